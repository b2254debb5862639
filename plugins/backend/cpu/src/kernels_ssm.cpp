// Mamba-2's two kernels (backend.h, ABI 2.22), reference-grade: every sum in double, in an
// order fixed by the shape, so any thread count gives the same bits.
//   ssm_conv_forward:  out(B,T,C) = [silu](bias + causal depthwise convolution of x, weight(C,K));
//                      state (B,K-1,C) read as the inputs before t = 0, then updated
//   ssm_conv_backward: dx(B,T,C) =; dweight(C,K) +=; dbias(C) += (from zero history)
//   ssm_scan_forward:  y(B,T,H,P), the selective scan; chunk_states and state f32 (or f64)
//   ssm_scan_backward: dx, ddt, dB, dC =; dA_log, dD, ddt_bias (H) +=
// The SDK slots checked the shapes (loom/cpp/ssm_args.hpp); these check dtypes and memory.
//
// Parallel over (batch, time) rows for the convolution, over channels for its parameter
// gradients; over (batch, head) for the scan forward and (batch, group) for its backward: the
// heads sharing a group's B and C add into dB and dC in head order on one thread. Per-head
// parameter gradients are summed per (batch, head) into scratch, then over the batch in order.
// Outputs may not alias inputs, except the convolution's dx, which may alias dout or x.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu_backend.hpp"
#include "loom/cpp/ssm_args.hpp"
#include "mixed.hpp"

namespace loom_cpu {
namespace {

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }
double softplus(double z) { return std::max(z, 0.0) + std::log1p(std::exp(-std::fabs(z))); }

// ---- the convolution -------------------------------------------------------------------------

struct ConvDims {
  int64_t batch, T, C, K;
};
ConvDims conv_dims(const DLTensor* x, const DLTensor* weight) {
  return {x->shape[0], x->shape[1], x->shape[2], weight->shape[1]};
}

// x[b, s, c] for s >= 0, state[b, K-1 + s, c] before t = 0 (0 without a state).
template <class T>
struct ConvInput {
  const T* x;
  const T* state;
  ConvDims d;
  double operator()(int64_t b, int64_t s, int64_t c) const {
    if (s >= 0) return x[(b * d.T + s) * d.C + c];
    return state ? (double)state[(b * (d.K - 1) + d.K - 1 + s) * d.C + c] : 0.0;
  }
};

// The pre-activation of row (b, t), channel c.
template <class T>
double conv_pre(const ConvInput<T>& in, const T* w, const T* bias, int64_t b, int64_t t,
                int64_t c) {
  double acc = bias ? (double)bias[c] : 0.0;
  for (int64_t k = 0; k < in.d.K; ++k)
    acc += (double)w[c * in.d.K + k] * in(b, t - in.d.K + 1 + k, c);
  return acc;
}

template <class T>
void conv_forward_kernel(T* out, const T* x, const T* w, const T* bias, T* state, ConvDims d,
                         bool silu, int nt) {
  const ConvInput<T> in{x, state, d};
  const int64_t rows = d.batch * d.T;
#pragma omp parallel for num_threads(nt) schedule(static) if (rows * d.C * d.K >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < d.C; ++c) {
      const double pre = conv_pre(in, w, bias, r / d.T, r % d.T, c);
      out[r * d.C + c] = static_cast<T>(silu ? pre * sigmoid(pre) : pre);
    }
  if (state == nullptr || d.K == 1) return;
  // The last K-1 inputs of [state, x], all read before any is written.
  std::vector<T> next((size_t)(d.batch * (d.K - 1) * d.C));
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t j = 0; j < d.K - 1; ++j)
      for (int64_t c = 0; c < d.C; ++c)
        next[(size_t)((b * (d.K - 1) + j) * d.C + c)] = static_cast<T>(in(b, d.T - d.K + 1 + j, c));
  std::copy(next.begin(), next.end(), state);
}

