#!/usr/bin/env bash
# A checkpoint of one parallel layout resumes on any other and follows the straight run.
# One rank trains 12 iterations straight. A source layout trains 6 and saves; each target
# layout loads that checkpoint (model, f32 main parameters, Adam state, the distributed
# optimizer's flat shards, a vocabulary padded for another TP size) and trains 6 more:
#  - fp64: the final parameters within 1e-9 of the straight run, element by element
#    (max |a-b| / max |a|), and every loss of iterations 7..12 within 1e-9 relative;
#  - fp32: every loss of iterations 7..12 within 1e-5 relative, the final parameters within
#    1e-5 in ||a-b|| / ||a|| (see equivalence.sh for why not per element).
# Sources and targets:
#   tp2pp2     -> tp1pp4, dp2 with the distributed optimizer, 1 rank, tp4, pp2 x vp2
#   tp2dp2dist -> pp2 (whole optimizer state from flat shards), dp4dist (other flat shards)
# and offline, `loom checkpoint convert` from tp2pp2 to tp1pp4, tp4 and pp2 x vp2, whose
# output each target loads as its own files (no resharding at load); and bf16 with the
# distributed optimizer's f32 main shards through convert and back, bitwise (at the end).
#   llama also: tp2pp2 -> pp2 in ZB-V's V, and pp2 in the V -> pp2 x vp2 interleaved, 1F1B's
#   pp2, 1 rank (the same stage count, placed otherwise: the checkpoint records the placement
#   and reshards)
#   moe: ep2dp2dist -> 1 rank, ep2, tp2dp2dist; tp2dp2dist -> ep2dp2dist, ep2, ep2etp2 (each
#   expert's MLP split over the tensor group); ep2pp2 (1F1B) -> pp2 under ZB-H1's split
#   backward, 1 rank; ep2fsdp (FSDP's ZeRO-3 beside EP2 on 4 ranks: the experts' shards over
#   the expert-data group) -> 1 rank, ep2dp2dist (no bf16 part)
#   dsv3: ep2pp2 -> tp2, cp2, 1 rank, pp2 with uneven stages (1 and 3 layers); tp2 -> ep2,
#   pp2, ep2pp2 (no bf16 part)
#   hybrid: tp2pp2 -> tp1pp4, dp2 with the distributed optimizer, 1 rank, pp2 x vp2, and
#   convert to tp1pp4 and pp2 x vp2 (its 2 groups of Mamba heads rule out TP4)
#   mtp (Llama-style with two depths of multi-token prediction, whose last stage holds a copy
#   of wte): tp2pp2 -> tp1pp4, dp2 with the distributed optimizer, 1 rank, pp2 x vp2, and
#   convert to tp1pp4 and pp2 x vp2
#   lora (the GPT with LoRA adapters, its base frozen): as gpt
#   reshard.sh LOOM MPIEXEC MODEL   (MODEL: gpt | llama | moe | dsv3 | hybrid | mtp | lora)
set -euo pipefail
loom=$1 mpiexec=$2 model=$3
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/lib.sh"
scratch
# The byte tokenizer's 257 tokens: the embedding pads to 384 rows at TP1, 512 at TP2 and TP4.
reshard_recipe > r.toml
case $model in
  gpt) model_set=() ;;
  # GQA with 8 query and 4 key/value heads, so that TP4 divides both.
  llama) model_set=(--set model.norm=rmsnorm --set model.activation=swiglu
                    --set model.position=rope --set model.n_head=8 --set model.n_kv_head=4
                    --set model.tie_embeddings=false --set model.bias=false) ;;
  # a mixture of experts (4 experts, top-2): expert parallelism's slabs of the experts and
  # the distributed optimizer's expert-data shards, to and from layouts without it
  moe) model_set=(--set model.num_experts=4 --set model.moe_router_topk=2
                  --set model.moe_aux_loss_coeff=0.01 --set model.moe_z_loss_coeff=0.001) ;;
  dsv3) model_set=("${DSV3_MODEL[@]}") ;;  # DeepSeek-V3 in miniature (lib.sh)
  hybrid) model_set=("${HYBRID_MODEL[@]}") ;;  # a Mamba-2 hybrid in miniature (lib.sh)
  mtp) model_set=(--set model.norm=rmsnorm --set model.activation=swiglu
                  --set model.position=rope --set model.n_kv_head=2
                  --set model.tie_embeddings=false --set model.bias=false
                  --set model.mtp_num_layers=2) ;;
  # LoRA on the tied GPT: adapters (B split by rows, A by columns) resharded with their Adam
  # state, the frozen base with them, its tied embedding kept on both pipeline ends
  lora) model_set=(--set model.peft=lora --set model.peft_rank=4 --set model.peft_alpha=8) ;;
  *) echo "unknown model $model" >&2; exit 2 ;;
