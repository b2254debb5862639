#!/usr/bin/env bash
# `loom parity` (issues 17 and 35) on the quick-start recipe, shrunk for speed (4 layers of
# width 16, sequences of 16, 8 iterations, one thread per rank), through the real executable
# and mpirun:
#  1. At its defaults (fp64, AdamW's own eps = 1e-8) seven layouts (TP2, PP2, DP2 with the
#     distributed optimizer, TP2+SP, FSDP over 2 ranks, CP2, TP2xPP2 on 4 ranks) match 1 rank:
#     exit 0, a row each saying "pass", the tolerances stated. In fp32 the key bias's zero
#     gradient made correct layouts fail (issue 35): fp32 is still there on request (PP2
#     interleaved, with eps = 1e-6).
#  2. It can fail: a learning rate 1% higher only in the layout's run (--layout-set) exits 1,
#     names the first diverging tensor in model order, the bound, a likely cause and the
#     command that reruns the layout alone; a layout's run that fails exits 1, shows the end
#     of its log and keeps the runs (the folder printed).
#  3. A launcher that starts no rank exits 2 naming the fix, its log kept: OpenMPI as root
#     without OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM) (the real mpirun when this runs as root, and a
#     stand-in that prints its words), too few slots (a stand-in that fails the layout's run).
#  4. Usage errors exit 2 before any run: an unknown layout part, a part given twice, sp
#     without tp, a layout the model cannot split, a bad --dtype, a misspelt recipe key, no
#     --layouts, --layouts with --fuzz, a missing launcher.
#   parity.sh LOOM MPIEXEC
set -uo pipefail
loom=$1 mpiexec=$2
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
. "$here/../support/lib.sh"
parity_scratch
base=(--set model.n_layer=4 --set model.n_head=2 --set model.n_embd=16
       --set model.max_seq_len=16 --set train.seq_len=16 --set train.micro_batch_size=2
       --set train.global_batch_size=4 --set backend.threads=1 --set backend.measure_gemm=false
       --set train.eval_interval=2 --set train.eval_iters=1 --set "data.path=$dir/docs.jsonl")
small=("${base[@]}" --mpiexec "$mpiexec")
cd "$repo"

# 1. Seven layouts pass at the defaults (fp64).
"$loom" parity recipes/quickstart.toml --layouts tp2,pp2,dp2+zero1,tp2+sp,fsdp2,cp2,tp2+pp2 \
  --iters 8 "${small[@]}" > "$dir/out.txt" 2> "$dir/err.txt"
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
grep -q "8 iterations in fp64" "$dir/out.txt" || fail "fp64 is not the default"
grep -q "parameters 1.0e-09 in max|a-b|/max|a|" "$dir/out.txt" ||
  fail "the fp64 tolerances are not stated"
grep -q "all 7 layouts match 1 rank" "$dir/out.txt" || fail "no summary line"

# fp32 on request (eps = 1e-6 keeps the zero gradient's amplified noise below 1e-5).
"$loom" parity recipes/quickstart.toml --layouts pp2vp2 --iters 8 --dtype fp32 "${small[@]}" \
  --set optimizer.eps=1e-6 > "$dir/out32.txt" 2> "$dir/err.txt"
rc=$?
cat "$dir/out32.txt"
[ $rc -eq 0 ] || { tail -20 "$dir/err.txt"; fail "fp32 pp2vp2: exit $rc, expected 0"; }
grep -q "tolerances: loss terms and grad norm 1.0e-05 relative" "$dir/out32.txt" ||
  fail "the fp32 tolerances are not stated"
grep -Eq "^pp2vp2 +2 .* pass$" "$dir/out32.txt" || fail "pp2vp2 did not pass in fp32"

# 2. A learning rate 1% higher in the layout's run only: the check fails and says why.
"$loom" parity recipes/quickstart.toml --layouts dp2 --iters 8 "${small[@]}" \
  --layout-set lr.max=3.03e-3 --keep "$dir/kept" > "$dir/bad.txt" 2> "$dir/err.txt"
rc=$?
cat "$dir/bad.txt"
[ $rc -eq 1 ] || fail "a different learning rate: exit $rc, expected 1"
grep -Eq "^dp2 +2 .* FAIL: [a-z_][a-z_.0-9]*$" "$dir/bad.txt" || fail "the failing row names no tensor"
grep -Eq "first in model order [a-z_.0-9]+ \(max\|a-b\|/max\|a\| [0-9.e+-]+\)" "$dir/bad.txt" ||
  fail "no first diverging tensor and its difference"
grep -q "tensors beyond 1.0e-09" "$dir/bad.txt" || fail "the bound is not stated"
grep -q "^  likely: " "$dir/bad.txt" || fail "no likely cause"
grep -q "rerun alone: loom parity recipes/quickstart.toml --layouts dp2 --iters 8" "$dir/bad.txt" ||
  fail "no command to rerun the layout"