template <class T>
void conv_backward_kernel(T* dx, T* dw, T* db, const T* dout, const T* x, const T* w, const T* bias,
                          ConvDims d, bool silu, int nt) {
  const ConvInput<T> in{x, nullptr, d};
  const int64_t rows = d.batch * d.T;
  const bool par = rows * d.C * d.K >= kParallelMin;
  std::vector<double> g((size_t)(rows * d.C));  // the gradient of the pre-activation
#pragma omp parallel for num_threads(nt) schedule(static) if (par)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < d.C; ++c) {
      double gr = dout[r * d.C + c];
      if (silu) {  // silu'(z) = sigmoid(z) (1 + z (1 - sigmoid(z)))
        const double pre = conv_pre(in, w, bias, r / d.T, r % d.T, c), s = sigmoid(pre);
        gr *= s * (1 + pre * (1 - s));
      }
      g[(size_t)(r * d.C + c)] = gr;
    }
  }
  // Parameter gradients: each thread owns channels and sums every row in order.
#pragma omp parallel for num_threads(nt) schedule(static) if (par)
  for (int64_t c = 0; c < d.C; ++c) {
    for (int64_t k = 0; k < d.K; ++k) {
      double s = 0;
      for (int64_t r = 0; r < rows; ++r)
        s += g[(size_t)(r * d.C + c)] * in(r / d.T, r % d.T - d.K + 1 + k, c);
      dw[c * d.K + k] += static_cast<T>(s);
    }
    if (db) {
      double s = 0;
      for (int64_t r = 0; r < rows; ++r) s += g[(size_t)(r * d.C + c)];
      db[c] += static_cast<T>(s);
    }
  }
  // dx last: dout and x are read above, so dx may alias either.
#pragma omp parallel for num_threads(nt) schedule(static) if (par)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t b = r / d.T, s = r % d.T;
    for (int64_t c = 0; c < d.C; ++c) {
      double acc = 0;
      for (int64_t k = 0; k < d.K; ++k) {
        const int64_t t = s + d.K - 1 - k;  // the output that read x[b, s] through tap k
        if (t < d.T) acc += (double)w[c * d.K + k] * g[(size_t)((b * d.T + t) * d.C + c)];
      }
      dx[r * d.C + c] = static_cast<T>(acc);
    }
  }
}

// Every given floating tensor of a call in x's dtype (f32 or f64).
void check_like_x(const Check& ck,
                  std::initializer_list<std::pair<const char*, const DLTensor*>> ts,
                  const DLTensor* x) {
  ck.tensor("x", x);
  ck.floating("x", x);
  for (const auto& [name, t] : ts)
    if (t) {
      ck.tensor(name, t);
      ck.same_dtype(name, t, "x", x);
    }
}

// The scan's inputs, forward and backward alike, in x's dtype.
void check_scan_inputs(const Check& ck, const DLTensor* x, const DLTensor* dt,
                       const DLTensor* A_log, const DLTensor* B, const DLTensor* C,
                       const DLTensor* D, const DLTensor* dt_bias) {
  check_like_x(
      ck, {{"dt", dt}, {"A_log", A_log}, {"B", B}, {"C", C}, {"D", D}, {"dt_bias", dt_bias}}, x);
}

// ---- the scan --------------------------------------------------------------------------------

using loom::SsmScanDims;

// One (batch, head)'s view of the scan's tensors: offsets of time step t.
struct HeadIndex {
  SsmScanDims d;
  int64_t b, h, g;
  int64_t x(int64_t t) const { return ((b * d.T + t) * d.H + h) * d.P; }   // x, y (P)
  int64_t dt(int64_t t) const { return (b * d.T + t) * d.H + h; }          // dt (1)
  int64_t bc(int64_t t) const { return ((b * d.T + t) * d.G + g) * d.N; }  // B, C (N)
  int64_t chunk(int64_t c) const { return ((b * d.chunks + c) * d.H + h) * d.P * d.N; }
  int64_t state() const { return (b * d.H + h) * d.P * d.N; }
};
HeadIndex head_index(const SsmScanDims& d, int64_t b, int64_t h) {
  return {d, b, h, h / (d.H / d.G)};
}

// The scan's per-step scalars of one head: dt_t = softplus(dt + dt_bias), a_t = exp(dt_t A),
// and softplus' derivative sigmoid(dt + dt_bias).
template <class T>
struct HeadSteps {
  double A;
  std::vector<double> dt, a, dsoftplus;
  HeadSteps(const HeadIndex& ix, const T* dt_raw, const T* A_log, const T* dt_bias)
      : A(-std::exp((double)A_log[ix.h])),
        dt((size_t)ix.d.T),
        a((size_t)ix.d.T),
        dsoftplus((size_t)ix.d.T) {
    for (int64_t t = 0; t < ix.d.T; ++t) {
      const double z = (double)dt_raw[ix.dt(t)] + (double)dt_bias[ix.h];
      dt[(size_t)t] = softplus(z);
      a[(size_t)t] = std::exp(dt[(size_t)t] * A);
      dsoftplus[(size_t)t] = sigmoid(z);
    }
  }
};

