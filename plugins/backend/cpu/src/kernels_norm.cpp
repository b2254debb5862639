// Normalisation layers, per row of C channels.
//   layernorm_forward:  out(N,C) = (inp - mean) * rstd * weight(C) + bias(C)
//                       mean(N), rstd(N) = 1/sqrt(var + eps) saved (biased variance, like
//                       PyTorch); bias may be NULL
//   layernorm_backward: dinp(N,C) = ; dweight(C) += ; dbias(C) += (may be NULL)
//   rmsnorm_forward:    out(N,C) = inp * rstd * weight(C), rstd(N) = 1/sqrt(mean(inp^2) + eps)
//   rmsnorm_backward:   dinp(N,C) = ; dweight(C) +=
//   rmsnorm_gated_*:    Mamba-2's (loom.norm-gate/1): the RMSNorm of g = inp * silu(gate) over
//                       groups of group_size channels, rstd (N * C / group_size); backward
//                       also writes dgate (N,C) =, g recomputed
// Activation gradients are written (=), parameter gradients accumulate (+=).
// Saved statistics are f32, or the data dtype (the f64 finite-difference path keeps them f64
// so the backward sees exact values).
//
// Backward runs in two passes: the weight/bias gradients column-block-parallel (each thread
// owns some channels and sums every row in order: no races, no per-thread buffers, same
// result for any thread count), then dinp row-parallel. Doing the column pass first means dinp
// may alias dout or inp: every read of a row happens before that row is overwritten.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "cpu_backend.hpp"
#include "mixed.hpp"

namespace loom_cpu {
namespace {

constexpr int64_t kColBlock = 64;

template <class T, class S>
LOOM_CPU_CLONES void layernorm_forward_kernel(T* out, S* mean, S* rstd, const T* inp, const T* w,
                                              const T* bias, int64_t N, int64_t C, T eps, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static) if (N * C >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    T* y = out + n * C;
    T s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < C; ++c) s += x[c];
    T m = s / static_cast<T>(C);
    // Two-pass variance: sum((x-m)^2) does not cancel the way E[x^2] - m^2 does.
    T v = 0;
#pragma omp simd reduction(+ : v)
    for (int64_t c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
    T rs = T(1) / std::sqrt(v / static_cast<T>(C) + eps);
    if (bias) {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) y[c] = (x[c] - m) * rs * w[c] + bias[c];
    } else {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) y[c] = (x[c] - m) * rs * w[c];
    }
    mean[n] = static_cast<S>(m);
    rstd[n] = static_cast<S>(rs);
  }
}

template <class T, class S>
LOOM_CPU_CLONES void layernorm_backward_kernel(T* dinp, T* dw, T* db, const T* dout, const T* inp,
                                               const T* w, const S* mean, const S* rstd, int64_t N,
                                               int64_t C, int nt) {
  int64_t nblocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for num_threads(nt) schedule(static) if (N * C >= kParallelMin)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    int64_t c0 = blk * kColBlock, bw = std::min(kColBlock, C - c0);
    T aw[kColBlock] = {}, ab[kColBlock] = {};
    for (int64_t n = 0; n < N; ++n) {
      const T* x = inp + n * C + c0;
      const T* g = dout + n * C + c0;
      T m = static_cast<T>(mean[n]), rs = static_cast<T>(rstd[n]);
#pragma omp simd
      for (int64_t c = 0; c < bw; ++c) {
        aw[c] += g[c] * ((x[c] - m) * rs);
        ab[c] += g[c];
      }
    }
    for (int64_t c = 0; c < bw; ++c) {
      dw[c0 + c] += aw[c];
      if (db) db[c0 + c] += ab[c];
    }
  }

#pragma omp parallel for num_threads(nt) schedule(static) if (N * C >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    const T* g = dout + n * C;
    T* dx = dinp + n * C;
    T m = static_cast<T>(mean[n]), rs = static_cast<T>(rstd[n]);
    // d(out)/d(xhat) = dout * w; dinp = rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm*xhat))
    T s1 = 0, s2 = 0;
