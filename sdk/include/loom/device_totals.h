/* Loom SDK, ABI 2 — sums a training step keeps on the device, so that the host reads them once,
 * after the step's update is enqueued (train.grad_norm_on_device): extensions on the args
 * chains of two backend ops, each writing into a (1) f64 tensor of the backend instead of
 * host memory. backend.h includes this file; the ops' args are there. */
#ifndef LOOM_DEVICE_TOTALS_H
#define LOOM_DEVICE_TOTALS_H

#include "loom/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ABI 2.27, loom.sum-squares-total/1 on sum_squares' ext chain: the gradient norm without a
 * host read. The call writes total[0] = out[0] + out[1] + ... + out[n-1], summed in double in
 * index order from 0 (the host's own loop over `out`, to the bit), into `total`, a (1) f64
 * tensor of the backend, and nothing to the host (`out` is not read or written, and may be
 * NULL); the call enqueues
 * (progress "stream") instead of blocking. A gradient-clipping optimizer reads `total` on
 * the device (loom.opt-clip/1, optimizer.h). The backend lists the id in its capabilities. */
#define LOOM_EXT_SUM_SQUARES_TOTAL "loom.sum-squares-total/1"
typedef struct loom_sum_squares_total {
  loom_ext base; /* id LOOM_EXT_SUM_SQUARES_TOTAL, flags LOOM_EXT_REQUIRED */
  DLTensor* total;
} loom_sum_squares_total;
#define LOOM_SUM_SQUARES_TOTAL_SIZE_V1 LOOM_STRUCT_SIZE(loom_sum_squares_total, total)

/* ABI 2.28, loom.ce-loss-total/1 on softmax_cross_entropy's ext chain: the loss without a
 * host read. Beside losses, the call adds the sum of losses[0..N) into total[0], a (1) f64
 * tensor of the backend, in double, in an order fixed by N (backend/cpu: index order from 0,
 * the host's own loop over `losses`, to the bit). With dlogits, a row whose loss is not
 * finite gets a NaN gradient row (a target logit of -inf otherwise leaves it finite), so
 * that the step's gradient norm tells a non-finite loss and a clip decided on the device
 * (loom.opt-clip/1) refuses the update before the host has read the loss. The call enqueues.
 * The backend lists the id in its capabilities. */
#define LOOM_EXT_CE_LOSS_TOTAL "loom.ce-loss-total/1"
typedef struct loom_ce_loss_total {
  loom_ext base; /* id LOOM_EXT_CE_LOSS_TOTAL, flags LOOM_EXT_REQUIRED */
  DLTensor* total;
} loom_ce_loss_total;
#define LOOM_CE_LOSS_TOTAL_SIZE_V1 LOOM_STRUCT_SIZE(loom_ce_loss_total, total)

#ifdef __cplusplus
}
#endif
#endif /* LOOM_DEVICE_TOTALS_H */
