/* Loom SDK, ABI 2 — model plugins: build a network, list its parameters, run forward and
 * backward of one micro-batch, and decode with a KV cache for generation.
 *
 * The model allocates its parameters and gradients on the active backend (host.get_backend)
 * and calls the active attention plugin for the attention core. Parameter initialisation is
 * defined on the full tensor from the seed, so any parallel layout starts from the same
 * model. Thread contract: one instance is driven from one thread. */
#ifndef LOOM_MODEL_H
#define LOOM_MODEL_H

#include "loom/host.h"
#include "loom/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_model loom_model;

/* Contract tags (common.h):
 *   grad_ready: owner, local, blocks
 *   unit_needed, unit_grads: owner, COLLECTIVE(data), blocks */
typedef struct loom_model_create_args {
  size_t struct_size;
  int64_t vocab_size;  /* tokenizer's vocabulary; the model may pad its embedding */
  int64_t seq_len;     /* tokens per sample in training */
  int64_t micro_batch; /* samples per micro-batch in training */
  DLDataType dtype;    /* compute dtype of activations */
  /* Pipeline parallelism: this instance holds virtual stage `pipeline_stage` of
   * `pipeline_stages` (= pipeline x virtual_stages; 0 or 1 = the whole model). Stage s holds
   * layers [s*L/S, (s+1)*L/S); the first stage adds the embedding, the last the final norm,
   * the head and the loss. Chunk v of pipeline rank p holds stage v*pipeline + p. Tensor and
   * sequence parallelism come from host.get_layout. */
  int32_t pipeline_stage;
  int32_t pipeline_stages;
  /* --- ABI 2.0 ends here; append new fields below this line only. --- */
  /* ABI 2.10: activation recompute (train.recompute_*, Megatron's flags). A model reads
   * these only when struct_size covers them (zero: store every activation) and refuses by
   * name a setting it cannot honour. Losses and gradients must not change, bit for bit. */
  int32_t recompute_granularity; /* LOOM_RECOMPUTE_NONE, _SELECTIVE, _FULL */
  int32_t recompute_method;      /* full: LOOM_RECOMPUTE_UNIFORM or LOOM_RECOMPUTE_BLOCK */
  /* full uniform: layers per group, of which only the group's input is kept; full block:
   * the first this many layers of each pipeline stage are recomputed, one by one */
  int32_t recompute_num_layers;
  uint32_t recompute_modules; /* selective: LOOM_RECOMPUTE_CORE_ATTN | _MLP_ACT | _LAYERNORM */
  /* ABI 2.12: gradient readiness, so that the data-parallel reduction can overlap the
   * backward pass (parallel.overlap_grad_reduce). When not NULL, stage_backward calls
   * grad_ready(grad_ready_user, first, count), on the thread that called it, as soon as the
   * gradients of parameters [first, first + count) (get_param's indices) hold this backward
   * pass's whole contribution: after each layer's backward, say. The host counts the calls;
   * a gradient is final once the step's last backward pass has announced it. A parameter
   * whose gradient finish_grads or another pipeline stage still changes (the sequence-
   * parallel norms, a tied embedding shared between stages) is never announced: the host
   * reduces it after finish_grads. A model may announce nothing. */
  void (*grad_ready)(void* user, int64_t first, int64_t count);
  void* grad_ready_user;
  /* ABI 2.13: parameter residency, for strategies that shard or move the parameters
   * (loom_grad_api.residency: parallel.data = "fsdp", overlap_param_gather). The parameters
   * form units (loom_model_param.unit: a layer each, the embedding and head together). The
   * model calls, on the thread that drives it:
   *   unit_needed(user, unit, fill) before every forward or backward that reads the unit's
   *     values. fill = 1: the model has just allocated them and the host fills them (all-
   *     gathers them from the shards) before it returns; fill = 0: they hold what they held,
   *     and the host may complete work pending on them (an all-gather of updated values
   *     started after the optimizer step) before it returns;
   *   unit_grads(user, unit) (LOOM_RESIDENCY_GRADS and _PARAMS) after a backward pass's last
   *     contribution to the unit's gradients, before it frees them: the host reduces them
   *     (reduce-scatter) at once.
   * LOOM_RESIDENCY_NOTIFY keeps every value and gradient for the run and only calls
   * unit_needed; _GRADS allocates a unit's gradients (zeroed) at the start of its backward and
   * frees them at the end (ZeRO-2); _PARAMS its values too, around each forward or backward
   * that reads them (ZeRO-3). get_param's tensors stay the same DLTensor objects; their data
   * is valid only while resident. At create every unit is resident and held (hold_params):
   * the host shards them, then lets go. A model that cannot honour a residency refuses it by
   * name; one whose struct_size ends before these fields is never asked. */
  int32_t residency; /* LOOM_RESIDENCY_* */
  loom_error* (*unit_needed)(void* user, int32_t unit, int32_t fill);
  loom_error* (*unit_grads)(void* user, int32_t unit);
  void* residency_user;
  /* ABI 2.18: create-time options beyond these fields, as extensions found by id (common.h):
   * every new create option goes on this chain, never as another plain field. NULL for now.
   * A model reads it only when struct_size covers it (LOOM_HAS_FIELD(args,
   * loom_model_create_args, ext), or >= LOOM_MODEL_CREATE_ARGS_SIZE_V2_18), finds an id with
   * loom_ext_find (common.h) and refuses a LOOM_EXT_REQUIRED id it does not know
   * (loom::require_known_exts, loom/cpp/plugin.hpp). The host chains an extension only for
   * a model that lists its id in its capabilities, so older models never see one. Borrowed
   * for the create call. */
  const loom_ext* ext;
  /* --- ABI 2.18 ends here: new create options are extensions on `ext`, not fields. --- */
} loom_model_create_args;
#define LOOM_MODEL_CREATE_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_model_create_args, pipeline_stages)
#define LOOM_MODEL_CREATE_ARGS_SIZE_V2_10 \
  LOOM_STRUCT_SIZE(loom_model_create_args, recompute_modules)
