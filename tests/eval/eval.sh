#!/usr/bin/env bash
# `loom eval` on small generated files, with the expected numbers recomputed independently:
# reference.py applies Megatron's WikiText detokenizer (Python's re), builds the overlapping
# windows and LAMBADA's cloze samples, and computes the losses, perplexities, token ratio and
# accuracies in float64 from per-position logits that `loom generate --logits-out` writes
# (the KV-cache decode path, not the training forward `loom eval` runs). Then every layout
# (tensor, pipeline, data parallel, and both) gives the one-rank numbers.
#   eval.sh LOOM [MPIEXEC]
set -euo pipefail
loom=$1
mpiexec=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/lib.sh"
scratch
python3 "$here/reference.py" make-data
{
  toml_section train iters=300 micro_batch_size=4 seq_len=32 log_interval=300
  toml_section model n_layer=2 n_head=4 n_embd=32 max_seq_len=32
  toml_section tokenizer plugin=byte
  toml_section data plugin=jsonl path=train.jsonl
  toml_section checkpoint save=ck
  toml_section lr max=3e-3
} > r.toml
"$loom" run r.toml 2> train.log || { tail -20 train.log; exit 1; }

run_eval() {  # run_eval NAME [launcher...] -- [eval args...]
  local name=$1
  shift
  "$@" 2> "$name.log" || { cat "$name.log"; exit 1; }
}
for strict in "" --strict; do
  "$loom" eval --checkpoint ck --task lambada --data lambada.jsonl $strict --micro-batch 3 \
    --output "lambada$strict.json" > /dev/null 2> lambada.log || { cat lambada.log; exit 1; }
done
"$loom" eval --checkpoint ck --task wikitext --data wiki.tokens --overlapping-eval 8 \
  --micro-batch 3 --output wikitext.json > /dev/null 2> wikitext.log || { cat wikitext.log; exit 1; }
"$loom" eval --checkpoint ck --task wikitext --data wiki.tokens --overlapping-eval 32 \
  --output wikitext32.json > /dev/null 2> wikitext32.log || { cat wikitext32.log; exit 1; }
python3 "$here/reference.py" check "$loom" ck

# The log (issue 35): what is scored and the result, not the set-up lines of the training
# run eval rebuilds to load the weights; --help says where the data comes from.
for log in wikitext.log lambada.log; do
  grep -q '^\[r0\] eval: ck' $log && grep -Eq '^\[r0\] (wikitext|lambada)' $log ||
    { cat $log; echo "FAIL: $log lacks the eval: line or the result"; exit 1; }
  if grep -E 'optimizer/|finetuning from|memory per parameter|\] model: |\] data: |sgemm' $log; then
    echo "FAIL: $log has the training run's set-up lines above"
    exit 1
  fi
done
"$loom" eval --help > help.txt
grep -q 'wiki.test.tokens' help.txt && grep -q 'lambada_test.jsonl' help.txt ||
  { cat help.txt; echo "FAIL: loom eval --help does not say where the data comes from"; exit 1; }

[ -n "$mpiexec" ] || { echo "no MPI: the layouts are not checked"; exit 0; }
for layout in "2 parallel.tensor=2" "2 parallel.pipeline=2" "2 parallel.tensor=1" \
              "4 parallel.tensor=2 parallel.pipeline=2"; do
  set -- $layout
  np=$1
  shift
  sets=(--set comm.plugin=mpi)
  for s in "$@"; do sets+=(--set "$s"); done
  tag=$(echo "$np $*" | tr ' =.' '___')
  "$mpiexec" -n "$np" "$loom" eval --checkpoint ck --task wikitext --data wiki.tokens \
    --overlapping-eval 8 --micro-batch 3 --output "w$tag.json" "${sets[@]}" > /dev/null 2> "w$tag.log" ||
    { cat "w$tag.log"; exit 1; }
  "$mpiexec" -n "$np" "$loom" eval --checkpoint ck --task lambada --data lambada.jsonl --strict \
    --micro-batch 3 --output "l$tag.json" "${sets[@]}" > /dev/null 2> "l$tag.log" ||
    { cat "l$tag.log"; exit 1; }
  python3 - "$np $*" "w$tag.json" "l$tag.json" <<'PY'
import json, sys
name, w, l = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
w1, l1 = json.load(open("wikitext.json")), json.load(open("lambada--strict.json"))
for k in ("avg_loss", "ppl", "adjusted_ppl"):
    assert abs(w[k] - w1[k]) <= 1e-5 * abs(w1[k]), (name, k, w[k], w1[k])
assert w["scored_tokens"] == w1["scored_tokens"] and w["windows"] == w1["windows"]
assert (l["correct"], l["total"]) == (l1["correct"], l1["total"]), (name, l, l1)
assert abs(l["avg_loss"] - l1["avg_loss"]) <= 1e-5 * l1["avg_loss"]
print(f"ranks {name:38}: wikitext avg loss {w['avg_loss']:.8f} (one rank {w1['avg_loss']:.8f}), "
      f"lambada {l['correct']:.0f}/{l['total']:.0f}")
PY
done
