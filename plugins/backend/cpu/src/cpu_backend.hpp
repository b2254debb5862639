// backend/cpu internals shared by every kernel file: the instance struct, the op wrapper that
// keeps exceptions inside the plugin, tensor checks with messages that name the op and the
// mismatch, dtype dispatch, and the kernel entry points the ops table is built from.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_set>

#include "loom/cpp/describe.hpp"
#include "loom/cpp/plugin.hpp"
#include "loom/cpp/vec_math.hpp"
#include "loom/loom.h"

namespace loom_cpu {
struct Blas;
}

// The opaque instance of backend.h. One per create(); the OpenBLAS library it uses is
// process-wide (see blas.hpp), the rest is per instance.
struct loom_backend {
  const loom_host* host = nullptr;
  int threads = 1;            // OpenMP team size of every parallel kernel, and BLAS threads
  bool norm_residual = true;  // loom.norm-residual/1 lent (recipe: backend.norm_residual)
  const loom_cpu::Blas* blas = nullptr;
  std::string device_name;  // valid until destroy (get_info hands out c_str())
  double peak_gflops = 0;
  std::atomic<size_t> mem_in_use{0};
  std::atomic<size_t> mem_peak{0};
  // Tensors alloc_tensor handed out and free_tensor has not taken back: free_tensor refuses
  // (and logs) a pointer it did not make instead of corrupting the heap, and destroy frees and
  // reports what is left.
  std::mutex live_mu;
  std::unordered_set<const DLTensor*> live;
};

namespace loom_cpu {

// The compute-heavy f32 loops (exp, division, sqrt) are compiled three times — AVX-512,
// AVX2 and the x86-64 baseline — and the widest the CPU supports is picked when the plugin is
// loaded (GCC function multiversioning: an ifunc per function, and per OpenMP-outlined body).
// GELU, SwiGLU and softmax run ~4x faster with AVX-512 than with SSE2; the baseline build
// keeps the plugin loadable on any x86-64. Memory-bound loops gain nothing and are not cloned.
// (LOOM_CPU_CLONES itself is the SDK's, loom/cpp/vec_math.hpp.)

// Work (elements) below which a kernel stays on the calling thread: waking the OpenMP team
// costs a few microseconds, more than a small elementwise pass.
constexpr int64_t kParallelMin = 1 << 15;

// The host of the most recent create(), for the one case where an op gets a NULL backend and
// still has to return a host-made error.
const loom_host* last_host() noexcept;
void set_last_host(const loom_host* host) noexcept;

// The body of every op: a NULL backend is refused, exceptions become host-made errors.
template <class Fn>
loom_error* run_op(loom_backend* be, const char* op, Fn&& fn) noexcept {
  const loom_host* host = be ? be->host : last_host();
  if (host == nullptr) {
    // No host has ever been seen, so no error object can be made: a caller bug.
    std::fprintf(stderr, "backend/cpu: %s called with a NULL backend before any create()\n", op);
    std::abort();
  }
  if (be == nullptr)
    return host->error_new(LOOM_ERR_INVALID_ARGUMENT,
                           (std::string(op) + ": backend instance is NULL").c_str());
  return loom::guard(host, [&] { fn(*be); });
}

// ---- dtypes --------------------------------------------------------------------------------
inline bool is_f32(DLDataType d) { return loom_dtype_eq(d, loom_f32()); }
inline bool is_f64(DLDataType d) { return loom_dtype_eq(d, loom_f64()); }
inline bool is_bf16(DLDataType d) { return loom_dtype_eq(d, loom_bf16()); }
inline bool is_f16(DLDataType d) { return loom_dtype_eq(d, loom_f16()); }
inline bool is_i32(DLDataType d) { return loom_dtype_eq(d, loom_i32()); }
// "f32", "bf16", ... and "(4,8)" in messages: the SDK's names (loom/cpp/describe.hpp).
using loom::dtype_str;
using loom::shape_str;

template <class T>
inline T* data_of(const DLTensor* t) {
  return reinterpret_cast<T*>(static_cast<char*>(t->data) + t->byte_offset);
}

// Argument checks for one op; every failure throws loom::Error with "<op>: <what>".
struct Check {
  const char* op;

