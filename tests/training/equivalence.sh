#!/usr/bin/env bash
# Every parallel layout trains the same model. A tiny GPT (or Llama-style GPT with GQA)
# trains 20 iterations on one rank, then under `mpirun` in LAYOUT with the same seed and
# global batch, and the final parameters are merged from the ranks' checkpoint shards into
# full tensors (`loom checkpoint diff`). Twice:
#  - fp32 (what users train): loss and gradient norm of every iteration within 1e-5
#    relative; every parameter tensor within 1e-5 in ||a-b|| / ||a||. (Per element, Adam's
#    normalisation amplifies the rounding of a different summation order for the elements
#    with the smallest gradients: max |a-b| / max |a| reaches ~1.1e-5 after 20 steps with
#    tensor parallelism, against 1e-7 for the loss.)
#  - fp64: the same runs in float64 must agree within 1e-9, element by element (max |a-b|
#    / max |a|): what remains is rounding, so a layout that computes anything differently
#    cannot hide below the tolerance.
#   equivalence.sh LOOM MPIEXEC MODEL LAYOUT
#   MODEL: gpt | llama | bert (model/bert on dataset/bert: padding, token types, both heads)
#          | t5 (model/t5 on dataset/t5: encoder padding, cross-attention)
#          | t5rel (the same with T5's relative position bias, whose tables split by heads)
#          | moe (GPT with a Mixtral-style mixture of experts: 4 SwiGLU experts, top-2, a
#            shared expert, balancing and z losses) | moebias (the same with DeepSeek-V3's sigmoid
#            router and aux-loss-free expert bias) | qwen3 (QK-norm, kv_channels 12, GQA)
#          | qwen3moe (the same with experts and a gated shared expert)
#          | dsv3 (DeepSeek-V3 in miniature: MLA and its MoE router)
#          | hybrid (a Nemotron-H-style stack: Mamba-2, attention, MLP, Mamba-2) | hybridmoe
#          (its MLP layer experts)
#          | mtp (llama with two depths of multi-token prediction) | dsv3mtp (dsv3 with one)
#          | lora (llama with LoRA adapters on its projections, the rest frozen) | gptlora
#          | dpo (gpt trained with DPO, train.objective = "dpo", on preference pairs of
#            arithmetic answers: a chosen and a rejected row per pair in each micro-batch, the
#            reference log-probabilities computed before the first step) | dpolora (lora so)
#   LAYOUT: tp2 | tp2sp | pp2 | pp2vp2 | pp4gpipe | dp2 | dp2dist | tp2pp2 | tp2dp2dist
#           | pp2zbh1 | pp4zbh1 | pp2zbv | pp4zbv | pp2dualpipev | pp4dualpipev (zero bubble)
#           | pp2uneven | pp4uneven | pp2vp2uneven | pp4vp2uneven (decoder_first/last_
#           pipeline_num_layers, the last two under virtual stages)
#           | dp2fsdp | dp4fsdp | dp2fsdp2 | tp2dp2fsdp | tp2spdp2fsdp (parallel.data =
#           "fsdp", ZeRO-3; dp2fsdp2 ZeRO-2)
#           | ep2 | ep2dp2dist | ep2tp2 | ep2pp2 | ep2cp2 | ep2tp2sp | etp2sp | tp2sppp2 (moe only)
#           | cp2 | cp4 | cp2tp2 | cp2pp2 | cp2dp2dist (context parallelism, gpt and llama), each
#           optionally with -flash: attention/flash-cpu on both sides (else attention/reference),
#           or with -packed: packed sequences (data.pack_sequences) of documents of 6
#           tokens, so that every sample holds two or three, on one rank as in the layout
set -euo pipefail
loom=$1 mpiexec=$2 model=$3 layout=$4
# LOOM_LAYOUT_ITERS and LOOM_LAYOUT_EVAL_INTERVAL shorten the 20 iterations with an evaluation
# every 10: the sanitizer build's layouts.cmake sets 4 and 2, as it looks for memory errors in
# every path (steps and evaluations), not for drift.
iters=${LOOM_LAYOUT_ITERS:-20}
eval_every=${LOOM_LAYOUT_EVAL_INTERVAL:-10}
# LOOM_LAYOUT_DTYPES: which of the two runs (fp32 then fp64); the sanitizer build runs fp64
# alone (layouts.cmake says why), and then not the memory check, which reads fp32's log.
dtypes=${LOOM_LAYOUT_DTYPES:-fp32 fp64}
model_plugin=gpt
case $model in bert | t5) model_plugin=$model ;; t5rel) model_plugin=t5 ;; esac
bert_data=$(cd "$(dirname "$0")/../data/data/bert_masking" && pwd)
. "$(dirname "$0")/../support/lib.sh"
scratch
{
  twenty_step_sections 8 16
  # threads = 1: ranks share 2 cores; more threads per rank only contend
  toml_section backend plugin=cpu measure_gemm=false threads=1
  toml_section model "plugin=$model_plugin" n_layer=4 n_head=4 n_embd=32 max_seq_len=16
  toml_section checkpoint interval=0
  if [ "$model" = bert ]; then
    bert_data_sections
  elif [ "$model_plugin" = t5 ]; then
    # dataset/t5's span corruption over the same sentences, with 10 sentinel tokens; decoder
    # rows of 8 tokens (model keys set below)
    toml_section tokenizer plugin=wordpiece "vocab_file=$bert_data/vocab.txt" vocab_extra_ids=10
    toml_section data plugin=t5 "prefix=$bert_data/sentences" split=80,20,0 decoder_seq_len=8
  elif [ "$model" = dpo ] || [ "$model" = dpolora ]; then
    # 200 pairs "What is a + b?" -> right / wrong sum, at most 40 bytes a conversation in a
    # plain template (rows of 48: model_set), the answers trained (the loss mask)
    "$(dirname "$0")/../../tools/sft-conversations" --pairs pairs.jsonl 200 > /dev/null
    "$loom" preprocess --input pairs.jsonl --output-prefix pairs --tokenizer byte \
      --chat-template $'{content}\n' --preference-pairs --append-eod > /dev/null 2>&1
    toml_section tokenizer plugin=byte
    toml_section data plugin=indexed prefix=pairs_chosen_document split=90,10,0
  else
    toml_section tokenizer plugin=byte
    toml_section data plugin=mock num_documents=200 doc_length=64
  fi
} > base.toml
case $model in
  gpt | bert) model_set=() ;;
  moe) model_set=(--set model.num_experts=4 --set model.moe_router_topk=2
                  --set model.activation=swiglu --set model.moe_ffn_hidden_size=24
                  --set model.moe_aux_loss_coeff=0.01 --set model.moe_z_loss_coeff=0.001
                  --set model.moe_shared_expert_intermediate_size=16) ;;
  # DeepSeek-V3's router: sigmoid scores, aux-loss-free balancing (the expert bias moves by
  # 0.01 a step, so routing changes within the 20 steps), the per-sequence balancing loss,
  # group-limited routing (4 experts in 2 groups, the best one), the weights x 2.5, and the
  # first layer dense
  moebias) model_set=(--set model.num_experts=4 --set model.moe_router_topk=2
                      --set model.moe_router_num_groups=2 --set model.moe_router_group_topk=1
                      --set model.moe_router_topk_scaling_factor=2.5
                      --set "model.moe_layer_freq=[0]+[1]*3"
                      --set model.activation=swiglu --set model.moe_ffn_hidden_size=24
                      --set model.moe_router_score_function=sigmoid
                      --set model.moe_router_enable_expert_bias=true
                      --set model.moe_router_bias_update_rate=0.01
                      --set model.moe_router_load_balancing_type=seq_aux_loss
                      --set model.moe_aux_loss_coeff=0.001
                      --set model.moe_shared_expert_intermediate_size=16) ;;
  # 3 decoder layers against 4 encoder layers, kv_channels != n_embd / n_head
  t5) model_set=(--set model.decoder_seq_len=8 --set model.decoder_layers=3
                 --set model.kv_channels=6) ;;
  # 8 buckets up to distance 10: rows of 16 reach the logarithmic buckets
  t5rel) model_set=(--set model.decoder_seq_len=8 --set model.decoder_layers=3
                    --set model.kv_channels=6 --set model.position=relative
                    --set model.relative_attention_num_buckets=8
                    --set model.relative_attention_max_distance=10) ;;
  llama) model_set=(--set model.norm=rmsnorm --set model.activation=swiglu
                    --set model.position=rope --set model.n_kv_head=2
                    --set model.tie_embeddings=false --set model.bias=false) ;;
  dsv3) model_set=("${DSV3_MODEL[@]}") ;;  # DeepSeek-V3 in miniature (lib.sh)
  hybrid) model_set=("${HYBRID_MODEL[@]}") ;;  # a Mamba-2 hybrid in miniature (lib.sh)
  # the same with its MLP layer a mixture of experts (an E layer)
  hybridmoe) model_set=("${HYBRID_MODEL[@]}" --set "model.hybrid_override_pattern=M*EM"
                        --set model.num_experts=4 --set model.moe_router_topk=2
                        --set model.moe_ffn_hidden_size=24 --set model.moe_aux_loss_coeff=0.01) ;;
  # multi-token prediction: two depths on the Llama-style model; one on DeepSeek-V3's
  mtp) model_set=(--set model.norm=rmsnorm --set model.activation=swiglu
                  --set model.position=rope --set model.n_kv_head=2
                  --set model.tie_embeddings=false --set model.bias=false
                  --set model.mtp_num_layers=2 --set model.mtp_loss_scaling_factor=0.3) ;;
  dsv3mtp) model_set=("${DSV3_MODEL[@]}" --set model.mtp_num_layers=1) ;;
  # LoRA (model.peft = "lora"): the Llama-style model's four projections with adapters of
  # rank 4, everything else frozen at its initialisation; gptlora: GPT-2's, named as GPT-2's
  # and Megatron's modules, its tied embedding frozen on both ends of a pipeline
  lora) model_set=(--set model.norm=rmsnorm --set model.activation=swiglu
                   --set model.position=rope --set model.n_kv_head=2
                   --set model.tie_embeddings=false --set model.bias=false
                   --set model.peft=lora --set model.peft_rank=4 --set model.peft_alpha=8) ;;
  gptlora) model_set=(--set model.peft=lora --set model.peft_rank=4
                      --set model.peft_target_modules=c_attn,linear_proj,c_fc,linear_fc2) ;;
  # DPO: the whole model trained (dpo), or LoRA's adapters on the Llama-style model (dpolora)
  dpo) model_set=(--set train.objective=dpo --set train.dpo_beta=0.5 --set train.seq_len=48
                  --set model.max_seq_len=48) ;;
  dpolora) model_set=(--set model.norm=rmsnorm --set model.activation=swiglu
                      --set model.position=rope --set model.n_kv_head=2
                      --set model.tie_embeddings=false --set model.bias=false
                      --set model.peft=lora --set model.peft_rank=4 --set model.peft_alpha=8
                      --set train.objective=dpo --set train.dpo_beta=0.5 --set train.seq_len=48
                      --set model.max_seq_len=48) ;;
  # Qwen3's attention: QK-norm (whose weights each tensor rank sees only its heads of), a
  # head size of 12 over a width of 32, GQA; qwen3moe adds Qwen3-MoE's experts (softmax,
  # top-2 renormalised: norm_topk_prob) with the balancing loss, and Qwen2-MoE's gated
  # shared expert
  qwen3 | qwen3moe)
    model_set=(--set model.norm=rmsnorm --set model.activation=swiglu --set model.position=rope
               --set model.n_kv_head=2 --set model.bias=false --set model.kv_channels=12
               --set model.qk_layernorm=true --set model.rope_theta=1000000.0)
    [ "$model" = qwen3 ] || model_set+=(--set model.num_experts=4 --set model.moe_router_topk=2
      --set model.moe_ffn_hidden_size=24 --set model.moe_aux_loss_coeff=0.01
      --set model.moe_shared_expert_intermediate_size=16 --set model.moe_shared_expert_gate=true) ;;
  *) echo "unknown model $model" >&2; exit 2 ;;