#pragma omp simd reduction(+ : s1, s2)
    for (int64_t c = 0; c < C; ++c) {
      T dn = g[c] * w[c];
      s1 += dn;
      s2 += dn * ((x[c] - m) * rs);
    }
    T mean_dn = s1 / static_cast<T>(C), mean_dnx = s2 / static_cast<T>(C);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      T xhat = (x[c] - m) * rs;
      dx[c] = rs * (g[c] * w[c] - mean_dn - xhat * mean_dnx);
    }
  }
}

template <class T, class S>
LOOM_CPU_CLONES void rmsnorm_forward_kernel(T* out, S* rstd, const T* inp, const T* w, int64_t N,
                                            int64_t C, T eps, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static) if (N * C >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    T* y = out + n * C;
    T ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < C; ++c) ss += x[c] * x[c];
    T rs = T(1) / std::sqrt(ss / static_cast<T>(C) + eps);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[c] = x[c] * rs * w[c];
    rstd[n] = static_cast<S>(rs);
  }
}

template <class T, class S>
LOOM_CPU_CLONES void rmsnorm_backward_kernel(T* dinp, T* dw, const T* dout, const T* inp,
                                             const T* w, const S* rstd, int64_t N, int64_t C,
                                             int nt) {
  int64_t nblocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for num_threads(nt) schedule(static) if (N * C >= kParallelMin)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    int64_t c0 = blk * kColBlock, bw = std::min(kColBlock, C - c0);
    T aw[kColBlock] = {};
    for (int64_t n = 0; n < N; ++n) {
      const T* x = inp + n * C + c0;
      const T* g = dout + n * C + c0;
      T rs = static_cast<T>(rstd[n]);
#pragma omp simd
      for (int64_t c = 0; c < bw; ++c) aw[c] += g[c] * (x[c] * rs);
    }
    for (int64_t c = 0; c < bw; ++c) dw[c0 + c] += aw[c];
  }

#pragma omp parallel for num_threads(nt) schedule(static) if (N * C >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    const T* g = dout + n * C;
    T* dx = dinp + n * C;
    T rs = static_cast<T>(rstd[n]);
    // dinp = rstd * (dnorm - xhat * mean(dnorm * xhat)), dnorm = dout * w, xhat = x * rstd
    T s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < C; ++c) s += g[c] * w[c] * (x[c] * rs);
    T mean_dnx = s / static_cast<T>(C);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) dx[c] = rs * (g[c] * w[c] - (x[c] * rs) * mean_dnx);
  }
}

// silu(z) = z sigmoid(z) and its derivative sigmoid(z) (1 + z (1 - sigmoid(z))).
template <class T>
T sigmoid_of(T z) {
  return T(1) / (T(1) + std::exp(-z));
}

template <class T, class S>
LOOM_CPU_CLONES void rmsnorm_gated_forward_kernel(T* out, S* rstd, const T* inp, const T* gate,
                                                  const T* w, int64_t N, int64_t C, int64_t gs,
                                                  T eps, int nt) {
  const int64_t groups = C / gs;
#pragma omp parallel for num_threads(nt) schedule(static) if (N * C >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < groups; ++k) {
      const int64_t at = n * C + k * gs;
      const T *x = inp + at, *z = gate + at;
      T* y = out + at;
      T ss = 0;
      for (int64_t c = 0; c < gs; ++c) {
        const T g = x[c] * z[c] * sigmoid_of(z[c]);
        y[c] = g;  // g, scaled below
        ss += g * g;
      }
      const T rs = T(1) / std::sqrt(ss / static_cast<T>(gs) + eps);
      for (int64_t c = 0; c < gs; ++c) y[c] = y[c] * rs * w[k * gs + c];
      rstd[n * groups + k] = static_cast<S>(rs);
    }
  }
}

