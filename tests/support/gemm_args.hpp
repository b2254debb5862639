// The arguments of one GEMM over compact row-major matrices, for the backend tests and
// benchmarks that call loom_ops::gemm directly.
#pragma once

#include <cstdint>

#include "loom/backend.h"

namespace loomtest {

// C(m,n) = op(A) op(B) + beta C, alpha 1, one matrix each (batch 1), every leading dimension
// that of compact rows: op(A) is (m,k), op(B) (k,n), ta / tb transposing A / B.
inline loom_gemm_args gemm_args(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double beta,
                                const DLTensor* a, const DLTensor* b, DLTensor* c) {
  loom_gemm_args g{};
  g.struct_size = LOOM_GEMM_ARGS_SIZE_V2;
  g.trans_a = ta, g.trans_b = tb;
  g.m = m, g.n = n, g.k = k;
  g.alpha = 1.0, g.beta = beta;
  g.a = a, g.lda = ta ? m : k;
  g.b = b, g.ldb = tb ? k : n;
  g.c = c, g.ldc = n;
  g.batch = 1;
  return g;
}

}  // namespace loomtest