esac
case $layout in
  # a V places the first and the last stage on rank 0: no tied embedding (refused there)
  pp2zbv | pp2dualpipev) model_set+=(--set model.tie_embeddings=false) ;;
  # 8 stages of one layer; DualPipeV needs 2 x 4 micro-batches a step
  pp4zbv | pp4dualpipev) model_set+=(--set model.tie_embeddings=false --set model.n_layer=8
                                     --set train.micro_batch_size=1) ;;
  pp4uneven) model_set+=(--set model.n_layer=8) ;;
  pp2vp2uneven) model_set+=(--set model.n_layer=6) ;;
  pp4vp2uneven) model_set+=(--set model.n_layer=12) ;;
  # FSDP under a pipeline: no tied embedding (refused there)
  pp2fsdp | pp2dp2fsdp) model_set+=(--set model.tie_embeddings=false) ;;
  *-packed) model_set+=(--set data.pack_sequences=true --set data.doc_length=6) ;;
  *-flash) model_set+=(--set attention.plugin=flash-cpu) ;;
esac
base_layout=${layout%-packed}
case ${base_layout%-flash} in
  tp2) np=2 sets=(--set parallel.tensor=2) ;;
  tp2sp) np=2 sets=(--set parallel.tensor=2 --set parallel.sequence_parallel=true) ;;
  pp2) np=2 sets=(--set parallel.pipeline=2 --set parallel.schedule=1f1b) ;;
  pp2vp2) np=2 sets=(--set parallel.pipeline=2 --set parallel.virtual_stages=2
                     --set parallel.schedule=interleaved-1f1b) ;;
  pp4gpipe) np=4 sets=(--set parallel.pipeline=4 --set parallel.schedule=gpipe) ;;
  # uneven stages under virtual stages (Megatron-Core's interleaved uneven split): the first
  # and last ranks' layers split over their two chunks, 1 2 1 2 and 1 2 2 1 1 2 2 1 layers
  pp2vp2uneven) np=2 sets=(--set parallel.pipeline=2 --set parallel.virtual_stages=2
                           --set parallel.schedule=interleaved-1f1b
                           --set model.decoder_first_pipeline_num_layers=2
                           --set model.decoder_last_pipeline_num_layers=4) ;;
  pp4vp2uneven) np=4 sets=(--set parallel.pipeline=4 --set parallel.virtual_stages=2
                           --set parallel.schedule=interleaved-1f1b
                           --set model.decoder_first_pipeline_num_layers=2
                           --set model.decoder_last_pipeline_num_layers=2) ;;
  # zero-bubble schedules: ZB-H1 on 2 and 4 ranks, ZB-V and DualPipeV in their V (stage r
  # and 2P-1-r on rank r)
  pp2zbh1) np=2 sets=(--set parallel.pipeline=2 --set parallel.schedule=zb-h1) ;;
  # uneven stages (Megatron's decoder_first/last_pipeline_num_layers): 1 + 3 layers, and
  # 1 + 2 + 2 + 3 of 8
  pp2uneven) np=2 sets=(--set parallel.pipeline=2 --set model.decoder_first_pipeline_num_layers=1) ;;
  pp4uneven) np=4 sets=(--set parallel.pipeline=4 --set model.decoder_first_pipeline_num_layers=1
                        --set model.decoder_last_pipeline_num_layers=3) ;;
  pp4zbh1) np=4 sets=(--set parallel.pipeline=4 --set parallel.schedule=zb-h1) ;;
  pp2zbv | pp4zbv) np=${base_layout:2:1}
    sets=(--set parallel.pipeline="$np" --set parallel.virtual_stages=2
          --set parallel.schedule=zb-v) ;;
  pp2dualpipev | pp4dualpipev) np=${base_layout:2:1}
    sets=(--set parallel.pipeline="$np" --set parallel.virtual_stages=2
          --set parallel.schedule=dualpipev) ;;
  dp2) np=2 sets=() ;;
  dp2dist) np=2 sets=(--set parallel.data=distributed-optimizer) ;;
  tp2pp2) np=4 sets=(--set parallel.tensor=2 --set parallel.pipeline=2) ;;
  tp2dp2dist) np=4 sets=(--set parallel.tensor=2 --set parallel.data=distributed-optimizer) ;;
  # FSDP: ZeRO-3 (each layer gathered just before use), on 2 and 4 ranks, beside TP; ZeRO-2
  dp2fsdp) np=2 sets=(--set parallel.data=fsdp) ;;
  dp4fsdp) np=4 sets=(--set parallel.data=fsdp) ;;
  dp2fsdp2) np=2 sets=(--set parallel.data=fsdp --set parallel.zero_stage=2) ;;
  tp2dp2fsdp) np=4 sets=(--set parallel.tensor=2 --set parallel.data=fsdp) ;;
  # ... beside sequence parallelism: the norms' partial gradients summed over the tensor
  # group at each unit's end, before the data ranks' reduce-scatter takes them
  tp2spdp2fsdp) np=4 sets=(--set parallel.tensor=2 --set parallel.sequence_parallel=true
                           --set parallel.data=fsdp) ;;
  # ... under pipeline parallelism, each stage's units sharded over its data ranks (1 and 2):
  # untied (a tied embedding's two copies are summed after the backward: refused)
  pp2fsdp) np=2 sets=(--set parallel.pipeline=2 --set parallel.data=fsdp) ;;
  pp2dp2fsdp) np=4 sets=(--set parallel.pipeline=2 --set parallel.data=fsdp) ;;
  # ... under context parallelism: shards over data x context (2 and 4 ranks)
  cp2fsdp) np=2 sets=(--set parallel.context=2 --set parallel.data=fsdp) ;;
  cp2dp2fsdp) np=4 sets=(--set parallel.context=2 --set parallel.data=fsdp) ;;
  # expert parallelism (moe): the 4 experts split over 2 ranks of the data x context ranks
  ep2) np=2 sets=(--set parallel.expert=2) ;;
  ep2dp2dist) np=4 sets=(--set parallel.expert=2 --set parallel.data=distributed-optimizer) ;;
  ep2tp2) np=4 sets=(--set parallel.expert=2 --set parallel.tensor=2) ;;
  # FSDP beside expert parallelism: the experts sharded over the expert-data group (1 rank
  # on 2, 2 ranks on 4), every other parameter over data x context
  ep2fsdp) np=2 sets=(--set parallel.expert=2 --set parallel.data=fsdp) ;;
  ep2dp2fsdp) np=4 sets=(--set parallel.expert=2 --set parallel.data=fsdp) ;;
  ep2dp2fsdp2) np=4 sets=(--set parallel.expert=2 --set parallel.data=fsdp
                          --set parallel.zero_stage=2) ;;
  ep2pp2) np=4 sets=(--set parallel.expert=2 --set parallel.pipeline=2) ;;
  # experts under context parallelism: the expert group spans the context ranks
  ep2cp2) np=4 sets=(--set parallel.expert=2 --set parallel.context=2) ;;
  # sequence parallelism around the experts: the tokens gathered before the router
  ep2tp2sp) np=4 sets=(--set parallel.expert=2 --set parallel.tensor=2
                       --set parallel.sequence_parallel=true) ;;
  etp2sp) np=2 sets=(--set parallel.tensor=2 --set parallel.expert_tensor=2
                     --set parallel.sequence_parallel=true) ;;
  tp2sppp2) np=4 sets=(--set parallel.tensor=2 --set parallel.sequence_parallel=true
                       --set parallel.pipeline=2) ;;
  # expert tensor parallelism: each expert's MLP split over the tensor group too
  etp2) np=2 sets=(--set parallel.tensor=2 --set parallel.expert_tensor=2) ;;
  ep2etp2) np=4 sets=(--set parallel.expert=2 --set parallel.tensor=2
                      --set parallel.expert_tensor=2) ;;
  # context parallelism: ring attention over 2 or 4 ranks (chunks of 4 or 2 tokens)
  cp2) np=2 sets=(--set parallel.context=2) ;;
  cp4) np=4 sets=(--set parallel.context=4) ;;
  cp2tp2) np=4 sets=(--set parallel.context=2 --set parallel.tensor=2) ;;
  cp2pp2) np=4 sets=(--set parallel.context=2 --set parallel.pipeline=2) ;;
  cp2dp2dist) np=4 sets=(--set parallel.context=2 --set parallel.data=distributed-optimizer) ;;
  # the all-to-all (Ulysses) variant: heads split over the context ranks
  cp2a2a) np=2 sets=(--set parallel.context=2 --set parallel.cp_comm_type=a2a) ;;
  cp4a2a) np=4 sets=(--set parallel.context=4 --set parallel.cp_comm_type=a2a) ;;
  cp2tp2a2a) np=4 sets=(--set parallel.context=2 --set parallel.tensor=2
                        --set parallel.cp_comm_type=a2a) ;;
  *) echo "unknown layout $layout" >&2; exit 2 ;;
