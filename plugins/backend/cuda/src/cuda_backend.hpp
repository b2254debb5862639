// backend/cuda internals shared by every file: the instance, the op wrapper that keeps
// exceptions inside the plugin, CUDA/cuBLAS error checks that name the op, and the entry
// points the ops table (cuda_backend.cpp) is built from. Kernel files (*.cu) include this
// header; it must stay valid C++17 for nvcc.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "loom/cpp/describe.hpp"
#include "loom/cpp/graph.hpp"
#include "loom/cpp/plugin.hpp"
#include "loom/loom.h"

namespace loom_cuda {
class CachingAllocator;  // allocator.hpp
struct Blas;             // gemm.cpp: cuBLASLt handle, workspace, plan cache
class Staging;           // staging.hpp: from_host's pinned buffers
}  // namespace loom_cuda

// The opaque instance of backend.h: one device, one stream every op is queued on.
struct loom_backend {
  const loom_host* host = nullptr;
  int device = 0;
  cudaStream_t stream = nullptr;
  loom_cuda::CachingAllocator* alloc = nullptr;
  loom_cuda::Blas* blas = nullptr;
  loom_cuda::Staging* staging = nullptr;
  bool allow_tf32 = false;  // fp32 GEMMs on tensor cores (recipe: backend.tf32)
  // loom.gemm-epilogue/1 lent (recipe: backend.gemm_epilogues), and the table get_ext returns
  bool gemm_epilogues = false;
  loom_gemm_epilogues epilogues{};
  // loom.norm-residual/1 lent (recipe: backend.norm_residual): get_ext returns norm_residual
  loom_ext norm_residual{};
  std::string device_name;
  double peak_gflops = 0;   // dense bf16 tensor-core peak of the device (MFU denominator)
  void* scratch = nullptr;  // small device scratch for reductions (sum_squares, CE stats)
  size_t scratch_bytes = 0;
  loom_device_stream device_stream{};  // loom.device-stream/1: this device and `stream`
  bool capturing = false;              // a graph's body runs (loom.graph/1, graph.cpp)
};