// S (P,N) <- a S + dt x B^T: one step of the recurrence.
template <class T>
void scan_step(double* S, double a, double dt, const T* x, const T* B, int64_t P, int64_t N) {
  for (int64_t p = 0; p < P; ++p)
    for (int64_t n = 0; n < N; ++n)
      S[p * N + n] = a * S[p * N + n] + dt * (double)x[p] * (double)B[n];
}

template <class T, class S>
void scan_forward_kernel(T* y, const T* x, const T* dt, const T* A_log, const T* Bm, const T* Cm,
                         const T* D, const T* dt_bias, S* chunk_states, S* state, SsmScanDims d,
                         int nt) {
  const int64_t PN = d.P * d.N;
#pragma omp parallel for collapse(2) num_threads(nt) \
    schedule(static) if (d.batch * d.T * d.H * PN >= kParallelMin)
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t h = 0; h < d.H; ++h) {
      const HeadIndex ix = head_index(d, b, h);
      const HeadSteps<T> st(ix, dt, A_log, dt_bias);
      std::vector<double> Sv((size_t)PN, 0.0);
      if (state) std::copy(state + ix.state(), state + ix.state() + PN, Sv.begin());
      for (int64_t t = 0; t < d.T; ++t) {
        if (chunk_states && t % d.chunk == 0)
          std::transform(Sv.begin(), Sv.end(), chunk_states + ix.chunk(t / d.chunk),
                         [](double v) { return static_cast<S>(v); });
        scan_step(Sv.data(), st.a[(size_t)t], st.dt[(size_t)t], x + ix.x(t), Bm + ix.bc(t), d.P,
                  d.N);
        const T* Ct = Cm + ix.bc(t);
        for (int64_t p = 0; p < d.P; ++p) {
          double acc = (double)D[h] * (double)x[ix.x(t) + p];
          for (int64_t n = 0; n < d.N; ++n) acc += Sv[(size_t)(p * d.N + n)] * (double)Ct[n];
          y[ix.x(t) + p] = static_cast<T>(acc);
        }
      }
      if (state)
        std::transform(Sv.begin(), Sv.end(), state + ix.state(),
                       [](double v) { return static_cast<S>(v); });
    }
}

// The scan backward's tensors, one pointer each (keeps the per-head function's list short).
template <class T, class S>
struct ScanGrads {
  T *dx, *ddt;
  const T *dy, *x, *dt, *A_log, *B, *C, *D, *dt_bias;
  const S* chunk_states;
};
// One head's sums of its parameter gradients over time.
struct HeadParamGrads {
  double dA_log = 0, dD = 0, ddt_bias = 0;
};