esac
# The final parameters in fp32, by norm: 1e-5, except t5rel. Its relative position bias
# makes the fp32 trajectory more sensitive to the order of the tensor-parallel sums: the
# parameters differ by 9.6e-6 (release build) and 2.8e-5 (the -O0 sanitizer build) after 20
# steps while its loss and gradient norm agree within 6.4e-6 and fp64 within 1e-9 element by
# element, so a wrong gradient still shows there.
param_tol32=1e-5
if [ "$model" = t5rel ]; then param_tol32=5e-5; fi
# moebias: the sigmoid router's weights take the smallest gradients of the model (the
# balancing loss's coefficient is 1e-3), and Adam's normalisation amplifies their rounding
# most: h.1's router differs by 9.2e-6 to 1.02e-5 by norm under EP (as the grouped GEMMs
# see other row counts) while every loss, the grad norm and the expert loads agree within
# 9e-8, and fp64 within 1e-9 element by element (1.3e-13 measured).
if [ "$model" = moebias ]; then param_tol32=3e-5; fi
# moe: the same near-zero gradients in h.1.ln_1.bias drift 1.0e-5 to 1.4e-5 by norm under
# tensor parallelism on an AMD EPYC machine, where OpenBLAS picks its Haswell (AVX2) kernels,
# against 3.8e-6 with its SkylakeX ones on the Xeon before; every loss within 2.7e-7 there,
# and fp64 within 1e-9 element by element (2.3e-14 measured, etp2).
if [ "$model" = moe ]; then param_tol32=3e-5; fi
# LOOM_LAYOUT_PARAM_TOL32 raises the fp32 bound: the sanitizer build's (layouts.cmake) -O1
# code rounds otherwise than Release's, and moe's h.1.ln_1.bias, whose gradients are near
# zero, drifts 1.03e-5 (TP2) to 1.18e-5 (EP2 x TP2) by norm there after 4 steps, against
# 3.8e-6 in Release after 20, with every loss within 1.4e-7 and fp64 within 1e-9.
if [ -n "${LOOM_LAYOUT_PARAM_TOL32:-}" ]; then
  param_tol32=$(awk -v a="$param_tol32" -v b="$LOOM_LAYOUT_PARAM_TOL32" \
    'BEGIN { print (a + 0 > b + 0) ? a : b }')