esac
sources="tp2pp2 tp2dp2dist"
if [ "$model" = moe ]; then sources="ep2dp2dist tp2dp2dist ep2pp2 ep2fsdp"; fi
if [ "$model" = dsv3 ]; then sources="ep2pp2 tp2"; fi
# the V-shaped placement (untied embeddings only): its files hold other stages than pp2vp2's
if [ "$model" = llama ]; then sources="$sources pp2zbv"; fi
layout() {  # layout NAME -> np and sets
  case $1 in
    one) np=1 sets=() ;;
    tp2pp2) np=4 sets=(--set parallel.tensor=2 --set parallel.pipeline=2) ;;
    tp2dp2dist) np=4 sets=(--set parallel.tensor=2 --set parallel.data=distributed-optimizer) ;;
    tp1pp4) np=4 sets=(--set parallel.pipeline=4) ;;
    dp2dist) np=2 sets=(--set parallel.data=distributed-optimizer) ;;
    dp4dist) np=4 sets=(--set parallel.data=distributed-optimizer) ;;
    tp4) np=4 sets=(--set parallel.tensor=4) ;;
    pp2) np=2 sets=(--set parallel.pipeline=2) ;;
    pp2vp2) np=2 sets=(--set parallel.pipeline=2 --set parallel.virtual_stages=2
                       --set parallel.schedule=interleaved-1f1b) ;;
    # a V: rank 0 holds stages 0 and 3, rank 1 stages 1 and 2 (pp2vp2's hold 0, 2 and 1, 3)
    pp2zbv) np=2 sets=(--set parallel.pipeline=2 --set parallel.virtual_stages=2
                       --set parallel.schedule=zb-v) ;;
    pp2zbh1) np=2 sets=(--set parallel.pipeline=2 --set parallel.schedule=zb-h1) ;;
    # uneven stages: 1 layer on the first, 3 on the second (pp2's files hold 2 and 2)
    pp2uneven) np=2 sets=(--set parallel.pipeline=2
                          --set model.decoder_first_pipeline_num_layers=1) ;;
    ep2) np=2 sets=(--set parallel.expert=2) ;;
    ep2pp2) np=4 sets=(--set parallel.expert=2 --set parallel.pipeline=2) ;;
    ep2dp2dist) np=4 sets=(--set parallel.expert=2 --set parallel.data=distributed-optimizer) ;;
    ep2fsdp) np=4 sets=(--set parallel.expert=2 --set parallel.data=fsdp) ;;
    ep2etp2) np=4 sets=(--set parallel.expert=2 --set parallel.tensor=2
                        --set parallel.expert_tensor=2) ;;
    tp2) np=2 sets=(--set parallel.tensor=2) ;;
    cp2) np=2 sets=(--set parallel.context=2) ;;
  esac
}
run() {  # run LAYOUT DTYPE ARGS...
  layout "$1"
  local dtype=$2
  shift 2
  mpi_ranks "$np" \
    "$loom" run r.toml "${model_set[@]}" "${sets[@]}" --set comm.plugin=mpi \
    --set precision.dtype="$dtype" "$@" 2>> log || { tail -30 log; exit 1; }
}
# LOOM_LAYOUT_DTYPES: the sanitizer build's fp64 alone (layouts.cmake)
for dtype in ${LOOM_LAYOUT_DTYPES:-fp64 fp32}; do
  # LOOM_LAYOUT_PARAM_TOL32: the sanitizer build's fp32 parameter bound (equivalence.sh).
  if [ $dtype = fp64 ]; then tol=1e-9 diff=(--rtol 1e-9); else
    tol=1e-5 diff=(--rtol "${LOOM_LAYOUT_PARAM_TOL32:-1e-5}" --norm); fi
  run one $dtype --set train.metrics=straight-$dtype.jsonl --set checkpoint.save=straight-$dtype
  for src in $sources; do
    run $src $dtype --set train.iters=6 --set checkpoint.save=src-$src-$dtype
    case $model:$src in
      llama:tp2pp2) targets="tp1pp4 dp2dist one tp4 pp2vp2 pp2zbv convert:tp1pp4 convert:tp4
                             convert:pp2vp2" ;;
      hybrid:tp2pp2 | mtp:tp2pp2) targets="tp1pp4 dp2dist one pp2vp2 convert:tp1pp4 convert:pp2vp2" ;;
      *:tp2pp2) targets="tp1pp4 dp2dist one tp4 pp2vp2 convert:tp1pp4 convert:tp4 convert:pp2vp2" ;;
      llama:pp2zbv) targets="pp2vp2 pp2 one" ;;
      moe:tp2dp2dist) targets="ep2dp2dist ep2 ep2etp2" ;;
      *:tp2dp2dist) targets="pp2 dp4dist" ;;
      moe:ep2dp2dist) targets="one ep2 tp2dp2dist" ;;
      moe:ep2pp2) targets="pp2zbh1 one" ;;
      moe:ep2fsdp) targets="one ep2dp2dist" ;;
      dsv3:ep2pp2) targets="tp2 cp2 one pp2uneven" ;;
      dsv3:tp2) targets="ep2 pp2 ep2pp2" ;;
    esac
    for dst in $targets; do
      what="$model $src -> $dst" load=src-$src-$dtype
      if [[ $dst == convert:* ]]; then  # offline: the target's own files, loaded as they are
        dst=${dst#convert:}
        case $dst in
          tp1pp4) conv=(--pipeline 4) ;;
          tp4) conv=(--tensor 4) ;;
          pp2vp2) conv=(--pipeline 2 --virtual-stages 2) ;;
        esac
        "$loom" checkpoint convert $load conv "${conv[@]}" 2>> log | tail -1
        load=conv
      fi
      run $dst $dtype --set checkpoint.load=$load --set checkpoint.save=dst-$dtype \
        --set train.metrics=dst-$src-$load-$dst-$dtype.jsonl
      if [ $load = conv ]; then
        ! grep -q "resharding" log || { echo "$what: a converted checkpoint was resharded"; exit 1; }
        grep -q "resumed from" log || { echo "$what: did not resume"; exit 1; }
        what="$model $src -> convert -> $dst"
        rm -rf conv
      else
        grep -q "resharding" log || { echo "$what: the load did not reshard"; exit 1; }
      fi
      : > log
      compare_resumed $tol straight-$dtype.jsonl dst-$src-$load-$dst-$dtype.jsonl "$what $dtype" loss
      "$loom" checkpoint diff straight-$dtype dst-$dtype "${diff[@]}" | tail -3
      rm -rf dst-$dtype
    done
  done
