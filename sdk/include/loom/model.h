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
} loom_model_create_args;
#define LOOM_MODEL_CREATE_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_model_create_args, pipeline_stages)

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
   * LOOM_GROUP_DATA_CONTEXT for dense parameters; expert parameters of a mixture of experts
   * will name their expert-data group. */
  int32_t reduce_group;
  /* One logical tensor held by several pipeline stages shares a tie group, kept equal by
   * the model in training and re-synchronised by the host after loading a checkpoint.
   * "embedding": wte on the first stage and the head's copy on the last, over
   * LOOM_GROUP_EMBEDDING (the only tie group the host knows so far). NULL: not tied. */
  const char* tie_group;
} loom_model_param;
#define LOOM_MODEL_PARAM_SIZE_V2 LOOM_STRUCT_SIZE(loom_model_param, tie_group)

typedef struct loom_microbatch {
  size_t struct_size;
  const int32_t* tokens;  /* (B, T) host memory */
  const int32_t* targets; /* (B, T) host memory; -1 = no loss at this position */
  int64_t batch;          /* B <= create_args.micro_batch */
  int64_t seq_len;        /* T <= create_args.seq_len */
  double loss_scale;      /* d(objective)/d(sum of token losses), e.g. 1/(tokens in step) */
} loom_microbatch;
#define LOOM_MICROBATCH_SIZE_V2 LOOM_STRUCT_SIZE(loom_microbatch, loss_scale)

typedef struct loom_stage_info {
  size_t struct_size;
  int32_t is_first, is_last; /* holds the embedding / the head and loss */
  int64_t hidden;            /* channels of the hidden state between stages */
  DLDataType dtype;          /* its dtype */
} loom_stage_info;
#define LOOM_STAGE_INFO_SIZE_V2 LOOM_STRUCT_SIZE(loom_stage_info, dtype)

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

  /* Pipeline stages, driven by a schedule plugin; every model has them, often just one
   * (a whole model is stage 0 of 1; loom/cpp/model_step.hpp runs it one micro-batch at a
   * time). Activations of up to
   * any number of micro-batches in flight live in numbered slots (grown on demand); a slot
   * is reused after its backward. Between stages flows the hidden state, (tokens, hidden)
   * in the compute dtype, tokens = B*T (B*T/tensor with sequence parallelism). */
  loom_error* (*stage_info)(loom_model* m, loom_stage_info* out);
  /* Forward of micro-batch `mb` into `slot`. input: the previous stage's output, NULL on
   * the first stage (which reads mb->tokens). *output: model-owned, valid until the slot's
   * backward; NULL on the last stage, which computes the loss from mb->targets (loss_sum,
   * tokens = the sum of its token losses and the number of counted targets; zero elsewhere;
   * gradients follow d(loss_scale * loss sum)/dθ). With `no_grad` nothing is kept for a
   * backward (evaluation) and the slot is free again on return.
   * COLLECTIVE(tensor group) when tensor > 1: the model's own tensor-parallel all-reduces
   * and all-gathers run inside. */
  loom_error* (*stage_forward)(loom_model* m, int64_t slot, const loom_microbatch* mb,
                               const DLTensor* input, int no_grad, DLTensor** output,
                               double* loss_sum, int64_t* tokens);
  /* Backward of the micro-batch in `slot`: doutput = gradient of its output (NULL on the
   * last stage, which starts from the loss). Parameter gradients +=. *dinput: gradient of
   * the input, model-owned, valid until the next stage call; NULL on the first stage.
   * COLLECTIVE(tensor group) when tensor > 1, as stage_forward. */
  loom_error* (*stage_backward)(loom_model* m, int64_t slot, const DLTensor* doutput,
                                DLTensor** dinput);
  /* Once per step after the last backward, before the data-parallel reduction: the model
   * completes gradients its own parallelism leaves partial (sequence-parallel norm weights
   * over the tensor group, the tied embedding over the embedding group). COLLECTIVE over
   * the model-parallel ranks. */
  loom_error* (*finish_grads)(loom_model* m);
  /* --- ABI 2.0 ends here; append new slots below this line only. --- */
} loom_model_api;
#define LOOM_MODEL_API_SIZE_V2 LOOM_STRUCT_SIZE(loom_model_api, finish_grads)

/* Generation with a KV cache: an optional capability. A model that can generate lists
 * LOOM_EXT_DECODE in its descriptor's capabilities and chains this table on its `ext`;
 * `loom generate` refuses a model without it, by name. */
#define LOOM_EXT_DECODE "loom.decode/1"
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

#ifdef __cplusplus
}
#endif
#endif /* LOOM_MODEL_H */
