#!/usr/bin/env bash
# Surviving preemption and bad numbers (issue 17), through the real `loom` executable:
#  1. SIGTERM mid-run: the step finishes, a checkpoint is saved, exit 3; checkpoint.load =
#     "auto" resumes it, and iterations after the stop equal an uninterrupted run's bitwise.
#     Under mpirun (DP2) a SIGTERM to one rank stops both at the same iteration.
#  2. A second SIGINT exits at once with 130, leaving the last checkpoint as it was.
#  3. train.exit_interval and train.exit_duration_mins save and exit 0.
#  4. checkpoint.save before the first step: a partial save a killed run left is removed with
#     a log line; a folder of another run's checkpoints is refused (exit 2) unless resumed or
#     checkpoint.overwrite = true; a lost tracker resumes from the newest complete checkpoint; a
#     corrupt tracker is refused; an unwritable folder is refused (exit 2) before training.
#  5. train.nan_check with NaN gradients injected (LOOM_TEST_NAN_AT, a test-only hook): stop
#     (exit 1 naming the iteration, rank and tensor, the last good state saved), skip (the
#     update dropped and counted), rerun (a transient fault: the run continues exactly as a clean
#     one; a deterministic one: stop). Under mpirun too.
#  6. train.loss_spike_factor names the spiking batch's samples, which `loom data samples
#     --first` prints.
#  7. Under mpirun: a recipe without [comm] uses comm/mpi (said once); comm.plugin = "single" is
#     refused with exit 2, saying why; a failure on one rank (a corrupt checkpoint that only rank
#     1's folder holds) prints its error and ends the whole job instead of hanging.
#   resilience.sh LOOM MPIEXEC
set -uo pipefail
loom=$1 mpiexec=$2
. "$(dirname "$0")/../support/lib.sh"
scratch
{
  toml_section train seed=11 iters=400 micro_batch_size=4 seq_len=64 log_interval=1
  toml_section lr max=1e-3 warmup_iters=2
  gpt_sections n_layer=4 n_embd=128 max_seq_len=64 num_documents=400 doc_length=128
  toml_section checkpoint interval=0
} > r.toml
fail() { echo "FAIL: $*"; for f in "${logs[@]:-}"; do [ -f "$f" ] && tail -5 "$f"; done; exit 1; }
logs=()
lines() { local n; n=$(grep -c '"loss"' "$1" 2>/dev/null); echo "${n:-0}"; }
wait_lines() {  # wait_lines FILE N: until FILE has N metrics lines (30 s at most)
  for _ in $(seq 300); do [ "$(lines "$1")" -ge "$2" ] && return 0; sleep 0.1; done
  fail "no progress in $1"
}
tracker() { cat "$1/latest_checkpointed_iteration.txt" 2>/dev/null | tr -d '\n'; }
# attempt LOG ARGS...: `loom run r.toml ARGS`, stderr to LOG (which fail shows), whatever it
# exits with: rc
attempt() {
  local log=$1
  shift
  "$loom" run r.toml "$@" 2> "$log"
  rc=$?
  logs=("$log")
}

# 1. SIGTERM, resume with "auto", bitwise equal to the straight run
"$loom" run r.toml --set train.iters=40 --set train.metrics=straight.jsonl 2> straight.log ||
  fail "the straight run failed"
"$loom" run r.toml --set train.iters=40 --set checkpoint.save=ck --set train.metrics=a.jsonl \
  2> a.log &
pid=$!
logs=(a.log)
wait_lines a.jsonl 3
kill -TERM $pid
wait $pid
rc=$?
[ $rc = 3 ] || fail "SIGTERM: exit $rc, expected 3"
k=$(tracker ck)
grep -q "stopping after iteration $k of 40 (SIGTERM)" a.log || fail "no stop line for iteration $k"
[ "$k" -lt 40 ] || fail "SIGTERM: the run did not stop early (iteration $k)"
"$loom" run r.toml --set train.iters=40 --set checkpoint.save=ck --set checkpoint.load=auto \
  --set train.metrics=b.jsonl 2> b.log || fail "the auto resume failed"
grep -q "resumed from" b.log || fail "checkpoint.load = auto did not resume"
python3 - "$k" <<'PY' || exit 1
import json, sys
k = int(sys.argv[1])
def rows(f):
    return {r["iter"]: (r["loss"], r["grad_norm"]) for r in map(json.loads, open(f)) if "loss" in r}
