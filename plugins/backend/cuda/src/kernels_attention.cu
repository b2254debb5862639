// Attention pieces the attention plugins compose with gemm: the row softmax over scores and
// rotary position embeddings. f32/bf16/f16 storage, f32 arithmetic, lse f32.
//   softmax_forward:  s(Bt,Tq,Tk) <- softmax(scale * s) per row, causal mask optional, and
//                     with it a sliding window;
//                     lse(Bt,Tq) = logsumexp of the scaled, masked row (may be NULL)
//   softmax_backward: ds(Bt,Tq,Tk) = scale * p * (dp - rowsum(p * dp)); ds may alias dp
//   rope_forward:     x(B,T,H,D) rotated in place, rotate-half pairs (i, i + D/2) at position
//                     pos_offset + t by angle pos * theta^(-2i/D)
//   rope_backward:    dx rotated back by the same angles (the transpose of the rotation)
//   rope_freqs:       either, with loom.rope-freqs/1's D/2 frequencies in place of
//                     theta^(-2i/D) and cos and sin both times its scale (Llama 3's and YaRN's
//                     scalings); the table rides in the launch's parameters (D <= 512)
// Leading dimensions of s are flattened: (B,H,Tq,Tk) works as Bt = B*H. With causal, column j
// of row i is masked when j > i + (Tk - Tq) (queries are the last Tq of Tk positions); a row
// with every column masked (only when Tq > Tk) gets probabilities 0 and lse = -inf.
#include "kernels_common.cuh"
#include "ops.hpp"

namespace loom_cuda {
namespace {

// s(rows = Bt*Tq, Tk) in place, lse(rows) or NULL. One block per row.
template <class T>
__global__ void softmax_forward_kernel(T* s, float* lse, int64_t rows, int64_t Tq, int64_t Tk,
                                       float scale, bool causal, int64_t window) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    T* x = s + r * Tk;
    // Columns [first, valid) take part; with causal, query i sits at key position
    // i + Tk - Tq, and a window keeps only its last `window` positions.
    int64_t valid = Tk;
    if (causal) {
      valid = r % Tq + (Tk - Tq) + 1;
      valid = valid < 0 ? 0 : (valid > Tk ? Tk : valid);
    }
    int64_t first = window > 0 ? valid - window : 0;
    first = first < 0 ? 0 : first;
    if (valid == first) {  // the same for the whole block: no thread skips a barrier alone
      for (int64_t j = threadIdx.x; j < Tk; j += blockDim.x) x[j] = from_f32<T>(0.0f);
      if (lse != nullptr && threadIdx.x == 0) lse[r] = -INFINITY;
      continue;
    }
    float mx = -INFINITY;
    for (int64_t j = first + threadIdx.x; j < valid; j += blockDim.x)
      mx = fmaxf(mx, scale * to_f32(x[j]));
    mx = block_max(mx);
    float sum = 0.0f;
    for (int64_t j = first + threadIdx.x; j < valid; j += blockDim.x)
      sum += expf(scale * to_f32(x[j]) - mx);
    sum = block_sum(sum);
    // The exponent is recomputed rather than parked in s: a bf16 s would round it twice.
    const float inv = 1.0f / sum;
    for (int64_t j = threadIdx.x; j < Tk; j += blockDim.x)
      x[j] = from_f32<T>(j >= first && j < valid ? expf(scale * to_f32(x[j]) - mx) * inv : 0.0f);
    if (lse != nullptr && threadIdx.x == 0) lse[r] = mx + logf(sum);
  }
}

// ds, p, dp (rows, Tk). One block per row; the row dot product is complete (block_sum's
// barriers) before any thread writes, and each thread writes only what it read: ds may alias
// dp.
template <class T>
__global__ void softmax_backward_kernel(T* ds, const T* p, const T* dp, int64_t rows, int64_t Tk,
                                        float scale) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* pr = p + r * Tk;
    const T* dpr = dp + r * Tk;
    float dot = 0.0f;
    for (int64_t j = threadIdx.x; j < Tk; j += blockDim.x) dot += to_f32(pr[j]) * to_f32(dpr[j]);
    dot = block_sum(dot);
    T* dsr = ds + r * Tk;
    for (int64_t j = threadIdx.x; j < Tk; j += blockDim.x)
      dsr[j] = from_f32<T>(scale * to_f32(pr[j]) * (to_f32(dpr[j]) - dot));
  }
}

