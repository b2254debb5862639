// Activations.
//   gelu_forward:    out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   (GPT-2's tanh form)
//   gelu_backward:   dinp = dout * gelu'(inp)
//   gelu_erf_*:      out = 0.5 x (1 + erf(x / sqrt 2))                         (BERT's exact form)
//   tanh_*:          out = tanh(x)                                             (BERT's pooler)
//   squared_relu_*:  out = max(x, 0)^2                                (Nemotron-H's MLP, ABI 2.24)
//   swiglu_forward:  inp(N,2H) = [gate | up]; out(N,H) = silu(gate) * up
//   swiglu_backward: dinp(N,2H) = [dout * up * silu'(gate) | dout * silu(gate)]
// Activation gradients are written (=). Elementwise, so out/dinp may alias inp or dout for
// GELU. f32 uses the vectorisable exp of vec_math.hpp.
#include <omp.h>

#include <cmath>

#include "cpu_backend.hpp"
#include "loom/cpp/vec_math.hpp"
#include "mixed.hpp"

namespace loom_cpu {
namespace {

constexpr double kGeluK0 = 0.7978845608028654;  // sqrt(2/pi)
constexpr double kGeluK1 = 0.044715;

// The elementwise activations as f (forward) and df (its derivative), each applied by one
// kernel pair below. Always inlined: a call left in the multiversioned kernels would run
// baseline code (no FMA, no vectors) and change the results by rounding.
#define LOOM_ACT_INLINE __attribute__((always_inline)) inline
// GELU_TANH is evaluated as x * sigmoid(2u), which equals 0.5 x (1 + tanh(u)) exactly but
// keeps its relative accuracy for negative x: in f32, 1 + tanh(u) cancels to 0 once tanh(u)
// rounds to -1 (u < -8.3), while sigmoid(2u) = 1 / (1 + exp(-2u)) stays accurate down to
// ~1e-38.
struct GeluTanh {
  template <class T>
  LOOM_ACT_INLINE static T f(T x) {
    const T u = T(kGeluK0) * (x + T(kGeluK1) * x * x * x);
    return x / (T(1) + loom::vexp(T(-2) * u));
  }
  // d/dx [x s] = s + x * 2 s (1 - s) * du/dx, du/dx = k0 (1 + 3 k1 x^2)
  template <class T>
  LOOM_ACT_INLINE static T df(T x) {
    const T k0 = T(kGeluK0), k1 = T(kGeluK1);
    const T s = T(1) / (T(1) + loom::vexp(T(-2) * k0 * (x + k1 * x * x * x)));  // sigmoid(2u)
    return s + T(2) * x * s * (T(1) - s) * k0 * (T(1) + T(3) * k1 * x * x);
  }
};
// GELU: 0.5 x (1 + erf(x / sqrt 2)) (BERT's, torch.nn.functional.gelu); d/dx = Phi(x) + x phi(x).
struct GeluErf {
  template <class T>
  LOOM_ACT_INLINE static T f(T x) {
    return T(0.5) * x * (T(1) + std::erf(x * T(0.7071067811865476)));
  }
  template <class T>
  LOOM_ACT_INLINE static T df(T x) {
    return T(0.5) * (T(1) + std::erf(x * T(0.7071067811865476))) +
           x * T(0.3989422804014327) * std::exp(T(-0.5) * x * x);
  }
};
// Squared ReLU (Megatron's --squared-relu): max(x, 0)^2, d/dx = 2 max(x, 0). Both are exact
// in floating point up to the one rounding of the product.
struct SquaredRelu {
  template <class T>
  LOOM_ACT_INLINE static T f(T x) {
    const T r = x > T(0) ? x : T(0);
    return r * r;
  }
  template <class T>
  LOOM_ACT_INLINE static T df(T x) {
    return x > T(0) ? T(2) * x : T(0);
  }
};
struct Tanh {  // BERT's pooler
  template <class T>
  LOOM_ACT_INLINE static T f(T x) {
    return std::tanh(x);
  }
  template <class T>
  LOOM_ACT_INLINE static T df(T x) {
    const T t = std::tanh(x);
    return T(1) - t * t;
  }
};

template <class F, class T>
LOOM_CPU_CLONES void act_forward_kernel(T* out, const T* inp, int64_t n, int nt) {
#pragma omp parallel for simd num_threads(nt) schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = F::f(inp[i]);
}

template <class F, class T>
LOOM_CPU_CLONES void act_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t n, int nt) {
#pragma omp parallel for simd num_threads(nt) schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) dinp[i] = dout[i] * F::df(inp[i]);
}

template <class T>
LOOM_CPU_CLONES void swiglu_forward_kernel(T* out, const T* inp, int64_t N, int64_t H, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static) if (N * H >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* gate = inp + n * 2 * H;
    const T* up = gate + H;
    T* y = out + n * H;
#pragma omp simd
    for (int64_t h = 0; h < H; ++h) {
      T g = gate[h];
      T sig = T(1) / (T(1) + loom::vexp(-g));
      y[h] = g * sig * up[h];
    }
  }
}