// One (batch, head): chunks from the last, each one's states recomputed from its stored
// start, then the reverse recurrence dS_t = dy_t C_t^T + a_{t+1} dS_{t+1}. dB and dC (T,N,
// this group's) are added into.
template <class T, class S>
HeadParamGrads scan_backward_head(const ScanGrads<T, S>& a, const HeadIndex& ix, double* dB,
                                  double* dC) {
  const SsmScanDims& d = ix.d;
  const int64_t P = d.P, N = d.N, PN = P * N;
  const HeadSteps<T> st(ix, a.dt, a.A_log, a.dt_bias);
  const double Dh = (double)a.D[ix.h];
  std::vector<double> dS((size_t)PN, 0.0), states((size_t)(std::min(d.chunk, d.T) + 1) * PN);
  HeadParamGrads out;
  double dA = 0;
  for (int64_t c = d.chunks - 1; c >= 0; --c) {
    const int64_t t0 = c * d.chunk, t1 = std::min(d.T, t0 + d.chunk);
    // states[0] = S_{t0-1} (the stored start), states[1 + t - t0] = S_t.
    const S* start = a.chunk_states + ix.chunk(c);
    std::copy(start, start + PN, states.begin());
    for (int64_t t = t0; t < t1; ++t) {
      double* St = states.data() + (t - t0 + 1) * PN;
      std::copy(St - PN, St, St);
      scan_step(St, st.a[(size_t)t], st.dt[(size_t)t], a.x + ix.x(t), a.B + ix.bc(t), P, N);
    }
    for (int64_t t = t1 - 1; t >= t0; --t) {
      const T *xt = a.x + ix.x(t), *dyt = a.dy + ix.x(t), *Bt = a.B + ix.bc(t),
              *Ct = a.C + ix.bc(t);
      const double* St = states.data() + (t - t0 + 1) * PN;
      const double* Sp = St - PN;
      const double dtt = st.dt[(size_t)t], at = st.a[(size_t)t];
      double da = 0, xdSB = 0;
      for (int64_t p = 0; p < P; ++p) {
        const double dy = dyt[p];
        out.dD += dy * (double)xt[p];
        double sb = 0;
        for (int64_t n = 0; n < N; ++n) {
          double& g = dS[(size_t)(p * N + n)];
          g += dy * (double)Ct[n];  // dS held a_{t+1} dS_{t+1}
          dC[(t * N + n)] += St[p * N + n] * dy;
          da += g * Sp[p * N + n];
          sb += g * (double)Bt[n];
        }
        xdSB += (double)xt[p] * sb;
        a.dx[ix.x(t) + p] = static_cast<T>(Dh * dy + dtt * sb);
      }
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t p = 0; p < P; ++p) s += dS[(size_t)(p * N + n)] * (double)xt[p];
        dB[t * N + n] += dtt * s;
      }
      const double ddt = (da * at * st.A + xdSB) * st.dsoftplus[(size_t)t];
      a.ddt[ix.dt(t)] = static_cast<T>(ddt);
      out.ddt_bias += ddt;
      dA += da * at * dtt;
      for (double& g : dS) g *= at;  // a_t dS_t, for step t - 1
    }
  }
  out.dA_log = dA * st.A;  // A = -exp(A_log): dA/dA_log = A
  return out;
}

template <class T, class S>
void scan_backward_kernel(const ScanGrads<T, S>& a, T* dA_log, T* dB, T* dC, T* dD, T* ddt_bias,
                          SsmScanDims d, int nt) {
  const int64_t heads_per_group = d.H / d.G;
  std::vector<HeadParamGrads> per_head((size_t)(d.batch * d.H));
#pragma omp parallel for collapse(2) num_threads(nt) \
    schedule(static) if (d.batch * d.T * d.H * d.P * d.N >= kParallelMin)
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t g = 0; g < d.G; ++g) {
      std::vector<double> gB((size_t)(d.T * d.N), 0.0), gC((size_t)(d.T * d.N), 0.0);
      for (int64_t h = g * heads_per_group; h < (g + 1) * heads_per_group; ++h)
        per_head[(size_t)(b * d.H + h)] =
            scan_backward_head(a, head_index(d, b, h), gB.data(), gC.data());
      for (int64_t t = 0; t < d.T; ++t)
        for (int64_t n = 0; n < d.N; ++n) {
          const int64_t at = ((b * d.T + t) * d.G + g) * d.N + n;
          dB[at] = static_cast<T>(gB[(size_t)(t * d.N + n)]);
          dC[at] = static_cast<T>(gC[(size_t)(t * d.N + n)]);
        }
    }
  for (int64_t h = 0; h < d.H; ++h) {
    HeadParamGrads sum;
    for (int64_t b = 0; b < d.batch; ++b) {
      const HeadParamGrads& p = per_head[(size_t)(b * d.H + h)];
      sum.dA_log += p.dA_log, sum.dD += p.dD, sum.ddt_bias += p.ddt_bias;
    }
    dA_log[h] += static_cast<T>(sum.dA_log);
    dD[h] += static_cast<T>(sum.dD);
    ddt_bias[h] += static_cast<T>(sum.ddt_bias);
  }
}

}  // namespace