  [[noreturn]] void fail(const std::string& what,
                         loom_status code = LOOM_ERR_INVALID_ARGUMENT) const;
  // Not NULL, on kDLCPU, compact (strides NULL or row-major), data present when non-empty.
  const DLTensor* tensor(const char* name, const DLTensor* t) const;
  // f32 or f64 (anything else: UNIMPLEMENTED, the backend.h rule for other dtypes).
  void floating(const char* name, const DLTensor* t) const;
  void dtype(const char* name, const DLTensor* t, DLDataType want) const;
  void same_dtype(const char* name, const DLTensor* t, const char* ref_name,
                  const DLTensor* ref) const;
  // Saved statistics (mean/rstd/lse): f32 always allowed, and the data dtype for f64 runs.
  void stat_dtype(const char* name, const DLTensor* t, const DLTensor* data) const;
  void numel(const char* name, const DLTensor* t, int64_t want) const;
  // tensor(), then ref's dtype and `want` elements: an output or gradient checked against
  // the input it is shaped like, in the one order every op uses.
  void like(const char* name, const DLTensor* t, const char* ref_name, const DLTensor* ref,
            int64_t want) const {
    tensor(name, t);
    same_dtype(name, t, ref_name, ref);
    numel(name, t, want);
  }
  int64_t last_dim(const char* name, const DLTensor* t) const;  // ndim >= 1
  void ndim(const char* name, const DLTensor* t, int want) const;
};

// The answer to ops args that loom::OpsSlots refuses (`why`), naming the op.
inline loom_error* refuse_args(loom_backend* be, const char* op, const std::string& why) noexcept {
  return run_op(be, op, [&](loom_backend&) { Check{op}.fail(why); });
}

// Calls fn(T{}) with T = float or double for the dtype of t.
template <class Fn>
void dispatch_float(const Check& ck, const char* name, const DLTensor* t, Fn&& fn) {
  ck.floating(name, t);
  if (is_f32(t->dtype))
    fn(float{});
  else
    fn(double{});
}
// The same for a data dtype T plus a statistics dtype S (f32, or T itself).
template <class Fn>
void dispatch_float_stat(const Check& ck, const char* name, const DLTensor* t, const DLTensor* stat,
                         Fn&& fn) {
  dispatch_float(ck, name, t, [&](auto tag) {
    using T = decltype(tag);
    if (is_f32(stat->dtype))
      fn(T{}, float{});
    else
      fn(T{}, double{});
  });
}

// ---- the kernels (one file per family; see backend.h for the contracts) --------------------
// Positional, as loom::OpsCalls lists them: cpu_backend.cpp builds the loom_ops table from
// them through loom::OpsSlots, which checks and unpacks the args structs. The mixed-precision
// staging re-enters the same functions.
// kernels_linear.cpp
loom_error* op_gemm(loom_backend* be, const loom_gemm_args* args) noexcept;
loom_error* op_bias_add(loom_backend* be, DLTensor* out, const DLTensor* bias) noexcept;
loom_error* op_bias_backward(loom_backend* be, DLTensor* dbias, const DLTensor* dout) noexcept;
loom_error* op_gemm_epilogue(loom_backend* be, const loom_gemm_args* args,
                             const loom_gemm_epilogue* e) noexcept;
loom_error* op_gemm_fp8(loom_backend* be, const loom_gemm_args* args,
                        const loom_gemm_fp8* fp8) noexcept;
// kernels_fp8.cpp: loom.fp8/1's table (every scaling)
constexpr uint32_t kFp8Scalings =
    (1u << LOOM_FP8_SCALE_TENSOR) | (1u << LOOM_FP8_SCALE_1X128) | (1u << LOOM_FP8_SCALE_128X128);
loom_error* op_fp8_quantize(loom_backend* be, const loom_fp8_quantize_args* args) noexcept;
loom_error* op_fp8_delayed_update(loom_backend* be, const loom_fp8_update_args* args) noexcept;
// kernels_elementwise.cpp
loom_error* op_fill(loom_backend* be, DLTensor* t, double value) noexcept;
loom_error* op_copy(loom_backend* be, DLTensor* dst, const DLTensor* src) noexcept;
// ABI 2.21: rows x cols elements between row-strided layouts (args checked by the SDK slot)
loom_error* op_copy_strided(loom_backend* be, DLTensor* dst, int64_t ld_dst, int64_t offset_dst,
                            const DLTensor* src, int64_t ld_src, int64_t offset_src, int64_t rows,
                            int64_t cols) noexcept;
loom_error* op_add(loom_backend* be, DLTensor* out, const DLTensor* a, const DLTensor* b) noexcept;
loom_error* op_axpby(loom_backend* be, DLTensor* y, double alpha, const DLTensor* x,
                     double beta) noexcept;
loom_error* op_sum_squares(loom_backend* be, const loom_sum_squares_args* args) noexcept;
loom_error* op_sum_squares_total(loom_backend* be, const loom_sum_squares_args* args,
                                 DLTensor* total) noexcept;
// kernels_embedding.cpp
loom_error* op_embedding_forward(loom_backend* be, DLTensor* out, const DLTensor* ids,
                                 const DLTensor* table, int accumulate) noexcept;
loom_error* op_embedding_backward(loom_backend* be, DLTensor* dtable, const DLTensor* ids,
                                  const DLTensor* dout) noexcept;
// kernels_norm.cpp
loom_error* op_layernorm_forward(loom_backend* be, DLTensor* out, DLTensor* mean, DLTensor* rstd,
                                 const DLTensor* inp, const DLTensor* weight, const DLTensor* bias,
                                 double eps) noexcept;
loom_error* op_layernorm_backward(loom_backend* be, DLTensor* dinp, DLTensor* dweight,
                                  DLTensor* dbias, const DLTensor* dout, const DLTensor* inp,
                                  const DLTensor* weight, const DLTensor* mean,
                                  const DLTensor* rstd) noexcept;
loom_error* op_rmsnorm_forward(loom_backend* be, DLTensor* out, DLTensor* rstd, const DLTensor* inp,
                               const DLTensor* weight, double eps) noexcept;
loom_error* op_rmsnorm_backward(loom_backend* be, DLTensor* dinp, DLTensor* dweight,
                                const DLTensor* dout, const DLTensor* inp, const DLTensor* weight,
                                const DLTensor* rstd) noexcept;
// ABI 2.22: Mamba-2's gated RMSNorm, loom.norm-gate/1 (args checked by the SDK slot)
loom_error* op_rmsnorm_gated_forward(loom_backend* be, DLTensor* out, DLTensor* rstd,
                                     const DLTensor* inp, const DLTensor* gate,
                                     const DLTensor* weight, double eps,
                                     int64_t group_size) noexcept;
loom_error* op_rmsnorm_gated_backward(loom_backend* be, DLTensor* dinp, DLTensor* dgate,
                                      DLTensor* dweight, const DLTensor* dout, const DLTensor* inp,
                                      const DLTensor* gate, const DLTensor* weight,
                                      const DLTensor* rstd, int64_t group_size) noexcept;
// ABI 2.29: loom.norm-residual/1, the add op and the plain norm (args checked by the SDK slot)
loom_error* op_norm_residual_forward(loom_backend* be, const loom_norm_fwd_args* a,
                                     const loom_norm_residual* r) noexcept;
loom_error* op_norm_residual_backward(loom_backend* be, const loom_norm_bwd_args* a,
                                      const loom_norm_residual* r) noexcept;
// kernels_activation.cpp
loom_error* op_gelu_forward(loom_backend* be, DLTensor* out, const DLTensor* inp) noexcept;
loom_error* op_gelu_backward(loom_backend* be, DLTensor* dinp, const DLTensor* inp,
                             const DLTensor* dout) noexcept;
loom_error* op_gelu_erf_forward(loom_backend* be, DLTensor* out, const DLTensor* inp) noexcept;
loom_error* op_gelu_erf_backward(loom_backend* be, DLTensor* dinp, const DLTensor* inp,
                                 const DLTensor* dout) noexcept;
loom_error* op_tanh_forward(loom_backend* be, DLTensor* out, const DLTensor* inp) noexcept;
loom_error* op_tanh_backward(loom_backend* be, DLTensor* dinp, const DLTensor* inp,
                             const DLTensor* dout) noexcept;
loom_error* op_squared_relu_forward(loom_backend* be, DLTensor* out, const DLTensor* inp) noexcept;
loom_error* op_squared_relu_backward(loom_backend* be, DLTensor* dinp, const DLTensor* inp,
                                     const DLTensor* dout) noexcept;
loom_error* op_swiglu_forward(loom_backend* be, DLTensor* out, const DLTensor* inp) noexcept;
loom_error* op_swiglu_backward(loom_backend* be, DLTensor* dinp, const DLTensor* inp,
                               const DLTensor* dout) noexcept;
// kernels_attention.cpp
loom_error* op_softmax_forward(loom_backend* be, const loom_softmax_args* args) noexcept;
loom_error* op_softmax_backward(loom_backend* be, DLTensor* ds, const DLTensor* p,
                                const DLTensor* dp, double scale) noexcept;
loom_error* op_rope_forward(loom_backend* be, DLTensor* x, int64_t pos_offset,
                            double theta) noexcept;
loom_error* op_rope_backward(loom_backend* be, DLTensor* dx, int64_t pos_offset,
                             double theta) noexcept;
// loom.rope-freqs/1: rope_forward (backward 0) or _backward (1) over a frequency table
loom_error* op_rope_freqs(loom_backend* be, DLTensor* x, int64_t pos_offset, const double* inv_freq,
                          double scale, int backward) noexcept;
// kernels_loss.cpp
loom_error* op_softmax_cross_entropy(loom_backend* be, DLTensor* losses, DLTensor* dlogits,
                                     const DLTensor* logits, const DLTensor* targets,
                                     double dloss) noexcept;
// ABI 2.28's loom.ce-loss-total/1 (args checked by the SDK slot)
loom_error* op_softmax_cross_entropy_total(loom_backend* be, DLTensor* losses, DLTensor* dlogits,
                                           const DLTensor* logits, const DLTensor* targets,
                                           double dloss, DLTensor* total) noexcept;
loom_error* op_vocab_ce_stats(loom_backend* be, DLTensor* stats, const DLTensor* logits,
                              const DLTensor* targets, int64_t vocab_start) noexcept;
loom_error* op_vocab_ce_backward(loom_backend* be, DLTensor* dlogits, const DLTensor* logits,
                                 const DLTensor* targets, int64_t vocab_start, const DLTensor* lse,
                                 double dloss) noexcept;
// kernels_ssm.cpp (ABI 2.22: Mamba-2; shapes checked by the SDK slots)
loom_error* op_ssm_conv_forward(loom_backend* be, DLTensor* out, const DLTensor* x,
                                const DLTensor* weight, const DLTensor* bias, int silu,
                                DLTensor* state) noexcept;
loom_error* op_ssm_conv_backward(loom_backend* be, DLTensor* dx, DLTensor* dweight, DLTensor* dbias,
                                 const DLTensor* dout, const DLTensor* x, const DLTensor* weight,
                                 const DLTensor* bias, int silu) noexcept;
loom_error* op_ssm_scan_forward(loom_backend* be, DLTensor* y, const DLTensor* x,
                                const DLTensor* dt, const DLTensor* A_log, const DLTensor* B,
                                const DLTensor* C, const DLTensor* D, const DLTensor* dt_bias,
                                int64_t chunk, DLTensor* chunk_states, DLTensor* state) noexcept;
loom_error* op_ssm_scan_backward(loom_backend* be, DLTensor* dx, DLTensor* ddt, DLTensor* dA_log,
                                 DLTensor* dB, DLTensor* dC, DLTensor* dD, DLTensor* ddt_bias,
                                 const DLTensor* dy, const DLTensor* x, const DLTensor* dt,
                                 const DLTensor* A_log, const DLTensor* B, const DLTensor* C,
                                 const DLTensor* D, const DLTensor* dt_bias, int64_t chunk,
                                 const DLTensor* chunk_states) noexcept;

}  // namespace loom_cpu
