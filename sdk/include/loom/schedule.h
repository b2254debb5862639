/* Loom SDK, ABI 2 — schedule plugins: the pipeline schedule of a run.
 *
 * Recipe `parallel.schedule` names it (gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-v, dualpipev). The
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
  /* NULL, or loom_schedule_trace, loom_schedule_split, loom_device_losses (ABI 2.28,
   * model.h: passed on to the training forwards; what the model sums there is not in
   * `losses`) */
  const loom_ext* ext;
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

/* ----- the schedule as data (ABI 2.19) ------------------------------------------------------
 * A schedule that lists LOOM_EXT_SCHEDULE_ORDER in its descriptor's capabilities chains this
 * table on the descriptor's ext. The host asks it, before it creates the model chunks, which
 * pipeline stage each rank's chunks hold (a V-shaped schedule places stage r and stage
 * 2P-1-r on rank r), whether the schedule can run the step's micro-batches (`loom validate`
 * refuses the recipe with its reason), and, for `loom schedule show`, every rank's order of
 * computations. Without it chunk v of rank r holds stage v*P + r and the schedule cannot be
 * drawn. */
#define LOOM_EXT_SCHEDULE_ORDER "loom.schedule-order/1"

/* One computation of a rank's order: a phase of one micro-batch on one of its chunks. */
typedef enum loom_schedule_phase {
  LOOM_PHASE_FORWARD = 0,
  LOOM_PHASE_BACKWARD = 1,       /* input and weight gradients together */
  LOOM_PHASE_BACKWARD_INPUT = 2, /* the input gradients; the weight gradients wait for */
  LOOM_PHASE_BACKWARD_WEIGHT = 3 /* the weight gradients of an earlier BACKWARD_INPUT */
} loom_schedule_phase;
typedef struct loom_schedule_step {
  size_t struct_size;
  int32_t phase; /* loom_schedule_phase */
  int32_t chunk; /* the rank's chunk: its stage is stages[rank * chunks + chunk] */
  int64_t microbatch;
} loom_schedule_step;
#define LOOM_SCHEDULE_STEP_SIZE_V2_19 LOOM_STRUCT_SIZE(loom_schedule_step, microbatch)

typedef struct loom_schedule_order_args {
  size_t struct_size;
  int32_t pipeline;         /* in */
  int32_t virtual_stages;   /* in: the recipe's parallel.virtual_stages */
  int64_t num_microbatches; /* in: a step's; 0 asks for the placement alone */
  /* out, plugin-owned, valid until the next call */
  int32_t chunks;                         /* model chunks per rank */
  const int32_t* stages;                  /* pipeline x chunks: the stage rank r's chunk v holds at
                                           * [r * chunks + v]; stages 0 .. pipeline*chunks - 1 */
  const size_t* num_steps;                /* pipeline: each rank's order's length */
  const loom_schedule_step* const* steps; /* pipeline: each rank's order */
  const loom_ext* ext;                    /* NULL */
} loom_schedule_order_args;
#define LOOM_SCHEDULE_ORDER_ARGS_SIZE_V2_19 LOOM_STRUCT_SIZE(loom_schedule_order_args, ext)

/* Contract tags (common.h):
 *   order: owner, local, blocks */
typedef struct loom_schedule_order_ext {
  loom_ext base; /* id LOOM_EXT_SCHEDULE_ORDER, base.struct_size = sizeof the whole table */
  /* A function of its arguments alone (no instance, no comm): `loom validate` and `loom
   * schedule show` call it with a host that has the error and log slots only. Refuses with
   * LOOM_ERR_INVALID_ARGUMENT and the reason what the schedule cannot run (virtual_stages it
   * does not place, too few micro-batches). */
  loom_error* (*order)(const loom_host* host, loom_schedule_order_args* args);
  /* --- loom.schedule-order/1 ends here; append new slots below this line only. --- */
} loom_schedule_order_ext;
#define LOOM_SCHEDULE_ORDER_EXT_SIZE_V1 LOOM_STRUCT_SIZE(loom_schedule_order_ext, order)

/* A traced step (ABI 2.19): the host chains this table on loom_schedule_args.ext (flags 0:
 * a schedule that does not know it runs untraced). A schedule that lists
 * LOOM_EXT_SCHEDULE_TRACE calls step_done after each computation of the run with the step as
 * it ran (a backward the model could not split is LOOM_PHASE_BACKWARD, and an empty weight
 * backward is not reported) and its start and end on the host's clock. `loom run` with
 * train.schedule_trace writes them out; `loom schedule show --trace` draws them. */
#define LOOM_EXT_SCHEDULE_TRACE "loom.schedule-trace/1"
/* Contract tags (common.h):
 *   now, step_done: owner, local, blocks */
typedef struct loom_schedule_trace {
  loom_ext base;             /* id LOOM_EXT_SCHEDULE_TRACE, struct_size = sizeof the whole */
  double (*now)(void* user); /* seconds */
  void (*step_done)(void* user, const loom_schedule_step* step, double start, double end);
  void* user;
  /* --- loom.schedule-trace/1 ends here; append new fields below this line only. --- */
} loom_schedule_trace;
#define LOOM_SCHEDULE_TRACE_SIZE_V1 LOOM_STRUCT_SIZE(loom_schedule_trace, user)

/* The model's split backward (loom.split-backward/1, model.h), handed to the schedule: the
 * host chains this on loom_schedule_args.ext (flags 0) when the model lists the capability.
 * A schedule with input and weight backwards (zb-h1, zb-v, dualpipev) then runs them apart;
 * without it each B runs the whole backward and its W has nothing left to do. */
typedef struct loom_schedule_split {
  loom_ext base; /* id LOOM_EXT_SPLIT_BACKWARD, struct_size = sizeof the whole struct */
  const loom_split_backward_ext* model;
} loom_schedule_split;
#define LOOM_SCHEDULE_SPLIT_SIZE_V1 LOOM_STRUCT_SIZE(loom_schedule_split, model)

#ifdef __cplusplus
}
#endif
#endif /* LOOM_SCHEDULE_H */
