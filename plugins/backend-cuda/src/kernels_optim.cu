// Optimizer steps, one parameter tensor per call, elementwise and in place; f32 parameters,
// gradients and state (Megatron's main params and grads; backend.h's mixed-precision rule).
//   adamw_step: PyTorch AdamW (torch.optim.AdamW, non-amsgrad):
//                 g = grad_scale * grad
//                 param *= 1 - lr * weight_decay                 (decoupled decay, first)
//                 m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//                 param -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
//   sgd_step:   g = grad_scale * grad + wd param; buf = momentum buf + g; param -= lr buf
//               (PyTorch's SGD; buf may be NULL when momentum == 0, then buf = g)
// Step-wide constants (bias corrections) are computed once on the host in double, as on the
// CPU backend. One fused pass per step (AdamW streams 7 floats per parameter): float4
// accesses when every pointer is 16-byte aligned, a scalar tail for the last n % 4.
#include "kernels_common.cuh"
#include "ops.hpp"

namespace loom_cuda {
namespace {

struct AdamWConsts {
  float gs, decay, b1, b2, one_b1, one_b2, step_size, inv_sqrt_bc2, eps;
};

__device__ __forceinline__ void adamw_one(float& p, float g, float& m, float& v,
                                          const AdamWConsts& k) {
  g *= k.gs;
  m = k.b1 * m + k.one_b1 * g;
  v = k.b2 * v + k.one_b2 * g * g;
  p = p * k.decay - k.step_size * m / (sqrtf(v) * k.inv_sqrt_bc2 + k.eps);
}

__device__ __forceinline__ int64_t thread_index() {
  return blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
}
__device__ __forceinline__ int64_t thread_count() { return int64_t{gridDim.x} * blockDim.x; }

// param, grad, m, v (n) f32
template <int VW>
__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n,
                             AdamWConsts k) {
  const int64_t nv = n / VW;
  for (int64_t i = thread_index(); i < nv; i += thread_count()) {
    float p[VW], g[VW], mm[VW], vv[VW];
    load_vec<VW>(param + i * VW, p);
    load_vec<VW>(grad + i * VW, g);
    load_vec<VW>(m + i * VW, mm);
    load_vec<VW>(v + i * VW, vv);
#pragma unroll
    for (int e = 0; e < VW; ++e) adamw_one(p[e], g[e], mm[e], vv[e], k);
    store_vec<VW>(param + i * VW, p);
    store_vec<VW>(m + i * VW, mm);
    store_vec<VW>(v + i * VW, vv);
  }
  for (int64_t i = nv * VW + thread_index(); i < n; i += thread_count())
    adamw_one(param[i], grad[i], m[i], v[i], k);
}

// param, grad, buf (n) f32; buf unused without kBuf (momentum == 0 and no buffer).
template <int VW, bool kBuf>
__global__ void sgd_kernel(float* param, const float* grad, float* buf, int64_t n, float lr,
                           float mom, float wd, float gs) {
  const int64_t nv = n / VW;
  auto one = [&](float& p, float g, float& b) {
    g = gs * g + wd * p;
    if constexpr (kBuf) {
      b = mom * b + g;
      p -= lr * b;
    } else {
      p -= lr * g;
    }
  };
  for (int64_t i = thread_index(); i < nv; i += thread_count()) {
    float p[VW], g[VW], bb[VW] = {};
    load_vec<VW>(param + i * VW, p);
    load_vec<VW>(grad + i * VW, g);
    if constexpr (kBuf) load_vec<VW>(buf + i * VW, bb);
#pragma unroll
    for (int e = 0; e < VW; ++e) one(p[e], g[e], bb[e]);
    store_vec<VW>(param + i * VW, p);
    if constexpr (kBuf) store_vec<VW>(buf + i * VW, bb);
  }
  for (int64_t i = nv * VW + thread_index(); i < n; i += thread_count()) {
    float bi = kBuf ? buf[i] : 0.0f;
    one(param[i], grad[i], bi);
    if constexpr (kBuf) buf[i] = bi;
  }
}

// t is f32 (other float dtypes: UNIMPLEMENTED) with param's element count.
void check_f32(const char* op, const char* name, const DLTensor* t) {
  need(op, name, t);
  if (!is_f32(t->dtype))
    fail(op,
         std::string(name) + " is " + dtype_str(t->dtype) +
             "; backend/cuda steps f32 parameters, gradients and state only",
         is_float(t->dtype) || (t->dtype.code == kDLFloat && t->dtype.bits == 64)
             ? LOOM_ERR_UNIMPLEMENTED
             : LOOM_ERR_INVALID_ARGUMENT);
}

}  // namespace

