#!/usr/bin/env bash
# `loom parity` (issue 17) on the quick-start recipe, shrunk for speed (4 layers of width 16,
# sequences of 16, 8 iterations, one thread per rank), through the real executable and mpirun:
#  1. seven fp32 layouts (TP2, PP2, DP2 with the distributed optimizer, TP2+SP, FSDP over 2
#     ranks, CP2, TP2xPP2 on 4 ranks) and an fp64 one (PP2 interleaved) match 1 rank: exit 0, a table row each
#     saying "pass", the tolerances stated.
#  2. It can fail: a learning rate that differs only in the layout's run (--layout-set) exits 1
#     and names the first diverging tensor in model order; a layout's run that fails exits 1
#     and shows the end of its log.
#  3. Usage errors exit 2 before any run: an unknown layout part, sp without tp, a layout the
#     model cannot split, a bad --dtype, a misspelt recipe key, no --layouts, a missing
#     launcher.
#   parity.sh LOOM MPIEXEC
set -uo pipefail
loom=$1 mpiexec=$2
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# Documents: the paragraphs of the docs (the quick start's fortunes may not be installed).
python3 - "$repo/docs" > "$dir/docs.jsonl" <<'PY'
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.md")):
    for p in open(f, encoding="utf-8").read().split("\n\n"):
        if p.strip():
            print(json.dumps({"text": p.strip()}))
PY
# optimizer.eps = 1e-6: the attention's key bias has an exactly zero gradient, whose rounding
# noise AdamW's eps = 1e-8 amplifies into layout-dependent steps (see equivalence.sh).
small=(--set model.n_layer=4 --set model.n_head=2 --set model.n_embd=16
       --set model.max_seq_len=16 --set train.seq_len=16 --set train.micro_batch_size=2
       --set train.global_batch_size=4 --set backend.threads=1 --set backend.measure_gemm=false
       --set train.eval_interval=2 --set train.eval_iters=1 --set optimizer.eps=1e-6
       --set "data.path=$dir/docs.jsonl")
small+=(--mpiexec "$mpiexec")
cd "$repo"

# 1. Seven fp32 layouts and an fp64 one pass.
"$loom" parity recipes/quickstart.toml --layouts tp2,pp2,dp2+zero1,tp2+sp,fsdp2,cp2,tp2+pp2 \
  --iters 8 \
  "${small[@]}" > "$dir/out.txt" 2> "$dir/err.txt"
rc=$?
cat "$dir/out.txt"
[ $rc -eq 0 ] || { tail -20 "$dir/err.txt"; fail "seven layouts: exit $rc, expected 0"; }
for layout in tp2:2 pp2:2 dp2+zero1:2 tp2+sp:2 fsdp2:2 cp2:2 tp2+pp2:4; do
  ranks=${layout#*:} layout=${layout%:*}
  grep -Eq "^${layout//+/\\+} +$ranks .* pass$" "$dir/out.txt" ||
    fail "no passing row for $layout"
done
grep -q "^LAYOUT  *RANKS  *LOSS  *GRAD NORM  *PARAMS  *WORST TENSOR" "$dir/out.txt" ||
  fail "no table header"
grep -q "tolerances: loss terms and grad norm 1.0e-05 relative" "$dir/out.txt" ||
  fail "the fp32 tolerances are not stated"
grep -q "all 7 layouts match 1 rank" "$dir/out.txt" || fail "no summary line"

"$loom" parity recipes/quickstart.toml --layouts pp2vp2 --iters 8 --dtype fp64 "${small[@]}" \
  > "$dir/out64.txt" 2> "$dir/err.txt"
rc=$?
cat "$dir/out64.txt"
[ $rc -eq 0 ] || { tail -20 "$dir/err.txt"; fail "fp64 pp2vp2: exit $rc, expected 0"; }
grep -q "parameters 1.0e-09 in max|a-b|/max|a|" "$dir/out64.txt" ||
  fail "the fp64 tolerances are not stated"
grep -Eq "^pp2vp2 +2 .* pass$" "$dir/out64.txt" || fail "pp2vp2 did not pass in fp64"

# 2. A learning rate 1% higher in the layout's run only: the check fails and names a tensor.
"$loom" parity recipes/quickstart.toml --layouts dp2 --iters 8 "${small[@]}" \
  --layout-set lr.max=3.03e-3 --keep "$dir/kept" > "$dir/bad.txt" 2> "$dir/err.txt"
rc=$?
cat "$dir/bad.txt"
[ $rc -eq 1 ] || fail "a different learning rate: exit $rc, expected 1"
grep -Eq "^dp2 +2 .* FAIL: [a-z_][a-z_.0-9]*$" "$dir/bad.txt" || fail "the failing row names no tensor"
grep -q "first in model order" "$dir/bad.txt" || fail "no first diverging tensor"
grep -q "the layout fails the check" "$dir/bad.txt" || fail "no failing summary"
[ -f "$dir/kept/dp2/recipe.toml" ] && [ -f "$dir/kept/1rank/metrics.jsonl" ] ||
  fail "--keep did not keep the runs"

# A layout's run that fails (its data file missing): exit 1, the row says so, its log's end.
"$loom" parity recipes/quickstart.toml --layouts dp2 --iters 2 "${small[@]}" \
  --layout-set "data.path=$dir/missing.jsonl" > "$dir/err-run.txt" 2> "$dir/err.txt"
rc=$?
cat "$dir/err-run.txt"
[ $rc -eq 1 ] || fail "a failing layout run: exit $rc, expected 1"
grep -Eq "^dp2 +2 .* ERROR \(run failed\)$" "$dir/err-run.txt" || fail "no ERROR row"
grep -q "cannot open $dir/missing.jsonl" "$dir/err-run.txt" || fail "the run's log is not shown"

# 3. Usage errors: exit 2 with one line, before anything runs.
usage() {  # usage WHAT EXPECTED-TEXT ARGS...
  local what=$1 text=$2
  shift 2
  "$loom" parity recipes/quickstart.toml "$@" > "$dir/u.out" 2> "$dir/u.err"
  local rc=$?
  [ $rc -eq 2 ] || { cat "$dir/u.out" "$dir/u.err"; fail "$what: exit $rc, expected 2"; }
  grep -q -- "$text" "$dir/u.err" || { cat "$dir/u.err"; fail "$what: no '$text'"; }
  echo "usage error ($what): $(cat "$dir/u.err")"
}
usage "unknown part" "unknown layout part 'xx3' in 'tp2+xx3'" --layouts tp2,tp2+xx3 "${small[@]}"
usage "sp without tp" "sp (sequence parallelism) needs tp2 or more" --layouts dp2+sp "${small[@]}"
usage "tp4 of 2 heads" "layout 'tp4': parallel layout for 4 ranks: n_head = 2 is not divisible" --layouts tp4 "${small[@]}"
usage "dtype" "--dtype must be fp32 or fp64" --layouts tp2 --dtype bf16 "${small[@]}"
usage "recipe key" "n_layr" --layouts tp2 "${small[@]}" --set model.n_layr=2
usage "no layouts" "missing --layouts" "${small[@]}"
unset 'small[-1]' 'small[-2]'  # --mpiexec MPIEXEC
usage "launcher" "is not an executable" --layouts tp2 "${small[@]}" --mpiexec /nonexistent/mpirun
echo "parity: every check passed"
