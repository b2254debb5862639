#!/usr/bin/env python3
"""The engine's subsystems stand on levels (issue 36, docs/architecture.md): a folder of
engine/src may use the folders below it, never one above it, so no include and no call runs
back up and no loop can form between folders.

The levels are LOOM_ENGINE_FOLDERS in engine/CMakeLists.txt, lowest first; main.cpp and
cli/ stand above them all.
  - includes: every engine header is included by its folder ("train/train_run.hpp"), the
    file exists, and its folder is the includer's own or one below it;
  - calls (--objects DIR, the loom_engine target's object folder): every symbol a unit
    uses that another unit of the library defines (strongly: weak inline and template
    copies are everyone's) is defined in the unit's own folder or one below it.

    check_layers.py [ROOT] [--objects DIR]
Exit 0 when the levels hold, 1 with one line per violation.
"""
import os
import re
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def levels(root):
    text = open(os.path.join(root, "engine", "CMakeLists.txt")).read()
    m = re.search(r"set\(LOOM_ENGINE_FOLDERS([^)]*)\)", text)
    if not m:
        raise SystemExit("check_layers: no set(LOOM_ENGINE_FOLDERS ...) in engine/CMakeLists.txt")
    names = m.group(1).split()
    return {name: k for k, name in enumerate(names)}


def folder_of(rel):
    """The folder of a path relative to engine/src: "train", or "top" for main.cpp and cli/."""
    head = rel.split("/")[0]
    return "top" if head in ("main.cpp", "cli") else head


def check_includes(src, level):
    bad = []
    top = len(level)
    headers = {}
    for d, _, files in os.walk(src):
        for f in files:
            if f.endswith(".hpp"):
                headers.setdefault(f, []).append(os.path.relpath(os.path.join(d, f), src))
    for d, _, files in os.walk(src):
        for f in sorted(files):
            if not f.endswith((".cpp", ".hpp")):
                continue
            path = os.path.join(d, f)
            rel = os.path.relpath(path, src)
            here = folder_of(rel)
            if here != "top" and here not in level:
                bad.append(f"engine/src/{rel}: folder {here} is not in LOOM_ENGINE_FOLDERS")
                continue
            mine = top if here == "top" else level[here]
            text = open(path, encoding="utf-8").read()
            for m in INCLUDE.finditer(text):
                inc = m.group(1)
                line = text.count("\n", 0, m.start()) + 1
                name = os.path.basename(inc)
                if "/" not in inc:
                    if name in headers:
                        bad.append(f"engine/src/{rel}:{line}: include \"{inc}\" without its folder "
                                   f"(\"{headers[name][0]}\")")
                    continue
                if not os.path.exists(os.path.join(src, inc)):
                    continue  # the SDK's ("loom/...") or a generated header
                there = folder_of(inc)
                theirs = top if there == "top" else level.get(there, top)
                if theirs > mine or (there == "top" and here != "top"):
                    bad.append(f"engine/src/{rel}:{line}: {here} includes \"{inc}\" of {there}, "
                               f"a level above it")
    return bad


def symbols(obj, defined):
    flag = "--defined-only" if defined else "--undefined-only"
    out = subprocess.run(["nm", flag, obj], capture_output=True, text=True, check=True).stdout
    syms = set()
    for line in out.splitlines():
        parts = line.split()
        if defined and len(parts) == 3 and parts[1] in "TDBR":
            syms.add(parts[2])
        elif not defined and len(parts) == 2 and parts[0] == "U":
            syms.add(parts[1])
    return syms


def check_calls(objects, level):
    units = []  # (folder, unit path, object)
    for d, _, files in os.walk(objects):
        for f in files:
            if f.endswith(".cpp.o"):
                obj = os.path.join(d, f)
                rel = os.path.relpath(obj, objects)
                rel = rel[4:] if rel.startswith("src/") else rel
                units.append((folder_of(rel), rel[:-2], obj))
    if not units:
        return [f"check_layers: no object files under {objects}"]
    owner = {}
    for fold, unit, obj in units:
        for s in symbols(obj, True):
            owner[s] = (fold, unit)
    bad = []
    top = len(level)
    for fold, unit, obj in units:
        mine = top if fold == "top" else level.get(fold, top)
        for s in sorted(symbols(obj, False)):
            if s not in owner:
                continue
            there, where = owner[s]
            theirs = top if there == "top" else level.get(there, top)
            if theirs > mine:
                name = subprocess.run(["c++filt", s], capture_output=True, text=True).stdout.strip()
                bad.append(f"engine/src/{unit}: calls {name[:120]} of engine/src/{where}, "
                           f"a level above it")
    return bad


def main(argv):
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    objects = None
    args = list(argv)
    if "--objects" in args:
        k = args.index("--objects")
        objects = args[k + 1]
        del args[k:k + 2]
    if args:
        root = os.path.abspath(args[0])
    level = levels(root)
    bad = check_includes(os.path.join(root, "engine", "src"), level)
    if objects:
        bad += check_calls(objects, level)
    for line in bad:
        print(line)
    if bad:
        order = " < ".join(sorted(level, key=level.get))
        print(f"check_layers: {len(bad)} uses of a higher level (the levels: {order} < main.cpp, "
              "cli/; docs/architecture.md)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