// loom.rope-freqs/1's table as a kernel parameter (2 KiB of the 4 KiB a launch may carry).
constexpr int64_t kRopeTableMax = 256;
struct RopeTable {
  double inv_freq[kRopeTableMax];
};

// x(B*T rows of H heads of D), in place. One block per (b, t); a thread per frequency i
// computes its angle once (in double: positions reach 10^5 and more, where an f32 angle would
// be off by whole radians' worth of ulps) and turns that pair in every head.
// sign = +1 rotates forward, -1 back (the inverse, which for a rotation is the transpose).
// freqs: loom.rope-freqs/1's D/2 frequencies when `table`, else theta^(-2i/D); cos and sin are
// times scale, rounded to f32 once, as backend/cpu does.
template <class T>
__global__ void rope_kernel(T* x, int64_t BT, int64_t Tn, int64_t H, int64_t D, int64_t pos_offset,
                            double theta, double sign, const RopeTable freqs, bool table,
                            double scale) {
  const int64_t half = D / 2;
  for (int64_t bt = blockIdx.x; bt < BT; bt += gridDim.x) {
    const double pos = static_cast<double>(pos_offset + bt % Tn);
    for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
      const double inv_freq =
          table ? freqs.inv_freq[i]
                : pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
      double sd, cd;
      sincos(pos * inv_freq, &sd, &cd);
      const float c = static_cast<float>(scale * cd), sn = static_cast<float>(sign * scale * sd);
      for (int64_t h = 0; h < H; ++h) {
        T* lo = x + (bt * H + h) * D + i;
        const float a = to_f32(lo[0]), b = to_f32(lo[half]);
        lo[0] = from_f32<T>(a * c - b * sn);
        lo[half] = from_f32<T>(b * c + a * sn);
      }
    }
  }
}

void rope_op(const char* op, loom_backend& b, DLTensor* x, const char* name, int64_t pos_offset,
             double theta, double sign, const double* host_freqs = nullptr, double scale = 1.0) {
  need(op, name, x);
  need_float(op, name, x);
  if (x->ndim != 4)
    fail(op, std::string(name) + " has " + std::to_string(x->ndim) +
                 " dimensions, expected 4 (B, T, H, D)");
  const int64_t B = x->shape[0], Tn = x->shape[1], H = x->shape[2], D = x->shape[3];
  if (D <= 0 || D % 2 != 0)
    fail(op, std::string(name) + " has head dimension D = " + std::to_string(D) +
                 ", expected a positive even number");
  if (host_freqs == nullptr && (!(theta > 0) || !std::isfinite(theta)))
    fail(op, "theta = " + std::to_string(theta) + " must be > 0");
  if (host_freqs != nullptr) need_finite(op, "scale", scale);
  if (pos_offset < 0) fail(op, "pos_offset = " + std::to_string(pos_offset) + " must be >= 0");
  void* p = device_ptr(b, x, op, name, B * Tn * H * D);
  if (B * Tn * H == 0) return;
  // The caller's table (host memory, borrowed for the call) travels by value in the launch:
  // no copy to queue, nothing to wait for before the caller may reuse it.
  RopeTable freqs{};
  if (host_freqs != nullptr) {
    if (D / 2 > kRopeTableMax)
      fail(op,
           std::string(LOOM_EXT_ROPE_FREQS) + " with D = " + std::to_string(D) +
               ": backend/cuda takes at most " + std::to_string(2 * kRopeTableMax),
           LOOM_ERR_UNIMPLEMENTED);
    for (int64_t i = 0; i < D / 2; ++i) freqs.inv_freq[i] = host_freqs[i];
  }
  dispatch_float(op, name, x, [&](auto tt) {
    using T = typename decltype(tt)::type;
    rope_kernel<T><<<grid_rows(B * Tn), row_threads(D / 2, 256), 0, b.stream>>>(
        static_cast<T*>(p), B * Tn, Tn, H, D, pos_offset, theta, sign, freqs, host_freqs != nullptr,
        scale);
    LOOM_CUDA_LAUNCHED(op);
  });
}

}  // namespace