loom_error* op_ssm_conv_forward(loom_backend* be, DLTensor* out, const DLTensor* x,
                                const DLTensor* weight, const DLTensor* bias, int silu,
                                DLTensor* state) noexcept {
  return run_op(be, "ssm_conv_forward", [&](loom_backend& b) {
    Check ck{"ssm_conv_forward"};
    if (Staging::any_half({out, x, weight, bias, state})) {
      Staging st(ck, b.threads);
      const DLTensor* x_ = st.in("x", x);
      const DLTensor* weight_ = st.in("weight", weight);
      const DLTensor* bias_ = st.in("bias", bias);
      DLTensor* out_ = st.out("out", out);
      DLTensor* state_ = st.out("state", state);
      st.run(b, [&] { return op_ssm_conv_forward(&b, out_, x_, weight_, bias_, silu, state_); });
      return;
    }
    check_like_x(ck, {{"out", out}, {"weight", weight}, {"bias", bias}, {"state", state}}, x);
    dispatch_float(ck, "x", x, [&](auto tag) {
      using T = decltype(tag);
      conv_forward_kernel(data_of<T>(out), data_of<const T>(x), data_of<const T>(weight),
                          bias ? data_of<const T>(bias) : nullptr,
                          state ? data_of<T>(state) : nullptr, conv_dims(x, weight), silu != 0,
                          b.threads);
    });
  });
}

loom_error* op_ssm_conv_backward(loom_backend* be, DLTensor* dx, DLTensor* dweight, DLTensor* dbias,
                                 const DLTensor* dout, const DLTensor* x, const DLTensor* weight,
                                 const DLTensor* bias, int silu) noexcept {
  return run_op(be, "ssm_conv_backward", [&](loom_backend& b) {
    Check ck{"ssm_conv_backward"};
    if (Staging::any_half({dx, dweight, dbias, dout, x, weight, bias})) {
      Staging st(ck, b.threads);
      const DLTensor* dout_ = st.in("dout", dout);
      const DLTensor* x_ = st.in("x", x);
      const DLTensor* weight_ = st.in("weight", weight);
      const DLTensor* bias_ = st.in("bias", bias);
      DLTensor* dx_ = st.out("dx", dx);
      DLTensor* dweight_ = st.out("dweight", dweight);
      DLTensor* dbias_ = st.out("dbias", dbias);
      st.run(b, [&] {
        return op_ssm_conv_backward(&b, dx_, dweight_, dbias_, dout_, x_, weight_, bias_, silu);
      });
      return;
    }
    check_like_x(ck,
                 {{"dx", dx},
                  {"dweight", dweight},
                  {"dbias", dbias},
                  {"dout", dout},
                  {"weight", weight},
                  {"bias", bias}},
                 x);
    dispatch_float(ck, "x", x, [&](auto tag) {
      using T = decltype(tag);
      conv_backward_kernel(data_of<T>(dx), data_of<T>(dweight), dbias ? data_of<T>(dbias) : nullptr,
                           data_of<const T>(dout), data_of<const T>(x), data_of<const T>(weight),
                           bias ? data_of<const T>(bias) : nullptr, conv_dims(x, weight), silu != 0,
                           b.threads);
    });
  });
}

loom_error* op_ssm_scan_forward(loom_backend* be, DLTensor* y, const DLTensor* x,
                                const DLTensor* dt, const DLTensor* A_log, const DLTensor* B,
                                const DLTensor* C, const DLTensor* D, const DLTensor* dt_bias,
                                int64_t chunk, DLTensor* chunk_states, DLTensor* state) noexcept {
  return run_op(be, "ssm_scan_forward", [&](loom_backend& b) {
    Check ck{"ssm_scan_forward"};
    if (Staging::any_half({y, x, dt, A_log, B, C, D, dt_bias})) {
      Staging st(ck, b.threads);
      st.f32_only("chunk_states", chunk_states);
      st.f32_only("state", state);
      const DLTensor *x_ = st.in("x", x), *dt_ = st.in("dt", dt), *A_log_ = st.in("A_log", A_log);
      const DLTensor *B_ = st.in("B", B), *C_ = st.in("C", C), *D_ = st.in("D", D);
      const DLTensor* dt_bias_ = st.in("dt_bias", dt_bias);
      DLTensor* y_ = st.out("y", y);
      st.run(b, [&] {
        return op_ssm_scan_forward(&b, y_, x_, dt_, A_log_, B_, C_, D_, dt_bias_, chunk,
                                   chunk_states, state);
      });
      return;
    }
    check_scan_inputs(ck, x, dt, A_log, B, C, D, dt_bias);
    check_like_x(ck, {{"y", y}}, x);
    for (const auto& [name, t] :
         {std::pair{"chunk_states", chunk_states}, std::pair{"state", state}})
      if (t) {
        ck.tensor(name, t);
        ck.stat_dtype(name, t, x);
      }
    if (chunk_states && state) ck.same_dtype("state", state, "chunk_states", chunk_states);
    const DLTensor* stat = chunk_states ? chunk_states : state ? state : x;
    dispatch_float_stat(ck, "x", x, stat, [&](auto t, auto s) {
      using T = decltype(t);
      using S = decltype(s);
      scan_forward_kernel(
          data_of<T>(y), data_of<const T>(x), data_of<const T>(dt), data_of<const T>(A_log),
          data_of<const T>(B), data_of<const T>(C), data_of<const T>(D), data_of<const T>(dt_bias),
          chunk_states ? data_of<S>(chunk_states) : nullptr, state ? data_of<S>(state) : nullptr,
          loom::ssm_scan_dims(x, B, chunk), b.threads);
    });
  });
}

