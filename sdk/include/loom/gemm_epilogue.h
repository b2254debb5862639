/* Loom SDK, ABI 2 — loom.gemm-epilogue/1 (ABI 2.17; GELU kinds and aux since 2.23): work a
 * GEMM does on its operands while it runs (cuBLASLt's epilogues), instead of one more pass
 * over them. backend.h includes this file; loom_gemm_args is there. Two structs share the id:
 *  - the instance's table, from the backend table's get_ext: present when this instance's
 *    gemm accepts the args extension, with the kinds it offers. An instance may lend it, and
 *    choose the kinds, by its configuration (backend/cuda: `gemm_epilogues`,
 *    `gemm_bias_grad_epilogue`, `gemm_gelu_epilogue`), so callers ask the instance, not the
 *    descriptor.
 *  - the args extension, on a loom_gemm_args chain (flags LOOM_EXT_REQUIRED, batch 1):
 *      LOOM_EPILOGUE_BIAS   C(m,n) = alpha op(A) op(B) + beta C, then + bias(n) on every row
 *                           (a linear layer's output: bias_add fused). C's rows compact
 *                           (ldc = n).
 *      LOOM_EPILOGUE_BGRAD  the GEMM as usual, and dbias(m) += the column sums of A as
 *                           stored (k, m): trans_a = 1 and lda = m (a linear layer's weight
 *                           gradient dW = dY^T X, whose A is dY: bias_backward fused).
 *      LOOM_EPILOGUE_BIAS_GELU (2.23)  aux(m,n) = alpha op(A) op(B) + bias(n) (bias NULL:
 *                           none), C = gelu_tanh(aux): an MLP's first projection and its
 *                           activation (LOOM_ACT_GELU_TANH) in one pass, the pre-activation
 *                           kept for the backward. beta = 0; C and aux compact (ldc = n), of
 *                           one dtype.
 *      LOOM_EPILOGUE_DGELU (2.23)  C = (alpha op(A) op(B)) * gelu_tanh'(aux), aux (m,n) as
 *                           BIAS_GELU wrote it: the gradient into the activation's input,
 *                           from the second projection's input gradient. beta = 0; C and aux
 *                           compact, of one dtype.
 *    The result is what the separate ops give after the plain GEMM (bias_add,
 *    bias_backward, act_forward, act_backward), up to rounding: a backend may round once
 *    where the separate calls round twice (bf16 C). */
#ifndef LOOM_GEMM_EPILOGUE_H
#define LOOM_GEMM_EPILOGUE_H

#include "loom/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_EXT_GEMM_EPILOGUE "loom.gemm-epilogue/1"
#define LOOM_EPILOGUE_BIAS 1u
#define LOOM_EPILOGUE_BGRAD 2u
#define LOOM_EPILOGUE_BIAS_GELU 4u /* ABI 2.23: needs the struct's aux */
#define LOOM_EPILOGUE_DGELU 8u     /* ABI 2.23: needs the struct's aux */
typedef struct loom_gemm_epilogue {
  loom_ext base;        /* id LOOM_EXT_GEMM_EPILOGUE, flags LOOM_EXT_REQUIRED */
  uint32_t kind;        /* one LOOM_EPILOGUE_* */
  const DLTensor* bias; /* BIAS: (n), C's dtype or f32; BIAS_GELU: the same, or NULL */
  DLTensor* dbias;      /* BGRAD: (m), A's dtype or f32; += */
  /* --- version 1 (ABI 2.17) ends here; append new fields below this line only. --- */
  DLTensor* aux; /* BIAS_GELU writes it, DGELU reads it: (m, n), C's dtype */
} loom_gemm_epilogue;
#define LOOM_GEMM_EPILOGUE_SIZE_V1 LOOM_STRUCT_SIZE(loom_gemm_epilogue, dbias)
#define LOOM_GEMM_EPILOGUE_SIZE_V2_23 LOOM_STRUCT_SIZE(loom_gemm_epilogue, aux)
/* The instance's table (get_ext(be, LOOM_EXT_GEMM_EPILOGUE)). */
typedef struct loom_gemm_epilogues {
  loom_ext base;  /* id LOOM_EXT_GEMM_EPILOGUE; base.struct_size = sizeof the whole table */
  uint32_t kinds; /* LOOM_EPILOGUE_* bits this instance offers */
} loom_gemm_epilogues;
#define LOOM_GEMM_EPILOGUES_SIZE_V1 LOOM_STRUCT_SIZE(loom_gemm_epilogues, kinds)

#ifdef __cplusplus
}
#endif
#endif /* LOOM_GEMM_EPILOGUE_H */
