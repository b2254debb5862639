// backend/cuda: the entry point of every loom_ops slot, one per op, with the slot's exact
// signature. cuda_backend.cpp builds the table from these; each is defined in the file of
// its family (gemm.cpp, kernels_<family>.cu). An entry that takes an args struct checks it
// (loom::ops_args_refusal) and calls the positional function of the same name beside it.
#pragma once

#include "cuda_backend.hpp"

namespace loom_cuda {

loom_error* gemm(loom_backend* be, const loom_gemm_args* args) noexcept;
loom_error* bias_add(loom_backend* be, const loom_bias_add_args* args) noexcept;
loom_error* bias_backward(loom_backend* be, const loom_bias_bwd_args* args) noexcept;
loom_error* fill(loom_backend* be, DLTensor* t, double value) noexcept;
loom_error* copy(loom_backend* be, DLTensor* dst, const DLTensor* src) noexcept;
loom_error* add(loom_backend* be, DLTensor* out, const DLTensor* a, const DLTensor* b) noexcept;
loom_error* axpby(loom_backend* be, DLTensor* y, double alpha, const DLTensor* x,
                  double beta) noexcept;
loom_error* sum_squares(loom_backend* be, const loom_sum_squares_args* args) noexcept;
loom_error* embedding_forward(loom_backend* be, const loom_embedding_fwd_args* args) noexcept;
loom_error* embedding_backward(loom_backend* be, const loom_embedding_bwd_args* args) noexcept;
loom_error* norm_forward(loom_backend* be, const loom_norm_fwd_args* args) noexcept;
loom_error* norm_backward(loom_backend* be, const loom_norm_bwd_args* args) noexcept;
loom_error* act_forward(loom_backend* be, const loom_act_fwd_args* args) noexcept;
loom_error* act_backward(loom_backend* be, const loom_act_bwd_args* args) noexcept;
loom_error* softmax_forward(loom_backend* be, const loom_softmax_args* args) noexcept;
loom_error* softmax_backward(loom_backend* be, const loom_softmax_bwd_args* args) noexcept;
loom_error* rope_forward(loom_backend* be, const loom_rope_args* args) noexcept;
loom_error* rope_backward(loom_backend* be, const loom_rope_args* args) noexcept;
loom_error* softmax_cross_entropy(loom_backend* be, const loom_cross_entropy_args* args) noexcept;
loom_error* vocab_ce_stats(loom_backend* be, const loom_vocab_ce_stats_args* args) noexcept;
loom_error* vocab_ce_backward(loom_backend* be, const loom_vocab_ce_bwd_args* args) noexcept;

}  // namespace loom_cuda