fi
check() {  # check DTYPE TOL PARAM_TOL DIFF_OPTS...
  local dtype=$1 tol=$2 param_tol=$3
  shift 3
  "$loom" run base.toml "${model_set[@]}" --set precision.dtype="$dtype" --set train.iters=$iters \
    --set train.eval_interval=$eval_every --set train.metrics=one-$dtype.jsonl \
    --set checkpoint.save=one-$dtype 2> one.log ||
    { cat one.log; exit 1; }
  mpi_ranks "$np" "$loom" run base.toml "${model_set[@]}" "${sets[@]}" --set comm.plugin=mpi \
    --set precision.dtype="$dtype" --set train.iters=$iters --set train.eval_interval=$eval_every \
    --set train.metrics=par-$dtype.jsonl --set checkpoint.save=par-$dtype 2> par.log || { tail -30 par.log; exit 1; }
  PYTHONPATH=$tests_dir/support python3 - "$model $layout $dtype" "$tol" one-$dtype.jsonl \
    par-$dtype.jsonl "$iters" "$eval_every" <<'PY'
import sys
from metrics import compare, rows
what, tol, iters, every = sys.argv[1], float(sys.argv[2]), int(sys.argv[5]), int(sys.argv[6])
one, par = rows(sys.argv[3]), rows(sys.argv[4])
want = iters + iters // every  # the steps and their evaluations
assert len(one) == len(par) == want, (len(one), len(par), want)


def keys(a):
    """Every loss term (lm, BERT's sop, a mixture of experts' moe_aux and moe_z), train and
    eval, the grad norm, and in fp64 the experts' shares of the routed tokens."""
    for k in sorted(a):
        share = k.startswith("moe_load") or k.startswith("eval_moe_load")
        if share and "fp64" not in what:
            continue  # fp32 may break a near tie of two experts differently
        if k.endswith("rewards.accuracy") and "fp64" not in what:
            continue  # DPO's share of pairs with a positive margin: a near-zero one may flip
        if (k != "grad_norm" and not k.startswith("eval_") and not share
                and ("loss" not in k or k == "loss_scale")):
            continue
        yield k


worst = compare(one, par, keys, tol, f"{what} ", "1 rank", "parallel")
# a mixture of experts' per-layer shares of routed tokens: dropless, they sum to 1 per layer
for row in par:
    layers = {}
    for k, v in row.items():
        if "moe_load." in k:
            layers[k.rsplit(".", 1)[0]] = layers.get(k.rsplit(".", 1)[0], 0.0) + v
    for layer, total in layers.items():
        if abs(total - 1.0) > 1e-12:
            sys.exit(f"{what} iter {row['iter']} {layer}: the experts' shares add up to {total!r}")
print(f"{what}: every loss term and the grad norm of {iters} iterations (and {iters // every} evaluations) match 1 rank within {tol:g}; "
      f"worst relative difference {worst:.2e}; final loss {par[-2]['loss']:.4f}")
PY
  "$loom" checkpoint diff one-$dtype par-$dtype --rtol "$param_tol" "$@"
  # the uneven split under virtual stages: which layers each pipeline rank's file holds
  case $layout in
    pp2vp2uneven) want_ranks="0 3|1 2 4 5" ;;
    pp4vp2uneven) want_ranks="0 6|1 2 7 8|3 4 9 10|5 11" ;;
    *) want_ranks= ;;
  esac
  [ -z "$want_ranks" ] || python3 - par-$dtype/iter_$(printf %07d $iters) "$want_ranks" <<'PY'