template <class T, class S>
LOOM_CPU_CLONES void rmsnorm_gated_backward_kernel(T* dinp, T* dgate, T* dw, const T* dout,
                                                   const T* inp, const T* gate, const T* w,
                                                   const S* rstd, int64_t N, int64_t C, int64_t gs,
                                                   int nt) {
  const int64_t groups = C / gs, nblocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for num_threads(nt) schedule(static) if (N * C >= kParallelMin)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kColBlock, bw = std::min(kColBlock, C - c0);
    T aw[kColBlock] = {};
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < bw; ++c) {
        const int64_t i = n * C + c0 + c;
        const T g = inp[i] * gate[i] * sigmoid_of(gate[i]);
        aw[c] += dout[i] * g * static_cast<T>(rstd[n * groups + (c0 + c) / gs]);
      }
    for (int64_t c = 0; c < bw; ++c) dw[c0 + c] += aw[c];
  }

  // dg = rstd * (dnorm - xhat * mean(dnorm * xhat)) per group, dnorm = dout * w, xhat = g *
  // rstd; then dinp = dg silu(gate), dgate = dg inp silu'(gate). Each element is read before
  // it is written, so dinp and dgate may alias dout, inp or gate.
#pragma omp parallel for num_threads(nt) schedule(static) if (N * C >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < groups; ++k) {
      const int64_t at = n * C + k * gs;
      const T rs = static_cast<T>(rstd[n * groups + k]);
      T s = 0;
      for (int64_t c = 0; c < gs; ++c) {
        const T z = gate[at + c], xhat = inp[at + c] * z * sigmoid_of(z) * rs;
        s += dout[at + c] * w[k * gs + c] * xhat;
      }
      const T mean_dnx = s / static_cast<T>(gs);
      for (int64_t c = 0; c < gs; ++c) {
        const T x = inp[at + c], z = gate[at + c], sg = sigmoid_of(z);
        const T dg = rs * (dout[at + c] * w[k * gs + c] - x * z * sg * rs * mean_dnx);
        dinp[at + c] = dg * z * sg;
        dgate[at + c] = dg * x * sg * (T(1) + z * (T(1) - sg));
      }
    }
  }
}

// Rows and channels of a normalisation call: C from inp's last dimension, N the rest.
struct Rows {
  int64_t N, C;
};
Rows check_rows(const Check& ck, const DLTensor* inp) {
  ck.tensor("inp", inp);
  ck.floating("inp", inp);
  int64_t C = ck.last_dim("inp", inp);
  if (C <= 0) ck.fail("inp has " + std::to_string(C) + " channels");
  return {loom_tensor_numel(inp) / C, C};
}
void check_stat(const Check& ck, const char* name, const DLTensor* t, const DLTensor* inp,
                int64_t N) {
  ck.tensor(name, t);
  ck.stat_dtype(name, t, inp);
  ck.numel(name, t, N);
}
void check_eps(const Check& ck, double eps) {
  if (!(eps >= 0) || !std::isfinite(eps)) ck.fail("eps = " + std::to_string(eps) + " must be >= 0");
}

}  // namespace

loom_error* op_layernorm_forward(loom_backend* be, DLTensor* out, DLTensor* mean, DLTensor* rstd,
                                 const DLTensor* inp, const DLTensor* weight, const DLTensor* bias,
                                 double eps) noexcept {
  return run_op(be, "layernorm_forward", [&](loom_backend& b) {
    Check ck{"layernorm_forward"};
    if (Staging::any_half({out, inp, weight, bias})) {
      Staging st(ck, b.threads);
      st.f32_only("mean", mean);
      st.f32_only("rstd", rstd);
      const DLTensor* inp_ = st.in("inp", inp);
      const DLTensor* weight_ = st.in("weight", weight);
      const DLTensor* bias_ = st.in("bias", bias);
      DLTensor* out_ = st.out("out", out);
      DLTensor* mean_ = st.out("mean", mean);
      DLTensor* rstd_ = st.out("rstd", rstd);
      st.run(b, [&] {
        return op_layernorm_forward(&b, out_, mean_, rstd_, inp_, weight_, bias_, eps);
      });
      return;
    }
    Rows r = check_rows(ck, inp);
    ck.like("out", out, "inp", inp, r.N * r.C);
    ck.like("weight", weight, "inp", inp, r.C);
    if (bias) ck.like("bias", bias, "inp", inp, r.C);
    check_stat(ck, "mean", mean, inp, r.N);
    check_stat(ck, "rstd", rstd, inp, r.N);
    ck.same_dtype("rstd", rstd, "mean", mean);
    check_eps(ck, eps);
    dispatch_float_stat(ck, "inp", inp, mean, [&](auto t, auto s) {
      using T = decltype(t);
      using S = decltype(s);
      layernorm_forward_kernel(data_of<T>(out), data_of<S>(mean), data_of<S>(rstd),
                               data_of<const T>(inp), data_of<const T>(weight),
                               bias ? data_of<const T>(bias) : nullptr, r.N, r.C,
                               static_cast<T>(eps), b.threads);
    });
  });
}

