// Fused softmax + cross-entropy over the vocabulary.
//   losses(N)    = logsumexp(logits[n]) - logits[n, t[n]]
//   dlogits(N,V) = dloss * (softmax(logits[n]) - onehot(t[n]))     (when dlogits != NULL)
// targets(N) are i32; -1 marks an ignored position (loss 0, gradient row 0). dlogits may alias
// logits: a row's loss terms are all read before the row is overwritten, which lets the
// caller skip a second N x V buffer (the largest activation of a GPT).
// Numerically stable: exponents are taken of logits - rowmax, so nothing overflows.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu_backend.hpp"
#include "vec_math.hpp"

namespace loom_cpu {
namespace {

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
        T e = vexp(x[j] - mx);
        d[j] = e;
        sum += e;
      }
    } else {
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < V; ++j) sum += vexp(x[j] - mx);
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

}  // namespace

loom_error* op_softmax_cross_entropy(loom_backend* be, DLTensor* losses, DLTensor* dlogits,
                                     const DLTensor* logits, const DLTensor* targets,
                                     double dloss) noexcept {
  return run_op(be, "softmax_cross_entropy", [&](loom_backend& b) {
    Check ck{"softmax_cross_entropy"};
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
      ck.tensor("dlogits", dlogits);
      ck.same_dtype("dlogits", dlogits, "logits", logits);
      ck.numel("dlogits", dlogits, N * V);
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

}  // namespace loom_cpu
