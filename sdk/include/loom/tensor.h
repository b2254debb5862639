/* Loom SDK, ABI 2 — tensors cross the boundary as DLPack descriptors.
 *
 * A `DLTensor*` passed to a function is a non-owning view, valid for the duration of the
 * call unless the function's documentation says otherwise. Buffers are freed by whoever
 * allocated them, through the same table they came from (loom_backend_api.free_tensor).
 * Shapes are row-major; `strides == NULL` means compact. */
#ifndef LOOM_TENSOR_H
#define LOOM_TENSOR_H

#include <dlpack/dlpack.h>

#include "loom/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef DLTensor loom_tensor;

/* The dtypes Loom's kernels use (functions, not compound literals, so C++ can use them). */
static inline DLDataType loom_dtype(uint8_t code, uint8_t bits) {
  DLDataType d;
  d.code = code;
  d.bits = bits;
  d.lanes = 1;
  return d;
}
static inline DLDataType loom_f32(void) { return loom_dtype(kDLFloat, 32); }
static inline DLDataType loom_f64(void) { return loom_dtype(kDLFloat, 64); }
static inline DLDataType loom_bf16(void) { return loom_dtype(kDLBfloat, 16); }
static inline DLDataType loom_f16(void) { return loom_dtype(kDLFloat, 16); }
static inline DLDataType loom_i32(void) { return loom_dtype(kDLInt, 32); }

static inline int64_t loom_tensor_numel(const DLTensor* t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

static inline size_t loom_dtype_bytes(DLDataType d) { return (size_t)((d.bits * d.lanes + 7) / 8); }

static inline int loom_dtype_eq(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

#ifdef __cplusplus
}
#endif
#endif /* LOOM_TENSOR_H */
