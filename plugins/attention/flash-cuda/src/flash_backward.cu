// attention/flash-cuda backward: FlashAttention-2's algorithm in three kernels, which the
// plugin launches as backward_delta, backward_tiles (once per variable-length sequence) and
// backward_cast.
//   1. delta(B,Hq,T) = rowsum(dO * O), one warp per row (fp32).
//   2. one block per (key tile, kv head, batch item): K, V tile and the fp32 dK, dV
//      accumulators stay in shared memory while the block walks every query tile of every
//      query head of its group (GQA sums over the group here, without atomics), recomputing
//      P = exp(scale * Q K^T - lse) and
//        dV += P^T dO,  dP = dO V^T,  dS = scale * P * (dP - delta),  dK += dS^T Q,
//        dQ += dS K  (atomicAdd into the fp32 workspace dq_acc: other key tiles add too),
//      masked as the forward (causal, window) and with its bias, whose gradient
//      P * (dP - delta) is added to dbias atomically (the batch rows share it).
//   3. dq = dq_acc cast to the element type.
// dq, dk, dv are written (=). The atomics make dq's summation order, hence its last bits,
// vary from run to run: there is no deterministic mode yet.
#include "flash_kernels.hpp"
#include "flash_tile.cuh"

namespace flash {
namespace {

// delta[b,h,t] = sum_c dout[b,t,h,c] * out[b,t,h,c]; rows ordered (b,h,t).
template <class T>
__global__ void __launch_bounds__(kThreads)
    flash_delta_kernel(Dims d, const T* __restrict__ dout, const T* __restrict__ out,
                       float* __restrict__ delta) {
  const int64_t rows = d.B * d.Hq * d.T;
  const int lane = threadIdx.x % 32;
  for (int64_t row = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 32; row < rows;
       row += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int64_t t = row % d.T, h = (row / d.T) % d.Hq, b = row / (d.T * d.Hq);
    const int64_t base = ((b * d.T + t) * d.Hq + h) * d.D;
    float acc = 0.0f;
    for (int64_t c = lane; c < d.D; c += 32) acc += to_f32(dout[base + c]) * to_f32(out[base + c]);
    for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) delta[(b * d.Hq + h) * d.lseT + t] = acc;
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    flash_cast_kernel(int64_t n, const float* __restrict__ src, T* __restrict__ dst) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads)
    dst[i] = from_f32<T>(src[i]);
}

template <class T, int D>
struct BwdSmem {
  static constexpr int Br = Tiles<T>::kBr, Bc = Tiles<T>::kBc;
  T *k, *v, *q, *dout, *p, *ds;  // k, v (Bc,D); q, dout (Br,D); p, ds (Br,Bc) for GEMMs
  float *dk, *dv;                // (Bc,D) accumulators
  float *s, *dp, *dq;            // s, dp (Br,Bc); dq (Br,D) reuses their space once consumed
  float *lse, *delta;            // (Br) of the current query tile
  __host__ __device__ explicit BwdSmem(Carver& c)
      : k(c.take<T>(Bc * D)),
        v(c.take<T>(Bc * D)),
        q(c.take<T>(Br * D)),
        dout(c.take<T>(Br * D)),
        p(c.take<T>(Br * Bc)),
        ds(c.take<T>(Br * Bc)),
        dk(c.take<float>(Bc * D)),
        dv(c.take<float>(Bc * D)),
        s(c.take<float>(Br * D > 2 * Br * Bc ? Br * D : 2 * Br * Bc)),
        dp(s + Br * Bc),
        dq(s),
        lse(c.take<float>(Br)),
        delta(c.take<float>(Br)) {}
  static size_t bytes() {
    Carver c{nullptr};
    BwdSmem<T, D> x(c);
    return c.off;
  }
};

template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    flash_backward_kernel(Dims d, const T* __restrict__ dout, const T* __restrict__ q,
                          const T* __restrict__ k, const T* __restrict__ v,
                          const float* __restrict__ lse, const float* __restrict__ delta,
                          float* __restrict__ dq_acc, T* __restrict__ dk, T* __restrict__ dv,
                          float scale, bool causal, Masks mk) {
  extern __shared__ __align__(128) char smem_raw[];
  Carver carver{smem_raw};
  using Sm = BwdSmem<T, D>;
  constexpr int Br = Sm::Br, Bc = Sm::Bc;
  const Sm sm(carver);

  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * Bc, g = blockIdx.y, b = blockIdx.z;
  const int64_t G = d.Hq / d.Hkv, qpitch = d.Hq * D, kpitch = d.Hkv * D, shift = d.S - d.T;
  const int krows = static_cast<int>(imin(Bc, d.S - k0));
  const int64_t kvoff = (b * d.S + k0) * kpitch + g * D;

  load_rows<T, D>(sm.k, Bc, k + kvoff, kpitch, krows);
  load_rows<T, D>(sm.v, Bc, v + kvoff, kpitch, krows);
  for (int i = threadIdx.x; i < Bc * D; i += kThreads) sm.dk[i] = sm.dv[i] = 0.0f;
  // Under causal, query t sees key k0 first when t + shift >= k0: earlier tiles see nothing;
  // under a window, query t sees key s last when t + shift - window < s, so the tile's last
  // key is seen by no query from k0 + krows - shift + window - 1 on.
  const int64_t t_first = causal ? imax(0, k0 - shift) : 0;
  const int64_t t_end = mk.window > 0 ? imin(d.T, k0 + krows - shift + mk.window - 1) : d.T;
  const T* bias = static_cast<const T*>(mk.bias);

  for (int64_t h = g * G; h < (g + 1) * G; ++h) {
    for (int64_t q0 = t_first / Br * Br; q0 < t_end; q0 += Br) {
      const int qrows = static_cast<int>(imin(Br, d.T - q0));
      const int64_t qoff = (b * d.T + q0) * qpitch + h * D, roff = (b * d.Hq + h) * d.lseT + q0;
      __syncthreads();  // the previous tile's GEMMs are done with q, dout, p, ds, dq
      load_rows<T, D>(sm.q, Br, q + qoff, qpitch, qrows);
      load_rows<T, D>(sm.dout, Br, dout + qoff, qpitch, qrows);
      for (int r = threadIdx.x; r < Br; r += kThreads) {
        sm.lse[r] = r < qrows ? lse[roff + r] : 0.0f;
        sm.delta[r] = r < qrows ? delta[roff + r] : 0.0f;
      }
      __syncthreads();
      tile_gemm<T, false, true>(Br, Bc, D, sm.q, D, sm.k, D, sm.s, Bc, false);  // S = Q K^T
      __syncthreads();
      // P = exp(scale S + bias - lse), 0 where masked, past S, or on a padding query row.
      for (int idx = threadIdx.x; idx < Br * Bc; idx += kThreads) {
        const int r = idx / Bc, c = idx % Bc;
        const int64_t t = q0 + r, s = k0 + c;
        const bool live = r < qrows && c < krows && (!causal || s <= t + shift) &&
                          (mk.window <= 0 || s > t + shift - mk.window);
        float z = sm.s[idx] * scale;
        if (live && bias) z += to_f32(bias[h * mk.bias_h + t * mk.bias_t + s]);
        const float p = live ? expf(z - sm.lse[r]) : 0.0f;
        sm.s[idx] = p;  // fp32 copy for dS
        sm.p[idx] = from_f32<T>(p);
      }
      __syncthreads();
      tile_gemm<T, true, false>(Bc, D, Br, sm.p, Bc, sm.dout, D, sm.dv, D, true);   // dV += P^T dO
      tile_gemm<T, false, true>(Br, Bc, D, sm.dout, D, sm.v, D, sm.dp, Bc, false);  // dP = dO V^T
      __syncthreads();
      for (int idx = threadIdx.x; idx < Br * Bc; idx += kThreads) {
        const int r = idx / Bc, c = idx % Bc;
        const float dz = sm.s[idx] * (sm.dp[idx] - sm.delta[r]);  // d(scores + bias)
        sm.ds[idx] = from_f32<T>(scale * dz);
        if (mk.dbias && sm.s[idx] != 0.0f)
          atomicAdd(mk.dbias + h * mk.bias_h + (q0 + r) * mk.bias_t + k0 + c, dz);
      }
      __syncthreads();
      tile_gemm<T, true, false>(Bc, D, Br, sm.ds, Bc, sm.q, D, sm.dk, D, true);    // dK += dS^T Q
      tile_gemm<T, false, false>(Br, D, Bc, sm.ds, Bc, sm.k, D, sm.dq, D, false);  // dQ = dS K
      __syncthreads();
      float* dqh = dq_acc + qoff;
      for (int idx = threadIdx.x; idx < qrows * D; idx += kThreads) {
        const int r = idx / D, c = idx % D;
        atomicAdd(dqh + r * qpitch + c, sm.dq[idx]);
      }
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < krows * D; idx += kThreads) {
    const int r = idx / D, c = idx % D;
    dk[kvoff + r * kpitch + c] = from_f32<T>(sm.dk[idx]);
    dv[kvoff + r * kpitch + c] = from_f32<T>(sm.dv[idx]);
  }
}

template <class T, int D>
cudaError_t launch_backward(const Dims& d, const void* dout, const void* q, const void* k,
                            const void* v, const float* lse, const float* delta, float* dq_acc,
                            void* dk, void* dv, float scale, bool causal, const Masks& m,
                            cudaStream_t stream) {
  constexpr int Bc = Tiles<T>::kBc;
  const size_t smem = BwdSmem<T, D>::bytes();
  auto kernel = flash_backward_kernel<T, D>;
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>((d.S + Bc - 1) / Bc), static_cast<unsigned>(d.Hkv),
                  static_cast<unsigned>(d.B));
  kernel<<<grid, kThreads, smem, stream>>>(d, static_cast<const T*>(dout), static_cast<const T*>(q),
                                           static_cast<const T*>(k), static_cast<const T*>(v), lse,
                                           delta, dq_acc, static_cast<T*>(dk), static_cast<T*>(dv),
                                           scale, causal, m);
  return cudaGetLastError();
}

template <class T>
cudaError_t tiles_t(const Dims& d, const void* dout, const void* q, const void* k, const void* v,
                    const float* lse, const float* delta, float* dq_acc, void* dk, void* dv,
                    float scale, bool causal, const Masks& m, cudaStream_t stream) {
  if (d.D == 64)
    return launch_backward<T, 64>(d, dout, q, k, v, lse, delta, dq_acc, dk, dv, scale, causal, m,
                                  stream);
  if (d.D == 128)
    return launch_backward<T, 128>(d, dout, q, k, v, lse, delta, dq_acc, dk, dv, scale, causal, m,
                                   stream);
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t backward_delta(Dtype dt, const Dims& d, const void* dout, const void* out, float* delta,
                           cudaStream_t stream) {
  const int64_t rows = d.B * d.Hq * d.T;
  if (rows == 0) return cudaSuccess;
  return dispatch(dt, [&](auto x) {
    using T = decltype(x);
    flash_delta_kernel<T><<<blocks_for(rows, kWarps), kThreads, 0, stream>>>(
        d, static_cast<const T*>(dout), static_cast<const T*>(out), delta);
    return cudaGetLastError();
  });
}

cudaError_t backward_tiles(Dtype dt, const Dims& d, const void* dout, const void* q, const void* k,
                           const void* v, const float* lse, const float* delta, float* dq_acc,
                           void* dk, void* dv, float scale, bool causal, const Masks& m,
                           cudaStream_t stream) {
  if (d.B == 0 || d.Hq == 0 || d.S == 0) return cudaSuccess;
  return dispatch(dt, [&](auto x) {
    using T = decltype(x);
    return tiles_t<T>(d, dout, q, k, v, lse, delta, dq_acc, dk, dv, scale, causal, m, stream);
  });
}

cudaError_t backward_cast(Dtype dt, int64_t n, const float* dq_acc, void* dq, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return dispatch(dt, [&](auto x) {
    using T = decltype(x);
    flash_cast_kernel<T>
        <<<blocks_for(n, kThreads), kThreads, 0, stream>>>(n, dq_acc, static_cast<T*>(dq));
    return cudaGetLastError();
  });
}

}  // namespace flash
