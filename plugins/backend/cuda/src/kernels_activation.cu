// MLP activations, elementwise, f32/bf16/f16 storage with f32 arithmetic.
//   gelu_forward:    out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   (GPT-2's tanh form)
//   gelu_backward:   dinp = dout * gelu'(inp)
//   gelu_erf_*:      out = 0.5 x (1 + erf(x / sqrt 2))   (BERT's exact form), and its gradient
//   tanh_*:          out = tanh(x)                       (BERT's pooler), and its gradient
//   squared_relu_*:  out = max(x, 0)^2                   (Nemotron-H's MLP), and 2 max(x, 0)
//   swiglu_forward:  inp(N,2H) = [gate | up]; out(N,H) = silu(gate) * up
//   swiglu_backward: dinp(N,2H) = [dout * up * silu'(gate) | dout * silu(gate)]
// Activation gradients are written (=). Each thread reads its elements before writing the
// same ones, so out/dinp may alias inp or dout (GELU) and dinp may alias inp (SwiGLU).
// Grid-stride loops over 16-byte vectors when every pointer is aligned (and, for SwiGLU, H
// is a multiple of the vector), then a scalar tail.
#include <initializer_list>
#include <type_traits>

#include "kernels_common.cuh"
#include "ops.hpp"

namespace loom_cuda {
namespace {

constexpr float kGeluK0 = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluK1 = 0.044715f;

// Each elementwise activation is a functor: f(x) and its derivative df(x), in f32, the same
// forms as backend/cpu's (kernels_activation.cpp).
// GELU (tanh form) is evaluated as x * sigmoid(2u), which equals 0.5 x (1 + tanh(u)) exactly
// but keeps its relative accuracy for negative x, where 1 + tanh(u) cancels.
struct GeluTanh {
  __device__ static float f(float x) {
    const float u = kGeluK0 * (x + kGeluK1 * x * x * x);
    return x / (1.0f + expf(-2.0f * u));
  }
  __device__ static float df(float x) {
    const float s = 1.0f / (1.0f + expf(-2.0f * kGeluK0 * (x + kGeluK1 * x * x * x)));
    // d/dx [x s] = s + x * 2 s (1 - s) * du/dx, du/dx = k0 (1 + 3 k1 x^2)
    return s + 2.0f * x * s * (1.0f - s) * kGeluK0 * (1.0f + 3.0f * kGeluK1 * x * x);
  }
};
// GELU: 0.5 x (1 + erf(x / sqrt 2)); d/dx = Phi(x) + x phi(x).
struct GeluErf {
  __device__ static float f(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678f)); }
  __device__ static float df(float x) {
    return 0.5f * (1.0f + erff(x * 0.70710678f)) + x * 0.39894228f * expf(-0.5f * x * x);
  }
};
struct SquaredRelu {  // ABI 2.24, Megatron's --squared-relu
  __device__ static float f(float x) {
    const float r = fmaxf(x, 0.0f);
    return r * r;
  }
  __device__ static float df(float x) { return 2.0f * fmaxf(x, 0.0f); }
};
struct Tanh {
  __device__ static float f(float x) { return tanhf(x); }
  __device__ static float df(float x) {
    const float t = tanhf(x);
    return 1.0f - t * t;
  }
};
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ __forceinline__ int64_t thread_index() {
  return blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
}
__device__ __forceinline__ int64_t thread_count() { return int64_t{gridDim.x} * blockDim.x; }

// out(n) = F(inp(n))
template <class F, class T, int VW>
__global__ void act_forward_kernel(T* out, const T* inp, int64_t n) {
  const int64_t nv = n / VW;
  for (int64_t k = thread_index(); k < nv; k += thread_count()) {
    float v[VW];
    load_vec<VW>(inp + k * VW, v);
#pragma unroll
    for (int i = 0; i < VW; ++i) v[i] = F::f(v[i]);
    store_vec<VW>(out + k * VW, v);
  }
  for (int64_t i = nv * VW + thread_index(); i < n; i += thread_count())
    out[i] = from_f32<T>(F::f(to_f32(inp[i])));
}

// dinp(n) = dout(n) * F'(inp(n))
template <class F, class T, int VW>
__global__ void act_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t n) {
  const int64_t nv = n / VW;
  for (int64_t k = thread_index(); k < nv; k += thread_count()) {
    float x[VW], g[VW];
    load_vec<VW>(inp + k * VW, x);
    load_vec<VW>(dout + k * VW, g);
#pragma unroll
    for (int i = 0; i < VW; ++i) x[i] = g[i] * F::df(x[i]);
    store_vec<VW>(dinp + k * VW, x);
  }
  for (int64_t i = nv * VW + thread_index(); i < n; i += thread_count())
    dinp[i] = from_f32<T>(to_f32(dout[i]) * F::df(to_f32(inp[i])));
}

