# Every parallel layout trains the same model as one rank (equivalence.sh), through the real
# `loom` executable under mpirun, for a GPT-2-style and a Llama-style (GQA) model, and BERT.
find_package(MPI COMPONENTS C QUIET)
if(NOT MPI_C_FOUND OR NOT TARGET loom_comm_mpi)
  return()
endif()
# The sanitizer build looks for memory errors, not drift: 4 iterations a layout with an
# evaluation every 2 (20 and 10 in Release, the acceptance's), every path of a step and an
# evaluation, in fp64 alone (within 1e-9 as in Release): the fp32 run takes the same paths
# through the layers and the communication with 4-byte elements, which the sanitizer build's
# unit tests and whole fp32 runs (training.*, parallel.*) cover, and where a size computed
# for 4-byte elements would overflow it is the 8-byte run that shows it. Release runs both
# (fp32's parameters within 1e-5; LOOM_LAYOUT_PARAM_TOL32 = 3e-5 if the sanitizer build runs
# fp32, equivalence.sh says why). The same for reshard.sh's runs (and its bf16 part).
if(LOOM_SANITIZE)
  loom_mpi_env(_env LOOM_PLUGIN_PATH= LOOM_LAYOUT_ITERS=4 LOOM_LAYOUT_EVAL_INTERVAL=2
               LOOM_LAYOUT_PARAM_TOL32=3e-5 LOOM_LAYOUT_DTYPES=fp64)
else()
  loom_mpi_env(_env LOOM_PLUGIN_PATH=)
endif()
# The sanitizer build runs the layouts below and not every one: it looks for memory errors,
# and each code path (TP with and without SP, every pipeline schedule kind, CP's ring and
# all-to-all, the distributed optimizer, ZeRO-2 and -3 beside each other axis, EP and ETP,
# packed documents, and each model family's own layers) is here at least once; the rest are
# the same paths in other combinations, which Release holds to one rank in fp32 and fp64.
# The whole set under ASan took about 1,100 s of a CI run's ~3,100 (the 40-minute target).
set(_sanitize_layouts
  gpt.tp2sp gpt.pp2vp2 gpt.pp4gpipe gpt.tp2dp2dist gpt.tp2sp-packed gpt.pp2-packed gpt.dp4fsdp
  gpt.dp2fsdp2 gpt.pp2zbv gpt.pp4dualpipev gpt.pp4zbh1 gpt.cp2tp2 gpt.cp4-flash gpt.cp2a2a
  gpt.cp2pp2 gpt.tp2spdp2fsdp gpt.cp2dp2fsdp gpt.pp2dp2fsdp gpt.pp4vp2uneven
  llama.tp2pp2 llama.cp2a2a-flash llama.pp2vp2uneven
  bert.tp2sp bert.pp2zbh1 bert.dp2dist t5.tp2 t5.dp2dist t5rel.tp2
  moe.ep2dp2dist moe.ep2etp2 moe.ep2tp2sp moe.etp2sp moe.tp2sppp2 moe.pp2zbv moe.ep2pp2
  moe.ep2cp2 moe.ep2dp2fsdp2 moe.pp4dualpipev
  moebias.ep2dp2dist moebias.pp2 moebias.cp2 moebias.dp2fsdp
  qwen3.tp2sp qwen3.cp2 qwen3.tp2dp2fsdp qwen3moe.ep2tp2 qwen3moe.tp2sppp2
  dsv3.ep2pp2 dsv3.tp2sppp2 dsv3.cp2 dsv3.ep2fsdp dsv3.pp2zbh1
  hybrid.tp2sp hybrid.tp2pp2 hybrid.pp2zbh1 hybrid.dp2dist hybridmoe.ep2 hybridmoe.pp2
  mtp.tp2pp2 mtp.pp2zbh1 mtp.tp2-packed mtp.dp2dist dsv3mtp.ep2pp2 dsv3mtp.pp2uneven
  dsv3mtp.pp2-packed
  lora.tp2sp lora.tp2pp2 gptlora.pp2 dpo.tp2sp dpo.pp2zbh1 dpo.cp2 dpolora.tp2pp2
  resume.tp2dp2dist resume.moe-ep2pp2zbh1 resume.hybrid-tp2pp2 resume.dsv3mtp-pp2
  resume.cp2dp2fsdp resume.lora-tp2pp2 reshard.gpt reshard.moe reshard.dsv3 reshard.lora)
# layout_test(NAME TIMEOUT SCRIPT ARGS...): layouts.NAME, SCRIPT LOOM MPIEXEC ARGS under mpirun
# (in the sanitizer build only if NAME is in the list above).
function(layout_test name timeout script)
  set_property(GLOBAL APPEND PROPERTY loom_layout_names ${name})
  if(LOOM_SANITIZE AND NOT name IN_LIST _sanitize_layouts)
    return()
  endif()
  loom_script_test(layouts.${name} ${script} ${timeout} "${_env}" ${MPIEXEC_EXECUTABLE} ${ARGN})
