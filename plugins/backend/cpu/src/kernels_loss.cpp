// Fused softmax + cross-entropy over the vocabulary.
//   losses(N)    = logsumexp(logits[n]) - logits[n, t[n]]
//   dlogits(N,V) = dloss * (softmax(logits[n]) - onehot(t[n]))     (when dlogits != NULL)
// targets(N) are i32; -1 marks an ignored position (loss 0, gradient row 0). dlogits may alias
// logits: a row's loss terms are all read before the row is overwritten, which lets the
// caller skip a second N x V buffer (the largest activation of a GPT).
// Numerically stable: exponents are taken of logits - rowmax, so nothing overflows.
//
// Vocab-parallel pieces (ABI v1.1), for logits split by vocabulary over tensor-parallel ranks:
//   vocab_ce_stats:    stats(N,3) = {rowmax m, sum exp(x - m), x[target - vocab_start] or 0}
//   vocab_ce_backward: dlogits = dloss * (exp(x - lse[n]) - onehot(target - vocab_start))
// The caller all-reduces the stats into the global lse and loss; no rank sees the full row.
// loom.ce-loss-total/1 (ABI 2.28): the losses' sum in index order into a (1) f64 total, and a
// NaN gradient row where a loss is not finite.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu_backend.hpp"
#include "loom/cpp/vec_math.hpp"
#include "mixed.hpp"

namespace loom_cpu {
namespace {

// exp(x - m), exactly 0 for a logit of -inf (the LM head's padding columns): the vectorised
// exp clamps its argument at -80, which would give such a column 1.8e-35 of the probability.
template <class T>
inline T prob(T x, T m) {
  return x == -std::numeric_limits<T>::infinity() ? T(0) : loom::vexp(x - m);
}

template <class T>
LOOM_CPU_CLONES void cross_entropy_kernel(T* losses, T* dlogits, const T* logits,
                                          const int32_t* targets, int64_t N, int64_t V, T dloss,
                                          int nt) {
#pragma omp parallel for num_threads(nt) schedule(static) if (N * V >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* x = logits + n * V;
    int32_t t = targets[n];
    if (t < 0) {  // ignored position
      losses[n] = T(0);
      if (dlogits) {
        T* d = dlogits + n * V;
#pragma omp simd
        for (int64_t j = 0; j < V; ++j) d[j] = T(0);
      }
      continue;
    }
    T mx = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, x[j]);
    T x_t = x[t];  // read before a dlogits that aliases logits overwrites it
    T sum = 0;
    T* d = dlogits ? dlogits + n * V : nullptr;
    if (d) {
      // One exp per element: park exp(x - mx) in dlogits (same index as the read, so an
      // aliasing dlogits is fine) and scale it by dloss / sum afterwards.
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < V; ++j) {
        T e = prob(x[j], mx);
        d[j] = e;
        sum += e;
      }
    } else {
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < V; ++j) sum += prob(x[j], mx);
    }
    // (mx - x_t) first: both are large when logits are, their difference is exact-ish, and
    // adding log(sum) to mx first would round it to mx's ulp.
    losses[n] = std::log(sum) + (mx - x_t);
    if (d) {
      T scale = dloss / sum;
#pragma omp simd
      for (int64_t j = 0; j < V; ++j) d[j] *= scale;
      d[t] -= dloss;
    }
  }
}

// Per-row local statistics of one vocabulary slice [vs, vs + V). Ignored rows (target -1)
// still get m and s: they are cheap and keep the combined lse finite for every row.
template <class T>
LOOM_CPU_CLONES void vocab_stats_kernel(T* stats, const T* logits, const int32_t* targets,
                                        int64_t N, int64_t V, int64_t vs, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static) if (N * V >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* x = logits + n * V;
    T mx = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, x[j]);
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < V; ++j) sum += prob(x[j], mx);
    int64_t local = targets[n] < 0 ? -1 : int64_t{targets[n]} - vs;
    stats[3 * n + 0] = mx;
    stats[3 * n + 1] = sum;
    stats[3 * n + 2] = (local >= 0 && local < V) ? x[local] : T(0);
  }
}

