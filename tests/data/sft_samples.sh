#!/usr/bin/env bash
# Supervised finetuning data end to end: conversations whose assistant replies are upper-case
# letters and whose every other character (the plain template's "[role]", the users' text,
# EOD) is not, preprocessed with --chat-template and --append-eod, then sampled as training
# reads them (`loom data samples --targets`, packed sequences): a target is trained exactly
# when it is an upper-case letter, whatever the window's place in the shuffled, packed
# stream, so the loss mask travels with its tokens through Megatron's sample index. With
# data.loss_on_prompt every target is trained but the packed documents' ends; with
# data.pad_sequences each sample is one conversation from its start, its padding ignored; a
# mask of another dataset is refused. Then 40 iterations train on the replies alone.
#   sft_samples.sh LOOM
set -euo pipefail
loom=$1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/lib.sh"
scratch
python3 - <<'PY'
import json, random
rng = random.Random(7)
def word(alphabet, n):
    return "".join(rng.choice(alphabet) for _ in range(n))
with open("conv.jsonl", "w") as f:
    for i in range(60):
        msgs = []
        if i % 3 == 0:
            msgs.append({"role": "system", "content": "be brief."})
        for _ in range(1 + i % 3):
            msgs.append({"role": "user", "content": word("abcdefgh ?", 3 + i % 7)})
            msgs.append({"role": "assistant", "content": word("ABCDEFGH", 2 + i % 5)})
        f.write(json.dumps({"messages": msgs}) + "\n")
PY
"$loom" preprocess --input conv.jsonl --output-prefix sft --tokenizer byte \
  --chat-template '[{role}]{content}' --append-eod > pre.log
{
  toml_section train seed=3 iters=40 micro_batch_size=4 seq_len=48 log_interval=10 \
    eval_interval=0 metrics=metrics.jsonl
  toml_section model n_layer=2 n_head=2 n_embd=32 max_seq_len=48
  toml_section tokenizer plugin=byte
  toml_section data plugin=indexed prefix=sft_chat_document split=100,0,0 pack_sequences=true
  toml_section lr max=3e-3
} > r.toml

check() {  # check MODE < samples: MODE replies (the mask) or all (loss_on_prompt)
  python3 -c '
import sys
mode, rows, trained = sys.argv[1], 0, 0
for line in sys.stdin:
    if line.startswith("#"):
        continue
    cols = line.rstrip("\n").split("\t")
    tokens, targets = [int(x) for x in cols[4].split()], [int(x) for x in cols[5].split()]
    assert len(tokens) == len(targets) == 48, (len(tokens), len(targets))
    rows += 1
    for t in range(47):
        nxt = tokens[t + 1]
        if tokens[t] == 256:
            want = -1  # a packed document ends: its next document is not its target
        elif mode == "all":
            want = nxt
        else:
            want = nxt if 65 <= nxt <= 90 else -1
        assert targets[t] == want, (rows, t, tokens[t], nxt, targets[t], want)
        trained += targets[t] != -1
print(f"{mode}: {rows} samples, {trained} trained targets, each as the rule says")
assert rows == 160 and trained > 0
' "$1"
}
"$loom" data samples r.toml --count 160 --targets 2> samples.log | check replies
"$loom" data samples r.toml --count 160 --targets --set data.loss_on_prompt=true 2>> samples.log |
  check all

# data.pad_sequences: each sample is one conversation from its start ("[" of its first
# turn), padded with 0 whose targets are ignored; within it the same rule.
"$loom" data samples r.toml --count 160 --targets --set data.pad_sequences=true \
  --set data.pack_sequences=false 2>> samples.log | python3 -c '
import sys
rows = cut = 0
for line in sys.stdin:
    if line.startswith("#"):
        continue
    cols = line.rstrip("\n").split("\t")
    tokens, targets = [int(x) for x in cols[4].split()], [int(x) for x in cols[5].split()]
    rows += 1
    assert tokens[0] == ord("["), tokens[:8]
    real = tokens.index(0) if 0 in tokens else 49  # (a cut sample: all 48 real, and one more)
    cut += real == 49
    for t in range(48 if real < 49 else 47):  # (a cut sample: its last target is unseen here)
        if t + 1 >= real:
            want = -1  # padding (or the EOD the conversation ends with: not upper-case)
        else:
            nxt = tokens[t + 1]
            want = nxt if 65 <= nxt <= 90 else -1
        assert targets[t] == want, (rows, t, tokens, targets)
print(f"padded: {rows} samples, each one conversation from its start, {cut} cut at 49 tokens")
assert rows == 160
'

# A mask whose documents are not the tokens' is refused with both names.
"$loom" preprocess --input conv.jsonl --output-prefix other --tokenizer byte \
  --chat-format chatml > /dev/null
if "$loom" data samples r.toml --count 1 --targets \
     --set data.loss_mask_prefix=other_chat_loss_mask_document > bad.log 2>&1; then
  echo "FAIL: a mismatched loss mask was accepted"; exit 1
fi
grep -q "loss mask other_chat_loss_mask_document: its 60 documents are not the 60 of the same lengths in sft_chat_document" bad.log ||
  { echo "FAIL: unexpected refusal:"; cat bad.log; exit 1; }

# Training on the replies alone: the loss (over upper-case letters from an alphabet of 8)
# falls from ln(257) towards ln(8).
"$loom" run r.toml 2> train.log || { tail -20 train.log; exit 1; }
python3 -c '
import json, math
rows = [json.loads(l) for l in open("metrics.jsonl") if "\"loss\"" in l]
first, last = rows[0]["loss"], rows[-1]["loss"]
print(f"loss {first:.3f} -> {last:.3f} (ln 257 = {math.log(257):.3f}, ln 8 = {math.log(8):.3f})")
assert first > 5.0 and last < 3.0, (first, last)
'
echo "PASS"