grep -q "the layout fails the check" "$dir/bad.txt" || fail "no failing summary"
[ -f "$dir/kept/dp2/recipe.toml" ] && [ -f "$dir/kept/1rank/metrics.jsonl" ] ||
  fail "--keep did not keep the runs"

# A layout's run that fails (its data file missing): exit 1, the row says so, its log's end,
# and its runs kept in the temporary folder printed.
TMPDIR=$dir "$loom" parity recipes/quickstart.toml --layouts dp2 --iters 2 "${small[@]}" \
  --layout-set "data.path=$dir/missing.jsonl" > "$dir/err-run.txt" 2> "$dir/err.txt"
rc=$?
cat "$dir/err-run.txt"
[ $rc -eq 1 ] || fail "a failing layout run: exit $rc, expected 1"
grep -Eq "^dp2 +2 .* ERROR \(run failed\)$" "$dir/err-run.txt" || fail "no ERROR row"
grep -q "cannot open $dir/missing.jsonl" "$dir/err-run.txt" || fail "the run's log is not shown"
kept=$(sed -n 's/.*are kept in \(.*\)$/\1/p' "$dir/err-run.txt")
[ -n "$kept" ] && [ -f "$kept/dp2/log.txt" ] || fail "the failed layout's log is not kept"
grep -q "cannot open $dir/missing.jsonl" "$kept/dp2/log.txt" || fail "the kept log is not the run's"

# 3. A launcher that starts no rank: exit 2, the fix named, the launcher's log kept.
refused() {  # refused WHAT EXPECTED-TEXT ARGS...
  local what=$1 text=$2
  shift 2
  TMPDIR=$dir "$@" > "$dir/l.out" 2> "$dir/l.err"
  local rc=$?
  [ $rc -eq 2 ] || { cat "$dir/l.out" "$dir/l.err"; fail "$what: exit $rc, expected 2"; }
  grep -q -- "$text" "$dir/l.err" || { cat "$dir/l.err"; fail "$what: no '$text'"; }
  local log
  log=$(sed -n 's/.*its log: \(.*\)$/\1/p' "$dir/l.err")
  [ -s "$log" ] || fail "$what: the launcher's log '$log' is not kept"
  echo "refused ($what): $(cat "$dir/l.err")"
}
cat > "$dir/fake-mpirun" <<'SH'
#!/bin/sh
# OpenMPI's refusals, as 4.1 words them: as root (every command), too few slots (not `true`).
if [ "$FAKE_MPI" = root ]; then
  echo "mpirun has detected an attempt to run as root."
  echo "You can override this protection by adding the --allow-run-as-root option"
  exit 1
fi
[ "$3" = true ] && exit 0
echo "There are not enough slots available in the system to satisfy the $2"
echo "slots that were requested by the application:"
exit 1
SH
chmod +x "$dir/fake-mpirun"
refused "root" "export OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1" \
  env FAKE_MPI=root "$loom" parity recipes/quickstart.toml --layouts tp2 "${base[@]}" \
  --mpiexec "$dir/fake-mpirun"
refused "slots" "add --mpiexec-arg --oversubscribe" \
  "$loom" parity recipes/quickstart.toml --layouts tp2 --iters 1 "${base[@]}" \
  --mpiexec "$dir/fake-mpirun"
if [ "$(id -u)" = 0 ] && "$mpiexec" --version 2>&1 | grep -q "Open MPI"; then
  refused "root, real mpirun" "export OMPI_ALLOW_RUN_AS_ROOT=1" \
    env -u OMPI_ALLOW_RUN_AS_ROOT -u OMPI_ALLOW_RUN_AS_ROOT_CONFIRM "$loom" parity \
    recipes/quickstart.toml --layouts tp2,pp2 "${small[@]}"
fi

# 4. Usage errors: exit 2 with one line, before anything runs.
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
usage "tp twice" "tp is given twice ('tp2' and 'tp2')" --layouts tp2+tp2 "${small[@]}"
usage "fuzz and layouts" "--layouts and --fuzz both given" --layouts tp2 --fuzz 2 "${small[@]}"
usage "fuzz 0" "--fuzz must be a number of layouts >= 1" --fuzz 0 "${small[@]}"
usage "sp without tp" "sp (sequence parallelism) needs tp2 or more" --layouts dp2+sp "${small[@]}"
usage "tp4 of 2 heads" "layout 'tp4': parallel layout for 4 ranks: n_head = 2 is not divisible" --layouts tp4 "${small[@]}"
usage "dtype" "--dtype must be fp32 or fp64" --layouts tp2 --dtype bf16 "${small[@]}"
usage "recipe key" "n_layr" --layouts tp2 "${small[@]}" --set model.n_layr=2
usage "no layouts" "missing --layouts or --fuzz" "${small[@]}"
usage "launcher" "is not an executable" --layouts tp2 "${base[@]}" --mpiexec /nonexistent/mpirun
echo "parity: every check passed"