namespace loom_cuda {

// An error that names the op: thrown inside ops, turned into a loom_error by run_op.
[[noreturn]] inline void fail(const char* op, const std::string& what,
                              loom_status code = LOOM_ERR_INVALID_ARGUMENT) {
  throw loom::Error(code, std::string("backend/cuda: ") + op + ": " + what);
}

// Checks a CUDA runtime call: "backend/cuda: layernorm_forward: cudaLaunchKernel failed:
// invalid configuration argument".
inline void check_cuda(cudaError_t e, const char* op, const char* call) {
  if (e != cudaSuccess)
    fail(op, std::string(call) + " failed: " + cudaGetErrorString(e),
         e == cudaErrorMemoryAllocation ? LOOM_ERR_OUT_OF_MEMORY : LOOM_ERR_INTERNAL);
}
#define LOOM_CUDA_CHECK(op, call) ::loom_cuda::check_cuda((call), (op), #call)

// What get_info reports as kernel_launches, host_syncs and device_mallocs (ABI 2.16): counted
// for the whole plugin, which drives one device per process.
struct Counters {
  std::atomic<uint64_t> launches{0}, syncs{0}, mallocs{0};
};
inline Counters g_counters;
// The host waits for the stream (counted).
inline cudaError_t stream_sync(cudaStream_t s) {
  g_counters.syncs.fetch_add(1, std::memory_order_relaxed);
  return cudaStreamSynchronize(s);
}
// The host waits for an event (counted).
inline cudaError_t event_sync(cudaEvent_t e) {
  g_counters.syncs.fetch_add(1, std::memory_order_relaxed);
  return cudaEventSynchronize(e);
}
// A device allocation asked of the runtime (counted).
inline cudaError_t device_malloc(void** p, size_t bytes) {
  g_counters.mallocs.fetch_add(1, std::memory_order_relaxed);
  return cudaMalloc(p, bytes);
}
// After a kernel launch: launch-configuration errors surface here, not later. Counts it.
#define LOOM_CUDA_LAUNCHED(op)                                               \
  (::loom_cuda::g_counters.launches.fetch_add(1, std::memory_order_relaxed), \
   ::loom_cuda::check_cuda(cudaGetLastError(), (op), "kernel launch"))

// The answer to ops args that loom::ops_args_refusal refuses (`why`), naming the op; defined
// after run_op below.
inline loom_error* refuse_args(loom_backend* be, const char* op, const std::string& why) noexcept;

// The host of the most recent create(), for an op called with a NULL backend.
const loom_host* last_host() noexcept;

// The body of every op: a NULL backend is refused, exceptions become host-made errors, the
// instance's device is made current first (ranks or threads may have switched it).
template <class Fn>
loom_error* run_op(loom_backend* be, const char* op, Fn&& fn) noexcept {
  if (be == nullptr) {
    const loom_host* host = last_host();
    if (host == nullptr) std::abort();  // no host was ever seen: no error object can be made
    return host->error_new(LOOM_ERR_INVALID_ARGUMENT,
                           (std::string("backend/cuda: ") + op + ": backend is NULL").c_str());
  }
  return loom::guard(be->host, [&] {
    LOOM_CUDA_CHECK(op, cudaSetDevice(be->device));
    fn(*be);
  });
}

inline loom_error* refuse_args(loom_backend* be, const char* op, const std::string& why) noexcept {
  return run_op(be, op, [&](loom_backend&) { fail(op, why); });
}

// ---- loom.graph/1 (graph.cpp) -------------------------------------------------------------
// The table get_ext lends.
const loom_graph_api* graph_table() noexcept;
// Throws the SDK's refusal when a graph's body runs: `call` waits for the device or copies
// host memory, which a replay could not repeat (graph.h's rules).
inline void refuse_in_capture(const loom_backend& b, const char* call) {
  if (b.capturing)
    throw loom::Error(LOOM_ERR_INVALID_ARGUMENT, loom::graph_call_refusal("backend/cuda", call));
}

// ---- dtypes and tensors ------------------------------------------------------------------
inline bool is_f32(DLDataType d) { return loom_dtype_eq(d, loom_f32()); }
inline bool is_bf16(DLDataType d) { return loom_dtype_eq(d, loom_bf16()); }
inline bool is_f16(DLDataType d) { return loom_dtype_eq(d, loom_f16()); }
inline bool is_i32(DLDataType d) { return loom_dtype_eq(d, loom_i32()); }
inline bool is_float(DLDataType d) { return is_f32(d) || is_bf16(d) || is_f16(d); }

// The element pointer of a compact device tensor (data + byte_offset), after checking it is
// on this backend's device, compact, and of `expect_numel` elements when >= 0.
void* device_ptr(const loom_backend& be, const DLTensor* t, const char* op, const char* name,
                 int64_t expect_numel = -1);
int64_t numel(const DLTensor* t);
// "f32", "bf16", ... and "(4,8)" in messages: the SDK's names (loom/cpp/describe.hpp).
using loom::dtype_str;
using loom::shape_str;

// ---- GEMM internals (gemm.cpp) -------------------------------------------------------------
// The cuBLASLt handle, workspace and plan cache of one instance; created by create(),
// destroyed (NULL accepted) by destroy().
Blas* blas_create(size_t workspace_bytes, bool autotune);
void blas_destroy(Blas* blas) noexcept;

// The cuBLASLt epilogues gemm.cpp fuses into one (non-batched) GEMM for
// loom.gemm-epilogue/1: kBias adds bias(n) to every row of C; kGeluAux(Bias) apply tanh-GELU
// after (the bias), keeping its input in `aux` (m, n, leading dimension ldc) for the
// backward; kDgelu multiplies C by gelu'(aux); kBgrad writes the column sums of A as stored
// (k, m) (the sum over k) into an f32 buffer of m.
enum class Epilogue { kNone, kBias, kGeluAux, kGeluAuxBias, kDgelu, kBgrad };

// kernels_elementwise.cu: dbias(C) += the K rows of part(K, C) f32, summed in a fixed order
// (dbias f32, bf16 or f16).
void add_column_sums(loom_backend& be, DLTensor* dbias, const float* part, int64_t K, int64_t C);

// kernels_elementwise.cu: C = beta * C on `batch` strided matrices (rows x cols, row pitch ld,
// matrix i at c + i * stride elements; dtype f32/bf16/f16); beta == 0 writes zeros without
// reading C. GEMM with k == 0, which cuBLASLt does not take.
void scale_matrices(loom_backend& be, DLDataType dtype, void* c, int64_t rows, int64_t cols,
                    int64_t ld, int64_t stride, int64_t batch, double beta);

}  // namespace loom_cuda
