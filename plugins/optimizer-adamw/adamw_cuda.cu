// optimizer/adamw on CUDA: adamw.cpp's per-element update in f32, grid-stride over the run,
// on the backend's stream. The constants arrive in double and are rounded to f32 here, as
// the host kernel rounds them to its dtype.
#include <cuda_runtime.h>

#include <algorithm>

#include "adamw_cuda.hpp"

namespace adamw_cuda {
namespace {

struct Consts {
  float gs, decay, b1, b2, one_b1, one_b2, step_size, inv_sqrt_bc2, eps;
};

__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ grad,
                             float* __restrict__ m, float* __restrict__ v, int64_t n, Consts k) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float g = grad[i] * k.gs;
    const float mi = k.b1 * m[i] + k.one_b1 * g;
    const float vi = k.b2 * v[i] + k.one_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * k.decay - k.step_size * mi / (sqrtf(vi) * k.inv_sqrt_bc2 + k.eps);
  }
}

}  // namespace

const char* step(float* p, const float* g, float* m, float* v, int64_t n, double grad_scale,
                 double decay, double beta1, double beta2, double step_size, double inv_sqrt_bc2,
                 double eps, void* stream) {
  if (n <= 0) return "";
  Consts k{};
  k.gs = static_cast<float>(grad_scale);
  k.decay = static_cast<float>(decay);
  k.b1 = static_cast<float>(beta1);
  k.b2 = static_cast<float>(beta2);
  k.one_b1 = 1.0f - k.b1;  // in f32 from the f32 betas, as the host kernel does
  k.one_b2 = 1.0f - k.b2;
  k.step_size = static_cast<float>(step_size);
  k.inv_sqrt_bc2 = static_cast<float>(inv_sqrt_bc2);
  k.eps = static_cast<float>(eps);
  constexpr int kThreads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 8192));
  adamw_kernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(p, g, m, v, n, k);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? "" : cudaGetErrorString(e);
}

}  // namespace adamw_cuda