loom_error* softmax_forward(loom_backend* be, const loom_softmax_args* a) noexcept {
  return run_op(be, "softmax_forward", [&](loom_backend& b) {
    const char* op = "softmax_forward";
    DLTensor *s = a->s, *lse = a->lse;
    const double scale = a->scale;
    if (a->window < 0) fail(op, "window must be >= 0");
    if (a->window > 0 && !a->causal) fail(op, "a sliding window needs causal");
    need(op, "s", s);
    need_float(op, "s", s);
    if (s->ndim < 2) fail(op, "s must have at least 2 dimensions (Tq, Tk)");
    const int64_t Tq = s->shape[s->ndim - 2], Tk = s->shape[s->ndim - 1];
    const int64_t rows = Tk > 0 ? numel(s) / Tk : 0;
    if (lse != nullptr) need_dtype(op, "lse", lse, loom_f32());
    need_finite(op, "scale", scale);
    void* ps = device_ptr(b, s, op, "s", rows * Tk);
    float* pl = lse ? static_cast<float*>(device_ptr(b, lse, op, "lse", rows)) : nullptr;
    if (rows == 0 || Tk == 0) return;
    dispatch_float(op, "s", s, [&](auto tt) {
      using T = typename decltype(tt)::type;
      softmax_forward_kernel<T><<<grid_rows(rows), row_threads(Tk, 256), 0, b.stream>>>(
          static_cast<T*>(ps), pl, rows, Tq, Tk, static_cast<float>(scale), a->causal != 0,
          a->window);
      LOOM_CUDA_LAUNCHED(op);
    });
  });
}

loom_error* softmax_backward(loom_backend* be, DLTensor* ds, const DLTensor* p, const DLTensor* dp,
                             double scale) noexcept {
  return run_op(be, "softmax_backward", [&](loom_backend& b) {
    const char* op = "softmax_backward";
    need(op, "ds", ds);
    need(op, "p", p);
    need(op, "dp", dp);
    need_float(op, "p", p);
    need_same_dtype(op, "ds", ds, "p", p);
    need_same_dtype(op, "dp", dp, "p", p);
    const int64_t Tk = last_dim(op, "p", p);
    const int64_t n = numel(p);
    const void* pp = device_ptr(b, p, op, "p", n);
    const void* pdp = device_ptr(b, dp, op, "dp", n);
    void* pds = device_ptr(b, ds, op, "ds", n);
    if (Tk == 0 || n == 0) return;
    dispatch_float(op, "p", p, [&](auto tt) {
      using T = typename decltype(tt)::type;
      softmax_backward_kernel<T><<<grid_rows(n / Tk), row_threads(Tk, 256), 0, b.stream>>>(
          static_cast<T*>(pds), static_cast<const T*>(pp), static_cast<const T*>(pdp), n / Tk, Tk,
          static_cast<float>(scale));
      LOOM_CUDA_LAUNCHED(op);
    });
  });
}

loom_error* rope_forward(loom_backend* be, DLTensor* x, int64_t pos_offset, double theta) noexcept {
  return run_op(be, "rope_forward", [&](loom_backend& b) {
    rope_op("rope_forward", b, x, "x", pos_offset, theta, +1.0);
  });
}

loom_error* rope_backward(loom_backend* be, DLTensor* dx, int64_t pos_offset,
                          double theta) noexcept {
  return run_op(be, "rope_backward", [&](loom_backend& b) {
    rope_op("rope_backward", b, dx, "dx", pos_offset, theta, -1.0);
  });
}

loom_error* rope_freqs(loom_backend* be, DLTensor* x, int64_t pos_offset, const double* inv_freq,
                       double scale, int backward) noexcept {
  const char* op = backward ? "rope_backward" : "rope_forward";
  return run_op(be, op, [&](loom_backend& b) {
    if (inv_freq == nullptr) fail(op, LOOM_EXT_ROPE_FREQS " without its inv_freq table");
    rope_op(op, b, x, backward ? "dx" : "x", pos_offset, 0.0, backward ? -1.0 : 1.0, inv_freq,
            scale);
  });
}

}  // namespace loom_cuda
