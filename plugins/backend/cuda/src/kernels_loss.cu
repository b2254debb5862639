// Fused softmax + cross-entropy over the vocabulary, and its vocab-parallel pieces.
//   softmax_cross_entropy: losses(N) = logsumexp(logits[n]) - logits[n, t[n]]            (f32)
//                          dlogits(N,V) = dloss * (softmax(logits[n]) - onehot(t[n]))
//                          (when dlogits != NULL; logits' dtype; may alias logits)
//   vocab_ce_stats:        stats(N,3) f32 = {rowmax m, sum exp(x - m), x[t - vocab_start] or 0}
//   vocab_ce_backward:     dlogits(N,Vl) = dloss * (exp(x - lse[n]) - onehot(t - vocab_start))
// targets(N) i32; -1 marks an ignored position (loss 0, gradient row 0). One block per row:
// max, then sum of exponents (block reductions, fixed order), then the gradient is written in
// one pass; no f32 copy of the probabilities is ever stored (the N x V logits are the
// largest activation of a GPT).
// Targets live on the device, so a bad one cannot be refused without a sync: a target
// outside [0,V) and not -1 (below -1 for the vocab-parallel ops, whose ids are global) gives
// a NaN loss (stats[n,2] = NaN) and a NaN gradient row, which the training loop reports.
// loom.ce-loss-total/1 (ABI 2.28) adds the losses' sum into a (1) f64 total on the device
// (one block after the rows, in an order fixed by N) and gives a row whose loss is not
// finite a NaN gradient row, so that a clip decided on the device refuses the update.
#include "kernels_common.cuh"
#include "ops.hpp"

namespace loom_cuda {
namespace {

constexpr int kRowThreads = 1024;  // vocabulary rows are long (32k-256k)

__device__ __forceinline__ float nan_f32() { return __int_as_float(0x7fc00000); }

// Block max and sum of exp(x - max) over a row x[0, V), in one read: each thread keeps a
// running max and its sum rescaled when the max grows (online softmax), then the block
// combines them. VW elements per access (16 bytes when VW > 1). Two passes of 2-byte loads
// reached 27 % of the copy bandwidth (step profile, H200, 2026-11-26). A thread that has seen
// only -inf (the padded vocabulary's mask) holds m = -inf and s = 0.
template <int VW, class T>
__device__ __forceinline__ void row_max_sumexp(const T* x, int64_t V, float& mx, float& sum) {
  float m = -INFINITY, s = 0.0f;
  for (int64_t j = int64_t{threadIdx.x} * VW; j < V; j += int64_t{blockDim.x} * VW) {
    float v[VW];
    load_vec<VW>(x + j, v);
    float lm = v[0];
#pragma unroll
    for (int i = 1; i < VW; ++i) lm = fmaxf(lm, v[i]);
    if (lm > m) {
      s *= expf(m - lm);  // m = -inf: s is 0 and stays 0
      m = lm;
    }
    if (m == -INFINITY) continue;
#pragma unroll
    for (int i = 0; i < VW; ++i) s += expf(v[i] - m);
  }
  mx = block_max(m);
  sum = block_sum(m == -INFINITY ? 0.0f : s * expf(m - mx));
}

template <class T>
__device__ __forceinline__ void fill_row(T* d, int64_t V, float v) {
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) d[j] = from_f32<T>(v);
}

// d[j] = scale exp(x[j] - sub) for j in [0, V), minus `at_t` at j == t (when t is in range).
// Each index is read before it is written by the same thread: d may alias x.
template <int VW, class T>
__device__ __forceinline__ void softmax_grad_row(T* d, const T* x, int64_t V, float sub,
                                                 float scale, int64_t t, float at_t) {
  for (int64_t j = int64_t{threadIdx.x} * VW; j < V; j += int64_t{blockDim.x} * VW) {
    float v[VW];
    load_vec<VW>(x + j, v);
#pragma unroll
    for (int i = 0; i < VW; ++i) {
      v[i] = expf(v[i] - sub) * scale;
      if (j + i == t) v[i] -= at_t;
    }
    store_vec<VW>(d + j, v);
  }
}

// losses(N) f32, dlogits(N,V) or NULL, logits(N,V), targets(N). nan_rows: a row whose loss
// is not finite gets a NaN gradient row (loom.ce-loss-total/1).
template <class T, int VW>
__global__ void cross_entropy_kernel(float* losses, T* dlogits, const T* logits,
                                     const int32_t* targets, int64_t N, int64_t V, float dloss,
                                     bool nan_rows) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* x = logits + n * V;
    T* d = dlogits != nullptr ? dlogits + n * V : nullptr;
    const int32_t t = targets[n];
    if (t == -1 || t < -1 || t >= V) {  // ignored, or bad (see the top); block-uniform
      const float v = t == -1 ? 0.0f : nan_f32();
      if (threadIdx.x == 0) losses[n] = v;
      if (d != nullptr) fill_row(d, V, v);
      continue;
    }
    // Read by every thread before the barriers inside row_max_sumexp, so before any thread
    // overwrites the row when dlogits aliases logits.
    const float x_t = to_f32(x[t]);
    float mx, sum;
    row_max_sumexp<VW>(x, V, mx, sum);
    // (mx - x_t) first: both are large when logits are, and their difference is exact-ish.
    // Every thread holds the same mx, sum and x_t, so the loss and the branch are uniform.
    const float loss = logf(sum) + (mx - x_t);
    if (threadIdx.x == 0) losses[n] = loss;
    if (d != nullptr && nan_rows && !isfinite(loss))
      fill_row(d, V, nan_f32());
    else if (d != nullptr)
      softmax_grad_row<VW>(d, x, V, mx, dloss / sum, t, dloss);
  }
}