// out(N,H), inp(N,2H). VW divides H, so a vector never straddles two rows.
template <class T, int VW>
__global__ void swiglu_forward_kernel(T* out, const T* inp, int64_t N, int64_t H) {
  const int64_t nv = N * H / VW;
  for (int64_t k = thread_index(); k < nv; k += thread_count()) {
    const int64_t e = k * VW, n = e / H, h = e - n * H;
    const T* gate = inp + n * 2 * H + h;
    float g[VW], u[VW];
    load_vec<VW>(gate, g);
    load_vec<VW>(gate + H, u);
#pragma unroll
    for (int i = 0; i < VW; ++i) g[i] = g[i] * sigmoid(g[i]) * u[i];
    store_vec<VW>(out + e, g);
  }
}

// dinp(N,2H), inp(N,2H), dout(N,H)
template <class T, int VW>
__global__ void swiglu_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t N, int64_t H) {
  const int64_t nv = N * H / VW;
  for (int64_t k = thread_index(); k < nv; k += thread_count()) {
    const int64_t e = k * VW, n = e / H, h = e - n * H;
    const T* gate = inp + n * 2 * H + h;
    T* dgate = dinp + n * 2 * H + h;
    float g[VW], u[VW], d[VW], dg[VW], du[VW];
    load_vec<VW>(gate, g);
    load_vec<VW>(gate + H, u);
    load_vec<VW>(dout + e, d);
#pragma unroll
    for (int i = 0; i < VW; ++i) {
      const float sig = sigmoid(g[i]);
      // silu'(g) = sig + g sig (1 - sig)
      dg[i] = d[i] * u[i] * (sig * (1.0f + g[i] * (1.0f - sig)));
      du[i] = d[i] * g[i] * sig;
    }
    store_vec<VW>(dgate, dg);
    store_vec<VW>(dgate + H, du);
  }
}

// inp(N,2H) and the (N,H) tensor on the other side; returns {N, H}.
struct Split {
  int64_t N, H;
};
Split check_swiglu(const char* op, const DLTensor* inp, const char* half_name,
                   const DLTensor* half) {
  need(op, "inp", inp);
  need(op, half_name, half);
  need_float(op, "inp", inp);
  need_same_dtype(op, half_name, half, "inp", inp);
  const int64_t two_h = last_dim(op, "inp", inp);
  if (two_h <= 0 || two_h % 2 != 0)
    fail(op, "inp's last dimension is " + std::to_string(two_h) +
                 ", expected an even 2H ([gate | up])");
  return {numel(inp) / two_h, two_h / 2};
}

// out = F(inp), elementwise; out may alias inp.
template <class F>
loom_error* act_forward(loom_backend* be, const char* op, DLTensor* out,
                        const DLTensor* inp) noexcept {
  return run_op(be, op, [&](loom_backend& b) {
    need(op, "out", out);
    need(op, "inp", inp);
    need_float(op, "inp", inp);
    need_same_dtype(op, "out", out, "inp", inp);
    const int64_t n = numel(inp);
    const void* px = device_ptr(b, inp, op, "inp", n);
    void* py = device_ptr(b, out, op, "out", n);
    if (n == 0) return;
    dispatch_float(op, "inp", inp, [&](auto tt) {
      using T = typename decltype(tt)::type;
      with_vec<T>(true, {px, py}, [&](auto vw) {
        constexpr int VW = decltype(vw)::value;
        act_forward_kernel<F, T, VW><<<grid_for(n / VW + 1), kThreads, 0, b.stream>>>(
            static_cast<T*>(py), static_cast<const T*>(px), n);
        LOOM_CUDA_LAUNCHED(op);
      });
    });
  });
}

// dinp = dout * F'(inp), elementwise (written, not added); dinp may alias inp or dout.
template <class F>
loom_error* act_backward(loom_backend* be, const char* op, DLTensor* dinp, const DLTensor* inp,
                         const DLTensor* dout) noexcept {
  return run_op(be, op, [&](loom_backend& b) {
    need(op, "dinp", dinp);
    need(op, "inp", inp);
    need(op, "dout", dout);
    need_float(op, "inp", inp);
    need_same_dtype(op, "dinp", dinp, "inp", inp);
    need_same_dtype(op, "dout", dout, "inp", inp);
    const int64_t n = numel(inp);
    const void* px = device_ptr(b, inp, op, "inp", n);
    const void* pg = device_ptr(b, dout, op, "dout", n);
    void* pdx = device_ptr(b, dinp, op, "dinp", n);
    if (n == 0) return;
    dispatch_float(op, "inp", inp, [&](auto tt) {
      using T = typename decltype(tt)::type;
      with_vec<T>(true, {px, pg, pdx}, [&](auto vw) {
        constexpr int VW = decltype(vw)::value;
        act_backward_kernel<F, T, VW><<<grid_for(n / VW + 1), kThreads, 0, b.stream>>>(
            static_cast<T*>(pdx), static_cast<const T*>(px), static_cast<const T*>(pg), n);
        LOOM_CUDA_LAUNCHED(op);
      });
    });
  });
}

}  // namespace

