#!/usr/bin/env python3
"""The shape of the code (STYLE.md, issue 36): no source file over 600 lines and no function
over 120 lines in engine/, sdk/ and plugins/.

A function is a brace block opened at namespace or class level (or inside `extern "C"`) whose
head, the text since the previous `;`, `{` or `}` at that level, ends in a parameter list:
`... ) {`, `... ) const noexcept {`, `... ) -> T {`, a constructor's `... : a(x), b(y) {`.
Lambdas and local classes count towards the function they are in. Comments, string and
character literals are blanked before the braces are counted, so a brace in them is not one.

    check_shape.py [ROOT] [--list]    ROOT: the repository (default: this file's ../..);
                                      --list prints every function over 60 lines as well
Exit 0 when the limits hold, 1 with one line per excess (path:line: what, how long).
"""
import os
import re
import sys

MAX_FILE, MAX_FUNCTION = 600, 120
FOLDERS = ("engine", "sdk", "plugins")
SUFFIXES = (".c", ".cc", ".cpp", ".h", ".hpp", ".cu", ".cuh")


def blank(text):
    """The text with comments and literals replaced by spaces (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == 'R' and text.startswith('R"', i) and (i == 0 or not text[i - 1].isalnum()):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator: 1'000
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


NOT_FUNCTION = re.compile(
    r"(\bnamespace\b[^()]*|\b(class|struct|union|enum)\b[^()]*|extern\s*\"C\"\s*|=\s*|\[\s*\]\s*)$")
FUNCTION = re.compile(r"(\)|\bconst|\bnoexcept|\boverride|\bfinal|->\s*[\w:<>,\s*&]+)\s*$")
CTOR_INIT = re.compile(r"\)\s*:\s*[\w:]+\s*[({]")


def functions(text):
    """(first line, lines, name) of each function in `text` (already blanked)."""
    found = []
    stack = []  # per open brace: "ns" (namespace/class level) or "fn" (a body) or "other"
    head_start = 0  # index where the current head began (after the last ; { } at this level)
    line_of = lambda k: text.count("\n", 0, k) + 1
    i = 0
    for i, c in enumerate(text):
        if c == "{":
            outer = all(k == "ns" for k, _, _ in stack)
            head = " ".join(text[head_start:i].split())
            kind = "other"
            if outer:
                if NOT_FUNCTION.search(head) or head == "" or head.endswith(("= ", "=")):
                    kind = "ns" if re.search(r"\b(namespace|class|struct|union)\b|extern\s*\"C\"",
                                             head) and "=" not in head.split("(")[0] else "other"
                elif FUNCTION.search(head) or CTOR_INIT.search(head):
                    kind = "fn"
            stack.append((kind, i, head))
            head_start = i + 1
        elif c == "}":
            if stack:
                kind, start, head = stack.pop()
                if kind == "fn":
                    name = re.sub(r"\s*\(.*", "", head).split()[-1] if head else "?"
                    first, last = line_of(start), line_of(i)
                    found.append((first, last - first + 1, name))
            head_start = i + 1
        elif c == ";" and all(kind == "ns" for kind, _, _ in stack):
            head_start = i + 1
    return found


def self_test():
    """The checker on a made-up file whose answer is known: it must find exactly the long
    function in a class in a namespace and the long free function (whose braces in a string,
    a character and a comment must not count), and not the long initializer or namespace."""
    body = "\n".join("  x += %d;" % k for k in range(125))
    text = ("namespace a {\nnamespace {\nstruct S {\n  int f(int x) const {\n" + body +
            "\n    return x;\n  }\n};\n}  // namespace\n"
            "const int table[] = {\n" + ",\n".join(str(k) for k in range(130)) + "};\n"
            "int g(int x) {\n  const char* s = \"}}{\"; char c = '}'; // }\n" + body +
            "\n  return x;\n}\n"
            "int h() { return 1; }\n}  // namespace a\n")
    found = [(first, length) for first, length, _ in functions(blank(text))]
    long_ones = [f for f in found if f[1] > MAX_FUNCTION]
    ok = len(long_ones) == 2 and long_ones[0][0] == 4 and len(found) == 3
    if not ok:
        print(f"check_shape: self-test failed: found {found}")
    return ok


def main(argv):
    if not self_test():
        return 1
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    listing = "--list" in argv
    args = [a for a in argv if a != "--list"]
    if args:
        root = os.path.abspath(args[0])
    bad, long_ones = [], []
    for folder in FOLDERS:
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for f in sorted(files):
                if not f.endswith(SUFFIXES):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
                lines = text.count("\n") + (0 if text.endswith("\n") else 1)
                if lines > MAX_FILE:
                    bad.append(f"{rel}:1: file of {lines} lines (at most {MAX_FILE})")
                for first, length, name in functions(blank(text)):
                    if length > MAX_FUNCTION:
                        bad.append(f"{rel}:{first}: function {name} of {length} lines "
                                   f"(at most {MAX_FUNCTION})")
                    elif listing and length > 60:
                        long_ones.append(f"{rel}:{first}: {name} {length}")
    for line in long_ones:
        print(line)
    for line in bad:
        print(line)
    if bad:
        print(f"check_shape: {len(bad)} over the limits (STYLE.md: files of a few hundred lines, "
              f"none over {MAX_FILE}; functions under ~{MAX_FUNCTION})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
