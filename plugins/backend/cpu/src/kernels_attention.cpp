// Attention pieces the attention plugins compose with gemm: the row softmax over scores and
// rotary position embeddings.
//   softmax_forward:  s(Bt,Tq,Tk) <- softmax(scale * s) per row, causal mask optional, and
//                     with it a sliding window;
//                     lse(Bt,Tq) = logsumexp of the scaled, masked row
//   softmax_backward: ds(Bt,Tq,Tk) = scale * p * (dp - rowsum(p * dp)); ds may alias dp
//   rope_forward:     x(B,T,H,D) rotated in place, rotate-half pairs (i, i + D/2) at position
//                     pos_offset + t by angle pos * theta^(-2i/D)
//   rope_backward:    dx rotated back by the same angles (the transpose of the rotation)
// Leading dimensions of s are flattened: (B,H,Tq,Tk) works as Bt = B*H.
//
// lse dtype: f32, or the dtype of s (f64 runs keep it f64 so finite-difference tests of a
// flash-style backward see exact values). lse may be NULL when the caller does not need it.
// A row whose every column is masked (only possible when Tq > Tk) gets probabilities 0 and
// lse = -inf.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu_backend.hpp"
#include "loom/cpp/vec_math.hpp"
#include "mixed.hpp"

namespace loom_cpu {
namespace {

template <class T, class S>
LOOM_CPU_CLONES void softmax_forward_kernel(T* s, S* lse, int64_t rows, int64_t Tq, int64_t Tk,
                                            T scale, bool causal, int64_t window, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static) if (rows * Tk >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    T* x = s + r * Tk;
    int64_t i = r % Tq;
    // Columns [first, valid) take part; with causal, query i sits at key position
    // i + Tk - Tq, and a window keeps only its last `window` positions.
    int64_t valid = causal ? std::clamp<int64_t>(i + (Tk - Tq) + 1, 0, Tk) : Tk;
    int64_t first = window > 0 ? std::clamp<int64_t>(valid - window, 0, Tk) : 0;
    if (valid == first) {
      for (int64_t j = 0; j < Tk; ++j) x[j] = T(0);
      if (lse) lse[r] = -std::numeric_limits<S>::infinity();
      continue;
    }
    T mx = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : mx)
    for (int64_t j = first; j < valid; ++j) mx = std::max(mx, scale * x[j]);
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = first; j < valid; ++j) {
      T e = loom::vexp(scale * x[j] - mx);
      x[j] = e;
      sum += e;
    }
    T inv = T(1) / sum;
#pragma omp simd
    for (int64_t j = first; j < valid; ++j) x[j] *= inv;
    for (int64_t j = 0; j < first; ++j) x[j] = T(0);
    for (int64_t j = valid; j < Tk; ++j) x[j] = T(0);
    if (lse) lse[r] = static_cast<S>(mx + std::log(sum));
  }
}

template <class T>
LOOM_CPU_CLONES void softmax_backward_kernel(T* ds, const T* p, const T* dp, int64_t rows,
                                             int64_t Tk, T scale, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static) if (rows * Tk >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const T* pr = p + r * Tk;
    const T* dpr = dp + r * Tk;
    T* dsr = ds + r * Tk;
    T dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < Tk; ++j) dot += pr[j] * dpr[j];
      // Reads of dpr[j] precede the write of dsr[j] at the same j: aliasing ds = dp is safe.
#pragma omp simd
    for (int64_t j = 0; j < Tk; ++j) dsr[j] = scale * pr[j] * (dpr[j] - dot);
  }
}

// sign = +1 rotates forward, -1 rotates back (the inverse, which for a rotation is the
// transpose: exactly the backward of the forward's linear map).
// freqs: D/2 inverse frequencies (loom.rope-freqs/1) or NULL for theta^(-2i/D); cos and sin
// are multiplied by scale.
template <class T>
void rope_kernel(T* x, int64_t B, int64_t Tn, int64_t H, int64_t D, int64_t pos_offset,
                 double theta, const double* freqs, double scale, int sign, int nt) {
  int64_t half = D / 2;
  // cos/sin per (t, i), computed in double: positions reach 10^5 and more, where an f32
  // angle would already be off by whole radians' worth of ulps.
  std::vector<T> cs(static_cast<size_t>(Tn * half)), sn(static_cast<size_t>(Tn * half));
  for (int64_t i = 0; i < half; ++i) {
    double inv_freq =
        freqs ? freqs[i] : std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
    for (int64_t t = 0; t < Tn; ++t) {
      double a = static_cast<double>(pos_offset + t) * inv_freq;
      cs[t * half + i] = static_cast<T>(scale * std::cos(a));
      sn[t * half + i] = static_cast<T>(sign * scale * std::sin(a));
    }
  }
  const T* cp = cs.data();
  const T* sp = sn.data();
#pragma omp parallel for num_threads(nt) schedule(static) if (B * Tn * H * D >= kParallelMin)
  for (int64_t bt = 0; bt < B * Tn; ++bt) {
    int64_t t = bt % Tn;
    const T* c = cp + t * half;
    const T* s = sp + t * half;
    for (int64_t h = 0; h < H; ++h) {
      T* lo = x + (bt * H + h) * D;
      T* hi = lo + half;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        T a = lo[i], b = hi[i];
        lo[i] = a * c[i] - b * s[i];
        hi[i] = b * c[i] + a * s[i];
      }
    }
  }
}

