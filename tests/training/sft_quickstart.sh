#!/usr/bin/env bash
# recipes/sft-quickstart.toml as its header says to run it, shortened: tools/sft-conversations
# (2,000 conversations), `loom preprocess --chat-format chatml --append-eod`, then 60
# iterations. The loss over the assistant's replies alone falls from about ln(257) (a fresh
# byte model) below 2.0 (the replies repeat the question's numbers), the run read the loss
# mask, and the checkpoint's recipe keeps serve.chat_format.
#   sft_quickstart.sh LOOM
set -euo pipefail
loom=$1
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$here/../support/lib.sh"
scratch
sft_quickstart_model 2000 60 --set train.eval_interval=30 --set checkpoint.interval=60
grep -q "data: loss mask run/sft/arith_chat_loss_mask_document" train.log ||
  { echo "FAIL: the run did not read the loss mask"; exit 1; }
grep -q 'chat_format = "chatml"' run/sft/checkpoints/iter_0000060/recipe.toml ||
  { echo "FAIL: the checkpoint's recipe lost serve.chat_format"; exit 1; }
python3 -c '
import json
rows = [json.loads(l) for l in open("run/sft/metrics.jsonl")]
train = [r["loss"] for r in rows if "loss" in r and "eval_loss" not in r]
evals = [r["eval_loss"] for r in rows if "eval_loss" in r]
print(f"assistant-token loss {train[0]:.3f} -> {train[-1]:.3f}; eval {evals}")
assert train[0] > 5.0 and train[-1] < 2.0 and evals[-1] < evals[0], (train[0], train[-1], evals)
'
# A chat format that does not exist is refused where the recipe is read (exit 2).
status=0
"$loom" validate "$root/recipes/sft-quickstart.toml" --set serve.chat_format=vicuna \
  > bad.log 2>&1 || status=$?
[ "$status" = 2 ] && grep -q "serve.chat_format: unknown chat format 'vicuna' (known: chatml" bad.log ||
  { echo "FAIL: serve.chat_format=vicuna gave $status:"; cat bad.log; exit 1; }
echo "PASS"
