#!/usr/bin/env bash
# T5 through the `loom` executable: a tiny model/t5 pretrains on dataset/t5 (span corruption
# over the sentences and WordPiece vocabulary of tests/data/data/bert_masking, 10 sentinels)
# and saves; `loom generate` then encodes a prompt once and decodes its answer.
#   t5_generate.sh LOOM
# Checks:
#  - a run resumed from its checkpoint at iteration 10 equals the straight 20-iteration run
#    bitwise (dataset/t5's samples and model/t5's state);
#  - the answer is printed on the line after the prompt, and greedy decoding (temperature 0)
#    gives the same answer whatever the seed; sampling runs too;
#  - --logits-out (decoder-only), a prompt longer than the encoder's context, an empty
#    prompt, and `loom serve` (no encoder-decoder serving yet) are refused with exit 2 and
#    a message that names the reason.
# The numbers of KV-cached decoding over the once-run encoder are tests/model/test_t5.cpp's
# (against PyTorch); this checks the command around them.
set -euo pipefail
loom=$1
data=$(cd "$(dirname "$0")/../data/data/bert_masking" && pwd)
. "$(dirname "$0")/../support/lib.sh"
scratch
{
  toml_section train iters=20 seq_len=32 micro_batch_size=2 seed=11 log_interval=10 \
    eval_interval=0
  toml_section lr max=1e-3 warmup_iters=2
  toml_section backend plugin=cpu measure_gemm=false threads=1
  toml_section model plugin=t5 n_layer=2 decoder_layers=2 n_head=2 n_embd=32 max_seq_len=32 \
    decoder_seq_len=12
  toml_section tokenizer plugin=wordpiece "vocab_file=$data/vocab.txt" vocab_extra_ids=10
  toml_section data plugin=t5 "prefix=$data/sentences" split=100,0,0 decoder_seq_len=12
  toml_section checkpoint save=pre
} > pretrain.toml
resume_half grad_norm pretrain.toml

prompt="w5 w7 <extra_id_0> w10 w11"
gen() { "$loom" generate --checkpoint pre --prompt "$prompt" --max-new-tokens 6 "$@" 2>> gen.log; }
gen --temperature 0 --seed 1 > greedy1.txt || { cat gen.log; exit 1; }
gen --temperature 0 --seed 2 > greedy2.txt || { cat gen.log; exit 1; }
gen --temperature 1 --seed 3 > sampled.txt || { cat gen.log; exit 1; }
[ "$(sed -n 1p greedy1.txt)" = "$prompt" ] || { echo "the prompt is not the first line"; cat greedy1.txt; exit 1; }
[ "$(wc -l < greedy1.txt)" -eq 2 ] || { echo "expected the prompt and one answer line"; cat greedy1.txt; exit 1; }
cmp -s greedy1.txt greedy2.txt || { echo "greedy answers differ between seeds"; cat greedy1.txt greedy2.txt; exit 1; }
[ "$(sed -n 1p sampled.txt)" = "$prompt" ] || { echo "sampling: the prompt is not the first line"; exit 1; }
echo "generate: greedy answer '$(sed -n 2p greedy1.txt)', sampled '$(sed -n 2p sampled.txt)'"

refused() {  # refused WHAT EXPECTED-TEXT COMMAND...
  local what=$1 want=$2
  shift 2
  set +e
  "$@" > refused.out 2> refused.err
  local rc=$?
  set -e
  if [ $rc -ne 2 ] || ! grep -qF -- "$want" refused.err; then
    echo "$what: expected exit 2 and '$want', got $rc:"; cat refused.err; exit 1
  fi
  echo "refused ($what): $(grep -F -- "$want" refused.err | head -1)"
}
refused "--logits-out" "decoder-only" \
  "$loom" generate --checkpoint pre --prompt "$prompt" --logits-out l.safetensors
refused "long prompt" "the model's encoder takes 32" \
  "$loom" generate --checkpoint pre --prompt "$(printf 'w5 %.0s' {1..40})"
refused "empty prompt" "non-empty prompt" "$loom" generate --checkpoint pre --prompt ""
refused "serve" "loom.encode/1" timeout 60 "$loom" serve --checkpoint pre --port 0
