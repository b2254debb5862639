#!/usr/bin/env bash
# Activation recompute changes memory, never numbers. Each model trains 6 iterations (fp32)
# without recompute and then with every mode; the losses and gradient norms of every
# iteration, the evaluation and every final parameter must be identical bit for bit
# (`loom checkpoint diff --rtol 0`), and the backend's peak memory (mem_bytes) must fall:
#   selective: core_attn,mlp_act,layernorm (pre-norm models) or core_attn,mlp_act (post-norm)
#   full uniform 2, full uniform 3 (4 layers: a group of 3 and one of 1), full block 2 (the
#   scratch holds one layer, so block 1 would trade one layer for another)
# Models: GPT-2 style, Llama style (RMSNorm, SwiGLU, RoPE, GQA), a mixture of experts, BERT
# (post-norm); and under mpirun: TP2 with sequence parallelism, PP2 (1F1B, two micro-batches
# in flight share the scratch), ring CP2. Then the refusals, with exit 2.
#   recompute.sh LOOM MPIEXEC
set -euo pipefail
loom=$1 mpiexec=$2
. "$(dirname "$0")/../support/lib.sh"
scratch
{
  toml_section train seed=11 iters=6 micro_batch_size=2 global_batch_size=4 seq_len=32 \
    eval_interval=6 eval_iters=1
  toml_section lr max=3e-3
  gpt_sections n_layer=4 max_seq_len=32 num_documents=100 doc_length=64
} > base.toml
# BERT on dataset/bert over tests/data's sentences and WordPiece vocabulary
{ sed '/^\[tokenizer\]/,$d' base.toml; bert_data_sections; } > bert.toml
recipe=base.toml np=1 sets=()
run() {  # run NAME ARGS...: trains, saves NAME/ and NAME.jsonl
  local name=$1
  shift
  if [ "$np" = 1 ]; then
    "$loom" run $recipe "${sets[@]}" "$@" --set train.metrics=$name.jsonl \
      --set checkpoint.save=$name 2> log || { cat log; exit 1; }
  else
    mpi_ranks "$np" "$loom" run $recipe "${sets[@]}" --set comm.plugin=mpi "$@" \
      --set train.metrics=$name.jsonl --set checkpoint.save=$name 2> log || { tail -30 log; exit 1; }
  fi
}
same() {  # same WHAT A B: identical numbers, and B's peak memory below A's
  python3 - "$@" <<'PY'
import json, sys
what, a, b = sys.argv[1:4]
A = [json.loads(l) for l in open(a + ".jsonl")]
B = [json.loads(l) for l in open(b + ".jsonl")]
assert len(A) == len(B) == 7, (len(A), len(B))  # 6 steps and an evaluation
for x, y in zip(A, B):
    for k in x:
        if k == "grad_norm" or "loss" in k or k.startswith("moe_load"):
            if x[k] != y[k]:
                sys.exit(f"{what}: iter {x['iter']} {k}: {x[k]!r} without recompute, {y[k]!r} with")
peak = lambda rows: max(r.get("mem_bytes", 0) for r in rows)
if not peak(B) < peak(A):
    sys.exit(f"{what}: peak memory {peak(B)} is not below {peak(A)} without recompute")
print(f"{what}: identical losses and grad norms; peak {peak(A) / 2**20:.2f} -> "
      f"{peak(B) / 2**20:.2f} MiB")
PY
  "$loom" checkpoint diff "$2" "$3" --rtol 0 | tail -1
}
modes() {  # modes MODEL SELECTIVE_MODULES: none, then every mode against it
  local model=$1 modules=$2
  run $model-none
  run $model-sel --set train.recompute_granularity=selective --set train.recompute_modules=$modules
  same "$model selective $modules" $model-none $model-sel
  for m in uniform:2 uniform:3 block:2; do
    run $model-full --set train.recompute_granularity=full --set train.recompute_method=${m%:*} \
      --set train.recompute_num_layers=${m#*:}
    same "$model full ${m%:*} ${m#*:}" $model-none $model-full
    rm -rf $model-full
  done
}
sets=()
modes gpt core_attn,mlp_act,layernorm
sets=(--set model.norm=rmsnorm --set model.activation=swiglu --set model.position=rope
      --set model.n_kv_head=2 --set model.bias=false)
modes llama core_attn,mlp_act,layernorm
sets=(--set model.num_experts=4 --set model.moe_router_topk=2 --set model.moe_aux_loss_coeff=0.01
      --set model.moe_shared_expert_intermediate_size=16)
modes moe core_attn,layernorm
recipe=bert.toml sets=(--set model.plugin=bert --set model.norm_position=post)
modes bert core_attn,mlp_act
recipe=base.toml
np=2 sets=(--set parallel.tensor=2 --set parallel.sequence_parallel=true)
modes tp2sp core_attn,mlp_act,layernorm
sets=(--set parallel.pipeline=2 --set train.global_batch_size=8)
modes pp2 core_attn,mlp_act,layernorm
sets=(--set parallel.context=2)
modes cp2 core_attn,mlp_act,layernorm
np=1 sets=()
refuse() {  # refuse MESSAGE RECIPE ARGS...
  local msg=$1
  shift
  expect 2 "$msg" "$loom" run "$@" --set train.iters=1
}
refuse "train.recompute_modules names an unknown module \"core_atn\"; did you mean 'core_attn'?" \
  base.toml --set train.recompute_granularity=selective --set train.recompute_modules=core_atn
refuse "the post-norm layers (norm_position = \"post\") keep their norm outputs" \
  bert.toml --set model.plugin=bert --set model.norm_position=post \
  --set train.recompute_granularity=selective --set train.recompute_modules=layernorm
