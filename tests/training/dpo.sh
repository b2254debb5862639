#!/usr/bin/env bash
# recipes/dpo-quickstart.toml as its header says to run it, shortened, after a shortened
# recipes/sft-quickstart.toml (30 iterations): DPO with LoRA teaches the SFT model to prefer
# its worked answers to the wrong sums and refusals of tools/sft-conversations --pairs.
# - Iteration 1: LoRA's B is zero, so the policy is the reference: every margin is 0 and the
#   loss is ln 2 (to rounding: the reference pass sums the same token losses).
# - 20 iterations: the loss falls below 0.55, the margin turns positive and most pairs are
#   ranked right (the last 5 iterations' means); the valid split's loss falls too.
# - The reference is computed once and kept as checkpoint.save/dpo_reference.bin: a run stopped
#   at 10 and resumed reads it back and logs the straight run's iterations 11..20 bitwise.
# - `loom eval --logprobs` writes the reference beside the data; a run from the same checkpoint
#   reads it, one with other rows computes its own.
# - A damaged or missing reference is refused with its reason (exit 1); what DPO cannot run
#   is refused with exit 2 (an odd micro-batch, a model without loom.preference/1).
#   dpo.sh LOOM
set -euo pipefail
loom=$1
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$here/../support/lib.sh"
scratch
sft_quickstart_model 1000 30 --set train.eval_interval=0 --set checkpoint.interval=30
"$root/tools/sft-conversations" --pairs run/dpo/pairs.jsonl 300 > /dev/null
"$loom" preprocess --input run/dpo/pairs.jsonl --output-prefix run/dpo/arith --tokenizer byte \
  --chat-format chatml --preference-pairs --append-eod > /dev/null 2>&1

# 8 pairs a step: the 20 iterations read fewer than the train split's 294 pairs, so that the
# 10 of resume_half's first run draw them in the same order (the shuffle spans the epochs
# the samples wanted need, as data.pad_sequences' does)
recipe=("$root/recipes/dpo-quickstart.toml" --set train.iters=20 --set train.eval_interval=10
        --set train.global_batch_size=16 --set train.log_interval=5 --set checkpoint.interval=10
        --set backend.threads=1 --set lr.warmup_iters=2)
resume_half rewards.margin "${recipe[@]}"
grep -q "dpo: reference log-probabilities of 300 pairs computed" pre.log ||
  { echo "FAIL: the straight run did not compute the reference"; tail pre.log; exit 1; }
grep -q "dpo: reference log-probabilities of 300 pairs read from half/dpo_reference.bin" resumed.log ||
  { echo "FAIL: the resumed run did not read the reference back"; tail resumed.log; exit 1; }
python3 - <<'PY'
import json, math
rows = [json.loads(l) for l in open("pre.jsonl")]
train = [r for r in rows if "loss" in r]
evals = [r for r in rows if "eval_loss" in r]
first = train[0]
assert abs(first["loss"] - math.log(2)) < 1e-6, first
assert abs(first["rewards.margin"]) < 1e-6, first  # (accuracy: the sign of rounding noise)
last = {k: sum(r[k] for r in train[-5:]) / 5 for k in first if k.startswith(("loss", "rewards"))}
assert last["loss"] < 0.55 and last["rewards.margin"] > 0.3, last
assert last["rewards.chosen"] > last["rewards.rejected"] and last["rewards.accuracy"] > 0.6, last
assert evals[-1]["eval_loss"] < evals[0]["eval_loss"] < math.log(2), evals
print(f"dpo: loss {first['loss']:.6f} (ln 2 = {math.log(2):.6f}) -> {last['loss']:.4f} (the last "
      f"5 iterations' mean); margin {last['rewards.margin']:.4f}, accuracy "
      f"{last['rewards.accuracy']:.2f}; eval loss {[round(e['eval_loss'], 4) for e in evals]}")
PY

# `loom eval --logprobs` precomputes the reference beside the data for runs that start from
# the checkpoint, for rows of 192 tokens (the DPO recipe's; the SFT checkpoint's are 128): its
# micro-batches of 16 rows give the run's own pass's values (micro-batches of 8) to rounding,
# and a run with rows of another length computes its own.
"$loom" eval --checkpoint run/sft/checkpoints --logprobs run/dpo/arith_chosen_document \
  --seq-len 192 --set backend.threads=1 2> eval.log || { tail -20 eval.log; exit 1; }
"$loom" run "${recipe[@]}" --set train.iters=1 --set checkpoint.save=beside \
  --set train.metrics=beside.jsonl 2> beside.log || { tail -20 beside.log; exit 1; }
grep -q "dpo: reference log-probabilities of 300 pairs read from run/dpo/arith_dpo_reference.bin" \
  beside.log || { echo "FAIL: the run did not read loom eval's reference"; tail beside.log; exit 1; }
python3 - run/dpo/arith_dpo_reference.bin run/dpo/checkpoints/dpo_reference.bin <<'PY'
import json, math, struct, sys
def table(path):
    data = open(path, "rb").read()
    body = data[data.index(b"\n") + 1:]
    return struct.unpack(f"<{len(body) // 8}d", body)
a, b = table(sys.argv[1]), table(sys.argv[2])
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
assert len(a) == len(b) == 600 and worst < 1e-6, (len(a), len(b), worst)
loss = json.loads(open("beside.jsonl").readline())["loss"]
assert abs(loss - math.log(2)) < 1e-6, loss
print(f"loom eval --logprobs: 600 log-probabilities within {worst:.1e} of the run's own pass; "
      f"first loss {loss:.6f}")
PY
"$loom" run "${recipe[@]}" --set train.iters=1 --set train.seq_len=160 \
  --set checkpoint.save=other 2> other.log || { tail -20 other.log; exit 1; }
grep -q "is not this run's reference (seq_len 192 (this run: 160)): computing it" other.log ||
  { echo "FAIL: a reference for other rows was not recomputed"; tail other.log; exit 1; }

# A reference that is damaged, missing or another dataset's is refused with the reason.
cp -r half bad
python3 - bad/dpo_reference.bin <<'PY'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
data[-3] ^= 0x40
open(sys.argv[1], "wb").write(bytes(data))
PY
expect 1 "its checksum does not match (damaged)" "$loom" run "${recipe[@]}" --set train.iters=30 \
  --set checkpoint.load=bad --set checkpoint.save=bad
rm bad/dpo_reference.bin
expect 1 "is not beside the checkpoints" "$loom" run "${recipe[@]}" --set train.iters=30 \
  --set checkpoint.load=bad --set checkpoint.save=bad
expect 2 "train.micro_batch_size must be even" "$loom" validate "${recipe[@]}" \
  --set train.micro_batch_size=7 --set train.global_batch_size=7
expect 2 "data.pack_sequences = true: train.objective = \"dpo\" keeps each conversation" \
  "$loom" run "${recipe[@]}" --set data.pack_sequences=true
echo "PASS"
