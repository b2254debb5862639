/* Loom SDK, ABI 2 — loom.fp8/1 (ABI 2.32, issue 39): 8-bit floating-point tensors, the casts
 * that make them and the GEMMs that read them: what FP8 training (Transformer Engine's and
 * Megatron's `--fp8-recipe`) asks of a backend. backend.h includes this file.
 *
 * The dtypes are DLPack 1.1's (the codes are given here: Debian's dlpack.h is 0.6):
 *   loom_e4m3()  kDLFloat8_e4m3fn (10), 8 bits: OCP's E4M3, no infinities, largest 448;
 *   loom_e5m2()  kDLFloat8_e5m2 (12), 8 bits: OCP's E5M2, IEEE-like, largest 57344.
 * An FP8 tensor holds codes; its values are the codes times a scale inverse kept beside it
 * (f32, on the same backend), one per tensor or one per block:
 *   LOOM_FP8_SCALE_TENSOR   one for the whole tensor: shape (1);
 *   LOOM_FP8_SCALE_1X128    one per row and each 128 columns of a 2-D (rows, cols) tensor:
 *                           shape (rows, ceil(cols / 128)) (DeepSeek-V3's activation tiles);
 *   LOOM_FP8_SCALE_128X128  one per 128 x 128 block: (ceil(rows / 128), ceil(cols / 128))
 *                           (its weight blocks).
 * The casts are loom/cpp/fp8.hpp's to the bit: code = encode(f32(x * scale)), round to nearest
 * even, saturating to the largest finite value, NaN kept; a scale made from an amax is
 * loom::fp8_scale's (largest / amax, 2^margin below, 1 for an amax of 0 or not finite).
 *
 * Two structs share the id, as with loom.gemm-epilogue/1:
 *  - the instance's table (get_ext(be, LOOM_EXT_FP8)): the scalings it takes, `quantize`
 *    and `delayed_update`. An instance lends it when its gemm takes the args extension;
 *  - the args extension on a loom_gemm_args chain (flags LOOM_EXT_REQUIRED, batch 1):
 *      C(m,n) = alpha * op(A') op(B') + beta * C, where A' and B' are A's and B's values
 *      (codes times scale inverses, per their scalings as stored). A and B are FP8 (not
 *      both E5M2); C is f32, bf16 or f16. A backend computes it in f32, however it orders
 *      the sums (backend/cpu: A' and B' in f32, then sgemm; backend/cuda: cuBLASLt's FP8
 *      matmul, whose scale pointers are the scale inverses). A backend may refuse, naming
 *      it, a layout its GEMM cannot take (cuBLASLt: A transposed and B not, as column-major
 *      calls it); backend/cpu takes any. */
#ifndef LOOM_FP8_H
#define LOOM_FP8_H

#include "loom/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_backend loom_backend; /* backend.h's opaque instance */

#define LOOM_DL_FLOAT8_E4M3FN 10 /* DLPack 1.1's kDLFloat8_e4m3fn */
#define LOOM_DL_FLOAT8_E5M2 12   /* DLPack 1.1's kDLFloat8_e5m2 */
static inline DLDataType loom_e4m3(void) { return loom_dtype(LOOM_DL_FLOAT8_E4M3FN, 8); }
static inline DLDataType loom_e5m2(void) { return loom_dtype(LOOM_DL_FLOAT8_E5M2, 8); }
static inline int loom_dtype_is_fp8(DLDataType d) {
  return d.bits == 8 && d.lanes == 1 &&
         (d.code == LOOM_DL_FLOAT8_E4M3FN || d.code == LOOM_DL_FLOAT8_E5M2);
}

#define LOOM_EXT_FP8 "loom.fp8/1"
#define LOOM_FP8_SCALE_TENSOR 0u
#define LOOM_FP8_SCALE_1X128 1u
#define LOOM_FP8_SCALE_128X128 2u

/* quantize's flags */
#define LOOM_FP8_CURRENT 1u /* the scale is made from src's own amax (per block for blocks) */
#define LOOM_FP8_POW2 2u    /* ...kept to its power of two (loom::fp8_scale's pow2) */
/* delayed_update's flags */
#define LOOM_FP8_MOST_RECENT 4u /* the scale from the current amax alone, not the window's max */