endfunction()
# equivalence(MODEL LAYOUTS...): layouts.MODEL.LAYOUT for each, equivalence.sh MODEL LAYOUT.
function(equivalence model)
  foreach(layout ${ARGN})
    layout_test(${model}.${layout} 300 equivalence.sh ${model} ${layout})
  endforeach()
endfunction()

foreach(model gpt llama)
  equivalence(${model} tp2 tp2sp pp2 pp2vp2 pp4gpipe dp2 dp2dist tp2pp2 tp2dp2dist tp2sp-packed
                       pp2-packed dp2fsdp dp4fsdp dp2fsdp2 tp2dp2fsdp)
endforeach()
# LoRA: adapters split over the tensor group as Megatron Bridge splits them, and the frozen
# base (no gradient) on every axis; GPT-2's tied embedding frozen on both pipeline ends.
equivalence(lora tp2 tp2sp pp2 dp2 dp2dist tp2pp2 cp2 pp2zbh1 pp2vp2)
equivalence(gptlora tp2 tp2sp pp2 pp2vp2 dp2dist)
# DPO: a pair's two rows in one micro-batch, their log-probabilities completed over the
# context ranks, the reference computed before the first step on every layout
equivalence(dpo tp2 tp2sp pp2 pp2vp2 dp2 dp2dist tp2pp2 cp2 pp2zbh1 dp2fsdp tp2dp2dist cp2pp2
                pp2dualpipev)
equivalence(dpolora tp2 pp2 dp2dist tp2pp2 cp2)
# The zero-bubble schedules (ZB-H1; ZB-V and DualPipeV with their V of two chunks a rank).
equivalence(gpt pp2zbh1 pp4zbh1 pp2zbv pp4zbv pp2dualpipev pp4dualpipev)
equivalence(llama pp2zbh1 pp4zbh1 pp2zbv pp4zbv pp2dualpipev pp4dualpipev)

# Context parallelism (ring attention with Megatron's load-balanced chunks): CP2, CP4, beside
# TP2, PP2 and the distributed optimizer for GPT; CP2 for the Llama-style GQA model.
equivalence(gpt cp2 cp4 cp2tp2 cp2pp2 cp2dp2dist cp4-flash cp2a2a cp4a2a cp2tp2a2a)
equivalence(llama cp2 cp2tp2 cp2-flash cp2a2a cp2a2a-flash)

# model/bert (padding, token types, both heads) on dataset/bert, in the layouts Megatron
# trains BERT with.
equivalence(bert tp2 tp2sp pp2 dp2dist pp2zbh1 pp4zbh1)

# model/t5 on dataset/t5, in the layouts the issue asks of T5 (Megatron trains T5 with TP
# and DP; its pipeline split of encoder and decoder is not implemented).
equivalence(t5 tp2 dp2 dp2dist)
# The relative position bias: its (heads, buckets) tables split over the tensor ranks.
equivalence(t5rel tp2 dp2dist)

# A Mixtral-style mixture of experts (model/gpt, num_experts = 4, top-2, balancing and z
# losses) under data parallelism, the distributed optimizer, and tensor parallelism of the
# attention with the experts whole on every tensor rank; expert parallelism (the all-to-all
# dispatcher) alone, with the distributed optimizer sharding the experts over the
# expert-data group, and beside tensor parallelism; expert tensor parallelism (each expert's
# MLP split over the tensor group), alone and with EP2.
equivalence(moe tp2 dp2 dp2dist ep2 ep2dp2dist ep2tp2 etp2 ep2etp2)
# DeepSeek-V3's router: sigmoid scores and the aux-loss-free expert bias, whose update sums
# the step's loads over the data-parallel ranks, so that every layout routes alike.
equivalence(moebias dp2 ep2 ep2dp2dist ep2etp2)
# Experts under pipeline parallelism: each stage reports its layers' balancing losses and
# expert loads (loom.stage-losses/1), and a split backward defers the experts' and the
# router's weight gradients under the zero-bubble schedules; EP2 x PP2 on four ranks; the
# expert bias updated per stage.
equivalence(moe pp2 pp2vp2 pp2zbh1 pp4zbh1 pp2zbv pp4zbv pp2dualpipev pp4dualpipev ep2pp2)
equivalence(moebias pp2)
# Experts under sequence parallelism (the tokens gathered around the dispatcher, Megatron's
# way): with TP2, with expert tensor parallelism, beside EP2, and beside PP2.
equivalence(moe tp2sp etp2sp ep2tp2sp tp2sppp2)
# Experts under context parallelism: each rank's balancing and z losses its share of the
# micro-batch's, the top-k counts summed over the context group (Megatron's tp-cp reduction);
# the per-sequence form (moebias) sums each sequence's chunks'.
equivalence(moe cp2 ep2cp2)
equivalence(moebias cp2)
# Experts under FSDP (without expert parallelism the expert-data group is data x context, so
# the experts shard as every other parameter): ZeRO-3 on 2 and 4 ranks, beside TP2, ZeRO-2;
# the expert bias buffer, and DeepSeek-V3 in miniature. Beside EP2 each layer's experts are
# a second shard unit, over the expert-data group (1 rank on 2, 2 on 4), ZeRO-3 and ZeRO-2.
equivalence(moe dp2fsdp dp4fsdp dp2fsdp2 tp2dp2fsdp ep2fsdp ep2dp2fsdp ep2dp2fsdp2)
equivalence(moebias dp2fsdp)
equivalence(dsv3 dp2fsdp ep2fsdp)

