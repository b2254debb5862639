#!/usr/bin/env bash
# `loom parity --fuzz` (issue 35) on the quick-start GPT, MoE and BERT recipes, shrunk for
# speed (4 layers of width 32, sequences of 16, 2 iterations, at most 4 ranks of one thread):
#  1. Three layouts drawn from a fixed seed for each model match 1 rank in fp64 (exit 0).
#     (That the draw is the same for a seed is test_engine's "parity fuzz" case.)
#  2. A drawn layout that fails (the learning rate 1% higher in the layouts' runs) prints a
#     command whose --layouts token reruns it alone, and that rerun fails the same way.
#  3. What a model cannot take is refused before any run (exit 2), so never drawn: another
#     micro-batch size with Switch's per-micro-batch balancing loss, recompute in T5 (refused
#     at create only, before issue 35: the draws' runs failed).
#   parity_fuzz.sh LOOM MPIEXEC
set -uo pipefail
loom=$1 mpiexec=$2
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
bert_data=$(cd "$here/../data/data/bert_masking" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export TMPDIR=$dir  # the runs of failing layouts stay there
fail() { echo "FAIL: $*"; exit 1; }
# Documents: the docs' files, one each (the quick start's fortunes may not be installed).
for f in "$repo"/docs/*.md; do
  python3 -c 'import json, sys; print(json.dumps({"text": open(sys.argv[1]).read()}))' "$f"
done > "$dir/docs.jsonl"
draw=(--seed 35 --max-ranks 4)
small=(--iters 2 --mpiexec "$mpiexec" --set model.n_layer=4 --set model.n_head=4
       --set model.n_embd=32
       --set model.max_seq_len=16 --set train.seq_len=16 --set train.micro_batch_size=2
       --set backend.threads=1 --set backend.measure_gemm=false --set train.eval_interval=0)
gpt=(--set "data.path=$dir/docs.jsonl")
moe=(--set "data.path=$dir/docs.jsonl" --set model.n_kv_head=2 --set model.num_experts=4
     --set model.moe_ffn_hidden_size=16)
bert=(--set "tokenizer.vocab_file=$bert_data/vocab.txt" --set "data.prefix=$bert_data/sentences")
t5=("${bert[@]}" --set model.decoder_seq_len=8 --set data.decoder_seq_len=8)
cd "$repo"

# 1. Three drawn layouts per model pass.
fuzz() {  # fuzz NAME RECIPE ARGS...
  local name=$1 recipe=$2
  shift 2
  "$loom" parity "$recipe" --fuzz 3 "${draw[@]}" "${small[@]}" "$@" > "$dir/$name.txt" 2> "$dir/$name.err"
  local rc=$?
  cat "$dir/$name.txt"
  [ $rc -eq 0 ] || { tail -20 "$dir/$name.err"; fail "$name: exit $rc, expected 0"; }
  grep -q "^fuzz: 3 layouts drawn from seed 35 (at most 4 ranks)" "$dir/$name.txt" ||
    fail "$name: no line saying what was drawn"
  grep -q "in fp64" "$dir/$name.txt" || fail "$name: not fp64"
  grep -q "all 3 layouts match 1 rank" "$dir/$name.txt" || fail "$name: not all layouts pass"
}
fuzz gpt recipes/quickstart.toml "${gpt[@]}"
fuzz moe recipes/moe-quickstart.toml "${moe[@]}"
fuzz bert recipes/bert-quickstart.toml "${bert[@]}"

layouts() { sed -n '/^LAYOUT/,/^$/p' "$1" | awk 'NR > 1 && NF {print $1}'; }
[ "$(layouts "$dir/gpt.txt" | wc -l)" -eq 3 ] || fail "gpt: not 3 layout rows"

# 2. A failing draw reruns alone: the token it prints fails again under --layouts.
"$loom" parity recipes/quickstart.toml --fuzz 1 "${draw[@]}" "${small[@]}" "${gpt[@]}" \
  --layout-set lr.max=3.03e-3 > "$dir/bad.txt" 2> "$dir/bad.err"
rc=$?
cat "$dir/bad.txt"
[ $rc -eq 1 ] || fail "a drawn layout with another learning rate: exit $rc, expected 1"
token=$(sed -n 's/^  rerun alone: loom parity [^ ]* --layouts \([^ ]*\) .*/\1/p' "$dir/bad.txt")
[ -n "$token" ] || fail "no rerun command for the failing draw"
[ "$(layouts "$dir/bad.txt")" = "$token" ] || fail "the rerun's layout is not the row's"
"$loom" parity recipes/quickstart.toml --layouts "$token" "${small[@]}" "${gpt[@]}" \
  --layout-set lr.max=3.03e-3 > "$dir/rerun.txt" 2> "$dir/rerun.err"
rc=$?
cat "$dir/rerun.txt"
[ $rc -eq 1 ] || fail "the rerun of $token: exit $rc, expected 1"

# 3. Refused before any run.
refused() {  # refused WHAT EXPECTED-TEXT RECIPE ARGS...
  local what=$1 text=$2
  shift 2
  "$loom" parity "$@" "${small[@]}" > "$dir/u.out" 2> "$dir/u.err"
  local rc=$?
  [ $rc -eq 2 ] || { cat "$dir/u.out" "$dir/u.err"; fail "$what: exit $rc, expected 2"; }
  grep -q -- "$text" "$dir/u.err" || { cat "$dir/u.err"; fail "$what: no '$text'"; }
  grep -q "parity: 1 rank" "$dir/u.err" && fail "$what: refused only after a run"
  echo "refused ($what): $(cat "$dir/u.err")"
}
refused "moe mb1" "the experts' load-balancing loss .* is computed per micro-batch" \
  recipes/moe-quickstart.toml --layouts dp2+mb1 "${moe[@]}"
refused "t5 recompute" "activation recompute is not implemented for T5" \
  recipes/t5-quickstart.toml --layouts dp2+recompute "${t5[@]}"
echo "parity fuzz: every check passed"
