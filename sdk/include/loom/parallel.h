/* Loom SDK, ABI v1 — parallel plugins: a data-parallel gradient strategy.
 *
 * The host calls reduce_gradients once per step after the last micro-batch's backward;
 * the strategy leaves every rank with gradients averaged over the data-parallel group
 * (ddp: all-reduce; distributed-optimizer: reduce-scatter + all-gather of parameters).
 * Pipeline schedules (1f1b, interleaved, gpipe) append their slots in a later minor
 * version of this table, when the engine drives stages through them. */
#ifndef LOOM_PARALLEL_H
#define LOOM_PARALLEL_H

#include "loom/host.h"
#include "loom/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_parallel loom_parallel;

typedef struct loom_parallel_api {
  size_t struct_size;
  /* grads: the gradient tensors of the local model, valid while the instance lives */
  loom_error* (*create)(const loom_host* host, const loom_config* cfg, DLTensor* const* grads,
                        size_t num_grads, loom_parallel** out);
  void (*destroy)(loom_parallel* p); /* accepts NULL */
  /* COLLECTIVE over the data-parallel group */
  loom_error* (*reduce_gradients)(loom_parallel* p);
  /* --- ABI v1.0 ends here; append new slots below this line only. --- */
} loom_parallel_api;
#define LOOM_PARALLEL_API_SIZE_V1 LOOM_STRUCT_SIZE(loom_parallel_api, reduce_gradients)

#ifdef __cplusplus
}
#endif
#endif /* LOOM_PARALLEL_H */