#define LOOM_MODEL_CREATE_ARGS_SIZE_V2_12 LOOM_STRUCT_SIZE(loom_model_create_args, grad_ready_user)
#define LOOM_MODEL_CREATE_ARGS_SIZE_V2_13 LOOM_STRUCT_SIZE(loom_model_create_args, residency_user)
#define LOOM_MODEL_CREATE_ARGS_SIZE_V2_18 LOOM_STRUCT_SIZE(loom_model_create_args, ext)
#define LOOM_RESIDENCY_NONE 0   /* every parameter and gradient for the run; no calls */
#define LOOM_RESIDENCY_NOTIFY 1 /* the same, and unit_needed before each use */
#define LOOM_RESIDENCY_GRADS 2  /* ZeRO-2: gradients only during a unit's backward */
#define LOOM_RESIDENCY_PARAMS 3 /* ZeRO-3: values only while read, gradients as above */
#define LOOM_RECOMPUTE_NONE 0
#define LOOM_RECOMPUTE_SELECTIVE 1 /* parts of each layer, recomputed from what it keeps */
#define LOOM_RECOMPUTE_FULL 2      /* whole layers, recomputed from their input */
#define LOOM_RECOMPUTE_UNIFORM 0
#define LOOM_RECOMPUTE_BLOCK 1
#define LOOM_RECOMPUTE_CORE_ATTN 1u /* the attention core's output and lse */
#define LOOM_RECOMPUTE_MLP_ACT 2u   /* the MLP's activation function output */
#define LOOM_RECOMPUTE_LAYERNORM 4u /* the norms' outputs (pre-norm layers) */

typedef struct loom_model_param {
  size_t struct_size;
  const char* name;     /* "h.3.attn.qkv.weight"; valid until destroy */
  DLTensor* value;      /* valid until destroy; the optimizer updates it in place */
  DLTensor* grad;       /* same shape; accumulated (+=) by stage_backward */
  int weight_decay;     /* 0 for biases, norms (Megatron's no-decay rule) */
  int32_t tp_split_dim; /* dimension split across tensor-parallel ranks, -1 = replicated */
  /* How this rank's shard sits in the full tensor. Along tp_split_dim the full
   * tensor is tp_num_blocks blocks of global extents tp_block_sizes[] (the q|k|v rows of a
   * fused projection, the gate;up rows of SwiGLU), each split evenly over the tensor
   * group; the local tensor is the concatenation of this rank's slice of every block.
   * tp_num_blocks 0 means one block. */
  int32_t tp_num_blocks;
  const int64_t* tp_block_sizes; /* tp_num_blocks entries; valid until destroy */
  /* 1: a copy of a parameter that another pipeline stage owns (the tied embedding held by
   * the last stage for the head): kept equal by the model, never saved nor counted twice
   * in the gradient norm */
  int32_t pipeline_duplicate;
  /* The group over which the host averages this parameter's gradient (a loom_group_kind):
   * LOOM_GROUP_DATA_CONTEXT for dense parameters. An expert parameter of a mixture of experts
   * under expert parallelism (ABI 2.6) names LOOM_GROUP_EXPERT_DATA: its dimension 0 (the
   * experts) is split evenly over the expert group, expert rank e holding the e-th slab, and
   * its gradient already sums the expert group's tokens divided by the expert-parallel size,
   * so that averaging it over the expert-data group averages it over data x context. */
  int32_t reduce_group;
  /* One logical tensor held by several pipeline stages shares a tie group, kept equal by
   * the model in training and re-synchronised by the host after loading a checkpoint.
   * "embedding": wte on the first stage and the head's copy on the last, over
   * LOOM_GROUP_EMBEDDING (the only tie group the host knows so far). NULL: not tied. */
  const char* tie_group;
  /* ABI 2.9: 1 = a buffer, not a parameter (Megatron's persistent buffers: the router's
   * expert bias of aux-loss-free balancing). The model updates it itself (in finish_grads);
   * the host never gives it to the optimizer, the gradient reduction or the gradient norm
   * (grad is NULL), but saves, loads and reshards it with the parameters. 0 for a plugin
   * whose struct_size ends before this field. */
  int32_t buffer;
  /* ABI 2.13: the residency unit of the parameter (create args' residency): parameters of
   * one unit are gathered and reduced together. Units are numbered from 0 per model
   * instance; -1 = none (a buffer, or a model without units). */
  int32_t unit;
  /* ABI 2.25, parameter-efficient finetuning (model/gpt's peft = "lora"):
   * frozen = 1: a parameter the run does not train (a base weight beside LoRA adapters). The
   * model sets `buffer` too, so that every host keeps it out of the optimizer, the gradient
   * reduction and the gradient norm; grad is NULL and the model never changes it. Its values
   * come from checkpoint.finetune (the pretrained model); a host may save them, or (Loom)
   * name that checkpoint in its own and save the trained parameters alone.
   * adapter = 1: a trained parameter that parameter-efficient finetuning adds (lora_A,
   * lora_B): a pretrained checkpoint lacks it, and checkpoint.finetune leaves it at its
   * initialisation. Both 0 for a plugin whose struct_size ends before them. */
  int32_t frozen;
  int32_t adapter;
} loom_model_param;
#define LOOM_MODEL_PARAM_SIZE_V2 LOOM_STRUCT_SIZE(loom_model_param, tie_group)
#define LOOM_MODEL_PARAM_SIZE_V2_9 LOOM_STRUCT_SIZE(loom_model_param, buffer)
#define LOOM_MODEL_PARAM_SIZE_V2_13 LOOM_STRUCT_SIZE(loom_model_param, unit)
#define LOOM_MODEL_PARAM_SIZE_V2_25 LOOM_STRUCT_SIZE(loom_model_param, adapter)

