#!/usr/bin/env bash
# What a run writes, checked before the first step (issue 35), through the real `loom`:
#  1. one run per checkpoint folder: a second run with the same checkpoint.save is refused
#     with exit 2 naming the holder's host and pid, and so is `loom validate`; under mpirun
#     (2 ranks) too, every rank ending at once; once the first run ends the folder is free.
#  2. train.metrics: a fresh run keeps an earlier run's file as <path>.1 (then .2), not written
#     over; a resumed run appends to it (one line per iteration, 1..N, no gap), dropping the
#     lines a killed run logged past the checkpoint it resumes from.
#  3. `loom validate` refuses what `loom run` refuses about the folders, with the same message:
#     another run's checkpoints in checkpoint.save, an unwritable checkpoint.save or
#     train.metrics folder, a checkpoint.save under a regular file.
#  4. an unwritable checkpoint.save (a folder the unprivileged user cannot write: root ignores
#     permission bits) is exit 2 naming the folder before training, not a raw file system error.
#   output_folders.sh LOOM [MPIEXEC]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
loom=$1 mpiexec=${2:-}
dir=$(mktemp -d)
chmod 755 "$dir"
trap 'kill $holder 2>/dev/null; rm -rf "$dir"' EXIT
export OMPI_MCA_orte_tmpdir_base=$dir  # mpirun's session folders (lib.sh's mpi_session_in)
holder=
cd "$dir"
cp "$here/../support/tiny_gpt.toml" r.toml
fail() { echo "FAIL: $*"; tail -5 out.log 2>/dev/null; exit 1; }
lines() {
  local n
  n=$(grep -c '"loss"' "$1" 2>/dev/null)
  echo "${n:-0}"
}
iters() {  # the iterations of FILE's step lines, in order
  python3 -c 'import json, sys
print(" ".join(str(json.loads(l)["iter"]) for l in open(sys.argv[1]) if "\"loss\"" in l))' "$1"
}
# exits2 PATTERN CMD...: CMD exits 2 within 60 s with PATTERN in its output
exits2() {
  local pat=$1
  shift
  timeout 60 "$@" > out.log 2>&1
  local rc=$?
  [ $rc = 2 ] || fail "$*: exit $rc, expected 2"
  grep -q -- "$pat" out.log || fail "$*: no '$pat' in its output"
  echo "ok: exit 2: $(grep -m1 "$pat" out.log | cut -c1-200)"
}

echo "== 1. one run per checkpoint folder"
"$loom" run r.toml --set train.iters=100000 --set checkpoint.save=ck --set checkpoint.interval=0 \
  --set train.metrics=holder.jsonl > holder.log 2>&1 &
holder=$!
for _ in $(seq 300); do [ "$(lines holder.jsonl)" -ge 1 ] && break; sleep 0.1; done
[ "$(lines holder.jsonl)" -ge 1 ] || { cat holder.log; fail "the first run did not start"; }
grep -q "pid $holder" ck/.loom.lock || fail "the lock file does not name pid $holder"
mkdir ck/.tmp-iter_0000099  # as if the first run were writing a checkpoint now
exits2 "in use by another run (host $(hostname) pid $holder" \
  "$loom" run r.toml --set checkpoint.save=ck --set checkpoint.load=auto
[ "$(ls ck | grep -c iter_)" = 0 ] || fail "the refused run saved into the folder"
[ -d ck/.tmp-iter_0000099 ] || fail "the refused run removed the running run's partial save"
exits2 "in use by another run (host $(hostname) pid $holder" \
  "$loom" validate r.toml --set checkpoint.save=ck --set checkpoint.load=auto
if [ -n "$mpiexec" ]; then
  exits2 "in use by another run" "$mpiexec" -n 2 "$loom" run r.toml --set checkpoint.save=ck \
    --set checkpoint.load=auto
fi
kill -TERM $holder
wait $holder
echo "first run stopped (exit $?)"
timeout 60 "$loom" run r.toml --set train.iters=2 --set checkpoint.save=ck \
  --set checkpoint.load=auto > out.log 2>&1 || fail "the folder stayed locked after the run"
echo "ok: the folder is free once its run ended"

echo "== 2. train.metrics: kept on a fresh run, appended on resume"
"$loom" run r.toml --set train.metrics=m.jsonl > out.log 2>&1 || fail "fresh run 1"
"$loom" run r.toml --set train.iters=3 --set train.metrics=m.jsonl > out.log 2>&1 ||
  fail "fresh run 2"
