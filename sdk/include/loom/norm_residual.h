/* Loom SDK, ABI 2 — loom.norm-residual/1 (ABI 2.29): a block's residual add done by the norm
 * next to it, one pass over the rows where the add and the norm were two (the fused add +
 * norm of Apex and Transformer Engine). backend.h includes this file; the norms' args are
 * there. Two structs share the id:
 *  - the instance's table, from the backend table's get_ext: a bare loom_ext, present when
 *    this instance's norms take the args extension. An instance may withhold it by its
 *    configuration (backend/cuda: `norm_residual`), so callers ask the instance, not the
 *    descriptor (which lists the id when the backend can take it).
 *  - the args extension, on a norm_forward or norm_backward chain (flags LOOM_EXT_REQUIRED;
 *    LayerNorm or RMSNorm; not beside loom.norm-gate/1):
 *      forward:  sum(N,C) = inp + residual, rounded to inp's dtype as the add op rounds it;
 *                then out, mean and rstd are exactly norm_forward's of `sum`. sum may alias
 *                inp or residual.
 *      backward: dinp(N,C) = residual + g, where g is the input gradient the plain call
 *                writes, rounded to dinp's dtype first, and the sum rounded as the add op
 *                rounds it; `inp` is the norm's input (the forward's sum), the weight and
 *                bias gradients are the plain call's, `sum` is NULL. dinp may alias residual
 *                (and, as without it, dout or inp).
 *    So the results are bitwise those of the add op and the plain call, in either order the
 *    block makes them: a backend saves the passes, never changes the numbers. residual and
 *    sum are compact (N,C) tensors of inp's dtype. */
#ifndef LOOM_NORM_RESIDUAL_H
#define LOOM_NORM_RESIDUAL_H

#include "loom/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_EXT_NORM_RESIDUAL "loom.norm-residual/1"
typedef struct loom_norm_residual {
  loom_ext base;            /* id LOOM_EXT_NORM_RESIDUAL, flags LOOM_EXT_REQUIRED */
  const DLTensor* residual; /* (N,C): forward, the addend; backward, the residual's gradient */
  DLTensor* sum;            /* forward: (N,C) = inp + residual; backward: NULL */
} loom_norm_residual;
#define LOOM_NORM_RESIDUAL_SIZE_V1 LOOM_STRUCT_SIZE(loom_norm_residual, sum)

#ifdef __cplusplus
}
#endif
#endif /* LOOM_NORM_RESIDUAL_H */