/* ----- the named batch -----------------------------------------------------------------
 * A micro-batch is a list of named host arrays. The model declares the arrays it reads
 * (batch_spec); the host's data source declares what it provides, and the run is refused
 * before the first step when an array is missing or has another dtype or shape. GPT reads
 * "tokens" and "targets"; BERT adds "token_types", "loss_mask" and "padding_mask"; T5 its
 * encoder and decoder tokens. */
#define LOOM_ARRAY_TOKENS "tokens"   /* int32 (B, T): input token ids */
#define LOOM_ARRAY_TARGETS "targets" /* int32 (B, T): the next token; -1 = no loss here */
/* int32 (B, T), ABI 2.2: each token's position within its own document, so a document
 * starts wherever it is 0. Packed sequences (data.pack_sequences: Megatron's
 * reset_position_ids and reset_attention_mask): a model that reads it attends within each
 * document only and restarts its positions there. An array a model reads when present but
 * does not need, like this one, is listed in its stages' reads and left out of batch_spec,
 * which names what a micro-batch must carry. */
#define LOOM_ARRAY_POSITIONS "positions"

/* A declared extent that follows the micro-batch rather than being fixed. */
#define LOOM_DIM_BATCH (-1) /* B: samples in the micro-batch */
#define LOOM_DIM_SEQ (-2)   /* T: tokens per sample */

typedef struct loom_array_spec {
  size_t struct_size;
  const char* name; /* "tokens" */
  DLDataType dtype;
  int32_t ndim;
  const int64_t* shape; /* ndim extents: fixed, LOOM_DIM_BATCH or LOOM_DIM_SEQ; owned by
                         * the declarer, as the name */
} loom_array_spec;
#define LOOM_ARRAY_SPEC_SIZE_V2 LOOM_STRUCT_SIZE(loom_array_spec, shape)

typedef struct loom_microbatch {
  size_t struct_size;
  int64_t batch;   /* B <= create_args.micro_batch */
  int64_t seq_len; /* T <= create_args.seq_len */
  /* The arrays, host memory (kDLCPU), borrowed until the schedule's next fetch. A stage that
   * reads none (stage_info.num_reads == 0) may get num_arrays == 0. */
  size_t num_arrays;
  const char* const* names;
  const DLTensor* arrays;
  const loom_ext* ext; /* NULL, or loom_token_stats (ABI 2.1), loom_microbatch_device (2.31) */
} loom_microbatch;
#define LOOM_MICROBATCH_SIZE_V2 LOOM_STRUCT_SIZE(loom_microbatch, ext)

/* Per-token results of an evaluation, asked for on a micro-batch's ext chain (flags
 * LOOM_EXT_REQUIRED): an optional capability a model lists in its descriptor. The stage
 * holding the head fills, for each position of the micro-batch (B*T, row-major), its
 * target's loss (-log p, in float64; 0 where the target is -1) and whether the target is
 * the model's most likely token there (1 or 0: its logit equals the row's largest; 0 where
 * -1). Other stages leave both alone. `loom eval` reads LAMBADA's cloze accuracy from it
 * under any parallel layout. */
#define LOOM_EXT_TOKEN_STATS "loom.token-stats/1"
typedef struct loom_token_stats {
  loom_ext base; /* id LOOM_EXT_TOKEN_STATS, base.struct_size = sizeof the whole struct */
  double* loss;  /* (B*T) host memory, the host's */
  int32_t* top1; /* (B*T) host memory, the host's */
} loom_token_stats;
#define LOOM_TOKEN_STATS_SIZE_V1 LOOM_STRUCT_SIZE(loom_token_stats, top1)

