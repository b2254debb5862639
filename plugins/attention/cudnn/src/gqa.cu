// Grouped-query attention around the MHA graphs (gqa.hpp): 16-byte accesses, a grid-stride
// loop, launched on the backend's stream.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <string>

#include "gqa.hpp"
#include "loom/cpp/cuda_convert.cuh"

namespace cudnn_attn {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t work) {
  const int64_t b = (work + kThreads - 1) / kThreads;
  return (int)(b < 4096 ? (b > 0 ? b : 1) : 4096);
}

void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("attention/cudnn: ") + what + ": " +
                             cudaGetErrorString(e));
}

// One uint4 (8 elements) per step; vecs = D / 8 per row.
__global__ void repeat_kernel(const uint4* in, uint4* out, int64_t out_vecs, int64_t group,
                              int64_t vecs) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < out_vecs;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t row = i / vecs, v = i - row * vecs;
    out[i] = in[(row / group) * vecs + v];
  }
}

// Element conversions: the SDK's, as backend/cuda's kernels round.
using loom::from_f32;
using loom::to_f32;

// out vector i (8 elements of row r) = the sum of the group's rows r * group + g.
template <class T>
__global__ void sum_kernel(const uint4* in, uint4* out, int64_t out_vecs, int64_t group,
                           int64_t vecs) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < out_vecs;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t row = i / vecs, v = i - row * vecs;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t g = 0; g < group; ++g) {
      const uint4 x = in[(row * group + g) * vecs + v];
      const T* e = reinterpret_cast<const T*>(&x);
      for (int k = 0; k < 8; ++k) acc[k] += to_f32(e[k]);
    }
    uint4 y;
    T* o = reinterpret_cast<T*>(&y);
    for (int k = 0; k < 8; ++k) o[k] = from_f32<T>(acc[k]);
    out[i] = y;
  }
}

}  // namespace

void repeat_heads(const void* in, void* out, int64_t rows, int64_t group, int64_t D,
                  cudaStream_t stream) {
  const int64_t vecs = D / 8, n = rows * group * vecs;
  repeat_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const uint4*>(in),
                                                        static_cast<uint4*>(out), n, group, vecs);
  check_launch("repeating K/V heads");
}

void sum_head_groups(const void* in, void* out, int64_t rows, int64_t group, int64_t D, bool f16,
                     cudaStream_t stream) {
  const int64_t vecs = D / 8, n = rows * vecs;
  const auto* i = static_cast<const uint4*>(in);
  auto* o = static_cast<uint4*>(out);
  if (f16)
    sum_kernel<__half><<<blocks_for(n), kThreads, 0, stream>>>(i, o, n, group, vecs);
  else
    sum_kernel<__nv_bfloat16><<<blocks_for(n), kThreads, 0, stream>>>(i, o, n, group, vecs);
  check_launch("summing dK/dV over head groups");
}

}  // namespace cudnn_attn
