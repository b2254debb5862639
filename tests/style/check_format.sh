#!/usr/bin/env bash
# Fails when a tracked C/C++ file differs from clang-format's output; exit 77 (skipped)
# without clang-format or outside a git checkout. Fix with:
#   clang-format -i $(git ls-files '*.cpp' '*.hpp' '*.h' '*.c')
set -u
fmt=${1:-}
if [ -z "$fmt" ] || [ "$fmt" = "CLANG_FORMAT-NOTFOUND" ]; then
  echo "skipped: clang-format is not installed"; exit 77
fi
files=$(git ls-files '*.cpp' '*.hpp' '*.h' '*.c' 2>/dev/null) || { echo "skipped: not a git checkout"; exit 77; }
[ -n "$files" ] || { echo "skipped: no tracked sources"; exit 77; }
# shellcheck disable=SC2086
if ! "$fmt" --dry-run -Werror $files; then
  echo "clang-format: the files above are not formatted (clang-format -i FILE)"; exit 1
fi
echo "$(echo "$files" | wc -l) files formatted"
