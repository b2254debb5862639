#!/usr/bin/env bash
# BERT finetuning end to end, as Megatron's GLUE MNLI task: a tiny model/bert pretrains on
# dataset/bert (the sentences and WordPiece vocabulary of tests/data/data/bert_masking) and
# saves; model/bert-classifier then finetunes from that checkpoint on MNLI-format TSV files
# (dataset/mnli: GLUE's 12-column train file, a 3-column dev file) with a fresh classifier
# (checkpoint.finetune_fresh) and reports the dev accuracy at each evaluation.
#   bert_finetune.sh LOOM
# Checks:
#  - a pretraining run resumed from its checkpoint at iteration 10 equals the straight run;
#  - every weight but the classifier is the pretrained one: the log names exactly the
#    classifier's two tensors as fresh, and the first loss differs from a from-scratch run's;
#  - the task is learnable from the hypothesis (each label has its own words), so the dev
#    accuracy must rise from chance (1/3) to at least 0.9;
#  - without finetune_fresh the run is refused (exit 2) and pointed at it; a parameter the
#    checkpoint lacks and finetune_fresh does not name is refused naming it;
#  - a label outside contradiction/entailment/neutral is refused with the file and line.
set -euo pipefail
loom=$1
data=$(cd "$(dirname "$0")/../data/data/bert_masking" && pwd)
. "$(dirname "$0")/../support/lib.sh"
scratch
common=(--set backend.plugin=cpu --set backend.measure_gemm=false --set backend.threads=1
        --set tokenizer.plugin=wordpiece --set tokenizer.vocab_file="$data/vocab.txt"
        --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=32
        --set model.max_seq_len=32 --set train.seq_len=32 --set train.micro_batch_size=8
        --set train.seed=11 --set lr.warmup_iters=2)
# pretraining: 2 samples a step, so 20 steps stay within one epoch of the sample index (about
# 56 samples at seq_len 32): the index, which covers whole epochs of the samples wanted (as
# Megatron's), is then the same for 10 iterations as for 20
pre=(--set train.micro_batch_size=2)
{
  toml_section train iters=20 log_interval=10 eval_interval=0
  toml_section lr max=1e-3
  toml_section model plugin=bert
  toml_section data plugin=bert "prefix=$data/sentences" split=100,0,0
  toml_section checkpoint save=pre
} > pretrain.toml
# Resuming dataset/bert's samples: 10 iterations on the 20-iteration schedule, save, resume
# to 20: the same losses as the straight run, bitwise.
resume_half loss_sop pretrain.toml "${common[@]}" "${pre[@]}"

python3 - <<'PY'
import random
rng = random.Random(5)
words = ["w%d" % i for i in range(5, 100) if i % 3]
# each label has its own words for the hypothesis (a bag-of-words rule a tiny model learns)
group = {"contradiction": words[0::3], "entailment": words[1::3], "neutral": words[2::3]}
def example():
    label = rng.choice(sorted(group))
    premise = " ".join(rng.choice(words) for _ in range(rng.randint(3, 9)))
    hypothesis = " ".join(rng.choice(group[label]) for _ in range(rng.randint(2, 5)))
    return premise, hypothesis, label
head = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
        "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "sentence1",
        "sentence2", "label1", "gold_label"]
with open("train.tsv", "w") as f:
    f.write("\t".join(head) + "\n")
    for i in range(480):
        p, h, l = example()
        f.write("\t".join([str(i), "0", "0", "fiction", "()", "()", "()", "()", p, h, l, l]) + "\n")
with open("dev.tsv", "w") as f:
    f.write("premise\thypothesis\tlabel\n")
    for i in range(96):
        f.write("\t".join(example()) + "\n")
with open("bad.tsv", "w") as f:
    f.write("premise\thypothesis\tlabel\nw10 w11\tw5 w13\tcontradiction\nw10\tw7\tmaybe\n")
PY

