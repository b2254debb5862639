#!/usr/bin/env bash
# The checkpoint the serve tests serve: a small Llama-style model (RoPE: no fixed context, so
# long generations are possible) trained a little on ASCII sentences, so that its greedy
# text is ASCII too.
#   make_model.sh LOOM CHECKPOINT_DIR      (in the current directory)
set -euo pipefail
loom=$1
ck=$2
. "$(dirname "$0")/../support/lib.sh"
python3 - <<'PY'
import json, random
rng = random.Random(5)
words = "the a meaning of life is to be or not king queen said and time once upon land far away".split()
with open("text.jsonl", "w") as f:
    for _ in range(400):
        f.write(json.dumps({"text": " ".join(rng.choice(words) for _ in range(12)) + "."}) + "\n")
PY
{
  toml_section train iters=60 micro_batch_size=4 seq_len=32 log_interval=30
  toml_section model n_layer=2 n_head=4 n_embd=64 max_seq_len=32 position=rope norm=rmsnorm \
    activation=swiglu
  toml_section tokenizer plugin=byte
  toml_section data plugin=jsonl path=text.jsonl
  toml_section checkpoint "save=$ck"
  toml_section lr max=3e-3
} > r.toml
"$loom" run r.toml 2> train.log || { tail -20 train.log; exit 1; }
