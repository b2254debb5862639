// LoRA (Hu et al. 2021; HF PEFT's and Megatron Bridge's LoraLinear) on one projection of the
// layer library: y = x W^T + b + s (x A^T) B^T, s = alpha / rank, A (rank, in) and B (out, rank)
// trained, W and b frozen. loom::tp::LocalLinear calls it after its own GEMM (forward) and after
// its input gradient (backward).
//
// Tensor parallelism splits the adapters as Megatron Bridge does, with no extra communication:
//   column-parallel W (rows split): A whole on every rank, B split by W's rows. dA sums every
//     rank's rows of B: partial per rank (the caller's tensor group sums it, as QK-norm's).
//   row-parallel W (columns split): A split by W's columns, B whole. The rank's partial output
//     x_r W_r^T + s (x_r A_r^T) B^T is summed by the projection's own reduction, so B's
//     gradient (from this rank's x_r A_r^T) is partial per rank, A's is exact.
// The intermediate u = s x A^T (n, rank) is recomputed in backward rather than kept: it costs
// 2 n in rank FLOPs, rank/out of the projection's own.
#pragma once

#include <memory>
#include <string>

#include "loom/cpp/tensor.hpp"

namespace loom::tp {

// (n, rank) scratch for u and for g = s dy B, shared by every adapter of a model instance and
// grown to the largest micro-batch (one projection runs at a time).
struct LoraScratch {
  Tensor u, g;
  int64_t rows = 0;
  // Views of at least n rows of `rank` columns in `dtype`.
  void ensure(const Backend& be, DLDataType dtype, int64_t n, int64_t rank) {
    if (rows >= n * rank && u.get() != nullptr && loom_dtype_eq(u.get()->dtype, dtype)) return;
    u = Tensor(be, dtype, {n * rank});
    g = Tensor(be, dtype, {n * rank});
    rows = n * rank;
  }
};

struct LoraAdapter {
  const DLTensor* a = nullptr;  // (rank, in)
  DLTensor* da = nullptr;
  const DLTensor* b = nullptr;  // (rows, rank): the projection's local rows
  DLTensor* db = nullptr;
  int64_t rank = 0;
  double scale = 1.0;  // alpha / rank
  std::shared_ptr<LoraScratch> scratch;

  // y(n, out) += s (x A^T) B[row0 : row0 + out]^T, x (n, in).
  void forward(const Backend& be, DLTensor* y, const DLTensor* x, int64_t n, int64_t in,
               int64_t row0, int64_t out) const {
    View u = project(be, x, n, in);
    gemm(be, false, true, n, out, rank, u, rank, 0, b, rank, row0 * rank, y, out, 0, 1.0);
  }
  // Given dy (n, out) and the forward's x (n, in): dB[rows] += dy^T u, dA += g^T x, and
  // dx (n, in) += g A when dx is given, with u = s x A^T and g = s dy B[rows].
  void backward(const Backend& be, DLTensor* dx, const DLTensor* dy, const DLTensor* x, int64_t n,
                int64_t in, int64_t row0, int64_t out) const {
    View u = project(be, x, n, in);
    View g(scratch->g.get(), {n, rank});
    gemm_scaled(be, false, false, n, rank, out, scale, dy, out, 0, b, rank, row0 * rank, g, rank, 0,
                0.0);
    gemm(be, true, false, out, rank, n, dy, out, 0, u, rank, 0, db, rank, row0 * rank, 1.0);
    gemm(be, true, false, rank, in, n, g, rank, 0, x, in, 0, da, in, 0, 1.0);
    if (dx) gemm(be, false, false, n, in, rank, g, rank, 0, a, in, 0, dx, in, 0, 1.0);
  }

 private:
  // u (n, rank) = s x A^T, in the shared scratch
  View project(const Backend& be, const DLTensor* x, int64_t n, int64_t in) const {
    scratch->ensure(be, x->dtype, n, rank);
    View u(scratch->u.get(), {n, rank});
    gemm_scaled(be, false, true, n, rank, in, scale, x, in, 0, a, in, 0, u, rank, 0, 0.0);
    return u;
  }
};

}  // namespace loom::tp
