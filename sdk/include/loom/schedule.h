/* Loom SDK, ABI 2 — schedule plugins: the pipeline schedule of a run.
 *
 * Recipe `parallel.schedule` names it (gpipe, 1f1b, interleaved-1f1b; later zero-bubble). The
 * host hands it one step's (or one evaluation's) micro-batches; it runs them through this
 * rank's model chunks, exchanging activations point-to-point over the pipeline group. At
 * pipeline = 1 it is gradient accumulation over the micro-batches. */
#ifndef LOOM_SCHEDULE_H
#define LOOM_SCHEDULE_H

#include "loom/host.h"
#include "loom/model.h"
#include "loom/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_schedule loom_schedule;

typedef struct loom_schedule_args {
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
  const loom_ext* ext; /* NULL */
} loom_schedule_args;
#define LOOM_SCHEDULE_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_schedule_args, ext)

typedef struct loom_schedule_api {
  size_t struct_size;
  loom_error* (*create)(const loom_host* host, const loom_config* cfg, loom_schedule** out);
  void (*destroy)(loom_schedule* s); /* accepts NULL */
  /* COLLECTIVE(pipeline group), blocks */
  loom_error* (*run)(loom_schedule* s, loom_schedule_args* args);
  /* --- ABI 2.0 ends here; append new slots below this line only. --- */
} loom_schedule_api;
#define LOOM_SCHEDULE_API_SIZE_V2 LOOM_STRUCT_SIZE(loom_schedule_api, run)

#ifdef __cplusplus
}
#endif
#endif /* LOOM_SCHEDULE_H */