template <class T>
LOOM_CPU_CLONES void swiglu_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t N,
                                            int64_t H, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static) if (N * H >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* gate = inp + n * 2 * H;
    const T* up = gate + H;
    const T* g_out = dout + n * H;
    T* dgate = dinp + n * 2 * H;
    T* dup = dgate + H;
#pragma omp simd
    for (int64_t h = 0; h < H; ++h) {
      T g = gate[h], u = up[h], d = g_out[h];
      T sig = T(1) / (T(1) + loom::vexp(-g));
      // silu'(g) = sig + g sig (1 - sig)
      dgate[h] = d * u * (sig * (T(1) + g * (T(1) - sig)));
      dup[h] = d * g * sig;
    }
  }
}

}  // namespace

namespace {

using ForwardOp = loom_error* (*)(loom_backend*, DLTensor*, const DLTensor*) noexcept;
using BackwardOp = loom_error* (*)(loom_backend*, DLTensor*, const DLTensor*,
                                   const DLTensor*) noexcept;

// The 16-bit path of an (out, inp) activation: true when the call was a mixed-precision one
// and has run as `self` on f32 stand-ins. One staging for every activation's forward.
bool staged_forward(loom_backend& b, const Check& ck, ForwardOp self, DLTensor* out,
                    const DLTensor* inp) {
  if (!Staging::any_half({out, inp})) return false;
  Staging st(ck, b.threads);
  const DLTensor* inp_ = st.in("inp", inp);
  DLTensor* out_ = st.out("out", out);
  st.run(b, [&] { return self(&b, out_, inp_); });
  return true;
}

// The same for a (dinp, inp, dout) backward.
bool staged_backward(loom_backend& b, const Check& ck, BackwardOp self, DLTensor* dinp,
                     const DLTensor* inp, const DLTensor* dout) {
  if (!Staging::any_half({dinp, inp, dout})) return false;
  Staging st(ck, b.threads);
  const DLTensor* inp_ = st.in("inp", inp);
  const DLTensor* dout_ = st.in("dout", dout);
  DLTensor* dinp_ = st.out("dinp", dinp);
  st.run(b, [&] { return self(&b, dinp_, inp_, dout_); });
  return true;
}

// An elementwise activation's forward op: checks, 16-bit staging (re-entering `self` in
// f32), then F's kernel.
template <class F>
loom_error* elementwise_forward(loom_backend* be, const char* name, ForwardOp self, DLTensor* out,
                                const DLTensor* inp) noexcept {
  return run_op(be, name, [&](loom_backend& b) {
    Check ck{name};
    if (staged_forward(b, ck, self, out, inp)) return;
    ck.tensor("out", out);
    ck.tensor("inp", inp);
    ck.same_dtype("out", out, "inp", inp);
    int64_t n = loom_tensor_numel(inp);
    ck.numel("out", out, n);
    dispatch_float(ck, "inp", inp, [&](auto tag) {
      using T = decltype(tag);
      act_forward_kernel<F>(data_of<T>(out), data_of<const T>(inp), n, b.threads);
    });
  });
}

template <class F>
loom_error* elementwise_backward(loom_backend* be, const char* name, BackwardOp self,
                                 DLTensor* dinp, const DLTensor* inp,
                                 const DLTensor* dout) noexcept {
  return run_op(be, name, [&](loom_backend& b) {
    Check ck{name};
    if (staged_backward(b, ck, self, dinp, inp, dout)) return;
    ck.tensor("dinp", dinp);
    ck.tensor("inp", inp);
    ck.tensor("dout", dout);
    ck.same_dtype("dinp", dinp, "inp", inp);
    ck.same_dtype("dout", dout, "inp", inp);
    int64_t n = loom_tensor_numel(inp);
    ck.numel("dinp", dinp, n);
    ck.numel("dout", dout, n);
    dispatch_float(ck, "inp", inp, [&](auto tag) {
      using T = decltype(tag);
      act_backward_kernel<F>(data_of<T>(dinp), data_of<const T>(inp), data_of<const T>(dout), n,
                             b.threads);
    });
  });
}

}  // namespace