template <class T>
LOOM_CPU_CLONES void vocab_backward_kernel(T* dlogits, const T* logits, const int32_t* targets,
                                           const T* lse, int64_t N, int64_t V, int64_t vs, T dloss,
                                           int nt) {
#pragma omp parallel for num_threads(nt) schedule(static) if (N * V >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* x = logits + n * V;
    T* d = dlogits + n * V;
    if (targets[n] < 0) {  // ignored position
#pragma omp simd
      for (int64_t j = 0; j < V; ++j) d[j] = T(0);
      continue;
    }
    // Same index read and written, so a dlogits aliasing logits is fine.
    T l = lse[n];
#pragma omp simd
    for (int64_t j = 0; j < V; ++j) d[j] = dloss * prob(x[j], l);
    int64_t local = int64_t{targets[n]} - vs;
    if (local >= 0 && local < V) d[local] -= dloss;
  }
}

// Shared checks of the two vocab ops: logits(N,Vl) floating, targets(N) i32 in {-1} or >= 0
// (global ids: this rank cannot bound them by the full vocabulary), vocab_start >= 0.
int64_t check_vocab_args(const Check& ck, const DLTensor* logits, const DLTensor* targets,
                         int64_t vocab_start, int64_t* rows) {
  ck.tensor("logits", logits);
  ck.tensor("targets", targets);
  ck.floating("logits", logits);
  int64_t V = ck.last_dim("logits", logits);
  if (V <= 0) ck.fail("logits has an empty vocabulary dimension");
  if (vocab_start < 0) ck.fail("vocab_start = " + std::to_string(vocab_start) + " is negative");
  int64_t N = loom_tensor_numel(logits) / V;
  ck.dtype("targets", targets, loom_i32());
  ck.numel("targets", targets, N);
  const int32_t* tg = data_of<const int32_t>(targets);
  for (int64_t n = 0; n < N; ++n)
    if (tg[n] < -1)
      ck.fail("targets[" + std::to_string(n) + "] = " + std::to_string(tg[n]) +
              " is negative and not -1 (ignore)");
  *rows = N;
  return V;
}

}  // namespace

loom_error* op_vocab_ce_stats(loom_backend* be, DLTensor* stats, const DLTensor* logits,
                              const DLTensor* targets, int64_t vocab_start) noexcept {
  return run_op(be, "vocab_ce_stats", [&](loom_backend& b) {
    Check ck{"vocab_ce_stats"};
    if (Staging::any_half({logits})) {
      Staging st(ck, b.threads);
      st.f32_only("stats", stats);
      const DLTensor* logits_ = st.in("logits", logits);
      const DLTensor* targets_ = st.in("targets", targets);
      DLTensor* stats_ = st.out("stats", stats);
      st.run(b, [&] { return op_vocab_ce_stats(&b, stats_, logits_, targets_, vocab_start); });
      return;
    }
    int64_t N = 0;
    int64_t V = check_vocab_args(ck, logits, targets, vocab_start, &N);
    ck.like("stats", stats, "logits", logits, 3 * N);
    dispatch_float(ck, "logits", logits, [&](auto tag) {
      using T = decltype(tag);
      vocab_stats_kernel(data_of<T>(stats), data_of<const T>(logits),
                         data_of<const int32_t>(targets), N, V, vocab_start, b.threads);
    });
  });
}

loom_error* op_vocab_ce_backward(loom_backend* be, DLTensor* dlogits, const DLTensor* logits,
                                 const DLTensor* targets, int64_t vocab_start, const DLTensor* lse,
                                 double dloss) noexcept {
  return run_op(be, "vocab_ce_backward", [&](loom_backend& b) {
    Check ck{"vocab_ce_backward"};
    if (Staging::any_half({dlogits, logits})) {
      Staging st(ck, b.threads);
      st.f32_only("lse", lse);
      const DLTensor* logits_ = st.in("logits", logits);
      const DLTensor* targets_ = st.in("targets", targets);
      const DLTensor* lse_ = st.in("lse", lse);
      DLTensor* dlogits_ = st.out("dlogits", dlogits);
      st.run(b, [&] {
        return op_vocab_ce_backward(&b, dlogits_, logits_, targets_, vocab_start, lse_, dloss);
      });
      return;
    }
    int64_t N = 0;
    int64_t V = check_vocab_args(ck, logits, targets, vocab_start, &N);
    ck.like("dlogits", dlogits, "logits", logits, N * V);
    ck.like("lse", lse, "logits", logits, N);
    dispatch_float(ck, "logits", logits, [&](auto tag) {
      using T = decltype(tag);
      vocab_backward_kernel(data_of<T>(dlogits), data_of<const T>(logits),
                            data_of<const int32_t>(targets), data_of<const T>(lse), N, V,
                            vocab_start, static_cast<T>(dloss), b.threads);
    });
  });
}

