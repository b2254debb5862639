#!/usr/bin/env bash
# A stop signal during set-up, before the first step (issue 35): there is nothing to save, and
# set-up may block for minutes (MPI_Init, index building, checkpoint loading), so the run exits
# at once with 3 (docs/resilience.md) instead of waiting for a first step. A slow set-up is
# LOOM_TEST_STALL_AT=0:R:S (rank R sleeps S seconds once the comm is made; tests only).
#  1. One process, SIGTERM in set-up: exit 3 within a few seconds, saying why.
#  2. mpirun -np 2: SIGTERM to one rank in set-up ends the job with 3; SIGUSR1 to mpirun
#     (which forwards it) too; SIGTERM to mpirun: Open MPI ends the ranks itself and returns 1.
#  3. mpirun -np 2 mid-run: SIGUSR1 to mpirun saves and returns 3, so that the requeue loop of
#     docs/resilience.md goes on.
#   setup_signal.sh LOOM MPIEXEC
set -uo pipefail
loom=$1 mpiexec=$2
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=launch_lib.sh
. "$here/launch_lib.sh"
# A name of its own: ranks() finds this test's processes by command line, and other tests
# (training.launch) run `loom run r.toml` at the same time under ctest -j.
recipe=setup-signal-$$.toml
launch_recipe "$recipe"
long=(--set train.iters=100000 --set train.metrics=m.jsonl --set backend.threads=1
  --set checkpoint.save=ck)
ranks() { pgrep -f "$loom run $recipe" || true; }
# stop_in_setup PID SIGNAL TARGET...: once the run sleeps in set-up, signals the targets (a
# pid, or "rank1"); sets rc and took (seconds from the signal to the end of PID)
stop_in_setup() {
  local pid=$1 sig=$2 t0 p
  shift 2
  for _ in $(seq 300); do
    grep -q "backend/cpu: OpenBLAS" out.txt && break
    sleep 0.1
  done
  sleep 1  # into the stall
  kill -0 "$pid" 2> /dev/null || fail "the run ended before the signal"
  t0=$(now)
  for p in "$@"; do
    [ "$p" = rank1 ] && p=$(ranks | sort -n | tail -1)
    kill -"$sig" "$p"
  done
  for _ in $(seq 300); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2> /dev/null && { kill -9 "$pid"; fail "SIG$sig in set-up: running 30 s on"; }
  wait "$pid"
  rc=$?
  took=$(since "$t0")
  below "$took" 5 || fail "SIG$sig in set-up: took $took s"
}

# 1. one process
LOOM_TEST_STALL_AT=0:0:120 "$loom" run "$recipe" "${long[@]}" --set comm.plugin=single \
  > out.txt 2>&1 &
job=$!
stop_in_setup $job TERM $job
echo "one process, SIGTERM in set-up: exit $rc after $took s"
[ "$rc" = 3 ] || fail "SIGTERM in set-up: exit $rc, expected 3"
grep -q "loom: SIGTERM received during set-up, before the first step: nothing to save; exiting \
with 3" out.txt || fail "no line saying why"
grep -q "finishing this step" out.txt && fail "set-up said it would finish a step"

# 2. mpirun -np 2, rank 1 in a slow set-up: what mpirun returns for each signal
for case in "TERM rank1 3" "USR1 mpirun 3" "TERM mpirun 1"; do
  read -r sig to want <<< "$case"
  LOOM_TEST_STALL_AT=0:1:120 "$mpiexec" -np 2 "$loom" run "$recipe" "${long[@]}" > out.txt 2>&1 &
  job=$!
  stop_in_setup $job "$sig" "$([ "$to" = mpirun ] && echo $job || echo rank1)"
  echo "mpirun -np 2, SIG$sig to $to in set-up: exit $rc after $took s"
  [ "$rc" = "$want" ] || fail "SIG$sig to $to in set-up: exit $rc, expected $want"
  for _ in $(seq 30); do [ -z "$(ranks)" ] && break; sleep 0.1; done
  [ -z "$(ranks)" ] || fail "ranks outlived mpirun"
done

# 3. mpirun mid-run: SIGUSR1 saves and returns 3
"$mpiexec" -np 2 "$loom" run "$recipe" "${long[@]}" > out.txt 2>&1 &
job=$!
for _ in $(seq 300); do [ "$(grep -c '"loss"' m.jsonl 2> /dev/null)" -ge 3 ] && break; sleep 0.1; done
kill -USR1 $job
wait $job
rc=$?
echo "mpirun -np 2, SIGUSR1 to mpirun mid-run: exit $rc, checkpoint at $(cat ck/latest_checkpointed_iteration.txt)"
[ "$rc" = 3 ] || fail "SIGUSR1 to mpirun mid-run: exit $rc, expected 3"
[ "$(grep -c "stopping after iteration" out.txt)" = 2 ] || fail "not both ranks stopped"
[ -s ck/latest_checkpointed_iteration.txt ] || fail "no checkpoint saved"
echo "setup_signal: ok"
