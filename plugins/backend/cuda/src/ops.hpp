// backend/cuda: every op's kernel entry, positional as loom::OpsCalls lists them.
// cuda_backend.cpp builds the loom_ops table from these through loom::OpsSlots, which checks
// and unpacks the args structs; each is defined in the file of its family (gemm.cpp,
// kernels_<family>.cu).
#pragma once

#include "cuda_backend.hpp"

namespace loom_cuda {

// gemm.cpp, kernels_elementwise.cu
loom_error* gemm(loom_backend* be, const loom_gemm_args* args) noexcept;
// loom.gemm-epilogue/1, checked by loom::OpsSlots: fused by cuBLASLt where it has an
// algorithm, else the plain GEMM and the bias op after it.
loom_error* gemm_epilogue(loom_backend* be, const loom_gemm_args* args,
                          const loom_gemm_epilogue* e) noexcept;
// loom.fp8/1 (ABI 2.32; compiled, not yet run on a GPU): the scaled GEMM through cuBLASLt's
// FP8 matmul (gemm.cpp), quantize and delayed_update (kernels_fp8.cu); the tensor scaling.
constexpr uint32_t kFp8Scalings = 1u << LOOM_FP8_SCALE_TENSOR;
loom_error* gemm_fp8(loom_backend* be, const loom_gemm_args* args,
                     const loom_gemm_fp8* fp8) noexcept;
loom_error* fp8_quantize(loom_backend* be, const loom_fp8_quantize_args* args) noexcept;
loom_error* fp8_delayed_update(loom_backend* be, const loom_fp8_update_args* args) noexcept;
loom_error* bias_add(loom_backend* be, DLTensor* out, const DLTensor* bias) noexcept;
loom_error* bias_backward(loom_backend* be, DLTensor* dbias, const DLTensor* dout) noexcept;
loom_error* fill(loom_backend* be, DLTensor* t, double value) noexcept;
loom_error* copy(loom_backend* be, DLTensor* dst, const DLTensor* src) noexcept;
// ABI 2.21: one cudaMemcpy2DAsync (args checked by the SDK slot)
loom_error* copy_strided(loom_backend* be, DLTensor* dst, int64_t ld_dst, int64_t offset_dst,
                         const DLTensor* src, int64_t ld_src, int64_t offset_src, int64_t rows,
                         int64_t cols) noexcept;
loom_error* add(loom_backend* be, DLTensor* out, const DLTensor* a, const DLTensor* b) noexcept;
loom_error* axpby(loom_backend* be, DLTensor* y, double alpha, const DLTensor* x,
                  double beta) noexcept;
loom_error* sum_squares(loom_backend* be, const loom_sum_squares_args* args) noexcept;
loom_error* sum_squares_total(loom_backend* be, const loom_sum_squares_args* args,
                              DLTensor* total) noexcept;
// kernels_embedding.cu
loom_error* embedding_forward(loom_backend* be, DLTensor* out, const DLTensor* ids,
                              const DLTensor* table, int accumulate) noexcept;
loom_error* embedding_backward(loom_backend* be, DLTensor* dtable, const DLTensor* ids,
                               const DLTensor* dout) noexcept;
// kernels_norm.cu
loom_error* layernorm_forward(loom_backend* be, DLTensor* out, DLTensor* mean, DLTensor* rstd,
                              const DLTensor* inp, const DLTensor* weight, const DLTensor* bias,
                              double eps) noexcept;
loom_error* layernorm_backward(loom_backend* be, DLTensor* dinp, DLTensor* dweight, DLTensor* dbias,
                               const DLTensor* dout, const DLTensor* inp, const DLTensor* weight,
                               const DLTensor* mean, const DLTensor* rstd) noexcept;
loom_error* rmsnorm_forward(loom_backend* be, DLTensor* out, DLTensor* rstd, const DLTensor* inp,
                            const DLTensor* weight, double eps) noexcept;
loom_error* rmsnorm_backward(loom_backend* be, DLTensor* dinp, DLTensor* dweight,
                             const DLTensor* dout, const DLTensor* inp, const DLTensor* weight,
                             const DLTensor* rstd) noexcept;
// loom.norm-residual/1 (ABI 2.29): the residual add inside the norm; args checked by the SDK
// slot (loom::norm_residual_refusal).
loom_error* norm_residual_forward(loom_backend* be, const loom_norm_fwd_args* a,
                                  const loom_norm_residual* r) noexcept;
loom_error* norm_residual_backward(loom_backend* be, const loom_norm_bwd_args* a,
                                   const loom_norm_residual* r) noexcept;
// loom.norm-gate/1 (ABI 2.22), Mamba-2's gated RMSNorm; args checked by the SDK slot
// (loom::norm_gate_refusal).
loom_error* rmsnorm_gated_forward(loom_backend* be, DLTensor* out, DLTensor* rstd,
                                  const DLTensor* inp, const DLTensor* gate, const DLTensor* weight,
                                  double eps, int64_t group_size) noexcept;
loom_error* rmsnorm_gated_backward(loom_backend* be, DLTensor* dinp, DLTensor* dgate,
                                   DLTensor* dweight, const DLTensor* dout, const DLTensor* inp,
                                   const DLTensor* gate, const DLTensor* weight,
                                   const DLTensor* rstd, int64_t group_size) noexcept;
// kernels_activation.cu
loom_error* gelu_forward(loom_backend* be, DLTensor* out, const DLTensor* inp) noexcept;
loom_error* gelu_backward(loom_backend* be, DLTensor* dinp, const DLTensor* inp,
                          const DLTensor* dout) noexcept;
loom_error* gelu_erf_forward(loom_backend* be, DLTensor* out, const DLTensor* inp) noexcept;
loom_error* gelu_erf_backward(loom_backend* be, DLTensor* dinp, const DLTensor* inp,
                              const DLTensor* dout) noexcept;
loom_error* tanh_forward(loom_backend* be, DLTensor* out, const DLTensor* inp) noexcept;
loom_error* tanh_backward(loom_backend* be, DLTensor* dinp, const DLTensor* inp,
                          const DLTensor* dout) noexcept;
loom_error* squared_relu_forward(loom_backend* be, DLTensor* out, const DLTensor* inp) noexcept;
loom_error* squared_relu_backward(loom_backend* be, DLTensor* dinp, const DLTensor* inp,
                                  const DLTensor* dout) noexcept;
loom_error* swiglu_forward(loom_backend* be, DLTensor* out, const DLTensor* inp) noexcept;
loom_error* swiglu_backward(loom_backend* be, DLTensor* dinp, const DLTensor* inp,
                            const DLTensor* dout) noexcept;
// kernels_attention.cu
loom_error* softmax_forward(loom_backend* be, const loom_softmax_args* args) noexcept;
loom_error* softmax_backward(loom_backend* be, DLTensor* ds, const DLTensor* p, const DLTensor* dp,
                             double scale) noexcept;
loom_error* rope_forward(loom_backend* be, DLTensor* x, int64_t pos_offset, double theta) noexcept;
loom_error* rope_backward(loom_backend* be, DLTensor* dx, int64_t pos_offset,
                          double theta) noexcept;
// loom.rope-freqs/1 (ABI 2.22): the caller's D/2 frequencies and cos/sin scale, checked by
// the SDK slot; backward = 1 rotates back.
loom_error* rope_freqs(loom_backend* be, DLTensor* x, int64_t pos_offset, const double* inv_freq,
                       double scale, int backward) noexcept;
// kernels_loss.cu
loom_error* softmax_cross_entropy(loom_backend* be, DLTensor* losses, DLTensor* dlogits,
                                  const DLTensor* logits, const DLTensor* targets,
                                  double dloss) noexcept;
// ABI 2.28's loom.ce-loss-total/1 (args checked by the SDK slot)
loom_error* softmax_cross_entropy_total(loom_backend* be, DLTensor* losses, DLTensor* dlogits,
                                        const DLTensor* logits, const DLTensor* targets,
                                        double dloss, DLTensor* total) noexcept;
loom_error* vocab_ce_stats(loom_backend* be, DLTensor* stats, const DLTensor* logits,
                           const DLTensor* targets, int64_t vocab_start) noexcept;
loom_error* vocab_ce_backward(loom_backend* be, DLTensor* dlogits, const DLTensor* logits,
                              const DLTensor* targets, int64_t vocab_start, const DLTensor* lse,
                              double dloss) noexcept;
// kernels_ssm_conv.cu, kernels_ssm_scan.cu: ABI 2.22's Mamba-2 ops, shapes checked by the SDK
// slots (loom/cpp/ssm_args.hpp)
loom_error* ssm_conv_forward(loom_backend* be, DLTensor* out, const DLTensor* x,
                             const DLTensor* weight, const DLTensor* bias, int silu,
                             DLTensor* state) noexcept;
loom_error* ssm_conv_backward(loom_backend* be, DLTensor* dx, DLTensor* dweight, DLTensor* dbias,
                              const DLTensor* dout, const DLTensor* x, const DLTensor* weight,
                              const DLTensor* bias, int silu) noexcept;
loom_error* ssm_scan_forward(loom_backend* be, DLTensor* y, const DLTensor* x, const DLTensor* dt,
                             const DLTensor* A_log, const DLTensor* B, const DLTensor* C,
                             const DLTensor* D, const DLTensor* dt_bias, int64_t chunk,
                             DLTensor* chunk_states, DLTensor* state) noexcept;
loom_error* ssm_scan_backward(loom_backend* be, DLTensor* dx, DLTensor* ddt, DLTensor* dA_log,
                              DLTensor* dB, DLTensor* dC, DLTensor* dD, DLTensor* ddt_bias,
                              const DLTensor* dy, const DLTensor* x, const DLTensor* dt,
                              const DLTensor* A_log, const DLTensor* B, const DLTensor* C,
                              const DLTensor* D, const DLTensor* dt_bias, int64_t chunk,
                              const DLTensor* chunk_states) noexcept;

}  // namespace loom_cuda