/* dst = cast(src * scale). Without LOOM_FP8_CURRENT, `scale` is read (delayed scaling: the
 * scale the history made); with it, the scale is made from src's amax and written into
 * `scale` (current scaling; blocks always take it). Then, where given: scale_inv = 1 / scale
 * (what a GEMM reads), amax = fmax(amax, max |src|) (a delayed history's slot 0; NaN passes
 * over, as fmax does), and dst_t, the codes of src's transpose (cols, rows): what a GEMM
 * that wants the other layout reads (a weight gradient's operands). Under the tensor scaling
 * dst_t shares `scale`; under a block scaling it is quantized as a matrix of its own, with
 * its own grid in scale_t and scale_inv_t: 1x128 then makes src's 128x1 tiles (DeepSeek-V3's
 * and Transformer Engine's column-wise copy), 128x128 the transposed blocks. */
typedef struct loom_fp8_quantize_args {
  size_t struct_size;
  const DLTensor* src;   /* f32, bf16 or f16, compact; 2-D (rows, cols) for blocks and dst_t */
  DLTensor* dst;         /* e4m3 or e5m2, compact, src's element count */
  DLTensor* dst_t;       /* NULL, or compact (cols, rows) in dst's dtype */
  uint32_t scaling;      /* LOOM_FP8_SCALE_*: the shape of scale and scale_inv (above) */
  uint32_t flags;        /* LOOM_FP8_CURRENT, LOOM_FP8_POW2 */
  int32_t margin;        /* >= 0: a made scale 2^margin below the format's largest over amax */
  DLTensor* scale;       /* f32: read, or written under LOOM_FP8_CURRENT */
  DLTensor* scale_inv;   /* f32 of scale's shape, or NULL */
  DLTensor* amax;        /* f32 (1), or NULL */
  DLTensor* scale_t;     /* block scalings with dst_t: f32, the grid of (cols, rows); else NULL */
  DLTensor* scale_inv_t; /* the same, or NULL */
  const loom_ext* ext;   /* NULL */
} loom_fp8_quantize_args;
#define LOOM_FP8_QUANTIZE_ARGS_SIZE_V2_32 LOOM_STRUCT_SIZE(loom_fp8_quantize_args, ext)

/* The end of a step under delayed scaling, for n tensors of one format at once: each row's
 * next scale from its amax history, then the roll (loom::fp8_delayed_update to the bit:
 * slot 0 the current step's amax; the window is the whole row, or slot 0 alone under
 * LOOM_FP8_MOST_RECENT; an amax of 0 or not finite keeps the previous scale; the current amax
 * moves to the row's end, the oldest leaves, slot 0 restarts at 0). */
typedef struct loom_fp8_update_args {
  size_t struct_size;
  DLTensor* history;   /* f32 (n, len), compact */
  DLTensor* scale;     /* f32 (n): the previous scales in, the next ones out */
  DLTensor* scale_inv; /* f32 (n), or NULL: 1 / the next scales */
  DLDataType format;   /* loom_e4m3() or loom_e5m2(): the largest value a scale aims at */
  int32_t margin;      /* >= 0 */
  uint32_t flags;      /* LOOM_FP8_MOST_RECENT */
  const loom_ext* ext; /* NULL */
} loom_fp8_update_args;
#define LOOM_FP8_UPDATE_ARGS_SIZE_V2_32 LOOM_STRUCT_SIZE(loom_fp8_update_args, ext)

/* Contract tags (common.h):
 *   quantize, delayed_update: owner, local, stream */
typedef struct loom_fp8_api {
  loom_ext base;     /* id LOOM_EXT_FP8; base.struct_size = sizeof the whole table */
  uint32_t scalings; /* bit (1 << LOOM_FP8_SCALE_*) for each scaling quantize and gemm take */
  loom_error* (*quantize)(loom_backend* be, const loom_fp8_quantize_args* args);
  loom_error* (*delayed_update)(loom_backend* be, const loom_fp8_update_args* args);
  /* --- loom.fp8/1 ends here; append new slots below this line only. --- */
} loom_fp8_api;
#define LOOM_FP8_API_SIZE_V1 LOOM_STRUCT_SIZE(loom_fp8_api, delayed_update)

/* The args extension of a gemm (above). */
typedef struct loom_gemm_fp8 {
  loom_ext base;                 /* id LOOM_EXT_FP8, flags LOOM_EXT_REQUIRED */
  const DLTensor* a_scale_inv;   /* f32: A's, per a_scaling over A as stored */
  const DLTensor* b_scale_inv;   /* f32: B's, per b_scaling over B as stored */
  uint32_t a_scaling, b_scaling; /* LOOM_FP8_SCALE_* */
} loom_gemm_fp8;
#define LOOM_GEMM_FP8_SIZE_V1 LOOM_STRUCT_SIZE(loom_gemm_fp8, b_scaling)

#ifdef __cplusplus
}
#endif
#endif /* LOOM_FP8_H */