/* ABI 2.31, loom.microbatch-device/1 on a training micro-batch's chain (flags
 * LOOM_EXT_REQUIRED), for a step the backend records and replays (train.cuda_graph,
 * loom.graph/1): `arrays` holds the micro-batch's arrays once more, num_arrays of them in
 * `names`' order, as compact tensors of the backend of the same dtypes and shapes, written by
 * the host before the step. The model reads its ids (tokens, targets, ...) from these with
 * device ops instead of copying the host arrays, so that the work it enqueues for the
 * micro-batch depends on the host arrays in nothing but their shapes: a replay then reads the
 * next batch's values. The host arrays keep the same values (a model may check them on the
 * host), but a replay does not call the model, so the host makes the checks of the ids for it
 * before each step: tokens within the tokenizer's vocabulary, targets also -1. A model lists
 * the id in its capabilities. */
#define LOOM_EXT_MICROBATCH_DEVICE "loom.microbatch-device/1"
typedef struct loom_microbatch_device {
  loom_ext base;          /* id LOOM_EXT_MICROBATCH_DEVICE, flags LOOM_EXT_REQUIRED */
  const DLTensor* arrays; /* num_arrays tensors of the backend */
} loom_microbatch_device;
#define LOOM_MICROBATCH_DEVICE_SIZE_V1 LOOM_STRUCT_SIZE(loom_microbatch_device, arrays)

/* The array called `name`, or NULL. */
static inline const DLTensor* loom_microbatch_find(const loom_microbatch* mb, const char* name) {
  for (size_t i = 0; mb != NULL && i < mb->num_arrays; ++i)
    if (mb->names[i] != NULL && strcmp(mb->names[i], name) == 0) return &mb->arrays[i];
  return NULL;
}

/* ----- stage I/O --------------------------------------------------------------------------
 * Between pipeline stages flow lists of tensors: stage s's outputs are stage s+1's inputs,
 * in order. GPT passes one, "hidden" (tokens, channels) in the compute dtype, tokens = B*T
 * (B*T/tensor with sequence parallelism); T5's decoder stages also pass the encoder's
 * output. */
typedef struct loom_stage_tensor {
  size_t struct_size;
  const char* name; /* "hidden" */
  DLDataType dtype;
  int32_t ndim;
  const int64_t* shape; /* ndim extents for the micro-batch shape stage_info was asked
                         * about; owned by the model, as the name */
} loom_stage_tensor;
#define LOOM_STAGE_TENSOR_SIZE_V2 LOOM_STRUCT_SIZE(loom_stage_tensor, shape)

typedef struct loom_stage_info {
  size_t struct_size;
  int64_t batch, seq_len; /* in: the micro-batch shape the tensor shapes below are for */
  /* out; every pointer is model-owned and valid until the next stage_info call */
  int32_t is_first, is_last; /* holds the embedding / the head and the losses */
  size_t num_reads;          /* the batch arrays this stage reads: with none, the schedule */
  const char* const* reads;  /* need not fetch the micro-batch at all */
  size_t num_inputs;         /* 0 on the first stage */
  const loom_stage_tensor* inputs;
  size_t num_outputs; /* 0 on the last stage */
  const loom_stage_tensor* outputs;
  /* The losses the model's last stage reports, in order; the same list on every stage, so
   * that ranks without the last stage can take part in summing them. The first is the
   * main loss (GPT's "lm"). */
  size_t num_losses;
  const char* const* losses;
} loom_stage_info;
#define LOOM_STAGE_INFO_SIZE_V2 LOOM_STRUCT_SIZE(loom_stage_info, losses)

/* ----- named losses ----------------------------------------------------------------------
 * One micro-batch's contribution to one loss term. The objective the gradients follow is
 * loss_scale * sum over terms of (weight * sum); the host reports each term as the ratio of
 * its sums over the global batch, sum / count, under its own name. GPT has one term, "lm"
 * (summed token losses over counted targets, weight 1); a mixture of experts adds
 * "moe_aux" and "z_loss", BERT "sop". A term of weight 0 is a statistic reported beside the
 * losses (a classifier's accuracy, a mixture of experts' share of tokens per expert): summed
 * like them, logged without the word loss; a name with dots is logged grouped by its part
 * before the last dot ("moe_load.h3.e0", "moe_load.h3.e1" on one line). */
typedef struct loom_loss {
  size_t struct_size;
  const char* name; /* as listed by stage_info */
  double sum;
  double count;  /* what sum is averaged over (GPT: counted targets) */
  double weight; /* its coefficient in the objective */
} loom_loss;
#define LOOM_LOSS_SIZE_V2 LOOM_STRUCT_SIZE(loom_loss, weight)