cat > finetune.toml <<'TOML'
[train]
iters = 400
log_interval = 10
eval_interval = 200
eval_iters = 4
metrics = "ft.jsonl"
[lr]
max = 2e-3
[model]
plugin = "bert-classifier"
num_classes = 3
[data]
plugin = "mnli"
path = "train.tsv"
train_blend = "train.tsv"
valid_blend = "dev.tsv"
[checkpoint]
finetune = "pre"
finetune_fresh = "classifier"
TOML
"$loom" run finetune.toml "${common[@]}" 2> ft.log || { tail -20 ft.log; exit 1; }
grep -q "checkpoint.finetune_fresh: 2 parameter(s) start from their initialisation on this rank: classifier.weight, classifier.bias" ft.log ||
  { echo "the log does not name the fresh classifier:"; grep finetune ft.log; exit 1; }
python3 - <<'PY'
import json
rows = [json.loads(l) for l in open("ft.jsonl")]
evals = [r for r in rows if "eval_accuracy" in r]
assert len(evals) == 2, rows
first = [r for r in rows if "loss" in r][0]
print(f"finetuning: cls loss {first['loss']:.4f} at iteration 1; dev accuracy "
      + ", ".join(f"{r['eval_accuracy']:.3f} at {r['iter']}" for r in evals))
assert evals[-1]["eval_accuracy"] >= 0.9, evals
PY

# The pretrained weights are what the run starts from: from scratch (no checkpoint), the same
# seed gives another first loss.
"$loom" run finetune.toml "${common[@]}" --set train.iters=1 --set train.metrics=a.jsonl \
  --set checkpoint.finetune= --set checkpoint.finetune_fresh= 2> a.log
first=$(python3 -c "import json; print(json.loads(open('ft.jsonl').readline())['loss'])")
scratch=$(python3 -c "import json; print(json.loads(open('a.jsonl').readline())['loss'])")
[ "$first" != "$scratch" ] || { echo "finetuned and from-scratch first losses agree: $first"; exit 1; }
echo "first loss: $first finetuned, $scratch from scratch"

# Refusals: no finetune_fresh (the classifier is not in the checkpoint); a bad label.
set +e
"$loom" run finetune.toml "${common[@]}" --set checkpoint.finetune_fresh= 2> nofresh.log
code=$?
set -e
[ $code -eq 2 ] || { echo "without finetune_fresh: exit $code, expected 2"; tail -5 nofresh.log; exit 1; }
grep -q 'model.plugin is "bert-classifier" in the recipe but "bert" in pre/iter_0000020; a new head on the checkpoint.s body (its parameters named by checkpoint.finetune_fresh) may change it' nofresh.log ||
  { echo "unexpected refusal:"; tail -3 nofresh.log; exit 1; }
set +e
"$loom" run finetune.toml "${common[@]}" --set data.valid_blend=bad.tsv 2> bad.log
code=$?
set -e
[ $code -ne 0 ] || { echo "a bad label was accepted"; exit 1; }
grep -q "bad.tsv:3: label 'maybe' is none of contradiction, entailment, neutral" bad.log ||
  { echo "unexpected error for a bad label:"; tail -3 bad.log; exit 1; }
set +e
"$loom" run finetune.toml "${common[@]}" --set checkpoint.finetune_fresh=pooler 2> nohead.log
code=$?
set -e
[ $code -eq 2 ] || { echo "fresh pooler, no classifier: exit $code, expected 2"; tail -3 nohead.log; exit 1; }
grep -q "has no classifier.weight, classifier.bias; a new head starts fresh when checkpoint.finetune_fresh names it" nohead.log ||
  { echo "unexpected refusal:"; tail -3 nohead.log; exit 1; }
# A recipe whose head differs from the checkpoint's is refused by its key: model/bert with a
# binary head from one without.
"$loom" run pretrain.toml "${common[@]}" --set model.binary_head=false --set data.binary_head=false \
  --set checkpoint.save=nobin --set train.iters=2 2> nobin.log || { tail -5 nobin.log; exit 1; }
set +e
"$loom" run pretrain.toml "${common[@]}" --set checkpoint.save= --set train.iters=2 \
  --set checkpoint.finetune=nobin --set model.binary_head=true 2> missing.log
code=$?
set -e
[ $code -eq 2 ] || { echo "a checkpoint without the binary head: exit $code, expected 2"; tail -3 missing.log; exit 1; }
grep -q "model.binary_head is true in the recipe but false in nobin" missing.log ||
  { echo "unexpected refusal:"; tail -3 missing.log; exit 1; }
echo "refusals: no finetune_fresh (exit 2, points at it), a changed head (exit 2), a bad label (names file:line)"
