#!/usr/bin/env bash
# checkpoint.async (issue 17), through the real `loom` executable:
#  1. Every checkpoint an async run saves equals the synchronous run's, tensor for tensor
#     (checkpoint diff, tolerance 0), verifies (sha256 in its manifest) and resumes: 10 + 10
#     iterations from an async checkpoint give the losses of 20 straight, bitwise.
#  2. kill -9 while a background save is being written (LOOM_TEST_SLOW_SAVE_AT, a test-only
#     hook: iteration 10's writer sleeps 60 s first): the loop goes on meanwhile (iterations
#     11.. are logged before the kill), the tracker still names iteration 5, no iter_0000010
#     exists; the next start removes the partial .tmp-iter_0000010 with a log line, resumes
#     from 5 (its files verified) and trains iteration 6 to the killed run's loss, bitwise.
#  3. Under mpirun (DP2) async and synchronous saves are equal too (the finish is collective).
#   async_save.sh LOOM MPIEXEC
set -uo pipefail
loom=$1 mpiexec=$2
. "$(dirname "$0")/../support/lib.sh"
scratch
{
  toml_section train seed=11 iters=20 micro_batch_size=2 seq_len=32 log_interval=1 metrics=m.jsonl
  toml_section lr max=1e-3
  gpt_sections n_head=2 max_seq_len=32 num_documents=200 doc_length=64
  toml_section checkpoint interval=5
} > a.toml
same_checkpoints() {  # same_checkpoints A B: every iter_* of A equals B's
  for it in 0000005 0000010 0000015 0000020; do
    "$loom" checkpoint diff "$1/iter_$it" "$2/iter_$it" --rtol 0 > diff.txt 2>&1 ||
      { cat diff.txt; fail "$1/iter_$it differs from $2/iter_$it"; }
  done
}
losses() { python3 -c "import json,sys; [print(json.loads(l)['loss']) for l in open(sys.argv[1]) if '\"loss\"' in l]" "$1"; }

# 1. async equals sync, and resumes exactly
"$loom" run a.toml --set checkpoint.save=sync > out.txt 2>&1 || fail "sync run"
losses m.jsonl > straight.txt
"$loom" run a.toml --set checkpoint.save=async --set checkpoint.async=true > out.txt 2>&1 ||
  fail "async run"
n=$(grep -c "writing in the background" out.txt)
[ "$n" -eq 3 ] || fail "expected 3 background saves (5, 10, 15), saw $n"
grep -q "saved checkpoint async/iter_0000010 (checkpoint.async" out.txt || fail "no async saved line"
same_checkpoints sync async
[ "$(cat async/latest_checkpointed_iteration.txt)" = 20 ] || fail "tracker"
ls -a async/iter_0000010 | grep -q sha256 && fail "hash notes left in the checkpoint"
rm -rf resumed && cp -r async resumed && rm -rf resumed/iter_00000{15,20} &&
  echo 10 > resumed/latest_checkpointed_iteration.txt
"$loom" run a.toml --set checkpoint.save=resumed --set checkpoint.load=auto \
  --set checkpoint.async=true --set train.metrics=m2.jsonl > out.txt 2>&1 ||
  fail "resume from an async checkpoint"
grep -q "resum.*iter_0000010\|iteration 10" out.txt || fail "did not resume from iteration 10"
losses m2.jsonl > second.txt
tail -10 straight.txt | diff - second.txt > /dev/null || fail "resumed losses differ from straight"
echo "async saves equal sync ones; resume from one matches 20 straight iterations bitwise"

# 2. kill -9 during a background save
rm -rf k m.jsonl
LOOM_TEST_SLOW_SAVE_AT=10:60 "$loom" run a.toml --set checkpoint.save=k --set checkpoint.async=true \
  --set train.iters=400 --set checkpoint.interval=5 > out.txt 2>&1 &
pid=$!
for _ in $(seq 300); do
  grep -q '"iter":13,' m.jsonl 2>/dev/null && break
  sleep 0.1
done
grep -q "iter_0000010: state copied" out.txt || { kill -9 $pid; fail "no background save of 10"; }
grep -q '"iter":13,' m.jsonl || { kill -9 $pid; fail "the loop did not go on while saving"; }
kill -9 $pid
wait $pid 2>/dev/null
[ "$(cat k/latest_checkpointed_iteration.txt)" = 5 ] || fail "tracker moved: $(cat k/latest_checkpointed_iteration.txt)"
[ -d k/.tmp-iter_0000010 ] || fail "expected the partial k/.tmp-iter_0000010"
[ -d k/iter_0000010 ] && fail "a checkpoint of 10 exists although its save was killed"
cp m.jsonl killed.jsonl
"$loom" run a.toml --set checkpoint.save=k --set checkpoint.load=auto --set train.iters=400 \
  --set train.exit_interval=6 --set train.metrics=m3.jsonl > out.txt 2>&1 ||
  fail "restart after the kill"
grep -q "tmp-iter_0000010" out.txt || fail "the partial save was not reported"
[ -d k/.tmp-iter_0000010 ] && fail "the partial save was not removed"
grep -q "resumed from k/iter_0000005" out.txt || fail "did not resume from 5"
python3 - <<'PY' || fail "iteration 6 after the restart differs from the killed run's"
import json
def at(path, it):
    return [json.loads(l)["loss"] for l in open(path) if json.loads(l).get("iter") == it][0]
assert at("killed.jsonl", 6) == at("m3.jsonl", 6), (at("killed.jsonl", 6), at("m3.jsonl", 6))
PY
echo "kill -9 during a background save: iteration 5's checkpoint intact, partial 10 removed"

# 3. DP2
"$mpiexec" -np 2 "$loom" run a.toml --set comm.plugin=mpi --set checkpoint.save=dsync > out.txt 2>&1 ||
  fail "DP2 sync"
"$mpiexec" -np 2 "$loom" run a.toml --set comm.plugin=mpi --set checkpoint.save=dasync \
  --set checkpoint.async=true > out.txt 2>&1 || fail "DP2 async"
same_checkpoints dsync dasync
echo "DP2: async saves equal sync ones"
echo "async_save: ok"
