#!/usr/bin/env python3
"""The engine's subsystems and the layer library's folders stand on levels (issue 36,
docs/architecture.md): a folder may use the folders below it, never one above it, so no
include and no call runs back up and no loop can form between folders.

The engine's levels are LOOM_ENGINE_FOLDERS in engine/CMakeLists.txt, lowest first; main.cpp
and cli/ stand above them all. The layer library's are LOOM_LAYER_FOLDERS in
sdk/CMakeLists.txt: sdk/layers/<folder>/ and its mirrored headers
sdk/include/loom/cpp/layers/<folder>/ are one folder.
  - includes: every engine header is included by its folder ("train/train_run.hpp"), the
    file exists, and its folder is the includer's own or one below it;
  - calls (--objects DIR, the loom_engine_units target's object folder): every symbol a unit
    uses that another unit of the library defines (strongly: weak inline and template
    copies are everyone's) is defined in the unit's own folder or one below it.

  - the layer library's includes ("loom/cpp/layers/<folder>/x.hpp") and, with
    --layer-objects DIR (the loom_layers target's object folder), its calls, alike.

    check_layers.py [ROOT] [--objects DIR] [--layer-objects DIR]
Exit 0 when the levels hold, 1 with one line per violation.
"""
import os
import re
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def levels(root, cmake=("engine", "CMakeLists.txt"), var="LOOM_ENGINE_FOLDERS"):
    text = open(os.path.join(root, *cmake)).read()
    m = re.search(r"set\(" + var + r"([^)]*)\)", text)
    if not m:
        raise SystemExit(f"check_layers: no set({var} ...) in {'/'.join(cmake)}")
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


def check_calls(objects, level, strip="src/", where_is="engine/src", root=None):
    units = []  # (folder, unit path, object)
    for d, _, files in os.walk(objects):
        for f in files:
            if f.endswith(".cpp.o"):
                obj = os.path.join(d, f)
                rel = os.path.relpath(obj, objects)
                rel = rel[len(strip):] if rel.startswith(strip) else rel
                # an object whose source was deleted or moved since is stale, not the library's
                if root and not os.path.exists(os.path.join(root, where_is, rel[:-2])):
                    continue
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
                bad.append(f"{where_is}/{unit}: calls {name[:120]} of {where_is}/{where}, "
                           f"a level above it")
    return bad


LAYER_INCLUDE = re.compile(r'^\s*#\s*include\s+"loom/cpp/layers/([^"]+)"', re.M)


def check_layer_includes(root, level):
    """sdk/layers/<f>/*.cpp and sdk/include/loom/cpp/layers/<f>/*.hpp include layer headers
    by folder, of their own folder or one below it."""
    bad = []
    inc_root = os.path.join(root, "sdk", "include", "loom", "cpp", "layers")
    for base in (os.path.join(root, "sdk", "layers"), inc_root):
        for d, _, files in os.walk(base):
            for f in sorted(files):
                if not f.endswith((".cpp", ".hpp")):
                    continue
                path = os.path.join(d, f)
                rel = os.path.relpath(path, root)
                here = os.path.relpath(path, base).split("/")[0]
                if here not in level:
                    bad.append(f"{rel}: folder {here} is not in LOOM_LAYER_FOLDERS")
                    continue
                text = open(path, encoding="utf-8").read()
                for m in LAYER_INCLUDE.finditer(text):
                    inc = m.group(1)
                    line = text.count("\n", 0, m.start()) + 1
                    there = inc.split("/")[0]
                    if "/" not in inc or there not in level:
                        bad.append(f"{rel}:{line}: include \"loom/cpp/layers/{inc}\" outside "
                                   "the layer folders")
                    elif not os.path.exists(os.path.join(inc_root, inc)):
                        bad.append(f"{rel}:{line}: include \"loom/cpp/layers/{inc}\" does not exist")
                    elif level[there] > level[here]:
                        bad.append(f"{rel}:{line}: {here} includes \"loom/cpp/layers/{inc}\" of "
                                   f"{there}, a level above it")
    return bad


def main(argv):
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    args = list(argv)
    dirs = {}
    for flag in ("--objects", "--layer-objects"):
        if flag in args:
            k = args.index(flag)
            dirs[flag] = args[k + 1]
            del args[k:k + 2]
    if args:
        root = os.path.abspath(args[0])
    level = levels(root)
    bad = check_includes(os.path.join(root, "engine", "src"), level)
    if "--objects" in dirs:
        bad += check_calls(dirs["--objects"], level, root=root)
    layer_level = levels(root, ("sdk", "CMakeLists.txt"), "LOOM_LAYER_FOLDERS")
    bad += check_layer_includes(root, layer_level)
    if "--layer-objects" in dirs:
        bad += check_calls(dirs["--layer-objects"], layer_level, "layers/", "sdk/layers", root)
    for line in bad:
        print(line)
    if bad:
        order = " < ".join(sorted(level, key=level.get))
        layers = " < ".join(sorted(layer_level, key=layer_level.get))
        print(f"check_layers: {len(bad)} uses of a higher level (the engine's levels: {order} < "
              f"main.cpp, cli/; the layer library's: {layers}; docs/architecture.md)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
