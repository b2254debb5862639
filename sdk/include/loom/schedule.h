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

/* Contract tags (common.h):
 *   get_microbatch: owner, local, blocks */
typedef struct loom_schedule_args {
  size_t struct_size;
  const loom_model_api* model_api;
  loom_model* const* chunks; /* this rank's model chunks: chunk v holds virtual stage
                              * v*pipeline + pipeline_rank */
  size_t num_chunks;         /* = layout.virtual_stages */
  int64_t num_microbatches;
  int64_t batch, seq_len; /* the shape of every micro-batch of the run */
  double loss_scale;      /* passed to the last stage's stage_forward */
  /* Fills *out for micro-batch i with the arrays the model's batch_spec lists; the data
   * stays valid until the next call. A function of i: the schedule calls it once per
   * micro-batch on each stage whose stage_info reads arrays, and never on the others. */
  loom_error* (*get_microbatch)(void* user, int64_t i, loom_microbatch* out);
  void* user;
  int forward_only; /* evaluation: no backward, nothing kept */
  /* out, on every rank of the pipeline group, schedule-owned and valid until the next run:
   * each loss term of stage_info's list, sum and count summed over the micro-batches,
   * weight as the last stage reported it */
  size_t num_losses;
  const loom_loss* losses;
  const loom_ext* ext; /* NULL */
} loom_schedule_args;
#define LOOM_SCHEDULE_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_schedule_args, ext)

/* Contract tags (common.h):
 *   create, destroy: owner, local, blocks
 *   run: owner, COLLECTIVE(pipeline), blocks */
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
