/* Loom SDK, ABI 2 — optimizer plugins: an update rule on fp32 parameters.
 *
 * The optimizer allocates its state on the active backend. The host clips gradients by
 * global norm by passing grad_scale; the optimizer multiplies gradients by it first. */
#ifndef LOOM_OPTIMIZER_H
#define LOOM_OPTIMIZER_H

#include "loom/host.h"
#include "loom/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_optimizer loom_optimizer;

typedef struct loom_opt_param {
  size_t struct_size;
  const char* name; /* valid while the optimizer lives */
  DLTensor* param;  /* updated in place; valid while the optimizer lives */
  const DLTensor* grad;
  int weight_decay; /* apply the recipe's weight decay to this tensor */
} loom_opt_param;
#define LOOM_OPT_PARAM_SIZE_V2 LOOM_STRUCT_SIZE(loom_opt_param, weight_decay)

typedef struct loom_opt_create_args {
  size_t struct_size;
  const loom_opt_param* params; /* num_params entries, borrowed for the call (the tensors
                                 * they point to live as long as the optimizer) */
  size_t num_params;
  const loom_ext* ext; /* NULL; a required extension the plugin does not know is refused */
} loom_opt_create_args;
#define LOOM_OPT_CREATE_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_opt_create_args, ext)

typedef struct loom_opt_step_args {
  size_t struct_size;
  double lr;
  int64_t step;        /* 1-based count of steps taken including this one */
  double grad_scale;   /* multiply every gradient by this first */
  const loom_ext* ext; /* NULL */
} loom_opt_step_args;
#define LOOM_OPT_STEP_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_opt_step_args, ext)

/* ABI 2.27, loom.opt-clip/1 on step's ext chain: clipping by the global gradient norm
 * decided on the device, so that no host read stands between the backward pass and the
 * update. `squares` is a (k) f64 tensor of the backend (sum_squares' loom.sum-squares-total/1
 * writes it, summed over the ranks already); the squared norm of the gradients as they are
 * (the loss scale included) is squares[0] + ... + squares[k-1] in index order, and the step
 * multiplies every gradient by grad_scale * c with c = loom::clip_scale(sum, loss_scale,
 * max_norm) (loom/cpp/clip.hpp: 1 / loss_scale, times max_norm / (norm + 1e-6) when
 * max_norm > 0 and the unscaled norm exceeds it), computed in double as the host computes
 * its grad_scale. When the norm is not finite the step changes nothing (parameters and
 * state keep their values): the host learns it afterwards and decides (train.nan_check).
 * The plugin lists the id in its capabilities. */
#define LOOM_EXT_OPT_CLIP "loom.opt-clip/1"
typedef struct loom_opt_clip {
  loom_ext base; /* id LOOM_EXT_OPT_CLIP, flags LOOM_EXT_REQUIRED */
  const DLTensor* squares;
  double loss_scale; /* the gradients carry it (1 unless fp16) */
  double max_norm;   /* > 0: clip the unscaled norm to it; 0: no clipping */
} loom_opt_clip;
#define LOOM_OPT_CLIP_SIZE_V1 LOOM_STRUCT_SIZE(loom_opt_clip, max_norm)

/* ABI 2.30, loom.opt-schedule/1 on step's ext chain: the learning rate and the step count read
 * on the device when the update runs, not when it is enqueued, so that one recorded update
 * (a captured CUDA graph, train.cuda_graph) serves every step; PyTorch's "capturable" Adam.
 * `values` is a compact (2) f64 tensor of the backend: values[0] the learning rate,
 * values[1] the 1-based step count (a whole number); the args' lr and step are not used.
 * Whatever the plugin derives from them (AdamW's bias corrections, the decay 1 - lr * wd) it
 * derives in double by its host formulas: on the CPU the update is the one of the same lr and
 * step passed in the args, to the bit (on a GPU the device's pow may differ from the host's in
 * the last bit). A plugin cannot check values it reads on a GPU: the host writes them. The
 * plugin lists the id in its capabilities. */
#define LOOM_EXT_OPT_SCHEDULE "loom.opt-schedule/1"
typedef struct loom_opt_schedule {
  loom_ext base; /* id LOOM_EXT_OPT_SCHEDULE, flags LOOM_EXT_REQUIRED */
  const DLTensor* values;
} loom_opt_schedule;
#define LOOM_OPT_SCHEDULE_SIZE_V1 LOOM_STRUCT_SIZE(loom_opt_schedule, values)

/* Contract tags (common.h):
 *   create, destroy, num_state, get_state: owner, local, blocks
 *   step: owner, local, stream */
typedef struct loom_optimizer_api {
  size_t struct_size;
  loom_error* (*create)(const loom_host* host, const loom_config* cfg,
                        const loom_opt_create_args* args, loom_optimizer** out);
  void (*destroy)(loom_optimizer* opt); /* accepts NULL */
  /* local (a sharded optimizer steps this rank's shards; the grad plugin gathers them);
   * may run asynchronously on the backend's stream */
  loom_error* (*step)(loom_optimizer* opt, const loom_opt_step_args* args);
  /* State tensors for checkpoints: name ("exp_avg.h.0.attn.qkv.weight") and tensor, both
   * valid while the optimizer lives; the host reads and overwrites them in place. */
  size_t (*num_state)(loom_optimizer* opt);
  loom_error* (*get_state)(loom_optimizer* opt, size_t i, const char** name, DLTensor** t);
  /* --- ABI 2.0 ends here; append new slots below this line only. --- */
} loom_optimizer_api;
#define LOOM_OPTIMIZER_API_SIZE_V2 LOOM_STRUCT_SIZE(loom_optimizer_api, get_state)

#ifdef __cplusplus
}
#endif
#endif /* LOOM_OPTIMIZER_H */