loom_error* op_layernorm_backward(loom_backend* be, DLTensor* dinp, DLTensor* dweight,
                                  DLTensor* dbias, const DLTensor* dout, const DLTensor* inp,
                                  const DLTensor* weight, const DLTensor* mean,
                                  const DLTensor* rstd) noexcept {
  return run_op(be, "layernorm_backward", [&](loom_backend& b) {
    Check ck{"layernorm_backward"};
    if (Staging::any_half({dinp, dweight, dbias, dout, inp, weight})) {
      Staging st(ck, b.threads);
      st.f32_only("mean", mean);
      st.f32_only("rstd", rstd);
      const DLTensor* dout_ = st.in("dout", dout);
      const DLTensor* inp_ = st.in("inp", inp);
      const DLTensor* weight_ = st.in("weight", weight);
      const DLTensor* mean_ = st.in("mean", mean);
      const DLTensor* rstd_ = st.in("rstd", rstd);
      DLTensor* dinp_ = st.out("dinp", dinp);
      DLTensor* dweight_ = st.out("dweight", dweight);
      DLTensor* dbias_ = st.out("dbias", dbias);
      st.run(b, [&] {
        return op_layernorm_backward(&b, dinp_, dweight_, dbias_, dout_, inp_, weight_, mean_,
                                     rstd_);
      });
      return;
    }
    Rows r = check_rows(ck, inp);
    ck.like("dinp", dinp, "inp", inp, r.N * r.C);
    ck.like("dout", dout, "inp", inp, r.N * r.C);
    ck.like("weight", weight, "inp", inp, r.C);
    ck.like("dweight", dweight, "inp", inp, r.C);
    if (dbias) ck.like("dbias", dbias, "inp", inp, r.C);
    check_stat(ck, "mean", mean, inp, r.N);
    check_stat(ck, "rstd", rstd, inp, r.N);
    ck.same_dtype("rstd", rstd, "mean", mean);
    dispatch_float_stat(ck, "inp", inp, mean, [&](auto t, auto s) {
      using T = decltype(t);
      using S = decltype(s);
      layernorm_backward_kernel(
          data_of<T>(dinp), data_of<T>(dweight), dbias ? data_of<T>(dbias) : nullptr,
          data_of<const T>(dout), data_of<const T>(inp), data_of<const T>(weight),
          data_of<const S>(mean), data_of<const S>(rstd), r.N, r.C, b.threads);
    });
  });
}

loom_error* op_rmsnorm_forward(loom_backend* be, DLTensor* out, DLTensor* rstd, const DLTensor* inp,
                               const DLTensor* weight, double eps) noexcept {
  return run_op(be, "rmsnorm_forward", [&](loom_backend& b) {
    Check ck{"rmsnorm_forward"};
    if (Staging::any_half({out, inp, weight})) {
      Staging st(ck, b.threads);
      st.f32_only("rstd", rstd);
      const DLTensor* inp_ = st.in("inp", inp);
      const DLTensor* weight_ = st.in("weight", weight);
      DLTensor* out_ = st.out("out", out);
      DLTensor* rstd_ = st.out("rstd", rstd);
      st.run(b, [&] { return op_rmsnorm_forward(&b, out_, rstd_, inp_, weight_, eps); });
      return;
    }
    Rows r = check_rows(ck, inp);
    ck.like("out", out, "inp", inp, r.N * r.C);
    ck.like("weight", weight, "inp", inp, r.C);
    check_stat(ck, "rstd", rstd, inp, r.N);
    check_eps(ck, eps);
    dispatch_float_stat(ck, "inp", inp, rstd, [&](auto t, auto s) {
      using T = decltype(t);
      using S = decltype(s);
      rmsnorm_forward_kernel(data_of<T>(out), data_of<S>(rstd), data_of<const T>(inp),
                             data_of<const T>(weight), r.N, r.C, static_cast<T>(eps), b.threads);
    });
  });
}

