#!/usr/bin/env python3
"""Turns a document's ```sh blocks (README.md's, docs/finetuning.md's) into one bash script
that runs them in order, as written,
except for what keeps the run short and hermetic (each rewrite is printed as it is made):

- every `loom run` and tools/quickstart (which hands its arguments to `loom run`) gets
  `--set train.iters=ITERS` after its own arguments (the last --set of a key wins);
- `tools/test` is left out (it runs this test);
- the port 5000 of `loom serve` and of curl becomes PORT (tests run side by side).

Usage: readme_commands.py DOC.md ITERS PORT > script.sh
Each command is echoed with its document line ("README.md:104: ...") before it runs; the script stops at the first
that fails (`|| exit` after each, as set -e passes over the left side of &&), so the last
echo names it."""
import os
import re
import shlex
import sys

LABEL = os.path.basename(sys.argv[1]) if len(sys.argv) > 1 else "README.md"


def blocks(lines):
    """(first line number, [lines]) of each ```sh block."""
    out, cur, start = [], None, 0
    for n, line in enumerate(lines, 1):
        if cur is None and re.fullmatch(r"```(sh|bash|shell)\s*", line):
            cur, start = [], n + 1
        elif cur is not None and line.strip() == "```":
            out.append((start, cur))
            cur = None
        elif cur is not None:
            cur.append(line)
    if cur is not None:
        sys.exit(f"{LABEL}:{start - 1}: a ```sh block is not closed")
    return out


def commands(start, block):
    """(README line, command) with continuation lines joined and trailing comments kept."""
    out, buf, first = [], "", None
    for n, line in enumerate(block, start):
        if first is None:
            first = n
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        if buf.strip() and not buf.strip().startswith("#"):
            out.append((first, buf))
        buf, first = "", None
    return out


def strip_comment(cmd):
    """The command without a trailing `# ...` comment (a # that starts a shell word)."""
    for m in re.finditer(r"(^|\s)#", cmd):
        head = cmd[: m.start()]
        try:
            shlex.split(head)  # a # inside quotes leaves the quotes open
        except ValueError:
            continue
        return head.rstrip()
    return cmd.rstrip()


def main():
    readme, iters, port = sys.argv[1], sys.argv[2], sys.argv[3]
    lines = open(readme, encoding="utf-8").read().split("\n")
    print("set -euo pipefail")
    ran = 0
    for start, block in blocks(lines):
        for n, cmd in commands(start, block):
            shown = cmd
            if re.match(r"\s*tools/test\b", cmd):
                print(f"echo '{LABEL}:{n}: left out: {cmd.strip()}' >&2")
                continue
            cmd = strip_comment(cmd)
            if re.search(r"(bin/loom run |^\s*tools/quickstart\b)", cmd):
                cmd += f" --set train.iters={iters}"
            if re.search(r"loom serve |localhost:", cmd):
                cmd = re.sub(r"\b5000\b", port, cmd)
            note = "" if cmd == strip_comment(shown) else f"   [run as: {cmd.strip()}]"
            print(f"echo {shlex.quote(f'{LABEL}:{n}: {shown.strip()}{note}')} >&2")
            # set -e passes over a failure before && ("a && b"): every command says it.
            print(cmd if cmd.endswith("&") else cmd + " || exit $?")
            ran += 1
    if ran == 0:
        sys.exit(f"{LABEL} has no ```sh commands")


if __name__ == "__main__":
    main()
