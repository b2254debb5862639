#!/usr/bin/env bash
# The checkpoint the serve tests serve: a small Llama-style model (RoPE: no fixed context, so
# long generations are possible) trained a little on ASCII sentences, so that its greedy
# text is ASCII too.
#   make_model.sh LOOM CHECKPOINT_DIR      (in the current directory)
set -euo pipefail
loom=$1
ck=$2
python3 - <<'PY'
import json, random
rng = random.Random(5)
words = "the a meaning of life is to be or not king queen said and time once upon land far away".split()
with open("text.jsonl", "w") as f:
    for _ in range(400):
        f.write(json.dumps({"text": " ".join(rng.choice(words) for _ in range(12)) + "."}) + "\n")
PY
cat > r.toml <<TOML
[train]
iters = 60
micro_batch_size = 4
seq_len = 32
log_interval = 30
[model]
n_layer = 2
n_head = 4
n_embd = 64
max_seq_len = 32
position = "rope"
norm = "rmsnorm"
activation = "swiglu"
[tokenizer]
plugin = "byte"
[data]
plugin = "jsonl"
path = "text.jsonl"
[checkpoint]
save = "$ck"
[lr]
max = 3e-3
TOML
"$loom" run r.toml 2> train.log || { tail -20 train.log; exit 1; }
