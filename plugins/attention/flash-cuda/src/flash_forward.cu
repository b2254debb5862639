// attention/flash-cuda forward: FlashAttention-2 style, one block per (query tile, head,
// batch item). The Q tile stays in shared memory; key/value tiles stream through; scores,
// the online softmax (running max m, running sum l per row) and the output accumulator are
// fp32. Never materialises more than one (Br,Bc) score tile.
//
//   q(B,T,Hq,D) k,v(B,S,Hkv,D) -> out(B,T,Hq,D), lse(B,Hq,lseT) f32
//   query t (of the last T of S positions) sees keys s <= t + S - T under causal, and those
//   above t + S - T - window with a window; the bias is added to the scaled scores first.
#include <cfloat>

#include "flash_kernels.hpp"
#include "flash_tile.cuh"

namespace flash {
namespace {

template <class T, int D>
struct FwdSmem {
  static constexpr int Br = Tiles<T>::kBr, Bc = Tiles<T>::kBc;
  T *q, *k, *v, *p;      // q (Br,D), k and v (Bc,D), p (Br,Bc) probabilities in T for the PV GEMM
  float *s, *o, *m, *l;  // s (Br,Bc) scores, o (Br,D) accumulator, m and l (Br) row stats
  __host__ __device__ explicit FwdSmem(Carver& c)
      : q(c.take<T>(Br * D)),
        k(c.take<T>(Bc * D)),
        v(c.take<T>(Bc * D)),
        p(c.take<T>(Br * Bc)),
        s(c.take<float>(Br * Bc)),
        o(c.take<float>(Br * D)),
        m(c.take<float>(Br)),
        l(c.take<float>(Br)) {}
  static size_t bytes() {
    Carver c{nullptr};
    FwdSmem<T, D> x(c);
    return c.off;
  }
};

template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(Dims d, const T* __restrict__ q, const T* __restrict__ k,
                         const T* __restrict__ v, T* __restrict__ out, float* __restrict__ lse,
                         float scale, bool causal, Masks mk) {
  extern __shared__ __align__(128) char smem_raw[];
  Carver carver{smem_raw};
  using Sm = FwdSmem<T, D>;
  constexpr int Br = Sm::Br, Bc = Sm::Bc;
  const Sm sm(carver);

  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * Br, h = blockIdx.y, b = blockIdx.z;
  const int64_t g = h / (d.Hq / d.Hkv);
  const int64_t qpitch = d.Hq * D, kpitch = d.Hkv * D, shift = d.S - d.T;
  const int qrows = static_cast<int>(imin(Br, d.T - q0));
  const T* qh = q + (b * d.T + q0) * qpitch + h * D;
  const T* kh = k + b * d.S * kpitch + g * D;
  const T* vh = v + b * d.S * kpitch + g * D;

  load_rows<T, D>(sm.q, Br, qh, qpitch, qrows);
  for (int i = threadIdx.x; i < Br * D; i += kThreads) sm.o[i] = 0.0f;
  for (int i = threadIdx.x; i < Br; i += kThreads) {
    sm.m[i] = -INFINITY;
    sm.l[i] = 0.0f;
  }
  // Keys past the last visible one of this tile's last query are never loaded, nor, under a
  // window, the tiles before the first visible one of its first query.
  const int64_t kend = causal ? imin(d.S, q0 + qrows - 1 + shift + 1) : d.S;
  const int64_t kbegin = mk.window > 0 ? imax(0, q0 + shift - mk.window + 1) / Bc * Bc : 0;
  const T* bias = static_cast<const T*>(mk.bias);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  for (int64_t k0 = kbegin; k0 < kend; k0 += Bc) {
    const int krows = static_cast<int>(imin(Bc, d.S - k0));
    __syncthreads();  // previous PV GEMM done with k, v, p
    load_rows<T, D>(sm.k, Bc, kh + k0 * kpitch, kpitch, krows);
    load_rows<T, D>(sm.v, Bc, vh + k0 * kpitch, kpitch, krows);
    __syncthreads();
    tile_gemm<T, false, true>(Br, Bc, D, sm.q, D, sm.k, D, sm.s, Bc, false);  // S = Q K^T
    __syncthreads();
    // Online softmax, one warp per row: new max, rescale factor of the old sum/output.
    for (int r = warp; r < Br; r += kWarps) {
      const int64_t t = q0 + r;
      const int64_t last = causal ? t + shift : d.S - 1;  // the visible keys: (first, last]
      const int64_t first = mk.window > 0 ? last - mk.window : -1;
      const T* brow = bias ? bias + h * mk.bias_h + t * mk.bias_t : nullptr;
      float x[Bc / 32];
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < Bc / 32; ++j) {
        const int64_t s = k0 + lane + 32 * j;
        const bool live = r < qrows && s < d.S && s <= last && s > first;
        x[j] = live ? sm.s[r * Bc + lane + 32 * j] * scale + (brow ? to_f32(brow[s]) : 0.0f)
                    : -INFINITY;
        mx = fmaxf(mx, x[j]);
      }
      for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_old = sm.m[r], m_new = fmaxf(m_old, mx);
      // A row with nothing visible yet keeps m = -inf: its p are 0, never exp(-inf - -inf).
      const float base = m_new == -INFINITY ? 0.0f : m_new;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < Bc / 32; ++j) {
        const float p = expf(x[j] - base);  // exp(-inf) = 0 for masked columns
        sum += p;
        sm.p[r * Bc + lane + 32 * j] = from_f32<T>(p);
      }
      for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      const float alpha = expf(m_old - base);  // 0 when m_old = -inf
      for (int c = lane; c < D; c += 32) sm.o[r * D + c] *= alpha;
      __syncwarp();
      if (lane == 0) {
        sm.l[r] = sm.l[r] * alpha + sum;
        sm.m[r] = m_new;
      }
    }
    __syncthreads();
    tile_gemm<T, false, false>(Br, D, Bc, sm.p, Bc, sm.v, D, sm.o, D, true);  // O += P V
  }
  __syncthreads();
  T* oh = out + (b * d.T + q0) * qpitch + h * D;
  for (int idx = threadIdx.x; idx < qrows * D; idx += kThreads) {
    const int r = idx / D, c = idx % D;
    const float l = sm.l[r];
    oh[r * qpitch + c] = from_f32<T>(l > 0.0f ? sm.o[idx] / l : 0.0f);
  }
  if (lse)
    for (int r = threadIdx.x; r < qrows; r += kThreads) {
      const float l = sm.l[r];
      lse[(b * d.Hq + h) * d.lseT + q0 + r] = l > 0.0f ? sm.m[r] + logf(l) : -INFINITY;
    }
}