loom_error* op_softmax_cross_entropy(loom_backend* be, DLTensor* losses, DLTensor* dlogits,
                                     const DLTensor* logits, const DLTensor* targets,
                                     double dloss) noexcept {
  return run_op(be, "softmax_cross_entropy", [&](loom_backend& b) {
    Check ck{"softmax_cross_entropy"};
    if (Staging::any_half({logits, dlogits})) {
      Staging st(ck, b.threads);
      st.f32_only("losses", losses);
      const DLTensor* logits_ = st.in("logits", logits);
      const DLTensor* targets_ = st.in("targets", targets);
      DLTensor* losses_ = st.out("losses", losses);
      DLTensor* dlogits_ = st.out("dlogits", dlogits);
      st.run(b, [&] {
        return op_softmax_cross_entropy(&b, losses_, dlogits_, logits_, targets_, dloss);
      });
      return;
    }
    ck.tensor("logits", logits);
    ck.tensor("losses", losses);
    ck.tensor("targets", targets);
    ck.floating("logits", logits);
    int64_t V = ck.last_dim("logits", logits);
    if (V <= 0) ck.fail("logits has an empty vocabulary dimension");
    int64_t N = loom_tensor_numel(logits) / V;
    ck.same_dtype("losses", losses, "logits", logits);
    ck.numel("losses", losses, N);
    ck.dtype("targets", targets, loom_i32());
    ck.numel("targets", targets, N);
    if (dlogits) {
      ck.like("dlogits", dlogits, "logits", logits, N * V);
    }
    const int32_t* tg = data_of<const int32_t>(targets);
    for (int64_t n = 0; n < N; ++n)
      if (tg[n] < -1 || tg[n] >= V)
        ck.fail("targets[" + std::to_string(n) + "] = " + std::to_string(tg[n]) +
                " is outside [0, " + std::to_string(V) + ") and not -1 (ignore)");
    dispatch_float(ck, "logits", logits, [&](auto tag) {
      using T = decltype(tag);
      cross_entropy_kernel(data_of<T>(losses), dlogits ? data_of<T>(dlogits) : nullptr,
                           data_of<const T>(logits), tg, N, V, static_cast<T>(dloss), b.threads);
    });
  });
}

namespace {

// Row n of dlogits (rows of V) set to NaN, in its float dtype (bf16 and f16 by their bits).
void nan_row(DLTensor* d, int64_t n, int64_t V) {
  if (d->dtype.bits == 64) {
    std::fill_n(data_of<double>(d) + n * V, V, std::numeric_limits<double>::quiet_NaN());
  } else if (d->dtype.bits == 32) {
    std::fill_n(data_of<float>(d) + n * V, V, std::numeric_limits<float>::quiet_NaN());
  } else {
    const uint16_t bits = is_bf16(d->dtype) ? 0x7fc0 : 0x7e00;
    std::fill_n(data_of<uint16_t>(d) + n * V, V, bits);
  }
}

}  // namespace

// The sum is the host's own loop over the losses (index order from 0, in double), so that a
// total kept here is what a caller summing `losses` gets, to the bit.
loom_error* op_softmax_cross_entropy_total(loom_backend* be, DLTensor* losses, DLTensor* dlogits,
                                           const DLTensor* logits, const DLTensor* targets,
                                           double dloss, DLTensor* total) noexcept {
  if (loom_error* e = op_softmax_cross_entropy(be, losses, dlogits, logits, targets, dloss))
    return e;
  return run_op(be, "softmax_cross_entropy", [&](loom_backend&) {
    Check ck{"softmax_cross_entropy"};
    ck.tensor("total", total);
    const int64_t N = loom_tensor_numel(losses);
    const int64_t V = N > 0 ? loom_tensor_numel(logits) / N : 0;
    double sum = 0.0;
    auto add = [&](auto* l) {
      for (int64_t n = 0; n < N; ++n) {
        sum += l[n];
        if (dlogits && !std::isfinite(l[n])) nan_row(dlogits, n, V);
      }
    };
    if (losses->dtype.bits == 64)
      add(data_of<const double>(losses));
    else
      add(data_of<const float>(losses));
    *data_of<double>(total) += sum;
  });
}

}  // namespace loom_cpu