// total[0] += the sum of losses(N) in double: thread i takes i, i + kThreads, ..., then the
// block's fixed tree (one block of kThreads: the order depends on N only).
__global__ void loss_total_kernel(const float* losses, int64_t N, double* total) {
  double s = 0;
  for (int64_t i = threadIdx.x; i < N; i += kThreads) s += static_cast<double>(losses[i]);
  s = tree_sum(s);
  if (threadIdx.x == 0) total[0] += s;
}

// stats(N,3) f32, logits(N,V) holding global ids [vs, vs + V), targets(N) global ids.
// Ignored rows still get m and s: cheap, and they keep the combined lse finite.
template <class T, int VW>
__global__ void vocab_stats_kernel(float* stats, const T* logits, const int32_t* targets, int64_t N,
                                   int64_t V, int64_t vs) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* x = logits + n * V;
    float mx, sum;
    row_max_sumexp<VW>(x, V, mx, sum);
    if (threadIdx.x == 0) {
      const int32_t t = targets[n];
      const int64_t local = t < 0 ? -1 : int64_t{t} - vs;
      stats[3 * n + 0] = mx;
      stats[3 * n + 1] = sum;
      stats[3 * n + 2] = t < -1 ? nan_f32() : (local >= 0 && local < V ? to_f32(x[local]) : 0.0f);
    }
  }
}

// dlogits(N,V), logits(N,V), targets(N), lse(N) f32 (the global log-sum-exp).
template <class T, int VW>
__global__ void vocab_backward_kernel(T* dlogits, const T* logits, const int32_t* targets,
                                      const float* lse, int64_t N, int64_t V, int64_t vs,
                                      float dloss) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* x = logits + n * V;
    T* d = dlogits + n * V;
    const int32_t t = targets[n];
    if (t < 0) {
      fill_row(d, V, t == -1 ? 0.0f : nan_f32());
      continue;
    }
    // the local id may be outside [0, V): another rank's
    softmax_grad_row<VW>(d, x, V, lse[n], dloss, int64_t{t} - vs, dloss);
  }
}

// logits(N,V) floating with V > 0, targets(N) i32; returns V and sets *rows = N.
int64_t check_logits(const char* op, const DLTensor* logits, const DLTensor* targets,
                     int64_t* rows) {
  need(op, "logits", logits);
  need(op, "targets", targets);
  need_float(op, "logits", logits);
  const int64_t V = last_dim(op, "logits", logits);
  if (V <= 0) fail(op, "logits has an empty vocabulary dimension");
  need_dtype(op, "targets", targets, loom_i32());
  *rows = numel(logits) / V;
  return V;
}

}  // namespace

namespace {

// The fused cross-entropy; `total` (loom.ce-loss-total/1): its losses' sum is added there and
// rows whose loss is not finite get NaN gradient rows.
void cross_entropy(loom_backend& b, DLTensor* losses, DLTensor* dlogits, const DLTensor* logits,
                   const DLTensor* targets, double dloss, DLTensor* total) {
  const char* op = "softmax_cross_entropy";
  int64_t N = 0;
  const int64_t V = check_logits(op, logits, targets, &N);
  need(op, "losses", losses);
  need_dtype(op, "losses", losses, loom_f32());
  if (dlogits != nullptr) need_same_dtype(op, "dlogits", dlogits, "logits", logits);
  need_finite(op, "dloss", dloss);
  const void* px = device_ptr(b, logits, op, "logits", N * V);
  const int32_t* pt = static_cast<const int32_t*>(device_ptr(b, targets, op, "targets", N));
  float* pl = static_cast<float*>(device_ptr(b, losses, op, "losses", N));
  void* pd = dlogits ? device_ptr(b, dlogits, op, "dlogits", N * V) : nullptr;
  double* ptot = total ? static_cast<double*>(device_ptr(b, total, op, "total", 1)) : nullptr;
  if (N == 0) return;
  dispatch_float(op, "logits", logits, [&](auto tt) {
    using T = typename decltype(tt)::type;
    with_vec<T>(V % kVec<T> == 0, {px, pd}, [&](auto vw) {
      constexpr int VW = decltype(vw)::value;
      cross_entropy_kernel<T, VW><<<grid_rows(N), row_threads(V / VW, kRowThreads), 0, b.stream>>>(
          pl, static_cast<T*>(pd), static_cast<const T*>(px), pt, N, V, static_cast<float>(dloss),
          ptot != nullptr);
      LOOM_CUDA_LAUNCHED(op);
    });
  });
  if (ptot == nullptr) return;
  loss_total_kernel<<<1, kThreads, 0, b.stream>>>(pl, N, ptot);
  LOOM_CUDA_LAUNCHED(op);
}

}  // namespace