template <class T, int D>
cudaError_t launch_forward(const Dims& d, const void* q, const void* k, const void* v, void* out,
                           float* lse, float scale, bool causal, const Masks& m,
                           cudaStream_t stream) {
  constexpr int Br = Tiles<T>::kBr;
  const size_t smem = FwdSmem<T, D>::bytes();
  auto kernel = flash_forward_kernel<T, D>;
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>((d.T + Br - 1) / Br), static_cast<unsigned>(d.Hq),
                  static_cast<unsigned>(d.B));
  kernel<<<grid, kThreads, smem, stream>>>(d, static_cast<const T*>(q), static_cast<const T*>(k),
                                           static_cast<const T*>(v), static_cast<T*>(out), lse,
                                           scale, causal, m);
  return cudaGetLastError();
}

template <class T>
cudaError_t forward_t(const Dims& d, const void* q, const void* k, const void* v, void* out,
                      float* lse, float scale, bool causal, const Masks& m, cudaStream_t stream) {
  if (d.D == 64) return launch_forward<T, 64>(d, q, k, v, out, lse, scale, causal, m, stream);
  if (d.D == 128) return launch_forward<T, 128>(d, q, k, v, out, lse, scale, causal, m, stream);
  return cudaErrorInvalidValue;
}

// loom.attention-partial/1's merge, one warp per (b, h, part row i): out row row0 + i and its
// lse fold in the part's. A part row of lse -inf (no key) leaves out as it is; a row of out
// with lse -inf takes the part's as it is.
template <class T>
__global__ void __launch_bounds__(kThreads)
    flash_merge_kernel(Dims d, int64_t Tp, int64_t row0, T* __restrict__ out,
                       float* __restrict__ lse, const T* __restrict__ part_out,
                       const float* __restrict__ part_lse) {
  const int64_t rows = d.B * d.Hq * Tp;
  const int lane = threadIdx.x % 32;
  for (int64_t row = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 32; row < rows;
       row += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int64_t i = row % Tp, h = (row / Tp) % d.Hq, b = row / (Tp * d.Hq);
    const float p = part_lse[row];  // (B,Hq,Tp): row's own order
    if (p == -INFINITY) continue;
    float* l = lse + (b * d.Hq + h) * d.T + row0 + i;
    const float m = fmaxf(*l, p);
    const float merged = m + logf(expf(*l - m) + expf(p - m));  // *l = -inf: exactly p
    const float a = expf(*l - merged), c = expf(p - merged);
    T* o = out + ((b * d.T + row0 + i) * d.Hq + h) * d.D;
    const T* po = part_out + ((b * Tp + i) * d.Hq + h) * d.D;
    for (int64_t j = lane; j < d.D; j += 32)
      o[j] = from_f32<T>(a * to_f32(o[j]) + c * to_f32(po[j]));
    __syncwarp();
    if (lane == 0) *l = merged;
  }
}

template <class T>
cudaError_t merge_t(const Dims& d, int64_t Tp, int64_t row0, void* out, float* lse,
                    const void* part_out, const float* part_lse, cudaStream_t stream) {
  const int64_t rows = d.B * d.Hq * Tp;
  if (rows == 0) return cudaSuccess;
  flash_merge_kernel<T><<<blocks_for(rows, kWarps), kThreads, 0, stream>>>(
      d, Tp, row0, static_cast<T*>(out), lse, static_cast<const T*>(part_out), part_lse);
  return cudaGetLastError();
}

}  // namespace

cudaError_t merge(Dtype dt, const Dims& d, int64_t Tp, int64_t row0, void* out, float* lse,
                  const void* part_out, const float* part_lse, cudaStream_t stream) {
  return dispatch(dt, [&](auto x) {
    return merge_t<decltype(x)>(d, Tp, row0, out, lse, part_out, part_lse, stream);
  });
}

cudaError_t forward(Dtype dt, const Dims& d, const void* q, const void* k, const void* v, void* out,
                    float* lse, float scale, bool causal, const Masks& m, cudaStream_t stream) {
  if (d.T == 0 || d.B == 0 || d.Hq == 0) return cudaSuccess;
  return dispatch(dt, [&](auto x) {
    return forward_t<decltype(x)>(d, q, k, v, out, lse, scale, causal, m, stream);
  });
}

}  // namespace flash
