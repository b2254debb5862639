#!/usr/bin/env bash
# Sharded checkpoints resume exactly at the same layout: 4 ranks in LAYOUT train 12
# iterations straight, and 6 + save + (a new run) load + 6; the final checkpoints must be
# identical (rtol 0) and so must the logged losses of iterations 7..12.
#   resume.sh LOOM MPIEXEC LAYOUT   (LAYOUT: tp2pp2 | tp2dp2dist | moe-tp2dp2dist | moe-ep2 |
#   moe-ep2dp2dist | moe-ep2fsdp | moe-ep2pp2zbh1, the moe ones with a mixture of experts: 4 experts, top-2, balancing and z
#   losses; moebias-ep2etp2: a sigmoid router with the expert bias, EP2 and expert tensor
#   parallelism over TP2; ep2: expert parallelism of 2 over the 4 data-parallel ranks; cp2dp2 | cp2dp2dist:
#   context parallelism of 2 beside data parallelism of 2; pp2dp2fsdp | cp2dp2fsdp: FSDP under
#   a pipeline and under context parallelism; lora-tp2pp2: LoRA adapters on a frozen base)
set -euo pipefail
loom=$1 mpiexec=$2 layout=$3
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/lib.sh"
scratch
{
  toml_section train seed=3 iters=12 micro_batch_size=2 global_batch_size=8 seq_len=16
  toml_section lr max=3e-3 decay_iters=12  # the same schedule for the run that stops at 6
  toml_section comm plugin=mpi
  small_gpt_sections
} > r.toml
case $layout in
  tp2pp2) sets=(--set parallel.tensor=2 --set parallel.pipeline=2) ;;
  tp2dp2dist) sets=(--set parallel.tensor=2 --set parallel.data=distributed-optimizer) ;;
  moe-tp2dp2dist) sets=(--set parallel.tensor=2 --set parallel.data=distributed-optimizer
                        --set model.num_experts=4 --set model.moe_router_topk=2
                        --set model.moe_aux_loss_coeff=0.01 --set model.moe_z_loss_coeff=0.001) ;;
  # expert parallelism over 4 data-parallel ranks: the experts in 2 slabs, each on 2 ranks
  moe-ep2) sets=(--set parallel.expert=2 --set model.num_experts=4 --set model.moe_router_topk=2
                 --set model.moe_aux_loss_coeff=0.01 --set model.moe_z_loss_coeff=0.001) ;;
  moe-ep2dp2dist) sets=(--set parallel.expert=2 --set parallel.data=distributed-optimizer
                        --set model.num_experts=4 --set model.moe_router_topk=2
                        --set model.moe_aux_loss_coeff=0.01 --set model.moe_z_loss_coeff=0.001) ;;
  # FSDP's ZeRO-3 beside EP2: each layer's experts a second shard unit, over the expert-data
  # group (2 ranks), the rest over all 4
  moe-ep2fsdp) sets=(--set parallel.expert=2 --set parallel.data=fsdp
                     --set model.num_experts=4 --set model.moe_router_topk=2
                     --set model.moe_aux_loss_coeff=0.01 --set model.moe_z_loss_coeff=0.001) ;;
  # experts on two pipeline stages (each stage's expert slabs, EP2) under ZB-H1's split backward
  moe-ep2pp2zbh1) sets=(--set parallel.expert=2 --set parallel.pipeline=2
                        --set parallel.schedule=zb-h1 --set model.num_experts=4
                        --set model.moe_router_topk=2 --set model.moe_aux_loss_coeff=0.01
                        --set model.moe_z_loss_coeff=0.001) ;;
  # DeepSeek-V3's router (sigmoid, the expert bias buffer) with EP2 and each expert split over
  # the tensor group: the buffer and the split experts' shards must come back exactly
  moebias-ep2etp2) sets=(--set parallel.expert=2 --set parallel.tensor=2
                         --set parallel.expert_tensor=2 --set model.num_experts=4
                         --set model.moe_router_topk=2 --set model.moe_router_score_function=sigmoid
                         --set model.moe_router_enable_expert_bias=true
                         --set model.moe_router_bias_update_rate=0.01) ;;
  # DeepSeek-V3 in miniature (MLA, its router with the expert bias and groups, the first
  # layer dense) with EP2 over two pipeline stages
  dsv3-ep2pp2) sets=(--set parallel.expert=2 --set parallel.pipeline=2 "${DSV3_MODEL[@]}") ;;
  # a Mamba-2 hybrid in miniature: the mixers' head shards and their scan parameters
  hybrid-tp2pp2) sets=(--set parallel.tensor=2 --set parallel.pipeline=2 "${HYBRID_MODEL[@]}") ;;
  # DeepSeek-V3 in miniature with a depth of multi-token prediction over two stages (the last
  # one's copy of wte)
  dsv3mtp-pp2) sets=(--set parallel.pipeline=2 "${DSV3_MODEL[@]}" --set model.mtp_num_layers=1) ;;
  # context parallelism of 2 beside data parallelism of 2 (ring attention)
  cp2dp2) sets=(--set parallel.context=2) ;;
  cp2dp2dist) sets=(--set parallel.context=2 --set parallel.data=distributed-optimizer) ;;
  # FSDP's ZeRO-3 on two pipeline stages (each stage's units over its 2 data ranks; untied)
  # and beside context parallelism (the shards over data x context, 2 ranks)
  pp2dp2fsdp) sets=(--set parallel.pipeline=2 --set parallel.data=fsdp
                    --set model.tie_embeddings=false) ;;
  cp2dp2fsdp) sets=(--set parallel.context=2 --set parallel.data=fsdp) ;;
  # LoRA: the adapters and their Adam state, the frozen base (saved once, the tied
  # embedding's last-stage copy filled from the first stage's after loading)
  lora-tp2pp2) sets=(--set parallel.tensor=2 --set parallel.pipeline=2 --set model.peft=lora
                     --set model.peft_rank=4 --set model.peft_alpha=8) ;;
  *) echo "unknown layout $layout" >&2; exit 2 ;;
esac
run() { mpi_ranks 4 "$loom" run r.toml "${sets[@]}" "$@" 2>> log || { tail -30 log; exit 1; }; }
run --set train.metrics=straight.jsonl --set checkpoint.save=straight
run --set train.iters=6 --set train.metrics=half.jsonl --set checkpoint.save=resumed
run --set train.metrics=half.jsonl --set checkpoint.save=resumed --set checkpoint.load=resumed
echo "files of the resumed checkpoint: $(ls resumed/iter_0000012 | tr "\n" " ")"
python3 - <<'PY'
import json
a = [json.loads(l) for l in open("straight.jsonl")]
b = [json.loads(l) for l in open("half.jsonl")]
assert [r["iter"] for r in b] == list(range(1, 13)), [r["iter"] for r in b]
for x, y in zip(a, b):
    for k in x:  # every loss term, and the grad norm
        if k == "grad_norm" or (k.startswith("loss") and k != "loss_scale"):
            assert x[k] == y[k], (k, x, y)
print("losses and grad norms of 12 iterations identical straight and resumed at 6")
PY
"$loom" checkpoint diff straight resumed --rtol 0
