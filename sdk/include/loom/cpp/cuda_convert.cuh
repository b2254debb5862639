// For CUDA plugins only (nvcc: these are __device__ functions): the conversions between the
// storage dtypes (f32, bf16, f16) and the f32 that every CUDA kernel computes in. Loading
// widens exactly; storing rounds to nearest even, once.
//
// Why in the SDK: backend/cuda's kernels and attention/flash-cuda's (and attention/cudnn's
// grouped-query sums) read and write the same tensors, and a plugin includes only the SDK,
// never another plugin's files. So a helper two plugins share lives here, one copy, and the
// kernels on either side of the boundary round alike.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace loom {

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }

// from_f32<T>(x): x rounded to T (round to nearest even; f32 unchanged).
template <class T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) {
  return __float2half_rn(x);
}

}  // namespace loom