typedef struct loom_stage_forward_args {
  size_t struct_size;
  int64_t slot;              /* activations are kept in this slot until its backward */
  const loom_microbatch* mb; /* carries at least the arrays stage_info.reads names */
  double loss_scale;         /* the last stage's gradients follow d(objective)/dθ with it */
  int no_grad;               /* evaluation: nothing is kept, the slot is free on return */
  size_t num_inputs;         /* stage_info's inputs; 0 and NULL on the first stage */
  const DLTensor* const* inputs;
  /* out, model-owned: the outputs, valid until the slot's backward (or the next call with
   * no_grad); none on the last stage */
  size_t num_outputs;
  DLTensor* const* outputs;
  /* out, model-owned, valid until the next call: the last stage's loss terms, in
   * stage_info's order; none elsewhere, except with loom.stage-losses/1 on ext (ABI 2.20,
   * below): a stage's share of them */
  size_t num_losses;
  const loom_loss* losses;
  const loom_ext* ext; /* NULL, or loom_stage_losses (ABI 2.20), loom_device_losses (2.28) */
} loom_stage_forward_args;
#define LOOM_STAGE_FORWARD_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_stage_forward_args, ext)

typedef struct loom_stage_backward_args {
  size_t struct_size;
  int64_t slot;
  size_t num_doutputs; /* gradients of the slot's outputs; 0 and NULL on the last stage, */
  const DLTensor* const* doutputs; /* which starts from the losses */
  /* out, model-owned, valid until the next stage call: gradients of the inputs; none on
   * the first stage */
  size_t num_dinputs;
  DLTensor* const* dinputs;
  const loom_ext* ext; /* NULL */
} loom_stage_backward_args;
#define LOOM_STAGE_BACKWARD_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_stage_backward_args, ext)

/* Contract tags (common.h):
 *   create, destroy, num_params, get_param, init_params, zero_grad, flops_per_token, batch_spec,
 *      attention_requires, stage_info: owner, local, blocks
 *   stage_forward, stage_backward: owner, COLLECTIVE(tensor), blocks
 *   finish_grads: owner, COLLECTIVE(model-parallel), blocks
 *   hold_params: owner, COLLECTIVE(data), blocks */
typedef struct loom_model_api {
  size_t struct_size;
  loom_error* (*create)(const loom_host* host, const loom_config* cfg,
                        const loom_model_create_args* args, loom_model** out);
  void (*destroy)(loom_model* m); /* accepts NULL */
  size_t (*num_params)(loom_model* m);
  /* Fills out (caller sets out->struct_size) for parameter i < num_params. */
  loom_error* (*get_param)(loom_model* m, size_t i, loom_model_param* out);
  /* Initialises every parameter from `seed` (the same values on any layout). */
  loom_error* (*init_params)(loom_model* m, uint64_t seed);
  loom_error* (*zero_grad)(loom_model* m);
  /* Model FLOPs per trained token (forward + backward), for MFU. */
  double (*flops_per_token)(loom_model* m);

  /* The arrays a micro-batch must carry for this model (the union over its stages). A
   * function of the configuration alone, called with no instance: `loom validate` asks it
   * before anything is created. *specs: plugin-owned, valid until the next call. */
  loom_error* (*batch_spec)(const loom_host* host, const loom_config* cfg, size_t* num,
                            const loom_array_spec** specs);
  /* The capability ids this configuration will require of the run's attention plugin (a
   * sliding window: LOOM_EXT_ATTENTION_WINDOW), in *ids: NULL-terminated, plugin-owned,
   * valid until the next call; NULL or empty for none. A function of the configuration
   * alone, like batch_spec: `loom validate` refuses an attention plugin that does not list
   * one, before anything runs (the host's gate still refuses it at the first call). */
  loom_error* (*attention_requires)(const loom_host* host, const loom_config* cfg,
                                    const char* const** ids);

  /* Pipeline stages, driven by a schedule plugin; every model has them, often just one (a
   * whole model is stage 0 of 1; loom/cpp/model_step.hpp runs it one micro-batch at a
   * time). Activations of any number of micro-batches in flight live in numbered slots
   * (grown on demand); a slot is reused after its backward. */
  loom_error* (*stage_info)(loom_model* m, loom_stage_info* info /* in and out */);
  /* Forward of one micro-batch into args->slot. The last stage computes the losses and,
   * unless no_grad, keeps what the backward needs to start from them.
   * COLLECTIVE(tensor group) when tensor > 1: the model's own tensor-parallel all-reduces
   * and all-gathers run inside. */
  loom_error* (*stage_forward)(loom_model* m, loom_stage_forward_args* args);
  /* Backward of the micro-batch in args->slot. Parameter gradients +=.
   * COLLECTIVE(tensor group) when tensor > 1, as stage_forward. */
  loom_error* (*stage_backward)(loom_model* m, loom_stage_backward_args* args);
  /* Once per step after the last backward, before the data-parallel reduction: the model
   * completes gradients its own parallelism leaves partial (sequence-parallel norm weights
   * over the tensor group, the tied embedding over the embedding group). COLLECTIVE over
   * the model-parallel ranks. */
  loom_error* (*finish_grads)(loom_model* m);
  /* --- ABI 2.0 ends here; append new slots below this line only. --- */
  /* ABI 2.13, under a residency (create args): hold = 1 makes every unit's values resident
   * and current (unit_needed for each) until hold = 0 lets them go again, so that the host
   * can save, load or look at the whole model. Training passes while held keep the values
   * and still reduce and free each unit's gradients. Without a residency it does nothing.
   * NULL: the model has no residency. */
  loom_error* (*hold_params)(loom_model* m, int32_t hold);
  /* --- ABI 2.13 ends here; append new slots below this line only. --- */
} loom_model_api;
#define LOOM_MODEL_API_SIZE_V2 LOOM_STRUCT_SIZE(loom_model_api, finish_grads)
#define LOOM_MODEL_API_SIZE_V2_13 LOOM_STRUCT_SIZE(loom_model_api, hold_params)