loom_error* adamw_step(loom_backend* be, const loom_adamw_args* args) noexcept {
  return run_op(be, "adamw_step", [&](loom_backend& b) {
    const char* op = "adamw_step";
    if (args == nullptr) fail(op, "args is NULL");
    if (args->struct_size < LOOM_ADAMW_ARGS_SIZE_V2)
      fail(op, "args->struct_size " + std::to_string(args->struct_size) + " < " +
                   std::to_string(LOOM_ADAMW_ARGS_SIZE_V2) + " (loom_adamw_args v1)");
    const loom_adamw_args& a = *args;
    check_f32(op, "param", a.param);
    check_f32(op, "grad", a.grad);
    check_f32(op, "m", a.m);
    check_f32(op, "v", a.v);
    if (a.step < 1) fail(op, "step = " + std::to_string(a.step) + " must be >= 1 (1-based)");
    if (!(a.beta1 >= 0 && a.beta1 < 1) || !(a.beta2 >= 0 && a.beta2 < 1))
      fail(op, "beta1 = " + std::to_string(a.beta1) + ", beta2 = " + std::to_string(a.beta2) +
                   " must be in [0, 1)");
    if (!(a.eps >= 0)) fail(op, "eps = " + std::to_string(a.eps) + " must be >= 0");
    need_finite(op, "lr", a.lr);
    need_finite(op, "weight_decay", a.weight_decay);
    need_finite(op, "grad_scale", a.grad_scale);
    const int64_t n = numel(a.param);
    float* pp = static_cast<float*>(device_ptr(b, a.param, op, "param", n));
    const float* pg = static_cast<const float*>(device_ptr(b, a.grad, op, "grad", n));
    float* pm = static_cast<float*>(device_ptr(b, a.m, op, "m", n));
    float* pv = static_cast<float*>(device_ptr(b, a.v, op, "v", n));
    if (n == 0) return;

    const double bc1 = 1.0 - std::pow(a.beta1, static_cast<double>(a.step));
    const double bc2 = 1.0 - std::pow(a.beta2, static_cast<double>(a.step));
    AdamWConsts k{};
    k.gs = static_cast<float>(a.grad_scale);
    k.decay = static_cast<float>(1.0 - a.lr * a.weight_decay);
    k.b1 = static_cast<float>(a.beta1);
    k.b2 = static_cast<float>(a.beta2);
    k.one_b1 = 1.0f - k.b1;  // in f32 from the f32 betas, as the CPU kernel does
    k.one_b2 = 1.0f - k.b2;
    k.step_size = static_cast<float>(a.lr / bc1);
    k.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
    k.eps = static_cast<float>(a.eps);
    with_vec<float>(true, {pp, pg, pm, pv}, [&](auto vw) {
      constexpr int VW = decltype(vw)::value;
      adamw_kernel<VW><<<grid_for(n / VW + 1), kThreads, 0, b.stream>>>(pp, pg, pm, pv, n, k);
      LOOM_CUDA_LAUNCHED(op);
    });
  });
}

loom_error* sgd_step(loom_backend* be, DLTensor* param, const DLTensor* grad, DLTensor* buf,
                     double lr, double momentum, double weight_decay, double grad_scale) noexcept {
  return run_op(be, "sgd_step", [&](loom_backend& b) {
    const char* op = "sgd_step";
    check_f32(op, "param", param);
    check_f32(op, "grad", grad);
    if (buf != nullptr)
      check_f32(op, "buf", buf);
    else if (momentum != 0)
      fail(op, "buf is NULL but momentum = " + std::to_string(momentum) +
                   "; a momentum buffer is needed when momentum != 0");
    need_finite(op, "lr", lr);
    need_finite(op, "momentum", momentum);
    need_finite(op, "weight_decay", weight_decay);
    need_finite(op, "grad_scale", grad_scale);
    const int64_t n = numel(param);
    float* pp = static_cast<float*>(device_ptr(b, param, op, "param", n));
    const float* pg = static_cast<const float*>(device_ptr(b, grad, op, "grad", n));
    float* pb = buf ? static_cast<float*>(device_ptr(b, buf, op, "buf", n)) : nullptr;
    if (n == 0) return;
    with_vec<float>(true, {pp, pg, pb}, [&](auto vw) {
      constexpr int VW = decltype(vw)::value;
      const unsigned grid = grid_for(n / VW + 1);
      const float f_lr = static_cast<float>(lr), f_mom = static_cast<float>(momentum),
                  f_wd = static_cast<float>(weight_decay), f_gs = static_cast<float>(grad_scale);
      if (pb != nullptr)
        sgd_kernel<VW, true>
            <<<grid, kThreads, 0, b.stream>>>(pp, pg, pb, n, f_lr, f_mom, f_wd, f_gs);
      else
        sgd_kernel<VW, false>
            <<<grid, kThreads, 0, b.stream>>>(pp, pg, pb, n, f_lr, f_mom, f_wd, f_gs);
      LOOM_CUDA_LAUNCHED(op);
    });
  });
}

}  // namespace loom_cuda