loom_error* gelu_forward(loom_backend* be, DLTensor* out, const DLTensor* inp) noexcept {
  return act_forward<GeluTanh>(be, "gelu_forward", out, inp);
}
loom_error* gelu_backward(loom_backend* be, DLTensor* dinp, const DLTensor* inp,
                          const DLTensor* dout) noexcept {
  return act_backward<GeluTanh>(be, "gelu_backward", dinp, inp, dout);
}
loom_error* gelu_erf_forward(loom_backend* be, DLTensor* out, const DLTensor* inp) noexcept {
  return act_forward<GeluErf>(be, "gelu_erf_forward", out, inp);
}
loom_error* gelu_erf_backward(loom_backend* be, DLTensor* dinp, const DLTensor* inp,
                              const DLTensor* dout) noexcept {
  return act_backward<GeluErf>(be, "gelu_erf_backward", dinp, inp, dout);
}
loom_error* tanh_forward(loom_backend* be, DLTensor* out, const DLTensor* inp) noexcept {
  return act_forward<Tanh>(be, "tanh_forward", out, inp);
}
loom_error* tanh_backward(loom_backend* be, DLTensor* dinp, const DLTensor* inp,
                          const DLTensor* dout) noexcept {
  return act_backward<Tanh>(be, "tanh_backward", dinp, inp, dout);
}
loom_error* squared_relu_forward(loom_backend* be, DLTensor* out, const DLTensor* inp) noexcept {
  return act_forward<SquaredRelu>(be, "squared_relu_forward", out, inp);
}
loom_error* squared_relu_backward(loom_backend* be, DLTensor* dinp, const DLTensor* inp,
                                  const DLTensor* dout) noexcept {
  return act_backward<SquaredRelu>(be, "squared_relu_backward", dinp, inp, dout);
}

loom_error* swiglu_forward(loom_backend* be, DLTensor* out, const DLTensor* inp) noexcept {
  return run_op(be, "swiglu_forward", [&](loom_backend& b) {
    const char* op = "swiglu_forward";
    const Split sp = check_swiglu(op, inp, "out", out);
    const int64_t N = sp.N, H = sp.H;
    const void* px = device_ptr(b, inp, op, "inp", N * 2 * H);
    void* py = device_ptr(b, out, op, "out", N * H);
    if (N == 0) return;
    dispatch_float(op, "inp", inp, [&](auto tt) {
      using T = typename decltype(tt)::type;
      with_vec<T>(H % kVec<T> == 0, {px, py}, [&](auto vw) {
        constexpr int VW = decltype(vw)::value;
        swiglu_forward_kernel<T, VW><<<grid_for(N * H / VW), kThreads, 0, b.stream>>>(
            static_cast<T*>(py), static_cast<const T*>(px), N, H);
        LOOM_CUDA_LAUNCHED(op);
      });
    });
  });
}

loom_error* swiglu_backward(loom_backend* be, DLTensor* dinp, const DLTensor* inp,
                            const DLTensor* dout) noexcept {
  return run_op(be, "swiglu_backward", [&](loom_backend& b) {
    const char* op = "swiglu_backward";
    const Split sp = check_swiglu(op, inp, "dout", dout);
    const int64_t N = sp.N, H = sp.H;
    need(op, "dinp", dinp);
    need_same_dtype(op, "dinp", dinp, "inp", inp);
    const void* px = device_ptr(b, inp, op, "inp", N * 2 * H);
    const void* pg = device_ptr(b, dout, op, "dout", N * H);
    void* pdx = device_ptr(b, dinp, op, "dinp", N * 2 * H);
    if (N == 0) return;
    dispatch_float(op, "inp", inp, [&](auto tt) {
      using T = typename decltype(tt)::type;
      with_vec<T>(H % kVec<T> == 0, {px, pg, pdx}, [&](auto vw) {
        constexpr int VW = decltype(vw)::value;
        swiglu_backward_kernel<T, VW><<<grid_for(N * H / VW), kThreads, 0, b.stream>>>(
            static_cast<T*>(pdx), static_cast<const T*>(px), static_cast<const T*>(pg), N, H);
        LOOM_CUDA_LAUNCHED(op);
      });
    });
  });
}

}  // namespace loom_cuda