/* Generation with a KV cache: an optional capability. A model that can generate lists
 * LOOM_EXT_DECODE in its descriptor's capabilities and chains this table on its `ext`;
 * `loom generate` refuses a model without it, by name. */
#define LOOM_EXT_DECODE "loom.decode/1"
/* Contract tags (common.h):
 *   kv_reset, max_context: owner, local, blocks
 *   decode: owner, COLLECTIVE(tensor), blocks */
typedef struct loom_decode_ext {
  loom_ext base; /* id LOOM_EXT_DECODE, base.struct_size = sizeof the whole table */
  /* Clear the KV cache for `batch` sequences of at most max_len tokens. */
  loom_error* (*kv_reset)(loom_model* m, int64_t batch, int64_t max_len);
  /* Append tokens(B,n) (host memory) to the cache and write the next-token logits of the
   * last position of each sequence to logits(B,vocab_size) host f32. */
  loom_error* (*decode)(loom_model* m, const int32_t* tokens, int64_t n, float* logits);
  /* The longest sequence kv_reset accepts (e.g. a learned position table's size), or 0
   * when the model has no fixed limit. The host caps generation with it. */
  int64_t (*max_context)(loom_model* m);
  /* --- loom.decode/1 ends here; append new slots below this line only. --- */
} loom_decode_ext;
#define LOOM_DECODE_EXT_SIZE_V1 LOOM_STRUCT_SIZE(loom_decode_ext, max_context)

/* Continuous batching over loom.decode/1's cache: an optional capability beside it. After
 * kv_reset(batch = slots, max_len), each slot holds one sequence with its own length;
 * decode_slots appends to the listed slots only, so a sequence joins (kv_clear, then its
 * prompt) or leaves between two decode steps while the others go on. `loom serve` refuses
 * a model without it, by name. */
#define LOOM_EXT_DECODE_SLOTS "loom.decode-slots/1"
/* Contract tags (common.h):
 *   kv_clear: owner, local, blocks
 *   decode_slots: owner, COLLECTIVE(tensor), blocks */
typedef struct loom_decode_slots_ext {
  loom_ext base; /* id LOOM_EXT_DECODE_SLOTS, base.struct_size = sizeof the whole table */
  /* Empty slot `slot` < kv_reset's batch: its next decode starts at position 0. */
  loom_error* (*kv_clear)(loom_model* m, int64_t slot);
  /* Append tokens(num,n) (host memory) to the distinct slots[0..num), each at its own
   * length, and write the next-token logits of each one's last position to
   * logits(num,vocab_size) host f32. */
  loom_error* (*decode_slots)(loom_model* m, const int64_t* slots, int64_t num,
                              const int32_t* tokens, int64_t n, float* logits);
  /* --- loom.decode-slots/1 ends here; append new slots below this line only. --- */
} loom_decode_slots_ext;
#define LOOM_DECODE_SLOTS_EXT_SIZE_V1 LOOM_STRUCT_SIZE(loom_decode_slots_ext, decode_slots)

/* Encoder-decoder generation (ABI 2.4): a model whose decoder attends to an encoding of the
 * prompt (T5) lists LOOM_EXT_ENCODE beside LOOM_EXT_DECODE and chains this table after the
 * decode tables. The host encodes the prompt into a slot, then decodes from decoder_start:
 * decode's tokens are the decoder's, and the prompt never enters the decoder's cache. A host
 * that does not know this capability refuses such a model rather than feed it the prompt. */
#define LOOM_EXT_ENCODE "loom.encode/1"
/* Contract tags (common.h):
 *   encode: owner, COLLECTIVE(tensor), blocks
 *   decoder_start: owner, local, blocks */
typedef struct loom_encode_ext {
  loom_ext base; /* id LOOM_EXT_ENCODE, base.struct_size = sizeof the whole table */
  /* Run the encoder over tokens(n) (host memory) for slot `slot` < kv_reset's batch. The
   * slot's decoder sequence restarts empty; its decode calls attend to this encoding. */
  loom_error* (*encode)(loom_model* m, int64_t slot, const int32_t* tokens, int64_t n);
  /* The token the decoder starts from (Megatron's T5: the tokenizer's [BOS]), or -1 when
   * the run's tokenizer has none. */
  int64_t (*decoder_start)(loom_model* m);
  /* --- loom.encode/1 ends here; append new slots below this line only. --- */
} loom_encode_ext;
#define LOOM_ENCODE_EXT_SIZE_V1 LOOM_STRUCT_SIZE(loom_encode_ext, decoder_start)