void rope_op(const Check& ck, loom_backend& b, DLTensor* x, const char* name, int64_t pos_offset,
             double theta, int sign, const double* freqs = nullptr, double scale = 1.0) {
  ck.tensor(name, x);
  if (Staging::any_half({x})) {
    Staging st(ck, b.threads);
    DLTensor* x32 = st.out(name, x);
    st.run(b, [&] {
      if (freqs) return op_rope_freqs(&b, x32, pos_offset, freqs, scale, sign > 0 ? 0 : 1);
      return sign > 0 ? op_rope_forward(&b, x32, pos_offset, theta)
                      : op_rope_backward(&b, x32, pos_offset, theta);
    });
    return;
  }
  ck.ndim(name, x, 4);
  int64_t B = x->shape[0], Tn = x->shape[1], H = x->shape[2], D = x->shape[3];
  if (D <= 0 || D % 2 != 0)
    ck.fail(std::string(name) + " has head dimension D = " + std::to_string(D) +
            ", expected a positive even number");
  if (!freqs && (!(theta > 0) || !std::isfinite(theta)))
    ck.fail("theta = " + std::to_string(theta) + " must be > 0");
  if (pos_offset < 0) ck.fail("pos_offset = " + std::to_string(pos_offset) + " must be >= 0");
  dispatch_float(ck, name, x, [&](auto tag) {
    using T = decltype(tag);
    rope_kernel(data_of<T>(x), B, Tn, H, D, pos_offset, theta, freqs, scale, sign, b.threads);
  });
}

}  // namespace

loom_error* op_softmax_forward(loom_backend* be, const loom_softmax_args* a) noexcept {
  return run_op(be, "softmax_forward", [&](loom_backend& b) {
    Check ck{"softmax_forward"};
    DLTensor *s = a->s, *lse = a->lse;
    const double scale = a->scale;
    const int64_t window = a->window;
    if (window < 0) ck.fail("window = " + std::to_string(window) + " is negative");
    if (window > 0 && !a->causal) ck.fail("a sliding window needs causal");
    if (Staging::any_half({s})) {
      Staging st(ck, b.threads);
      st.f32_only("lse", lse);
      loom_softmax_args staged = *a;
      staged.s = st.out("s", s);
      staged.lse = st.out("lse", lse);
      st.run(b, [&] { return op_softmax_forward(&b, &staged); });
      return;
    }
    ck.tensor("s", s);
    if (s->ndim < 2) ck.fail("s must have at least 2 dimensions (Tq, Tk)");
    int64_t Tq = s->shape[s->ndim - 2], Tk = s->shape[s->ndim - 1];
    int64_t rows = Tk > 0 ? loom_tensor_numel(s) / Tk : 0;
    if (lse) {
      ck.tensor("lse", lse);
      ck.stat_dtype("lse", lse, s);
      ck.numel("lse", lse, rows);
    }
    if (!std::isfinite(scale)) ck.fail("scale = " + std::to_string(scale) + " is not finite");
    if (rows == 0 || Tk == 0) return;
    auto run = [&](auto t, auto st) {
      using T = decltype(t);
      using S = decltype(st);
      softmax_forward_kernel(data_of<T>(s), lse ? data_of<S>(lse) : static_cast<S*>(nullptr), rows,
                             Tq, Tk, static_cast<T>(scale), a->causal != 0, window, b.threads);
    };
    if (lse)
      dispatch_float_stat(ck, "s", s, lse, run);
    else
      dispatch_float(ck, "s", s, [&](auto t) { run(t, float{}); });
  });
}

loom_error* op_softmax_backward(loom_backend* be, DLTensor* ds, const DLTensor* p,
                                const DLTensor* dp, double scale) noexcept {
  return run_op(be, "softmax_backward", [&](loom_backend& b) {
    Check ck{"softmax_backward"};
    if (Staging::any_half({ds, p, dp})) {
      Staging st(ck, b.threads);
      const DLTensor* p_ = st.in("p", p);
      const DLTensor* dp_ = st.in("dp", dp);
      DLTensor* ds_ = st.out("ds", ds);
      st.run(b, [&] { return op_softmax_backward(&b, ds_, p_, dp_, scale); });
      return;
    }
    ck.tensor("ds", ds);
    ck.tensor("p", p);
    ck.tensor("dp", dp);
    ck.same_dtype("ds", ds, "p", p);
    ck.same_dtype("dp", dp, "p", p);
    int64_t Tk = ck.last_dim("p", p);
    int64_t n = loom_tensor_numel(p);
    ck.numel("dp", dp, n);
    ck.numel("ds", ds, n);
    if (Tk == 0 || n == 0) return;
    dispatch_float(ck, "p", p, [&](auto tag) {
      using T = decltype(tag);
      softmax_backward_kernel(data_of<T>(ds), data_of<const T>(p), data_of<const T>(dp), n / Tk, Tk,
                              static_cast<T>(scale), b.threads);
    });
  });
}

loom_error* op_rope_forward(loom_backend* be, DLTensor* x, int64_t pos_offset,
                            double theta) noexcept {
  return run_op(be, "rope_forward", [&](loom_backend& b) {
    rope_op(Check{"rope_forward"}, b, x, "x", pos_offset, theta, +1);
  });
}

loom_error* op_rope_freqs(loom_backend* be, DLTensor* x, int64_t pos_offset, const double* inv_freq,
                          double scale, int backward) noexcept {
  const char* op = backward ? "rope_backward" : "rope_forward";
  return run_op(be, op, [&](loom_backend& b) {
    rope_op(Check{op}, b, x, backward ? "dx" : "x", pos_offset, 0.0, backward ? -1 : +1, inv_freq,
            scale);
  });
}

loom_error* op_rope_backward(loom_backend* be, DLTensor* dx, int64_t pos_offset,
                             double theta) noexcept {
  return run_op(be, "rope_backward", [&](loom_backend& b) {
    rope_op(Check{"rope_backward"}, b, dx, "dx", pos_offset, theta, -1);
  });
}

}  // namespace loom_cpu