loom_error* op_rmsnorm_backward(loom_backend* be, DLTensor* dinp, DLTensor* dweight,
                                const DLTensor* dout, const DLTensor* inp, const DLTensor* weight,
                                const DLTensor* rstd) noexcept {
  return run_op(be, "rmsnorm_backward", [&](loom_backend& b) {
    Check ck{"rmsnorm_backward"};
    if (Staging::any_half({dinp, dweight, dout, inp, weight})) {
      Staging st(ck, b.threads);
      st.f32_only("rstd", rstd);
      const DLTensor* dout_ = st.in("dout", dout);
      const DLTensor* inp_ = st.in("inp", inp);
      const DLTensor* weight_ = st.in("weight", weight);
      const DLTensor* rstd_ = st.in("rstd", rstd);
      DLTensor* dinp_ = st.out("dinp", dinp);
      DLTensor* dweight_ = st.out("dweight", dweight);
      st.run(b,
             [&] { return op_rmsnorm_backward(&b, dinp_, dweight_, dout_, inp_, weight_, rstd_); });
      return;
    }
    Rows r = check_rows(ck, inp);
    ck.like("dinp", dinp, "inp", inp, r.N * r.C);
    ck.like("dout", dout, "inp", inp, r.N * r.C);
    ck.like("weight", weight, "inp", inp, r.C);
    ck.like("dweight", dweight, "inp", inp, r.C);
    check_stat(ck, "rstd", rstd, inp, r.N);
    dispatch_float_stat(ck, "inp", inp, rstd, [&](auto t, auto s) {
      using T = decltype(t);
      using S = decltype(s);
      rmsnorm_backward_kernel(data_of<T>(dinp), data_of<T>(dweight), data_of<const T>(dout),
                              data_of<const T>(inp), data_of<const T>(weight),
                              data_of<const S>(rstd), r.N, r.C, b.threads);
    });
  });
}

loom_error* op_rmsnorm_gated_forward(loom_backend* be, DLTensor* out, DLTensor* rstd,
                                     const DLTensor* inp, const DLTensor* gate,
                                     const DLTensor* weight, double eps,
                                     int64_t group_size) noexcept {
  return run_op(be, "rmsnorm_gated_forward", [&](loom_backend& b) {
    Check ck{"rmsnorm_gated_forward"};
    if (Staging::any_half({out, inp, gate, weight})) {
      Staging st(ck, b.threads);
      st.f32_only("rstd", rstd);
      const DLTensor* inp_ = st.in("inp", inp);
      const DLTensor* gate_ = st.in("gate", gate);
      const DLTensor* weight_ = st.in("weight", weight);
      DLTensor* out_ = st.out("out", out);
      st.run(b, [&] {
        return op_rmsnorm_gated_forward(&b, out_, rstd, inp_, gate_, weight_, eps, group_size);
      });
      return;
    }
    Rows r = check_rows(ck, inp);
    ck.like("out", out, "inp", inp, r.N * r.C);
    ck.like("gate", gate, "inp", inp, r.N * r.C);
    ck.like("weight", weight, "inp", inp, r.C);
    check_stat(ck, "rstd", rstd, inp, r.N * (r.C / group_size));
    check_eps(ck, eps);
    dispatch_float_stat(ck, "inp", inp, rstd, [&](auto t, auto s) {
      using T = decltype(t);
      using S = decltype(s);
      rmsnorm_gated_forward_kernel(data_of<T>(out), data_of<S>(rstd), data_of<const T>(inp),
                                   data_of<const T>(gate), data_of<const T>(weight), r.N, r.C,
                                   group_size, static_cast<T>(eps), b.threads);
    });
  });
}