/* Split backward (ABI 2.19), for the zero-bubble pipeline schedules: a stage's backward in two
 * parts, B (the input gradients, which the previous stage waits for) and W (the parameter
 * gradients, which can wait). A model that can lists LOOM_EXT_SPLIT_BACKWARD and chains this
 * table on its descriptor's ext. B is stage_backward with a loom_stage_backward_split on the
 * args' chain (flags LOOM_EXT_REQUIRED: a model that cannot refuses it): it returns the input
 * gradients as usual, and the slot keeps what the parameter gradients need until
 * weight_backward, which adds them (+=) and frees the slot. B then W gives every parameter
 * gradient bitwise what the whole backward gives, when each slot's W runs in the order of the
 * B's. A model that announces gradients (grad_ready) does so from W. The host hands the table
 * to the schedule on loom_schedule_args.ext (loom_schedule_split, schedule.h). */
#define LOOM_EXT_SPLIT_BACKWARD "loom.split-backward/1"
typedef struct loom_stage_backward_split {
  loom_ext base; /* id LOOM_EXT_SPLIT_BACKWARD, flags LOOM_EXT_REQUIRED */
} loom_stage_backward_split;
typedef struct loom_stage_weight_args {
  size_t struct_size;
  int64_t slot;        /* a slot whose B ran and whose W has not */
  const loom_ext* ext; /* NULL */
} loom_stage_weight_args;
#define LOOM_STAGE_WEIGHT_ARGS_SIZE_V2_19 LOOM_STRUCT_SIZE(loom_stage_weight_args, ext)
/* Contract tags (common.h):
 *   weight_backward: owner, COLLECTIVE(tensor), blocks */
typedef struct loom_split_backward_ext {
  loom_ext base; /* id LOOM_EXT_SPLIT_BACKWARD, base.struct_size = sizeof the whole table */
  loom_error* (*weight_backward)(loom_model* m, loom_stage_weight_args* args);
  /* --- loom.split-backward/1 ends here; append new slots below this line only. --- */
} loom_split_backward_ext;
#define LOOM_SPLIT_BACKWARD_EXT_SIZE_V1 LOOM_STRUCT_SIZE(loom_split_backward_ext, weight_backward)

/* Loss terms from every stage (ABI 2.20). A schedule that adds up loss terms from every stage
 * chains this on loom_stage_forward_args.ext (flags 0) of each forward. With it, a stage
 * before the last may report stage_info's loss terms too, as its share: the sums and counts
 * of what its own layers compute (a mixture of experts' balancing and z losses and expert
 * loads on the layers it holds). The schedule adds each term's sum and count over every
 * stage and micro-batch, and takes each term's weight from the last stage. Without it only
 * the last stage's terms are read, and a model whose terms come from earlier stages refuses
 * to run there, rather than report a part as the whole. */
#define LOOM_EXT_STAGE_LOSSES "loom.stage-losses/1"
typedef struct loom_stage_losses {
  loom_ext base; /* id LOOM_EXT_STAGE_LOSSES, flags 0 */
} loom_stage_losses;

/* Loss sums on the device (ABI 2.28). A host that reads a step's losses only after its update
 * is enqueued (train.grad_norm_on_device) chains this on loom_schedule_args.ext, and a
 * schedule passes it on (flags 0) on loom_stage_forward_args.ext of each training forward.
 * `sums` is a (n) f64 tensor of the run's backend, n >= stage_info's num_losses, zeroed by
 * the host before the step. A model may add a term's micro-batch sum into sums[k] (k its
 * index in stage_info's list) instead of reporting it in losses[k].sum, which then carries
 * only what it summed on the host (0 when all went to the device); counts and weights stay
 * on the host. Term k's sum is losses[k].sum plus sums[k], over every stage and micro-batch.
 * The host offers it only where the backend lists loom.ce-loss-total/1, so that a model may
 * sum its cross-entropy there. A model that ignores it reports every sum on the host, as
 * before. */
#define LOOM_EXT_DEVICE_LOSSES "loom.device-losses/1"
typedef struct loom_device_losses {
  loom_ext base; /* id LOOM_EXT_DEVICE_LOSSES, flags 0 */
  DLTensor* sums;
} loom_device_losses;
#define LOOM_DEVICE_LOSSES_SIZE_V1 LOOM_STRUCT_SIZE(loom_device_losses, sums)

/* Preference optimisation (ABI 2.26): Direct Preference Optimisation's sigmoid loss
 * (train.objective = "dpo", Rafailov et al. 2023) in place of the language-model loss. A model
 * that can lists LOOM_EXT_PREFERENCE in its descriptor's capabilities; the host then chains a
 * loom_preference_objective on its create args (flags LOOM_EXT_REQUIRED) and a
 * loom_preference_rows on every micro-batch. Rows 2k and 2k+1 of a micro-batch are pair k's
 * chosen and rejected sequences (the batch is even); a row's log-probability is the sum of
 * log p(target) over its counted targets (-1 ignored). With z = beta * ((pi_c - ref_c) -
 * (pi_r - ref_r)), pair k's loss is -log sigmoid(z): the stage holding the head reports the
 * terms "dpo" (its sum over the micro-batch's pairs, count the pairs, weight 1) and the
 * statistics (weight 0) "rewards.chosen" (beta (pi_c - ref_c)), "rewards.rejected",
 * "rewards.margin" (z) and "rewards.accuracy" (z > 0), TRL's metrics, each summed over the
 * pairs; its gradients follow loss_scale * B * T / (B / 2) times the pairs' summed loss (the
 * host's loss_scale counts tokens), so that a step averages over the global batch's pairs.
 * Under context parallelism the row sums are completed over the context group, and only
 * context rank 0 reports the terms. */
