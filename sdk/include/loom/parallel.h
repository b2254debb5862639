/* Loom SDK, ABI 2 — parallel plugins: data-parallel gradient strategies and pipeline
 * schedules.
 *
 * A run has one of each, both of this kind: recipe `parallel.data` names the gradient
 * strategy, `parallel.schedule` the schedule. The host calls reduce_gradients once per
 * step after the last micro-batch's backward; the strategy leaves every rank with
 * gradients averaged over the data-parallel group (ddp: all-reduce; distributed-optimizer:
 * reduce-scatter into this rank's shard, and all-gather of the updated parameters in
 * after_step). A schedule implements run_pipeline and may leave reduce_gradients NULL; a
 * gradient strategy may leave run_pipeline NULL. */
#ifndef LOOM_PARALLEL_H
#define LOOM_PARALLEL_H

#include "loom/host.h"
#include "loom/model.h"
#include "loom/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_parallel loom_parallel;

/* One step's (or one evaluation's) micro-batches through the pipeline. */
typedef struct loom_pipeline_args {
  size_t struct_size;
  const loom_model_api* model_api;
  loom_model* const* chunks; /* this rank's model chunks: chunk v holds virtual stage
                              * v*pipeline + pipeline_rank */
  size_t num_chunks;         /* = layout.virtual_stages */
  int64_t num_microbatches;
  /* Fills *out for micro-batch i (every stage calls it; the data stays valid until the
   * next call). */
  loom_error* (*get_microbatch)(void* user, int64_t i, loom_microbatch* out);
  void* user;
  int forward_only; /* evaluation: no backward, nothing kept */
  /* out, on every rank of the pipeline group: the sums over micro-batches of the last
   * stage's loss_sum and counted tokens */
  double loss_sum;
  int64_t tokens;
} loom_pipeline_args;
#define LOOM_PIPELINE_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_pipeline_args, tokens)

/* The part of one parameter this rank's optimizer updates (distributed optimizer). */
typedef struct loom_param_shard {
  size_t struct_size;
  DLTensor* param; /* 1-D view of elements [offset, offset+numel) of the flattened
                    * parameter; numel 0 = this rank owns none of it */
  DLTensor* grad;  /* the reduced gradient of those elements */
  int64_t offset;  /* into the flattened (local, tensor-parallel) parameter */
} loom_param_shard;
#define LOOM_PARAM_SHARD_SIZE_V2 LOOM_STRUCT_SIZE(loom_param_shard, offset)

typedef struct loom_parallel_api {
  size_t struct_size;
  /* grads: the gradient tensors of the local model, valid while the instance lives */
  loom_error* (*create)(const loom_host* host, const loom_config* cfg, DLTensor* const* grads,
                        size_t num_grads, loom_parallel** out);
  void (*destroy)(loom_parallel* p); /* accepts NULL */
  /* COLLECTIVE over the data-parallel group */
  loom_error* (*reduce_gradients)(loom_parallel* p);

  /* Pipeline schedules: run the micro-batches through this rank's chunks with
   * point-to-point exchange over the pipeline group. COLLECTIVE over the pipeline group. */
  loom_error* (*run_pipeline)(loom_parallel* p, loom_pipeline_args* args);
  /* Gradient strategies that shard the optimizer (NULL otherwise): params[i] are the
   * parameter tensors in the order of create's grads; fills out[i] (caller sets
   * struct_size) with the views this rank's optimizer steps. Called once after create. */
  loom_error* (*shard_params)(loom_parallel* p, DLTensor* const* params, loom_param_shard* out);
  /* After every optimizer step (NULL when nothing is needed): sharded strategies
   * all-gather the updated parameters. COLLECTIVE over the data-parallel group. */
  loom_error* (*after_step)(loom_parallel* p);
  /* Bytes of gradient-strategy state per parameter on this rank (buffers for packing,
   * shards), for the memory report; NULL = 0. */
  double (*bytes_per_param)(loom_parallel* p);
  /* --- ABI 2.0 ends here; append new slots below this line only. --- */
} loom_parallel_api;
#define LOOM_PARALLEL_API_SIZE_V2 LOOM_STRUCT_SIZE(loom_parallel_api, bytes_per_param)

#ifdef __cplusplus
}
#endif
#endif /* LOOM_PARALLEL_H */
