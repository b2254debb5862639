#!/usr/bin/env bash
# backend.norm_residual (loom.norm-residual/1, ABI 2.29, issue 33): a block's residual adds
# made by the norms beside them (the add before a pre-norm block's second norm and both of a
# post-norm block's, and in backward the residual gradient's add after each norm) change no
# number. Each model trains with the norms taking the adds and with the layer library's
# separate add op (backend.norm_residual = false); every logged number and the final
# checkpoint's files must be identical:
#  - GPT-2 (pre-norm LayerNorm) in fp32, fp64 and bf16, with the norms recomputed (selective
#    recompute of "layernorm") and with whole layers recomputed;
#  - Llama-style (RMSNorm, SwiGLU, RoPE), a mixture of experts, a hybrid Mamba stack, BERT
#    (post-norm) and T5 (three norms a decoder layer);
#  - under mpirun: GPT at TP2 with sequence parallelism (the norms on the sequence shards).
# And the norms do take them: with train.timers, GPT's step makes 3 elementwise calls fewer a
# layer and micro-batch, and the same number of norm calls.
#   norm_residual.sh LOOM [MPIEXEC]
set -uo pipefail
loom=$1 mpiexec=${2:-}
. "$(dirname "$0")/../support/lib.sh"
bert_data=$(cd "$(dirname "$0")/../data/data/bert_masking" && pwd)
scratch
train() { toml_section train seed=7 iters=6 micro_batch_size=2 global_batch_size=4 seq_len=16 \
  log_interval=2; toml_section lr max=3e-3 warmup_iters=2; toml_section optimizer plugin=adamw; }
model() { toml_section backend measure_gemm=false threads=1
  toml_section model "plugin=$1" n_layer=2 n_head=4 n_embd=32 max_seq_len=16; }
{ train; small_gpt_sections 200; } > gpt.toml
{ train; model bert; bert_data_sections; } > bert.toml
{ train; model t5
  toml_section tokenizer plugin=wordpiece "vocab_file=$bert_data/vocab.txt" vocab_extra_ids=10
  toml_section data plugin=t5 "prefix=$bert_data/sentences" split=80,20,0 decoder_seq_len=8
} > t5.toml
# same NAME RECIPE ARGS...: the run both ways (under $launch when set), then compared.
launch=()
same() { same_both_ways backend.norm_residual "$@"; }

same gpt gpt.toml --set train.timers=true
python3 - <<'PY' || fail "gpt: the norms did not take the adds"
import json
def calls(mode):
    rows = [json.loads(l) for l in open(f"gpt.{mode}.jsonl")]
    rows = [r for r in rows if "timer_calls.elementwise" in r]
    return rows[-1]["timer_calls.elementwise"], rows[-1]["timer_calls.norm"]
(e_on, n_on), (e_off, n_off) = calls("true"), calls("false")
layers, micro = 4, 2
assert e_off - e_on == 3 * layers * micro and n_on == n_off, (e_on, e_off, n_on, n_off)
print(f"gpt: {e_on} elementwise calls a step with the norms taking the adds, {e_off} without; "
      f"{n_on} norm calls both")
PY
same fp64 gpt.toml --set precision.dtype=fp64
same bf16 gpt.toml --set precision.dtype=bf16
same selective gpt.toml --set train.recompute_granularity=selective \
  --set train.recompute_modules=layernorm
same full gpt.toml --set train.recompute_granularity=full
same llama gpt.toml --set model.norm=rmsnorm --set model.activation=swiglu \
  --set model.position=rope --set model.n_kv_head=2 --set model.bias=false \
  --set precision.dtype=bf16
same moe gpt.toml --set model.num_experts=4 --set model.moe_router_topk=2 \
  --set model.activation=swiglu --set model.moe_ffn_hidden_size=24
same hybrid gpt.toml "${HYBRID_MODEL[@]}"
same bert bert.toml
same t5 t5.toml --set model.decoder_seq_len=8 --set model.decoder_layers=2
if [ -n "$mpiexec" ]; then
  launch=(mpi_ranks 2)
  same tp2sp gpt.toml --set parallel.tensor=2 --set parallel.sequence_parallel=true
fi
echo "backend.norm_residual: every run identical with the norms taking the residual adds"
