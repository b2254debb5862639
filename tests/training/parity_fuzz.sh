#!/usr/bin/env bash
# `loom parity --fuzz` (issue 35) on the quick-start GPT, MoE and BERT recipes, shrunk for
# speed (4 layers of width 32, sequences of 16, 2 iterations, at most 4 ranks of one thread):
#  1. Three layouts drawn from a fixed seed for each model match 1 rank in fp64 (exit 0).
#     (That the draw is the same for a seed is test_engine's "parity fuzz" case.)
#  2. A drawn layout that fails (the learning rate 1% higher in the layouts' runs) prints a
#     command whose --layouts token reruns it alone, and that rerun fails the same way.
#  3. A layout with another micro-batch size (mbN) is compared with one rank of that size,
#     each row naming its reference: MoE's dp2+mb1 (Switch's balancing loss is per
#     micro-batch: refused before) and T5's tp2+mb1 (Megatron's T5 loss is a mean per
#     micro-batch: against the recipe's mb2 its first gradient norm is 31 % off) pass; tp2
#     with mb1 set by --layout-set, held to the recipe's mb2, still fails.
#  4. What a model cannot take is refused before any run (exit 2), so never drawn: recompute
#     in T5 (refused at create only, before issue 35: the draws' runs failed).
#   parity_fuzz.sh LOOM MPIEXEC
set -uo pipefail
loom=$1 mpiexec=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/lib.sh"  # parity_corpus (its fail is replaced below)
repo=$(cd "$here/../.." && pwd)
bert_data=$(cd "$here/../data/data/bert_masking" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export TMPDIR=$dir  # the runs of failing layouts stay there
fail() { echo "FAIL: $*"; exit 1; }
# Documents: the frozen corpus of the parity tests (the quick start's fortunes may not be
# installed), not docs/ itself, whose edits would change the data.
parity_corpus > "$dir/docs.jsonl"
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

# 3. mbN against one rank with the same micro-batch size.
same_micro() {  # same_micro NAME RECIPE LAYOUTS ARGS...
  local name=$1 recipe=$2 layouts=$3
  shift 3
  "$loom" parity "$recipe" --layouts "$layouts" "${small[@]}" "$@" > "$dir/$name.txt" \
    2> "$dir/$name.err"
  local rc=$?
  cat "$dir/$name.txt"
  [ $rc -eq 0 ] || { tail -20 "$dir/$name.err"; fail "$name: exit $rc, expected 0"; }
}
same_micro moe-mb1 recipes/moe-quickstart.toml dp2+mb1 "${moe[@]}"
grep -Eq "^dp2\+mb1 +2 .* pass$" "$dir/moe-mb1.txt" || fail "moe dp2+mb1 did not pass"
grep -q "; 1 rank took .* with micro-batch 1$" "$dir/moe-mb1.txt" ||
  fail "moe dp2+mb1: the reference's micro-batch is not named"
same_micro t5-mb1 recipes/t5-quickstart.toml tp2,tp2+mb1 "${t5[@]}"
grep -Eq "^tp2 +2 +1 rank mb2 .* pass$" "$dir/t5-mb1.txt" || fail "t5 tp2 not against 1 rank mb2"
grep -Eq "^tp2\+mb1 +2 +1 rank mb1 .* pass$" "$dir/t5-mb1.txt" ||
  fail "t5 tp2+mb1 not against 1 rank mb1, or not passing"
grep -q "with micro-batch 2 (the recipe's), .* with micro-batch 1$" "$dir/t5-mb1.txt" ||
  fail "t5: the header does not name both references"
# The same micro-batch held to the recipe's (as before): T5's objective differs, so it fails.
"$loom" parity recipes/t5-quickstart.toml --layouts tp2 --layout-set train.micro_batch_size=1 \
  "${small[@]}" "${t5[@]}" > "$dir/t5-mb2.txt" 2> "$dir/t5-mb2.err"
rc=$?
cat "$dir/t5-mb2.txt"
[ $rc -eq 1 ] || fail "t5 mb1 against 1 rank mb2: exit $rc, expected 1"
grep -q "^  grad_norm at iteration 1: " "$dir/t5-mb2.txt" ||
  fail "t5 mb1 against 1 rank mb2: the gradient norm does not differ at iteration 1"

# 4. Refused before any run.
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
refused "t5 recompute" "activation recompute is not implemented for T5" \
  recipes/t5-quickstart.toml --layouts dp2+recompute "${t5[@]}"
echo "parity fuzz: every check passed"
