// Loom layer library (loom/cpp/layers/moe/moe.hpp has the overview): the GEMMs of a mixture
// of experts' MLPs (expert_gemms.cpp), in the compute dtype or, where the weight carries FP8
// GEMMs (precision.fp8, ParamStore::link_fp8), in FP8.
//
// The routed experts: an expert weight (E/EP, out, in) holds local expert e's W_e (out, in);
// the rows of x are grouped by expert, counts[e] each, in expert order. In the compute dtype
// it is one grouped GEMM (backend.h's grouped_gemm); in FP8 one FP8 linear layer per expert
// over its rows (loom/cpp/fp8_linear.hpp), each cast with its own scales (and, delayed, its
// own history), as Transformer Engine's grouped linear layer casts each GEMM's tensors:
// loom.fp8/1 has no grouped scaled GEMM, and an expert that gets no rows is skipped.
// The shared expert: a dense weight W (out, in), its GEMMs in FP8 where it has them.
#pragma once

#include <vector>

#include "loom/cpp/layers/core/params.hpp"

namespace loom::layers {

// y (R, out) = x (R, in) W_e^T, each expert's rows (=).
void expert_linear_forward(const Ctx& c, const std::vector<int64_t>& counts, const Param& w,
                           const DLTensor* x, DLTensor* y);
// dx (R, in) = dy (R, out) W_e, each expert's rows (=).
void expert_linear_backward_data(const Ctx& c, const std::vector<int64_t>& counts, const Param& w,
                                 const DLTensor* dy, DLTensor* dx);
// dW_e (out, in) += alpha dy_e^T x_e, over each expert's rows.
void expert_linear_backward_weight(const Ctx& c, const std::vector<int64_t>& counts, Param& w,
                                   const DLTensor* dy, const DLTensor* x, double alpha);

// y (n, out) = x (n, in) W^T + beta y.
void dense_linear_forward(const Ctx& c, const Param& w, const DLTensor* x, int64_t n, DLTensor* y,
                          double beta);
// dx (n, in) = dy (n, out) W + beta dx.
void dense_linear_backward_data(const Ctx& c, const Param& w, const DLTensor* dy, int64_t n,
                                DLTensor* dx, double beta);
// dW (out, in) += dy (n, out)^T x (n, in).
void dense_linear_backward_weight(const Ctx& c, Param& w, const DLTensor* dy, const DLTensor* x,
                                  int64_t n);

}  // namespace loom::layers