import glob, json, re, struct, sys
held = []
for path in sorted(glob.glob(sys.argv[1] + "/model-tp00-pp*.safetensors")):
    with open(path, "rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    held.append(" ".join(str(l) for l in sorted({int(m.group(1)) for k in header
                                                  for m in [re.match(r"h\.(\d+)\.", k)] if m})))
assert "|".join(held) == sys.argv[2], f"layers by pipeline rank {held}, expected {sys.argv[2]}"
print("layers by pipeline rank: " + " | ".join(held))
PY
}
if [[ " $dtypes " == *" fp32 "* ]]; then
check fp32 1e-5 "$param_tol32" --norm
# Memory per parameter as in Megatron's README table (fp32 params and grads, Adam):
# 4 + 4 + 8 = 16 bytes with whole replicas, 4 + 4 + 8/D with the distributed optimizer.
want="4.00 (param) + 4.00 (grad) + 8.00 (optimizer state) = 16.00 bytes"
case $layout in *dist) want="4.00 (param) + 4.00 (grad) + 4.00 (optimizer state) = 12.00 bytes" ;; esac
# ep2dp2dist shards the dense state over 4 ranks and the experts' over 2. Per rank: 37184
# dense and 19072 expert parameters (its 2 of the 4 experts), so the state is
# (37184 x 8/4 + 19072 x 8/2) / 56256 = 2.68 bytes per parameter; moebias's first layer is
# dense: 60576 dense and 14304 expert parameters, (60576 x 2 + 14304 x 4) / 74880 = 2.38.
case $model.$layout in
  moebias.ep2dp2dist) layout_want="4.00 (param) + 4.00 (grad) + 2.38 (optimizer state) = 10.38 bytes" ;;
  # DeepSeek-V3 in miniature on 2 ranks: 71440 dense parameters over 2 and its 13824 expert
  # parameters (2 of the 4 experts of its 3 MoE layers) over 1: (71440 x 2 + 13824 x 4) / 85264
  dsv3.ep2fsdp) layout_want="2.32 (param) + 2.32 (grad) + 4.65 (optimizer state) = 9.30 bytes" ;;
  *) layout_want= ;;