loom_error* op_ssm_scan_backward(loom_backend* be, DLTensor* dx, DLTensor* ddt, DLTensor* dA_log,
                                 DLTensor* dB, DLTensor* dC, DLTensor* dD, DLTensor* ddt_bias,
                                 const DLTensor* dy, const DLTensor* x, const DLTensor* dt,
                                 const DLTensor* A_log, const DLTensor* B, const DLTensor* C,
                                 const DLTensor* D, const DLTensor* dt_bias, int64_t chunk,
                                 const DLTensor* chunk_states) noexcept {
  return run_op(be, "ssm_scan_backward", [&](loom_backend& b) {
    Check ck{"ssm_scan_backward"};
    if (Staging::any_half(
            {dx, ddt, dA_log, dB, dC, dD, ddt_bias, dy, x, dt, A_log, B, C, D, dt_bias})) {
      Staging st(ck, b.threads);
      st.f32_only("chunk_states", chunk_states);
      const DLTensor *dy_ = st.in("dy", dy), *x_ = st.in("x", x), *dt_ = st.in("dt", dt);
      const DLTensor *A_log_ = st.in("A_log", A_log), *B_ = st.in("B", B), *C_ = st.in("C", C);
      const DLTensor *D_ = st.in("D", D), *dt_bias_ = st.in("dt_bias", dt_bias);
      DLTensor *dx_ = st.out("dx", dx), *ddt_ = st.out("ddt", ddt), *dB_ = st.out("dB", dB);
      DLTensor *dC_ = st.out("dC", dC), *dA_log_ = st.out("dA_log", dA_log);
      DLTensor *dD_ = st.out("dD", dD), *ddt_bias_ = st.out("ddt_bias", ddt_bias);
      st.run(b, [&] {
        return op_ssm_scan_backward(&b, dx_, ddt_, dA_log_, dB_, dC_, dD_, ddt_bias_, dy_, x_, dt_,
                                    A_log_, B_, C_, D_, dt_bias_, chunk, chunk_states);
      });
      return;
    }
    check_scan_inputs(ck, x, dt, A_log, B, C, D, dt_bias);
    check_like_x(ck,
                 {{"dx", dx},
                  {"ddt", ddt},
                  {"dA_log", dA_log},
                  {"dB", dB},
                  {"dC", dC},
                  {"dD", dD},
                  {"ddt_bias", ddt_bias},
                  {"dy", dy}},
                 x);
    ck.tensor("chunk_states", chunk_states);
    ck.stat_dtype("chunk_states", chunk_states, x);
    dispatch_float_stat(ck, "x", x, chunk_states, [&](auto t, auto s) {
      using T = decltype(t);
      using S = decltype(s);
      const ScanGrads<T, S> a{data_of<T>(dx),
                              data_of<T>(ddt),
                              data_of<const T>(dy),
                              data_of<const T>(x),
                              data_of<const T>(dt),
                              data_of<const T>(A_log),
                              data_of<const T>(B),
                              data_of<const T>(C),
                              data_of<const T>(D),
                              data_of<const T>(dt_bias),
                              data_of<const S>(chunk_states)};
      scan_backward_kernel(a, data_of<T>(dA_log), data_of<T>(dB), data_of<T>(dC), data_of<T>(dD),
                           data_of<T>(ddt_bias), loom::ssm_scan_dims(x, B, chunk), b.threads);
    });
  });
}

}  // namespace loom_cpu
