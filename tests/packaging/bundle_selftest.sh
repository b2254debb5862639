#!/usr/bin/env bash
# bundle.selftest (see CMakeLists.txt): pack BUILD_DIR, prove the archive runs in isolation,
# then check that tools/gpu-check --bundle skips every GPU row here with the reason and exits
# 0. Exits 77 ("SKIPPED: why") where it cannot run: without root and mount namespaces, or on a
# machine that has a GPU (there tools/gpu-check is the test, and it runs the rows for real).
set -uo pipefail
build=${1:?usage: bundle_selftest.sh BUILD_DIR}
if nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "SKIPPED: this machine has a GPU: run tools/gpu-check instead"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export LOOM_BUNDLE_BUILD=$build LOOM_BUNDLE_NO_BUILD=1 LOOM_BUNDLE_XZ=1
echo "== tools/gpu-bundle $work/loom-gpu-bundle.tar.xz (from $build)"
tools/gpu-bundle "$work/loom-gpu-bundle.tar.xz" || { echo "FAIL: tools/gpu-bundle exited $?"; exit 1; }
tools/gpu-bundle --selftest "$work/loom-gpu-bundle.tar.xz"
rc=$?
[ $rc -eq 0 ] || exit $rc

tools/gpu-check --bundle "$work/loom-gpu-bundle.tar.xz" --out "$work/out" >"$work/check.log" 2>&1
rc=$?
sed -n '/^== summary/,$p' "$work/check.log"
fail=0
[ $rc -eq 0 ] || { echo "FAIL: tools/gpu-check exited $rc"; fail=1; }
# Every GPU test and every benchmark row: skipped, for the missing device.
rows=$(awk -F'\t' '$1 ~ /^(attention|backend|comm|gpu\.|loom |pytorch)/ && $1 != "loom plugins"' "$work/out/results.tsv")
n=$(echo "$rows" | grep -c .)
bad=$(echo "$rows" | grep -v $'\tskipped (no CUDA device)$' || true)
[ "$n" -ge 14 ] || { echo "FAIL: only $n GPU rows in results.tsv"; fail=1; }
[ -z "$bad" ] || { echo "FAIL: rows not skipped for the missing device:"; echo "$bad"; fail=1; }
grep -q $'^loom plugins\tall [0-9]* load$' "$work/out/results.tsv" ||
  { echo "FAIL: the plugins did not all load with this machine's CUDA libraries"; fail=1; }
[ "$(ls "$work/out" | wc -l)" -le 8 ] || { echo "FAIL: more than 8 files in --out"; fail=1; }
[ ! -e "$(grep -o '/tmp/loom-gpu\.[A-Za-z0-9]*' "$work/check.log" | head -1)" ] ||
  { echo "FAIL: the unpacked bundle was left in /tmp"; fail=1; }
[ $fail -eq 0 ] && echo "bundle.selftest: $n GPU rows skipped (no CUDA device), gpu-check exit 0"
exit $fail