grep -q 'held an earlier run.s metrics: kept as m.jsonl.1' out.log || fail "no line for m.jsonl.1"
[ "$(lines m.jsonl.1)" = 6 ] && [ "$(lines m.jsonl)" = 3 ] ||
  fail "m.jsonl.1 has $(lines m.jsonl.1) lines (want 6), m.jsonl $(lines m.jsonl) (want 3)"
"$loom" run r.toml --set train.iters=2 --set train.metrics=m.jsonl > out.log 2>&1 || fail "run 3"
[ "$(lines m.jsonl.2)" = 3 ] && [ "$(lines m.jsonl)" = 2 ] || fail "no m.jsonl.2"
"$loom" run r.toml --set train.iters=3 --set checkpoint.save=ck2 --set train.metrics=res.jsonl \
  > out.log 2>&1 || fail "run to resume"
"$loom" run r.toml --set checkpoint.save=ck2 --set checkpoint.load=auto \
  --set train.metrics=res.jsonl > out.log 2>&1 || fail "resumed run"
got=$(iters res.jsonl)
[ "$got" = "1 2 3 4 5 6" ] || fail "resumed metrics iterations: $got"
[ ! -e res.jsonl.1 ] || fail "a resumed run moved its metrics aside"
# lines past the checkpoint (a run killed after its last save logged them) are not repeated
"$loom" run r.toml --set train.iters=3 --set checkpoint.save=ck3 --set train.metrics=k.jsonl \
  > out.log 2>&1 || fail "run to resume (k)"
echo '{"iter": 4, "loss": 9.0}' >> k.jsonl
"$loom" run r.toml --set checkpoint.save=ck3 --set checkpoint.load=auto \
  --set train.metrics=k.jsonl > out.log 2>&1 || fail "resumed run (k)"
got=$(iters k.jsonl)
[ "$got" = "1 2 3 4 5 6" ] || fail "after a killed run's extra line, the iterations are: $got"
echo "ok: m.jsonl.1, m.jsonl.2 kept; the resumed run appended 4..6"

echo "== 3. validate refuses what run refuses about the folders"
for cmd in validate run; do
  exits2 'checkpoint.save = "ck2" already holds checkpoints (newest iter_6)' \
    "$loom" $cmd r.toml --set checkpoint.save=ck2
done
touch plainfile
for cmd in validate run; do
  exits2 'checkpoint.save = "plainfile/sub" is not a folder this run can write' \
    "$loom" $cmd r.toml --set checkpoint.save=plainfile/sub
  exits2 'train.metrics = "plainfile/m.jsonl" is not in a folder this run can write' \
    "$loom" $cmd r.toml --set train.metrics=plainfile/m.jsonl
  exits2 'train.metrics = "ck2" is a directory' "$loom" $cmd r.toml --set train.metrics=ck2
done
"$loom" validate r.toml --set checkpoint.save=ck2 --set checkpoint.load=auto > out.log 2>&1 ||
  fail "validate refused a resume"
[ -z "$(ls -A ck2 | grep probe)" ] || fail "validate left a probe file"

echo "== 4. unwritable folders, as an unprivileged user"
as_nobody=()
if command -v setpriv > /dev/null && [ "$(id -u)" = 0 ]; then
  as_nobody=(setpriv --reuid=nobody --regid="$(id -gn nobody 2>/dev/null || echo nogroup)"
    --clear-groups)
elif [ "$(id -u)" != 0 ]; then
  as_nobody=(env)  # already unprivileged
fi
if [ ${#as_nobody[@]} = 0 ]; then
  echo "skip 4: no setpriv to drop root"
else
  mkdir ro
  chmod 755 ro  # owned by root (or by this user, made read-only below)
  [ "$(id -u)" = 0 ] || chmod 555 ro
  chmod 755 "$dir"
  [ "$(id -u)" = 0 ] && chmod 777 "$dir"  # nobody may write the metrics beside ro
  for cmd in validate run; do
    exits2 'checkpoint.save = "ro" is not a folder this run can write (Permission denied)' \
      "${as_nobody[@]}" "$loom" $cmd r.toml --set checkpoint.save=ro
    exits2 'checkpoint.save = "ro/sub" is not a folder this run can write' \
      "${as_nobody[@]}" "$loom" $cmd r.toml --set checkpoint.save=ro/sub
    exits2 'train.metrics = "ro/m.jsonl" is not in a folder this run can write' \
      "${as_nobody[@]}" "$loom" $cmd r.toml --set train.metrics=ro/m.jsonl
  done
  grep -q "filesystem error" out.log && fail "a raw file system error"
fi
echo "PASS"
