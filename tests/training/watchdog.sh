#!/usr/bin/env bash
# Hangs and stragglers (issue 17), through the real `loom` executable under mpirun, DP2:
#  1. A rank that stalls inside a step (LOOM_TEST_STALL_AT, a test-only hook: rank 1 sleeps
#     120 s before iteration 5) ends the job within comm.timeout_s (3 s) plus a few seconds,
#     exit 1, and the waiting rank prints what it waited in: the call, its group, the bytes,
#     the iteration.
#  2. A rank killed with SIGKILL mid-run ends the job too (within the same bound), non-zero.
#  3. The step-time statistics every log_interval name the slowest rank: with rank 1 sleeping
#     0.3 s in iteration 6, the line at iteration 6 names rank 1 with a max above 100 ms, and
#     the metrics file says slowest_rank 1 there.
#   watchdog.sh LOOM MPIEXEC
set -uo pipefail
loom=$1 mpiexec=$2
. "$(dirname "$0")/../support/lib.sh"
scratch
{
  toml_section train seed=11 iters=12 micro_batch_size=2 seq_len=32 log_interval=2 metrics=m.jsonl
  toml_section lr max=1e-3
  gpt_sections n_head=2 max_seq_len=32 num_documents=200 doc_length=64
  toml_section comm plugin=mpi timeout_s=3
} > r.toml

# 1. a stalled rank
t0=$(now)
LOOM_TEST_STALL_AT=5:1:120 "$mpiexec" -np 2 "$loom" run r.toml > out.txt 2>&1
rc=$?
took=$(since "$t0")
echo "stalled rank: exit $rc after $took s"
[ "$rc" -ne 0 ] || fail "a stalled rank: the job exited 0"
below "$took" 20 || fail "the job took $took s (timeout 3 s)"
line=$(grep "comm watchdog" out.txt | head -1)
echo "$line"
[[ "$line" == "rank 0: comm watchdog: no progress for "* ]] || fail "no watchdog line from rank 0"
for want in "comm.timeout_s = 3" " over the " " group (2 ranks)" "in iteration 5"; do
  [[ "$line" == *"$want"* ]] || fail "the watchdog line lacks '$want'"
done
# the bytes in flight: the gradients' started all-reduce (since ABI 2.28 the step's losses are
# summed after its update, so that is the first collective a waiting rank blocks in)
[[ "$line" =~ \),\ [0-9.]+\ (B|KiB|MiB), ]] || fail "the watchdog line lacks the bytes"

# 2. a killed rank
"$mpiexec" -np 2 "$loom" run r.toml --set train.iters=100000 --set train.log_interval=1000 \
  > out.txt 2>&1 &
job=$!
victim=""
for _ in $(seq 100); do
  for p in $(pgrep -f "run r.toml --set train.iters=100000" || true); do
    if tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then victim=$p; fi
  done
  [ -n "$victim" ] && [ "$(grep -c "training 100000 iterations" out.txt)" -ge 1 ] && break
  sleep 0.1
done
[ -n "$victim" ] || { kill $job; fail "rank 1 never started"; }
sleep 1
kill -9 "$victim"
t0=$(now)
for _ in $(seq 200); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
kill -0 $job 2>/dev/null && { kill -9 $job; fail "the job outlived its killed rank by 20 s"; }
wait $job
rc=$?
took=$(since "$t0")
echo "killed rank: job ended with exit $rc $took s after the kill"
[ "$rc" -ne 0 ] || fail "a killed rank: the job exited 0"

# 3. step-time statistics name the straggler
LOOM_TEST_STALL_AT=6:1:0.3 "$mpiexec" -np 2 "$loom" run r.toml > out.txt 2>&1 || fail "run failed"
line=$(grep "\[r0\] iter      6/12 | busy time per step over 2 ranks" out.txt)
echo "$line"
[[ "$line" == *"(rank 1)"* ]] || fail "iteration 6's statistics do not name rank 1"
python3 - <<'PY' || fail "metrics file"
import json, re
rows = [json.loads(l) for l in open("m.jsonl")]
at6 = [r for r in rows if r.get("iter") == 6][0]
assert at6["slowest_rank"] == 1 and at6["busy_s_max_rank"] > 0.1, at6
assert at6["busy_s_min_rank"] < 0.1, at6
line = open("out.txt").read()
m = re.search(r"iter      6/12 \| busy time per step over 2 ranks \(not waiting in comm\): min ([0-9.]+) ms, max ([0-9.]+) ms", line)
assert m and float(m.group(2)) > 100 and float(m.group(1)) < 100, m
print("metrics at iteration 6:", {k: at6[k] for k in ("busy_s_min_rank", "busy_s_max_rank", "slowest_rank")})
PY
echo "watchdog: ok"
