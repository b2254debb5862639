// Optimizer steps, one parameter tensor per call, elementwise and in place.
//   adamw_step: PyTorch AdamW (torch.optim.AdamW, non-amsgrad):
//                 g = grad_scale * grad
//                 param *= 1 - lr * weight_decay                 (decoupled decay, first)
//                 m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//                 param -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
//               m and v have the param's dtype (f32 in training; f64 in the f64 test path).
//   sgd_step:   g = grad_scale * grad + wd param; buf = momentum buf + g; param -= lr buf
//               (PyTorch's SGD; buf may be NULL when momentum == 0, then buf = g)
// Step-wide constants (bias corrections) are computed once in double; the per-element loop
// is in the tensor's dtype so it vectorises. These passes are memory-bound (AdamW streams
// 7 values per parameter), so they run with every thread.
#include <omp.h>

#include <cmath>

#include "cpu_backend.hpp"

namespace loom_cpu {
namespace {

template <class T>
LOOM_CPU_CLONES void adamw_kernel(T* p, const T* grad, T* m, T* v, int64_t n, T gs, T decay, T b1,
                                  T b2, T step_size, T inv_sqrt_bc2, T eps, int nt) {
  const T one_b1 = T(1) - b1, one_b2 = T(1) - b2;
#pragma omp parallel for simd num_threads(nt) schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    T g = grad[i] * gs;
    T mi = b1 * m[i] + one_b1 * g;
    T vi = b2 * v[i] + one_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    T pi = p[i] * decay;
    p[i] = pi - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}

template <class T>
void sgd_kernel(T* p, const T* grad, T* buf, int64_t n, T lr, T mom, T wd, T gs, int nt) {
  if (buf) {
#pragma omp parallel for simd num_threads(nt) schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      T b = mom * buf[i] + (gs * grad[i] + wd * p[i]);
      buf[i] = b;
      p[i] -= lr * b;
    }
  } else {
#pragma omp parallel for simd num_threads(nt) schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) p[i] -= lr * (gs * grad[i] + wd * p[i]);  // buf = g
  }
}

void check_param_like(const Check& ck, const char* name, const DLTensor* t, const DLTensor* param) {
  ck.tensor(name, t);
  ck.same_dtype(name, t, "param", param);
  ck.numel(name, t, loom_tensor_numel(param));
}

void check_finite(const Check& ck, const char* name, double x) {
  if (!std::isfinite(x)) ck.fail(std::string(name) + " = " + std::to_string(x) + " is not finite");
}

}  // namespace

loom_error* op_adamw_step(loom_backend* be, const loom_adamw_args* args) noexcept {
  return run_op(be, "adamw_step", [&](loom_backend& b) {
    Check ck{"adamw_step"};
    if (args == nullptr) ck.fail("args is NULL");
    if (args->struct_size < LOOM_ADAMW_ARGS_SIZE_V2)
      ck.fail("args->struct_size " + std::to_string(args->struct_size) + " < " +
              std::to_string(LOOM_ADAMW_ARGS_SIZE_V2) + " (loom_adamw_args v1)");
    const loom_adamw_args& a = *args;
    ck.tensor("param", a.param);
    ck.floating("param", a.param);
    check_param_like(ck, "grad", a.grad, a.param);
    check_param_like(ck, "m", a.m, a.param);
    check_param_like(ck, "v", a.v, a.param);
    if (a.step < 1) ck.fail("step = " + std::to_string(a.step) + " must be >= 1 (1-based)");
    if (!(a.beta1 >= 0 && a.beta1 < 1) || !(a.beta2 >= 0 && a.beta2 < 1))
      ck.fail("beta1 = " + std::to_string(a.beta1) + ", beta2 = " + std::to_string(a.beta2) +
              " must be in [0, 1)");
    if (!(a.eps >= 0)) ck.fail("eps = " + std::to_string(a.eps) + " must be >= 0");
    check_finite(ck, "lr", a.lr);
    check_finite(ck, "weight_decay", a.weight_decay);
    check_finite(ck, "grad_scale", a.grad_scale);

    double bc1 = 1.0 - std::pow(a.beta1, static_cast<double>(a.step));
    double bc2 = 1.0 - std::pow(a.beta2, static_cast<double>(a.step));
    double step_size = a.lr / bc1;
    double inv_sqrt_bc2 = 1.0 / std::sqrt(bc2);
    double decay = 1.0 - a.lr * a.weight_decay;
    dispatch_float(ck, "param", a.param, [&](auto tag) {
      using T = decltype(tag);
      adamw_kernel(data_of<T>(a.param), data_of<const T>(a.grad), data_of<T>(a.m), data_of<T>(a.v),
                   loom_tensor_numel(a.param), static_cast<T>(a.grad_scale), static_cast<T>(decay),
                   static_cast<T>(a.beta1), static_cast<T>(a.beta2), static_cast<T>(step_size),
                   static_cast<T>(inv_sqrt_bc2), static_cast<T>(a.eps), b.threads);
    });
  });
}

loom_error* op_sgd_step(loom_backend* be, DLTensor* param, const DLTensor* grad, DLTensor* buf,
                        double lr, double momentum, double weight_decay,
                        double grad_scale) noexcept {
  return run_op(be, "sgd_step", [&](loom_backend& b) {
    Check ck{"sgd_step"};
    ck.tensor("param", param);
    ck.floating("param", param);
    check_param_like(ck, "grad", grad, param);
    if (buf)
      check_param_like(ck, "buf", buf, param);
    else if (momentum != 0)
      ck.fail("buf is NULL but momentum = " + std::to_string(momentum) +
              "; a momentum buffer is needed when momentum != 0");
    check_finite(ck, "lr", lr);
    check_finite(ck, "momentum", momentum);
    check_finite(ck, "weight_decay", weight_decay);
    check_finite(ck, "grad_scale", grad_scale);
    dispatch_float(ck, "param", param, [&](auto tag) {
      using T = decltype(tag);
      sgd_kernel(data_of<T>(param), data_of<const T>(grad), buf ? data_of<T>(buf) : nullptr,
                 loom_tensor_numel(param), static_cast<T>(lr), static_cast<T>(momentum),
                 static_cast<T>(weight_decay), static_cast<T>(grad_scale), b.threads);
    });
  });
}

}  // namespace loom_cpu