a, b, s = rows("a.jsonl"), rows("b.jsonl"), rows("straight.jsonl")
assert sorted(b) == list(range(k + 1, 41)), sorted(b)
assert all(a[i] == s[i] for i in a), "the interrupted run's first iterations differ"
assert all(b[i] == s[i] for i in b), [(i, b[i], s[i]) for i in b if b[i] != s[i]][:3]
print(f"SIGTERM after iteration {k}: exit 3, checkpoint saved; checkpoint.load = auto resumed, "
      f"iterations {k + 1}..40 bitwise those of the straight run")
PY

# ... and under mpirun: one rank's signal stops both at the same iteration
rm -rf ck
mpi_ranks 2 "$loom" run r.toml --set comm.plugin=mpi --set train.iters=400 \
  --set checkpoint.save=ck --set train.metrics=mpi-tagged.jsonl 2> mpi.log &
mpid=$!
logs=(mpi.log)
wait_lines mpi-tagged.jsonl 3
victim=$(pgrep -f "loom run r.toml --set comm.plugin=mpi.*mpi-tagged" | sort -n | tail -1)
[ -n "$victim" ] || fail "no rank process found"
kill -TERM "$victim"
wait $mpid
rc=$?
[ $rc = 3 ] || fail "mpirun after SIGTERM to one rank: exit $rc, expected 3"
k=$(tracker ck)
n=$(grep -c "stopping after iteration $k of 400" mpi.log)
[ "$n" = 2 ] || fail "expected both ranks to stop after iteration $k, got $n lines"
echo "mpirun DP2, SIGTERM to one rank: both ranks saved iteration $k and exited 3"

# 2. a second SIGINT exits at once (steps of ~0.5 s, so both land inside one step)
rm -rf ck
"$loom" run r.toml --set checkpoint.save=ck --set checkpoint.interval=2 --set train.iters=400 \
  --set model.n_embd=384 --set model.n_head=6 --set train.micro_batch_size=16 \
  --set train.metrics=c.jsonl 2> c.log &
pid=$!
logs=(c.log)
wait_lines c.jsonl 3  # iteration 2's checkpoint is written before iteration 3's line
before=$(tracker ck)
kill -INT $pid
sleep 0.05
kill -INT $pid
wait $pid
rc=$?
[ $rc = 130 ] || fail "two SIGINTs: exit $rc, expected 130"
grep -q "second SIGINT: exiting now" c.log || fail "no line for the second SIGINT"
after=$(tracker ck)
[ -d "ck/iter_$(printf %07d "$after")" ] || fail "the last checkpoint is gone"
"$loom" checkpoint merge ck merged.safetensors > /dev/null 2>&1 || fail "the last checkpoint does not load"
echo "two SIGINTs: exit 130 at once; the last checkpoint (iteration $after, was $before) loads"

# 3. exit_interval and exit_duration_mins
rm -rf ck
attempt d.log --set train.exit_interval=4 --set checkpoint.save=ck
[ $rc = 0 ] && [ "$(tracker ck)" = 4 ] && grep -q "stopping after iteration 4 of 400 (train.exit_interval" d.log ||
  fail "exit_interval: exit $rc, tracker $(tracker ck)"
rm -rf ck
attempt e.log --set train.exit_duration_mins=0.00001 --set checkpoint.save=ck
[ $rc = 0 ] && [ "$(tracker ck)" = 1 ] && grep -q "train.exit_duration_mins" e.log ||
  fail "exit_duration_mins: exit $rc, tracker $(tracker ck)"
echo "train.exit_interval = 4 and exit_duration_mins: saved and exited 0 after iterations 4 and 1"

# 4. the checkpoint folder before the first step
rm -rf ck
"$loom" run r.toml --set train.iters=3 --set checkpoint.save=ck --set checkpoint.load=auto 2> f.log ||
  fail "auto on an empty folder"
logs=(f.log)
grep -q 'checkpoint.load = "auto": no checkpoint under ck yet; starting from scratch' f.log ||
  fail "auto on an empty folder did not say it starts fresh"
mkdir -p ck/.tmp-iter_0000007
echo partial > ck/.tmp-iter_0000007/model.safetensors
"$loom" run r.toml --set train.iters=5 --set checkpoint.save=ck --set checkpoint.load=auto 2> g.log ||
  fail "resume with a stale partial save"
logs=(g.log)
grep -q "removed ck/.tmp-iter_0000007: a partial checkpoint a killed save left behind" g.log ||
  fail "the stale .tmp-iter folder was not reported"