esac
case ${base_layout%-flash} in
  # the distributed optimizer shards over data x context: 4 ranks
  cp2dp2dist) want="4.00 (param) + 4.00 (grad) + 2.00 (optimizer state) = 10.00 bytes" ;;
  ep2dp2dist) want="4.00 (param) + 4.00 (grad) + 2.68 (optimizer state) = 10.68 bytes" ;;
  # FSDP: ZeRO-3 shards all three, (4 + 4 + 8)/D; ZeRO-2 keeps the values whole
  # (under context parallelism the shards are over data x context)
  dp2fsdp | tp2dp2fsdp | tp2spdp2fsdp | cp2fsdp | pp2dp2fsdp)
    want="2.00 (param) + 2.00 (grad) + 4.00 (optimizer state) = 8.00 bytes" ;;
  dp4fsdp | cp2dp2fsdp)
    want="1.00 (param) + 1.00 (grad) + 2.00 (optimizer state) = 4.00 bytes" ;;
  dp2fsdp2) want="4.00 (param) + 2.00 (grad) + 4.00 (optimizer state) = 10.00 bytes" ;;
  # beside EP2 the experts' share over the expert-data group (1 or 2 ranks), the rest over
  # data x context (2 or 4): (37184 x 4/2 + 19072 x 4) / 56256 = 2.68 bytes of values a
  # parameter on 2 ranks; (37184 x 4/4 + 19072 x 4/2) / 56256 = 1.34 on 4
  ep2fsdp) want="2.68 (param) + 2.68 (grad) + 5.36 (optimizer state) = 10.71 bytes" ;;
  ep2dp2fsdp) want="1.34 (param) + 1.34 (grad) + 2.68 (optimizer state) = 5.36 bytes" ;;
  ep2dp2fsdp2) want="4.00 (param) + 1.34 (grad) + 2.68 (optimizer state) = 8.02 bytes" ;;
