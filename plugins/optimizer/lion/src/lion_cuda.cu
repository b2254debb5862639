// optimizer/lion on CUDA: the same per-element update as lion.cpp's host kernel,
//   c = beta1 m + (1 - beta1) g;  p = p (1 - lr wd) - lr sign(c);  m = beta2 m + (1 - beta2) g
// with g = grad_scale grad, in f32, grid-stride over the tensor, on the backend's stream.
#include <cuda_runtime.h>

#include <algorithm>

#include "lion_cuda.hpp"

namespace lion_cuda {
namespace {

__global__ void lion_kernel(float* __restrict__ p, const float* __restrict__ g,
                            float* __restrict__ m, int64_t n, loom::StepSchedule sch, double decay,
                            float b1, float b2, loom::StepScale sc) {
  double gs_d = 0;
  if (!sc.resolve(&gs_d)) return;  // the clip's norm is not finite: nothing changes
  const float gs = static_cast<float>(gs_d);
  // lion.cpp's constants from the lr in double (the args', or loom.opt-schedule/1's, read here)
  const double lr_d = sch.learning_rate();
  const float keep = static_cast<float>(1 - lr_d * decay), lr = static_cast<float>(lr_d);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float gi = g[i] * gs;
    const float c = b1 * m[i] + (1.0f - b1) * gi;
    const float sign = static_cast<float>((c > 0.0f) - (c < 0.0f));
    p[i] = p[i] * keep - lr * sign;
    m[i] = b2 * m[i] + (1.0f - b2) * gi;
  }
}

}  // namespace

const char* step(float* p, const float* g, float* m, int64_t n, loom::StepSchedule sch,
                 double beta1, double beta2, double decay, loom::StepScale sc, void* stream) {
  if (n <= 0) return "";
  constexpr int kThreads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 8192));
  lion_kernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      p, g, m, n, sch, decay, static_cast<float>(beta1), static_cast<float>(beta2), sc);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? "" : cudaGetErrorString(e);
}

}  // namespace lion_cuda