[ ! -e ck/.tmp-iter_0000007 ] || fail "the stale .tmp-iter folder is still there"
attempt h.log --set train.iters=5 --set checkpoint.save=ck
[ $rc = 2 ] && grep -q "already holds checkpoints (newest iter_5) and this run does not resume" h.log ||
  fail "a fresh run over another run's checkpoints: exit $rc"
[ "$(tracker ck)" = 5 ] || fail "the refused run changed the tracker"
"$loom" run r.toml --set train.iters=2 --set checkpoint.save=ck --set checkpoint.overwrite=true 2> i.log ||
  fail "checkpoint.overwrite = true was refused"
rm ck/latest_checkpointed_iteration.txt
"$loom" run r.toml --set train.iters=6 --set checkpoint.save=ck --set checkpoint.load=ck 2> j.log ||
  fail "resume without a tracker"
logs=(j.log)
grep -q "is missing; resuming from the newest complete checkpoint there, iter_0000005" j.log &&
  grep -q "resumed from" j.log || fail "a lost tracker did not resume from the newest checkpoint"
echo "-1" > ck/latest_checkpointed_iteration.txt
attempt k.log --set train.iters=7 --set checkpoint.save=ck --set checkpoint.load=ck
[ $rc = 1 ] && grep -q 'corrupt tracker file ("-1")' k.log || fail "a tracker of -1: exit $rc"
touch plainfile
attempt l.log --set train.iters=3 --set checkpoint.save=plainfile/sub
[ $rc = 2 ] && grep -q 'checkpoint.save = "plainfile/sub" is not a folder this run can write' l.log &&
  ! grep -q "iter " l.log || fail "an unwritable checkpoint.save: exit $rc"
echo "checkpoint.save: stale partial save removed, another run's checkpoints refused (exit 2)," \
  "overwrite allowed by key, lost tracker resumed, corrupt tracker and unwritable folder refused"

# 5. NaN gradients, each mode
rm -rf ck
LOOM_TEST_NAN_AT=5:always attempt m.log --set train.iters=8 --set checkpoint.save=ck
[ $rc = 1 ] || fail "nan_check = stop: exit $rc"
grep -q "iteration 5: loss .*, gradient norm nan is not finite; first non-finite gradient: wte on rank 0; the last good state (iteration 4) is saved under ck" m.log ||
  fail "nan_check = stop: the message"
[ "$(tracker ck)" = 4 ] || fail "nan_check = stop: the tracker is $(tracker ck), expected 4"
LOOM_TEST_NAN_AT=5:always "$loom" run r.toml --set train.iters=8 --set train.nan_check=skip \
  --set train.metrics=skip.jsonl 2> n.log || fail "nan_check = skip failed"
logs=(n.log)
grep -q 'update skipped (train.nan_check = "skip"; 1 skipped so far)' n.log || fail "skip: no line"
python3 -c "
import json
rows = {r['iter']: r for r in map(json.loads, open('skip.jsonl')) if 'loss' in r}
assert rows[5]['skipped'] and not any(rows[i]['skipped'] for i in rows if i != 5), rows
" || fail "skip: iteration 5 not marked skipped in the metrics"
"$loom" run r.toml --set train.iters=8 --set train.metrics=clean.jsonl 2> /dev/null || fail "clean run"
LOOM_TEST_NAN_AT=5 "$loom" run r.toml --set train.iters=8 --set train.nan_check=rerun \
  --set train.metrics=rerun.jsonl 2> o.log || fail "nan_check = rerun (transient) failed"
logs=(o.log)
grep -q "iteration 5: .*the rerun of the same batch gives .*a transient fault" o.log ||
  fail "rerun: no transient-fault line"
python3 -c "
import json
rows = lambda f: [(r['loss'], r['grad_norm']) for r in map(json.loads, open(f)) if 'loss' in r]
assert rows('rerun.jsonl') == rows('clean.jsonl'), 'the rerun run differs from a clean run'
" || fail "rerun: the run differs from a clean one"
rm -rf ck
LOOM_TEST_NAN_AT=5:always attempt p.log --set train.iters=8 --set train.nan_check=rerun \
  --set checkpoint.save=ck
[ $rc = 1 ] && grep -q "again on the rerun of the same batch, so it is deterministic" p.log &&
  [ "$(tracker ck)" = 4 ] || fail "rerun (deterministic): exit $rc"
