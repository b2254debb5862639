// optimizer/sgd on CUDA: sgd.cpp's per-element update in f32, grid-stride, on the backend's
// stream.
#include <cuda_runtime.h>

#include <algorithm>

#include "sgd_cuda.hpp"

namespace sgd_cuda {
namespace {

template <bool kBuf>
__global__ void sgd_kernel(float* __restrict__ p, const float* __restrict__ grad,
                           float* __restrict__ buf, int64_t n, loom::StepSchedule sch, float mom,
                           float wd, loom::StepScale sc) {
  double gs_d = 0;
  if (!sc.resolve(&gs_d)) return;  // the clip's norm is not finite: nothing changes
  const float gs = static_cast<float>(gs_d);
  const float lr = static_cast<float>(sch.learning_rate());  // loom.opt-schedule/1's: read here
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float g = gs * grad[i] + wd * p[i];
    if constexpr (kBuf) {
      const float b = mom * buf[i] + g;
      buf[i] = b;
      p[i] -= lr * b;
    } else {
      p[i] -= lr * g;
    }
  }
}

}  // namespace

const char* step(float* p, const float* g, float* buf, int64_t n, loom::StepSchedule sch,
                 double momentum, double weight_decay, loom::StepScale sc, void* stream) {
  if (n <= 0) return "";
  constexpr int kThreads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 8192));
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const float f_mom = static_cast<float>(momentum), f_wd = static_cast<float>(weight_decay);
  if (buf != nullptr)
    sgd_kernel<true><<<blocks, kThreads, 0, s>>>(p, g, buf, n, sch, f_mom, f_wd, sc);
  else
    sgd_kernel<false><<<blocks, kThreads, 0, s>>>(p, g, buf, n, sch, f_mom, f_wd, sc);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? "" : cudaGetErrorString(e);
}

}  // namespace sgd_cuda
