/* Loom SDK, ABI 2 — grad plugins: the data-parallel gradient strategy of a run.
 *
 * Recipe `parallel.data` names it (ddp, distributed-optimizer, fsdp). The host calls
 * reduce once per step after the last micro-batch's backward; the strategy leaves every rank
 * with gradients averaged over the data-parallel group (ddp: all-reduce; distributed-
 * optimizer: reduce-scatter into this rank's shard, and all-gather of the updated
 * parameters in after_step). Since ABI 2.6 each gradient names its group (create args'
 * reduce_groups): expert parameters are averaged over the expert-data group. */
#ifndef LOOM_GRAD_H
#define LOOM_GRAD_H

#include "loom/host.h"
#include "loom/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_grad loom_grad;

typedef struct loom_grad_create_args {
  size_t struct_size;
  /* the gradient tensors of the local model; borrowed, valid while the instance lives */
  DLTensor* const* grads;
  size_t num_grads;
  const loom_ext* ext; /* NULL */
  /* --- ABI 2.0 ends here; append new fields below this line only. --- */
  /* ABI 2.6: num_grads entries, the loom_group_kind each gradient is averaged over
   * (loom_model_param.reduce_group): LOOM_GROUP_DATA_CONTEXT, or LOOM_GROUP_EXPERT_DATA for
   * an expert parameter under expert parallelism. NULL: every gradient over data x context.
   * A strategy that shards the optimizer shards each gradient over its own group. */
  const int32_t* reduce_groups;
  /* ABI 2.13: num_grads entries, each gradient's residency unit (loom_model_param.unit), or
   * NULL when the model reports none. A strategy with a residency (fsdp) needs them. */
  const int32_t* units;
} loom_grad_create_args;
#define LOOM_GRAD_CREATE_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_grad_create_args, ext)
#define LOOM_GRAD_CREATE_ARGS_SIZE_V2_6 LOOM_STRUCT_SIZE(loom_grad_create_args, reduce_groups)
#define LOOM_GRAD_CREATE_ARGS_SIZE_V2_13 LOOM_STRUCT_SIZE(loom_grad_create_args, units)

/* One reduction of the step's gradients: every gradient, less what grad_ready (ABI 2.12)
 * started already, which reduce completes. */
typedef struct loom_grad_reduce_args {
  size_t struct_size;
  const loom_ext* ext; /* NULL */
} loom_grad_reduce_args;
#define LOOM_GRAD_REDUCE_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_grad_reduce_args, ext)

/* The part of one parameter this rank's optimizer updates (distributed optimizer). */
typedef struct loom_param_shard {
  size_t struct_size;
  DLTensor* param; /* 1-D view of elements [offset, offset+numel) of the flattened
                    * parameter; numel 0 = this rank owns none of it */
  DLTensor* grad;  /* the reduced gradient of those elements */
  int64_t offset;  /* into the flattened (local, tensor-parallel) parameter */
} loom_param_shard;
#define LOOM_PARAM_SHARD_SIZE_V2 LOOM_STRUCT_SIZE(loom_param_shard, offset)

/* Contract tags (common.h):
 *   create, destroy, shard_params, bytes_per_param: owner, local, blocks
 *   reduce, after_step: owner, COLLECTIVE(data), blocks
 *   grad_ready: owner, COLLECTIVE(data), starts
 *   residency: any, local, blocks
 *   unit_needed, unit_grads: owner, COLLECTIVE(data), blocks */
typedef struct loom_grad_api {
  size_t struct_size;
  loom_error* (*create)(const loom_host* host, const loom_config* cfg,
                        const loom_grad_create_args* args, loom_grad** out);
  void (*destroy)(loom_grad* g); /* accepts NULL */
  /* COLLECTIVE(data-parallel group), blocks */
  loom_error* (*reduce)(loom_grad* g, const loom_grad_reduce_args* args);
  /* Strategies that shard the optimizer (NULL otherwise): params[i] are the parameter
   * tensors in the order of create's grads; fills out[i] (caller sets struct_size) with the
   * views this rank's optimizer steps. Called once after create. */
  loom_error* (*shard_params)(loom_grad* g, DLTensor* const* params, loom_param_shard* out);
  /* After every optimizer step (NULL when nothing is needed): sharded strategies
   * all-gather the updated parameters. COLLECTIVE(data-parallel group), blocks. */
  loom_error* (*after_step)(loom_grad* g);
  /* Bytes of strategy state per parameter on this rank (buffers for packing, shards), for
   * the memory report; NULL = 0. */
  double (*bytes_per_param)(loom_grad* g);
  /* --- ABI 2.0 ends here; append new slots below this line only. --- */
  /* ABI 2.12: gradients [first, first + count) of create's tensors are final for this step:
   * the last backward pass has announced them (loom_model_create_args.grad_ready) and nothing
   * changes them before reduce. A strategy that overlaps its reduction with the backward pass
   * (ddp's overlap_grad_reduce) may start reducing a bucket once all its gradients are final;
   * reduce then completes those and reduces the rest. Every rank calls it with the same
   * ranges in the same order. NULL: nothing overlaps. */
  loom_error* (*grad_ready)(loom_grad* g, int64_t first, int64_t count);
  /* --- ABI 2.12 ends here; append new slots below this line only. --- */
  /* ABI 2.13, strategies that shard or move the parameters. residency: the
   * loom_model_create_args residency this configuration needs of the model (LOOM_RESIDENCY_*:
   * fsdp's ZeRO-2 and ZeRO-3, or NOTIFY to complete the parameter all-gather per unit with
   * overlap_param_gather), asked before the model exists; NULL = LOOM_RESIDENCY_NONE. The
   * host passes the model's calls on: unit_needed fills the unit's parameter tensors from
   * this rank's shards (fill = 1), or completes what is pending on them (fill = 0);
   * unit_grads reduces the unit's gradients into this rank's shard, accumulating over the
   * step's backward passes, before the model frees them. With the values sharded,
   * shard_params's views point into the strategy's own shard memory. */
  int32_t (*residency)(const loom_host* host, const loom_config* cfg);
  loom_error* (*unit_needed)(loom_grad* g, int32_t unit, int32_t fill);
  loom_error* (*unit_grads)(loom_grad* g, int32_t unit);
  /* --- ABI 2.13 ends here; append new slots below this line only. --- */
} loom_grad_api;
#define LOOM_GRAD_API_SIZE_V2 LOOM_STRUCT_SIZE(loom_grad_api, bytes_per_param)
#define LOOM_GRAD_API_SIZE_V2_12 LOOM_STRUCT_SIZE(loom_grad_api, grad_ready)
#define LOOM_GRAD_API_SIZE_V2_13 LOOM_STRUCT_SIZE(loom_grad_api, unit_grads)

#ifdef __cplusplus
}
#endif
#endif /* LOOM_GRAD_H */