loom_error* op_gelu_forward(loom_backend* be, DLTensor* out, const DLTensor* inp) noexcept {
  return elementwise_forward<GeluTanh>(be, "gelu_forward", op_gelu_forward, out, inp);
}
loom_error* op_gelu_backward(loom_backend* be, DLTensor* dinp, const DLTensor* inp,
                             const DLTensor* dout) noexcept {
  return elementwise_backward<GeluTanh>(be, "gelu_backward", op_gelu_backward, dinp, inp, dout);
}
loom_error* op_gelu_erf_forward(loom_backend* be, DLTensor* out, const DLTensor* inp) noexcept {
  return elementwise_forward<GeluErf>(be, "gelu_erf_forward", op_gelu_erf_forward, out, inp);
}
loom_error* op_gelu_erf_backward(loom_backend* be, DLTensor* dinp, const DLTensor* inp,
                                 const DLTensor* dout) noexcept {
  return elementwise_backward<GeluErf>(be, "gelu_erf_backward", op_gelu_erf_backward, dinp, inp,
                                       dout);
}
loom_error* op_tanh_forward(loom_backend* be, DLTensor* out, const DLTensor* inp) noexcept {
  return elementwise_forward<Tanh>(be, "tanh_forward", op_tanh_forward, out, inp);
}
loom_error* op_tanh_backward(loom_backend* be, DLTensor* dinp, const DLTensor* inp,
                             const DLTensor* dout) noexcept {
  return elementwise_backward<Tanh>(be, "tanh_backward", op_tanh_backward, dinp, inp, dout);
}
loom_error* op_squared_relu_forward(loom_backend* be, DLTensor* out, const DLTensor* inp) noexcept {
  return elementwise_forward<SquaredRelu>(be, "squared_relu_forward", op_squared_relu_forward, out,
                                          inp);
}
loom_error* op_squared_relu_backward(loom_backend* be, DLTensor* dinp, const DLTensor* inp,
                                     const DLTensor* dout) noexcept {
  return elementwise_backward<SquaredRelu>(be, "squared_relu_backward", op_squared_relu_backward,
                                           dinp, inp, dout);
}

namespace {
// inp(N,2H) and the (N,H) tensor on the other side; returns {N, H}.
std::pair<int64_t, int64_t> check_swiglu(const Check& ck, const DLTensor* inp,
                                         const char* half_name, const DLTensor* half) {
  ck.tensor("inp", inp);
  ck.tensor(half_name, half);
  ck.same_dtype(half_name, half, "inp", inp);
  int64_t two_h = ck.last_dim("inp", inp);
  if (two_h <= 0 || two_h % 2 != 0)
    ck.fail("inp's last dimension is " + std::to_string(two_h) +
            ", expected an even 2H ([gate | up])");
  int64_t H = two_h / 2, N = loom_tensor_numel(inp) / two_h;
  ck.numel(half_name, half, N * H);
  return {N, H};
}
}  // namespace

loom_error* op_swiglu_forward(loom_backend* be, DLTensor* out, const DLTensor* inp) noexcept {
  return run_op(be, "swiglu_forward", [&](loom_backend& b) {
    Check ck{"swiglu_forward"};
    if (staged_forward(b, ck, op_swiglu_forward, out, inp)) return;
    auto [N, H] = check_swiglu(ck, inp, "out", out);
    dispatch_float(ck, "inp", inp, [&](auto tag) {
      using T = decltype(tag);
      swiglu_forward_kernel(data_of<T>(out), data_of<const T>(inp), N, H, b.threads);
    });
  });
}

loom_error* op_swiglu_backward(loom_backend* be, DLTensor* dinp, const DLTensor* inp,
                               const DLTensor* dout) noexcept {
  return run_op(be, "swiglu_backward", [&](loom_backend& b) {
    Check ck{"swiglu_backward"};
    if (staged_backward(b, ck, op_swiglu_backward, dinp, inp, dout)) return;
    auto [N, H] = check_swiglu(ck, inp, "dout", dout);
    ck.like("dinp", dinp, "inp", inp, N * 2 * H);
    dispatch_float(ck, "inp", inp, [&](auto tag) {
      using T = decltype(tag);
      swiglu_backward_kernel(data_of<T>(dinp), data_of<const T>(inp), data_of<const T>(dout), N, H,
                             b.threads);
    });
  });
}

}  // namespace loom_cpu