#define LOOM_EXT_PREFERENCE "loom.preference/1"
typedef struct loom_preference_objective {
  loom_ext base; /* id LOOM_EXT_PREFERENCE, flags LOOM_EXT_REQUIRED */
  double beta;   /* > 0: the strength of the pull towards the reference */
} loom_preference_objective;
#define LOOM_PREFERENCE_OBJECTIVE_SIZE_V1 LOOM_STRUCT_SIZE(loom_preference_objective, beta)
/* On a micro-batch's ext chain (flags LOOM_EXT_REQUIRED), each forward's: */
#define LOOM_EXT_PREFERENCE_ROWS "loom.preference-rows/1"
typedef struct loom_preference_rows {
  loom_ext base;           /* id LOOM_EXT_PREFERENCE_ROWS */
  const double* reference; /* (B) host: each row's log-probability under the reference
                            * model (the frozen start), or NULL for 0 */
  double* policy;          /* (B) host, out: each row's log-probability under the model,
                            * written by the stage holding the head (others leave it) */
} loom_preference_rows;
#define LOOM_PREFERENCE_ROWS_SIZE_V1 LOOM_STRUCT_SIZE(loom_preference_rows, policy)

/* FP8 training (ABI 2.32, issue 39): the host's precision.fp8 recipe, Transformer Engine's and
 * Megatron's (--fp8-recipe, --fp8-format, --fp8-margin, --fp8-amax-history-len,
 * --fp8-amax-compute-algo, --first-last-layers-bf16). A model that can lists
 * LOOM_EXT_FP8_TRAINING; the host then chains a loom_fp8_training on its create args (flags
 * LOOM_EXT_REQUIRED) and checks that the backend lends loom.fp8/1 (fp8.h). The model runs its
 * transformer layers' linear GEMMs (forward, input gradient, weight gradient) in FP8 through
 * the backend's quantize and scaled GEMM; attention, norms, the embedding and the output head
 * stay in the compute dtype, as do the main parameters and the optimizer. Recipes:
 *   LOOM_FP8_RECIPE_TENSORWISE  current scaling: each tensor's scale from its own amax;
 *   LOOM_FP8_RECIPE_DELAYED     a scale from each tensor's amax history (amax_history_len
 *                               steps, "max" or "most_recent"), updated after each step
 *                               from the step's amaxes reduced (MAX) over the tensor and
 *                               data x context groups. Its state is the model's buffers
 *                               (f32, replicated): "<w>.fp8_amax_history" (3, len) and
 *                               "<w>.fp8_scale" (3) beside each FP8 weight "<w>.weight",
 *                               rows input, weight, gradient (an expert weight (E, out, in):
 *                               (E, 3, len) and (E, 3), expert parameters split like it);
 *                               training state that a Hugging Face export leaves out
 *                               (loom::is_fp8_state);
 *   LOOM_FP8_RECIPE_BLOCKWISE   DeepSeek-V3's: activations and gradients in 1x128 tiles,
 *                               weights in 128x128 blocks, power-of-two scales.
 * A model refuses, naming it, a recipe or layout it does not run yet. */
#define LOOM_EXT_FP8_TRAINING "loom.fp8-training/1"
#define LOOM_FP8_RECIPE_TENSORWISE 1
#define LOOM_FP8_RECIPE_DELAYED 2
#define LOOM_FP8_RECIPE_BLOCKWISE 3
typedef struct loom_fp8_training {
  loom_ext base;            /* id LOOM_EXT_FP8_TRAINING, flags LOOM_EXT_REQUIRED */
  int32_t recipe;           /* LOOM_FP8_RECIPE_* */
  int32_t hybrid;           /* 1: gradients in e5m2, the rest e4m3 ("hybrid"); 0: all e4m3 */
  int32_t margin;           /* >= 0: scales 2^margin below the format's largest over amax */
  int32_t amax_history_len; /* DELAYED: >= 1 */
  int32_t amax_most_recent; /* DELAYED: 1 "most_recent", 0 "max" */
  int32_t layers_at_start_bf16, layers_at_end_bf16; /* >= 0: the first and last transformer
                                                     * layers of the whole model stay in the
                                                     * compute dtype */
} loom_fp8_training;
#define LOOM_FP8_TRAINING_SIZE_V1 LOOM_STRUCT_SIZE(loom_fp8_training, layers_at_end_bf16)

#ifdef __cplusplus
}
#endif
#endif /* LOOM_MODEL_H */