rm -rf ck
LOOM_TEST_NAN_AT=3:always mpi_ranks 2 -x LOOM_TEST_NAN_AT "$loom" run r.toml \
  --set comm.plugin=mpi --set train.iters=6 --set checkpoint.save=ck 2> q.log
rc=$?
logs=(q.log)
[ $rc != 0 ] && [ "$(grep -c 'first non-finite gradient: wte on rank 0' q.log)" -ge 1 ] &&
  [ "$(tracker ck)" = 2 ] || fail "mpirun nan_check = stop: exit $rc, tracker $(tracker ck)"
echo "nan_check: stop (exit 1, iteration 5, wte on rank 0, iteration 4 saved), skip (1 dropped)," \
  "rerun (transient: identical to a clean run; deterministic: stop), mpirun DP2 stop"

# 6. a loss spike names its batch
# (an lr warming up to 1.0 without clipping makes the loss climb from 5.6 to ~21 by iteration 15,
# and then diverge: the run may stop on NaN, which is fine here)
"$loom" run r.toml --set train.iters=40 --set lr.max=1.0 --set lr.warmup_iters=25 \
  --set train.grad_clip=0 --set train.loss_spike_factor=1.5 --set train.global_batch_size=4 \
  2> s.log || true
logs=(s.log)
line=$(grep -m1 "loss_spike_factor = 1.5); its batch is train samples" s.log) ||
  fail "no loss spike logged"
first=$(echo "$line" | sed -E 's/.*--first ([0-9]+) --count ([0-9]+).*/\1/')
"$loom" data samples r.toml --set train.iters=40 --set train.global_batch_size=4 \
  --first "$first" --count 4 > samples.txt || fail "loom data samples --first"
[ "$(grep -vc '^#' samples.txt)" = 4 ] && grep -v '^#' samples.txt | head -1 | grep -q "^$first	" ||
  fail "loom data samples --first $first printed the wrong samples"
echo "loss spike: $(echo "$line" | sed -E 's/.*(iteration [0-9]+: loss [0-9.]+ is [0-9.]+ x).*/\1/') the median; its 4 samples from $first printed"
# 7. launchers and a failure on one rank
sed '/^\[checkpoint\]/,$d' r.toml > nocomm.toml  # no [comm]: mpirun's ranks pick comm/mpi
mpi_ranks 2 "$loom" run nocomm.toml --set train.iters=2 --set parallel.tensor=2 2> t.log ||
  fail "mpirun without [comm] failed"
logs=(t.log)
[ "$(grep -c 'no comm plugin: using comm/mpi' t.log)" = 1 ] || fail "no single line for comm/mpi"
mpi_ranks 2 "$loom" run nocomm.toml --set train.iters=2 --set comm.plugin=single 2> u.log
rc=$?
logs=(u.log)
[ $rc = 2 ] && grep -q 'loom: error: rank [01]: started as 2 ranks by a launcher' u.log ||
  fail "mpirun with comm.plugin = single: exit $rc"
echo "mpirun: without [comm] the ranks use comm/mpi (said once); with comm.plugin = single, exit 2, said"
# rank 1 alone gets a corrupt checkpoint while rank 0 trains on into a collective: before, rank
# 1's MPI_Finalize waited for rank 0 forever and its error never printed; now it prints and
# ends the job (MPI_Abort). Both run the same recipe (ranks with different ones are refused at
# start-up), each in its own folder: rank 0's holds no checkpoint, rank 1's a corrupt one.
mkdir -p w0 w1/bad/iter_0000003
echo 3 > w1/bad/latest_checkpointed_iteration.txt
echo "{garbage" > w1/bad/iter_0000003/manifest.json
start=$(date +%s)
timeout -s KILL 120 "$mpiexec" -np 1 --oversubscribe --allow-run-as-root --mca btl self,vader \
  -wdir "$dir/w0" "$loom" run ../r.toml --set comm.plugin=mpi --set checkpoint.load=bad : \
  -np 1 -wdir "$dir/w1" "$loom" run ../r.toml --set comm.plugin=mpi --set checkpoint.load=bad \
  2> v.log
rc=$?
took=$(( $(date +%s) - start ))
logs=(v.log)
[ $rc != 0 ] && [ $rc != 137 ] && grep -q "loom: error: rank 1: bad/iter_0000003/manifest.json: corrupt" v.log ||
  fail "one rank's corrupt checkpoint: exit $rc after ${took}s"
echo "a corrupt checkpoint on rank 1 only: its error printed and the job ended (exit $rc) in ${took}s"
echo "resilience: ok"