esac
# LoRA: every parameter's value (4 bytes, the frozen ones too), gradients and Adam's state for
# the adapters alone, over all of them: from this rank's counts (`peft:`), where the ranks
# hold alike (not a pipeline's stages)
case $model.$layout in
  lora.pp* | lora.tp2pp2 | gptlora.pp* | dpolora.pp* | dpolora.tp2pp2) want= ;;
  lora.* | gptlora.* | dpolora.*)
    read -r a f < <(sed -n 's/.*peft: \([0-9]*\) trained adapter parameters, \([0-9]*\) frozen.*/\1 \2/p' \
      par.log | head -1)
    opt=8
    case $layout in *dist) opt=4 ;; esac
    layout_want=$(awk -v a="$a" -v f="$f" -v o="$opt" 'BEGIN { n = a + f; g = 4 * a / n
      s = o * a / n; printf "4.00 (param) + %.2f (grad) + %.2f (optimizer state) = %.2f bytes",
      g, s, 4 + g + s }') ;;
esac
[ -z "$layout_want" ] || want=$layout_want
if [ -z "$want" ]; then
  echo "memory per parameter: not checked (the stages hold different shares of adapters)"
elif ! grep -q "memory per parameter on this rank: $want" par.log; then
  echo "memory per parameter: expected '$want' in:"; grep "memory per" par.log; exit 1
else
  echo "memory per parameter: $want"
fi
fi
[[ " $dtypes " != *" fp64 "* ]] || check fp64 1e-9 1e-9