loom_error* softmax_cross_entropy(loom_backend* be, DLTensor* losses, DLTensor* dlogits,
                                  const DLTensor* logits, const DLTensor* targets,
                                  double dloss) noexcept {
  return run_op(be, "softmax_cross_entropy", [&](loom_backend& b) {
    cross_entropy(b, losses, dlogits, logits, targets, dloss, nullptr);
  });
}

// ABI 2.28: not yet run on a GPU (docs/kernels.md).
loom_error* softmax_cross_entropy_total(loom_backend* be, DLTensor* losses, DLTensor* dlogits,
                                        const DLTensor* logits, const DLTensor* targets,
                                        double dloss, DLTensor* total) noexcept {
  return run_op(be, "softmax_cross_entropy", [&](loom_backend& b) {
    cross_entropy(b, losses, dlogits, logits, targets, dloss, total);
  });
}

loom_error* vocab_ce_stats(loom_backend* be, DLTensor* stats, const DLTensor* logits,
                           const DLTensor* targets, int64_t vocab_start) noexcept {
  return run_op(be, "vocab_ce_stats", [&](loom_backend& b) {
    const char* op = "vocab_ce_stats";
    int64_t N = 0;
    const int64_t V = check_logits(op, logits, targets, &N);
    if (vocab_start < 0) fail(op, "vocab_start = " + std::to_string(vocab_start) + " is negative");
    need(op, "stats", stats);
    need_dtype(op, "stats", stats, loom_f32());
    const void* px = device_ptr(b, logits, op, "logits", N * V);
    const int32_t* pt = static_cast<const int32_t*>(device_ptr(b, targets, op, "targets", N));
    float* ps = static_cast<float*>(device_ptr(b, stats, op, "stats", 3 * N));
    if (N == 0) return;
    dispatch_float(op, "logits", logits, [&](auto tt) {
      using T = typename decltype(tt)::type;
      with_vec<T>(V % kVec<T> == 0, {px}, [&](auto vw) {
        constexpr int VW = decltype(vw)::value;
        vocab_stats_kernel<T, VW><<<grid_rows(N), row_threads(V / VW, kRowThreads), 0, b.stream>>>(
            ps, static_cast<const T*>(px), pt, N, V, vocab_start);
        LOOM_CUDA_LAUNCHED(op);
      });
    });
  });
}

loom_error* vocab_ce_backward(loom_backend* be, DLTensor* dlogits, const DLTensor* logits,
                              const DLTensor* targets, int64_t vocab_start, const DLTensor* lse,
                              double dloss) noexcept {
  return run_op(be, "vocab_ce_backward", [&](loom_backend& b) {
    const char* op = "vocab_ce_backward";
    int64_t N = 0;
    const int64_t V = check_logits(op, logits, targets, &N);
    if (vocab_start < 0) fail(op, "vocab_start = " + std::to_string(vocab_start) + " is negative");
    need(op, "dlogits", dlogits);
    need(op, "lse", lse);
    need_same_dtype(op, "dlogits", dlogits, "logits", logits);
    need_dtype(op, "lse", lse, loom_f32());
    need_finite(op, "dloss", dloss);
    const void* px = device_ptr(b, logits, op, "logits", N * V);
    const int32_t* pt = static_cast<const int32_t*>(device_ptr(b, targets, op, "targets", N));
    void* pd = device_ptr(b, dlogits, op, "dlogits", N * V);
    const float* pl = static_cast<const float*>(device_ptr(b, lse, op, "lse", N));
    if (N == 0) return;
    dispatch_float(op, "logits", logits, [&](auto tt) {
      using T = typename decltype(tt)::type;
      with_vec<T>(V % kVec<T> == 0, {px, pd}, [&](auto vw) {
        constexpr int VW = decltype(vw)::value;
        vocab_backward_kernel<T, VW>
            <<<grid_rows(N), row_threads(V / VW, kRowThreads), 0, b.stream>>>(
                static_cast<T*>(pd), static_cast<const T*>(px), pt, pl, N, V, vocab_start,
                static_cast<float>(dloss));
        LOOM_CUDA_LAUNCHED(op);
      });
    });
  });
}

}  // namespace loom_cuda
