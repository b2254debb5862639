#!/usr/bin/env bash
# A checkpoint loads whole or not at all (issue 17, finding 6): resuming a 4-layer checkpoint
# with model.n_layer = 2 or 6, another norm or bias = false, from its own layout and through
# resharding (a TP2 copy made by `loom checkpoint convert`), and generating from it with such
# a model, exit 2 naming the tensors; resuming AdamW state with optimizer/sgd exits 2 unless
# checkpoint.no_load_optim = true, which resumes with a fresh optimizer and says so.
# With MPIEXEC, the TP2 copy is also resumed on two data-parallel ranks: refused by both
# (rank 0 says why) with another n_layer, resumed as it is.
#   checkpoint_mismatch.sh LOOM [MPIEXEC]
set -uo pipefail
loom=$1 mpiexec=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/lib.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mpi_session_in "$dir"
cd "$dir"
cat > r.toml <<'TOML'
[train]
seed = 5
iters = 2
micro_batch_size = 2
seq_len = 16
log_interval = 1
TOML
small_gpt_sections 50 >> r.toml
fail() { echo "FAIL: $*"; [ -f out ] && tail -5 out; exit 1; }
"$loom" run r.toml --set checkpoint.save=ck > out 2>&1 || fail "the first run"
"$loom" checkpoint convert ck tp2 --tensor 2 > out 2>&1 || fail "convert to TP2"

# refused CODE WHAT ARGS...: the command exits CODE with one error line containing WHAT
refused() {
  local code=$1 what=$2
  shift 2
  "$@" > out 2>&1
  local rc=$?
  [ "$rc" = "$code" ] || fail "$* exited $rc, not $code"
  grep -q "loom: error: .*$what" out || fail "$* did not say '$what'"
}
resume() { "$loom" run r.toml --set train.iters=3 --set "checkpoint.load=$1" "${@:2}"; }

for from in ck tp2; do
  refused 2 "its model tensors are not this run's: it holds [0-9]* the run does not take" \
    resume $from --set model.n_layer=2
  refused 2 "the recipe's \[model\] differs from the one the checkpoint was saved with" \
    resume $from --set model.n_layer=2
  refused 2 "it lacks [0-9]* the run needs" resume $from --set model.n_layer=6
  refused 2 "the run does not take" resume $from --set model.norm=rmsnorm
  refused 2 "the run does not take" resume $from --set model.bias=false
  refused 2 "holds the state of optimizer/adamw, and the recipe selects optimizer/sgd: set \
checkpoint.no_load_optim = true" resume $from --set optimizer.plugin=sgd
  # the same model and optimizer resume
  resume $from > out 2>&1 || fail "resuming $from unchanged"
  grep -q "at iteration 2" out || fail "resuming $from: no 'at iteration 2'"
  # another optimizer, said explicitly: weights and iteration kept, the optimizer fresh
  resume $from --set optimizer.plugin=sgd --set checkpoint.no_load_optim=true > out 2>&1 ||
    fail "no_load_optim from $from"
  grep -q "checkpoint.no_load_optim: optimizer/sgd starts fresh" out ||
    fail "no_load_optim from $from: no log line"
  grep -q "at iteration 2" out || fail "no_load_optim from $from: not resumed at iteration 2"
done

# generation builds the model from the checkpoint's recipe and --set: all or nothing too
refused 2 "its tensors are not the model's: it holds [0-9]* the model does not take" \
  "$loom" generate --checkpoint ck --prompt hi --max-new-tokens 2 --set model.n_layer=2
refused 2 "it lacks [0-9]* the model needs" \
  "$loom" generate --checkpoint ck --prompt hi --max-new-tokens 2 --set model.n_layer=6
"$loom" generate --checkpoint ck --prompt hi --max-new-tokens 2 > out 2>&1 || fail "generate"
if [ -n "$mpiexec" ]; then
  mpi() { mpi_ranks 2 \
            "$loom" run r.toml --set comm.plugin=mpi --set train.iters=3 --set checkpoint.load=tp2 \
            "$@"; }
  # each rank refuses alike; whichever's line comes first ends the job
  refused 2 "rank [01]: checkpoint.load: tp2/iter_0000002: its model tensors are not this run's: \
it holds 24 the run does not take" mpi --set model.n_layer=2
  mpi > out 2>&1 || fail "resuming tp2 on two data-parallel ranks"
  grep -q "at iteration 2" out || fail "two ranks: no 'at iteration 2'"
fi
echo "ok"
