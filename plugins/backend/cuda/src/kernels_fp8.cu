// backend/cuda: loom.fp8/1's table (fp8.h; issue 39), the tensor scaling. Compiled, not yet
// run on a GPU: gpu.fp8_vs_cpu is to hold it to backend/cpu's emulation.
//   quantize:       amax (a grid-stride max, one atomicMax of the bits per block: non-negative
//                   floats order as their bits), the scale (loom::fp8_scale, one thread), then
//                   the cast: PTX's cvt.rn.satfinite through cuda_fp8.h, which is
//                   loom::fp8_encode's rounding (nearest even, saturating, NaN kept) of the f32
//                   product x * scale, as backend/cpu computes it. dst_t written beside dst.
//   delayed_update: one thread per tensor, loom::fp8_delayed_update.
// The block scalings (1x128, 128x128) are not lent yet: cuBLASLt's VEC128/BLK128x128 scale
// layouts need a device to check against; backend/cpu has them.
#include <cuda_fp8.h>

#include "kernels_common.cuh"
#include "loom/cpp/fp8_args.hpp"
#include "ops.hpp"

namespace loom_cuda {
namespace {

template <class T>
__global__ void fp8_amax_kernel(const T* x, int64_t n, unsigned int* amax_bits) {
  float m = 0.0f;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    m = fmaxf(m, fabsf(to_f32(x[i])));  // fmaxf passes over NaN
  m = block_max(m);
  if (threadIdx.x == 0) atomicMax(amax_bits, __float_as_uint(m));
}

// scale (made from the amax under current scaling), its inverse, the amax folded in.
__global__ void fp8_scale_kernel(const unsigned int* amax_bits, loom::Fp8Format f, int margin,
                                 bool current, float* scale, float* scale_inv, float* amax) {
  const float a = amax_bits != nullptr ? __uint_as_float(*amax_bits) : 0.0f;
  if (current) *scale = loom::fp8_scale(f, a, margin, false);
  if (scale_inv != nullptr) *scale_inv = 1.0f / *scale;
  if (amax != nullptr) *amax = fmaxf(*amax, a);
}

template <class T, bool kE5M2>
__global__ void fp8_cast_kernel(const T* x, int64_t rows, int64_t cols, const float* scale,
                                uint8_t* dst, uint8_t* dst_t) {
  const float s = *scale;
  const int64_t n = rows * cols;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const __nv_fp8_storage_t c =
        __nv_cvt_float_to_fp8(to_f32(x[i]) * s, __NV_SATFINITE, kE5M2 ? __NV_E5M2 : __NV_E4M3);
    dst[i] = c;
    if (dst_t != nullptr) dst_t[(i % cols) * rows + i / cols] = c;
  }
}

__global__ void fp8_update_kernel(float* history, int64_t n, int64_t len, bool most_recent,
                                  int margin, loom::Fp8Format f, float* scale, float* scale_inv) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= n) return;
  loom::fp8_delayed_update(f, history + i * len, len, most_recent, margin, scale + i);
  if (scale_inv != nullptr) scale_inv[i] = 1.0f / scale[i];
}

template <class T>
void launch_cast(cudaStream_t s, bool e5m2, const void* x, int64_t rows, int64_t cols,
                 const float* scale, uint8_t* dst, uint8_t* dst_t) {
  const unsigned grid = grid_for(rows * cols);
  if (e5m2)
    fp8_cast_kernel<T, true>
        <<<grid, kThreads, 0, s>>>(static_cast<const T*>(x), rows, cols, scale, dst, dst_t);
  else
    fp8_cast_kernel<T, false>
        <<<grid, kThreads, 0, s>>>(static_cast<const T*>(x), rows, cols, scale, dst, dst_t);
}

template <class Fn>
void by_dtype(DLDataType d, Fn&& fn) {
  if (is_f32(d))
    fn(float{});
  else if (is_bf16(d))
    fn(__nv_bfloat16{});
  else
    fn(__half{});
}

}  // namespace

loom_error* fp8_quantize(loom_backend* be, const loom_fp8_quantize_args* a) noexcept {
  return run_op(be, "quantize", [&](loom_backend& b) {
    const char* op = "quantize";
    if (std::string why = loom::fp8_quantize_refusal(a, kFp8Scalings); !why.empty()) fail(op, why);
    const int64_t n = numel(a->src);
    const void* x = device_ptr(b, a->src, op, "src", n);
    auto* dst = static_cast<uint8_t*>(device_ptr(b, a->dst, op, "dst", n));
    auto* dst_t =
        static_cast<uint8_t*>(a->dst_t ? device_ptr(b, a->dst_t, op, "dst_t", n) : nullptr);
    auto* scale = static_cast<float*>(device_ptr(b, a->scale, op, "scale", 1));
    auto* inv = static_cast<float*>(a->scale_inv ? device_ptr(b, a->scale_inv, op, "scale_inv", 1)
                                                 : nullptr);
    auto* amax = static_cast<float*>(a->amax ? device_ptr(b, a->amax, op, "amax", 1) : nullptr);
    const bool current = (a->flags & LOOM_FP8_CURRENT) != 0;
    const int64_t rows = a->dst_t ? a->src->shape[0] : 1, cols = a->dst_t ? a->src->shape[1] : n;
    const loom::Fp8Format f = loom::fp8_format(a->dst->dtype);
    StreamScratch bits(sizeof(unsigned int), *b.alloc);
    unsigned int* amax_bits = nullptr;
    if (current || amax != nullptr) {
      amax_bits = bits.at<unsigned int>(0);
      LOOM_CUDA_CHECK(op, cudaMemsetAsync(amax_bits, 0, sizeof(unsigned int), b.stream));
      by_dtype(a->src->dtype, [&](auto tag) {
        using T = decltype(tag);
        fp8_amax_kernel<T>
            <<<grid_for(n), kThreads, 0, b.stream>>>(static_cast<const T*>(x), n, amax_bits);
      });
      LOOM_CUDA_LAUNCHED(op);
    }
    if (current || inv != nullptr || amax != nullptr) {
      fp8_scale_kernel<<<1, 1, 0, b.stream>>>(amax_bits, f, a->margin, current, scale, inv, amax);
      LOOM_CUDA_LAUNCHED(op);
    }
    if (n == 0) return;
    by_dtype(a->src->dtype, [&](auto tag) {
      launch_cast<decltype(tag)>(b.stream, f.has_inf, x, rows, cols, scale, dst, dst_t);
    });
    LOOM_CUDA_LAUNCHED(op);
  });
}

loom_error* fp8_delayed_update(loom_backend* be, const loom_fp8_update_args* a) noexcept {
  return run_op(be, "delayed_update", [&](loom_backend& b) {
    const char* op = "delayed_update";
    if (std::string why = loom::fp8_update_refusal(a); !why.empty()) fail(op, why);
    const int64_t n = a->history->shape[0], len = a->history->shape[1];
    auto* h = static_cast<float*>(device_ptr(b, a->history, op, "history", n * len));
    auto* scale = static_cast<float*>(device_ptr(b, a->scale, op, "scale", n));
    auto* inv = static_cast<float*>(a->scale_inv ? device_ptr(b, a->scale_inv, op, "scale_inv", n)
                                                 : nullptr);
    if (n == 0) return;
    fp8_update_kernel<<<grid_for(n), kThreads, 0, b.stream>>>(
        h, n, len, (a->flags & LOOM_FP8_MOST_RECENT) != 0, a->margin, loom::fp8_format(a->format),
        scale, inv);
    LOOM_CUDA_LAUNCHED(op);
  });
}

}  // namespace loom_cuda