loom_error* op_rmsnorm_gated_backward(loom_backend* be, DLTensor* dinp, DLTensor* dgate,
                                      DLTensor* dweight, const DLTensor* dout, const DLTensor* inp,
                                      const DLTensor* gate, const DLTensor* weight,
                                      const DLTensor* rstd, int64_t group_size) noexcept {
  return run_op(be, "rmsnorm_gated_backward", [&](loom_backend& b) {
    Check ck{"rmsnorm_gated_backward"};
    if (Staging::any_half({dinp, dgate, dweight, dout, inp, gate, weight})) {
      Staging st(ck, b.threads);
      st.f32_only("rstd", rstd);
      const DLTensor* dout_ = st.in("dout", dout);
      const DLTensor* inp_ = st.in("inp", inp);
      const DLTensor* gate_ = st.in("gate", gate);
      const DLTensor* weight_ = st.in("weight", weight);
      DLTensor* dinp_ = st.out("dinp", dinp);
      DLTensor* dgate_ = st.out("dgate", dgate);
      DLTensor* dweight_ = st.out("dweight", dweight);
      st.run(b, [&] {
        return op_rmsnorm_gated_backward(&b, dinp_, dgate_, dweight_, dout_, inp_, gate_, weight_,
                                         rstd, group_size);
      });
      return;
    }
    Rows r = check_rows(ck, inp);
    ck.like("dinp", dinp, "inp", inp, r.N * r.C);
    ck.like("dgate", dgate, "inp", inp, r.N * r.C);
    ck.like("dout", dout, "inp", inp, r.N * r.C);
    ck.like("gate", gate, "inp", inp, r.N * r.C);
    ck.like("weight", weight, "inp", inp, r.C);
    ck.like("dweight", dweight, "inp", inp, r.C);
    check_stat(ck, "rstd", rstd, inp, r.N * (r.C / group_size));
    dispatch_float_stat(ck, "inp", inp, rstd, [&](auto t, auto s) {
      using T = decltype(t);
      using S = decltype(s);
      rmsnorm_gated_backward_kernel(data_of<T>(dinp), data_of<T>(dgate), data_of<T>(dweight),
                                    data_of<const T>(dout), data_of<const T>(inp),
                                    data_of<const T>(gate), data_of<const T>(weight),
                                    data_of<const S>(rstd), r.N, r.C, group_size, b.threads);
    });
  });
}

// loom.norm-residual/1 by its definition: the add op, then the plain norm of the sum
// (forward); the plain norm's input gradient into a scratch of dinp's dtype, then the add op
// (backward; the scratch because dinp may alias the residual the add still reads). backend/cpu
// is the reference the fused kernels of other backends are compared with, so it composes the
// two calls rather than fusing them.
loom_error* op_norm_residual_forward(loom_backend* be, const loom_norm_fwd_args* a,
                                     const loom_norm_residual* r) noexcept {
  return run_op(be, "norm_forward", [&](loom_backend& b) {
    loom::check(b.host, op_add(&b, r->sum, a->inp, r->residual));
    if (a->kind == LOOM_NORM_RMS)
      loom::check(b.host, op_rmsnorm_forward(&b, a->out, a->rstd, r->sum, a->weight, a->eps));
    else
      loom::check(b.host, op_layernorm_forward(&b, a->out, a->mean, a->rstd, r->sum, a->weight,
                                               a->bias, a->eps));
  });
}

loom_error* op_norm_residual_backward(loom_backend* be, const loom_norm_bwd_args* a,
                                      const loom_norm_residual* r) noexcept {
  return run_op(be, "norm_backward", [&](loom_backend& b) {
    Check{"norm_backward"}.tensor("dinp", a->dinp);
    const size_t bytes = (size_t)loom_tensor_numel(a->dinp) * loom_dtype_bytes(a->dinp->dtype);
    // uninitialised (the norm writes every element): no extra pass over the rows
    std::unique_ptr<double[]> scratch(new double[(bytes + sizeof(double) - 1) / sizeof(double)]);
    DLTensor g = *a->dinp;
    g.data = scratch.get();
    g.byte_offset = 0;
    if (a->kind == LOOM_NORM_RMS)
      loom::check(b.host,
                  op_rmsnorm_backward(&b, &g, a->dweight, a->dout, a->inp, a->weight, a->rstd));
    else
      loom::check(b.host, op_layernorm_backward(&b, &g, a->dweight, a->dbias, a->dout, a->inp,
                                                a->weight, a->mean, a->rstd));
    loom::check(b.host, op_add(&b, a->dinp, r->residual, &g));
  });
}

}  // namespace loom_cpu