done

# Mixed precision: the distributed optimizer keeps f32 main parameters apart from the bf16
# model ("main." flat shards). TP2 + DP2 (distributed optimizer) in bf16 trains 6
# iterations; `convert` rewrites it as plain TP2 files (whole main parameters and state),
# and TP2 + DP2 resumes from those by resharding onto the flat shards again. Nothing is
# rounded on the way, so iterations 7..12 and the final checkpoint equal the straight
# 12-iteration run bitwise.
case $model in moe | dsv3) exit 0 ;; esac  # experts run in fp32 for now
[[ " ${LOOM_LAYOUT_DTYPES:-bf16} " == *" bf16 "* ]] || exit 0
run tp2dp2dist bf16 --set train.metrics=straight-bf16.jsonl --set checkpoint.save=straight-bf16
run tp2dp2dist bf16 --set train.iters=6 --set checkpoint.save=src-bf16
"$loom" checkpoint convert src-bf16 conv-bf16 --tensor 2 2>> log | tail -1
: > log
run tp2dp2dist bf16 --set checkpoint.load=conv-bf16 --set checkpoint.save=dst-bf16 \
  --set train.metrics=dst-bf16.jsonl
grep -q "resharding" log || { echo "bf16: the load did not reshard"; exit 1; }
compare_resumed 0 straight-bf16.jsonl dst-bf16.jsonl "$model tp2dp2dist -> convert tp2 -> tp2dp2dist bf16" loss
"$loom" checkpoint diff straight-bf16 dst-bf16 --rtol 0 | tail -1