# FSDP beside sequence parallelism (the replicated norms' partial gradients summed over the
# tensor group at each unit's end), and under QK-norm with TP (Qwen3's, the same way).
# And under context parallelism, the shards over data x context (2 and 4 ranks); under
# pipeline parallelism, each stage's units over its data ranks (untied embeddings).
equivalence(gpt tp2spdp2fsdp cp2fsdp cp2dp2fsdp pp2fsdp pp2dp2fsdp)
equivalence(llama tp2spdp2fsdp cp2fsdp-flash pp2dp2fsdp)
equivalence(qwen3 tp2dp2fsdp)

# Qwen3 (QK-norm, whose weights' gradients each tensor rank holds for its heads only and the
# tensor group sums; a head size of 12 over a width of 32) in the dense layouts; Qwen3-MoE
# (with Qwen2-MoE's gated shared expert) in the layouts the issue asks of it: EP2 x TP2 and
# PP2 with sequence parallelism.
equivalence(qwen3 tp2 tp2sp pp2 cp2 dp2dist tp2pp2)
equivalence(qwen3moe ep2tp2 tp2sppp2 pp2zbh1 etp2 ep2etp2)

# DeepSeek-V3 in miniature (multi-head latent attention, whose down-projections are whole on
# every tensor rank and see the tensor group's summed gradients; DeepSeek's router; the first
# layer dense) in the layouts the issue asks of it, and beside the distributed optimizer.
equivalence(dsv3 tp2 pp2 ep2 ep2pp2 cp2 ep2cp2 dp2dist tp2pp2 pp2zbh1)
# MLA under sequence parallelism: the latents' input gathered, dx kept by rows
equivalence(dsv3 tp2sp tp2sppp2 ep2tp2sp)

# A Mamba-2 hybrid in miniature (Mamba-2, attention, MLP, Mamba-2): its heads and groups split
# over the tensor group, with sequence parallelism, its layers over the pipeline (and a split
# backward's deferred projections under ZB-H1), beside the distributed optimizer.
equivalence(hybrid tp2 tp2sp pp2 tp2pp2 dp2dist pp2zbh1)
equivalence(hybridmoe ep2 tp2 pp2)

# Multi-token prediction: the depths on the last stage with their copy of the embedding (kept
# equal over the embedding group), the head's and the layers' tensor parallelism, ZB-H1's
# split backward; DeepSeek-V3 in miniature with one depth beside its experts.
equivalence(mtp tp2 pp2 tp2pp2 pp2zbh1 dp2dist)
equivalence(dsv3mtp tp2 pp2 ep2 ep2pp2 pp2zbh1 pp2uneven)
# ... over packed documents: each depth reads and predicts within its own document.
equivalence(mtp pp2-packed tp2-packed)
equivalence(dsv3mtp pp2-packed)
# Uneven pipeline stages (Megatron's decoder_first/last_pipeline_num_layers), also under
# virtual stages (the first and last ranks' layers split over their interleaved chunks).
equivalence(gpt pp2uneven pp4uneven pp2vp2uneven pp4vp2uneven)
equivalence(llama pp2uneven pp2vp2uneven)

# Sharded checkpoints (model shards per tensor/pipeline rank, optimizer shards per data
# rank) resume bitwise at the same layout.
foreach(layout tp2pp2 tp2dp2dist moe-tp2dp2dist moe-ep2 moe-ep2dp2dist moe-ep2fsdp moe-ep2pp2zbh1
               moebias-ep2etp2 dsv3-ep2pp2 hybrid-tp2pp2 dsv3mtp-pp2 cp2dp2
               cp2dp2dist pp2dp2fsdp cp2dp2fsdp lora-tp2pp2)
  layout_test(resume.${layout} 300 resume.sh ${layout})
endforeach()

# A checkpoint of one layout resumes on any other (resharding) and follows the straight run.
foreach(model gpt llama moe dsv3 hybrid mtp lora)
  layout_test(reshard.${model} 600 reshard.sh ${model})
endforeach()

# A name in the sanitizer's list that no layout above has is a typo that would drop a path.
get_property(_all GLOBAL PROPERTY loom_layout_names)
foreach(name ${_sanitize_layouts})
  if(NOT name IN_LIST _all)
    message(FATAL_ERROR "layouts.cmake: the sanitizer's layout ${name} is not a layout test")
  endif()
endforeach()
