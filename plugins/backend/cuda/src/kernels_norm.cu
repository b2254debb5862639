// Normalisation layers, per row of C channels (LayerNorm and RMSNorm share every kernel; kRms
// drops the mean and the bias).
//   layernorm_forward:  out(N,C) = (inp - mean) * rstd * weight(C) + bias(C)
//                       mean(N), rstd(N) = 1/sqrt(var + eps) saved, f32 (biased variance,
//                       like PyTorch); bias may be NULL
//   layernorm_backward: dinp(N,C) = ; dweight(C) += ; dbias(C) += (may be NULL)
//   rmsnorm_forward:    out(N,C) = inp * rstd * weight(C), rstd(N) = 1/sqrt(mean(inp^2) + eps)
//   rmsnorm_backward:   dinp(N,C) = ; dweight(C) +=
//   (Mamba-2's gated RMSNorm, loom.norm-gate/1, is in kernels_norm_gated.cu)
//   loom.norm-residual/1 (ABI 2.29), `res` given: the forward first makes sum = inp + res,
//   rounded to T as the add op rounds it, and normalises that; the backward writes
//   dinp = res + dinp rounded to T first (the add op after the plain call, to the bit), the
//   residual read where dinp is written, so dinp may alias res.
// Activation gradients are written (=), parameter gradients accumulate (+=).
// dtypes: inp/out/dinp/dout one of f32/bf16/f16 (T); weight/bias T or f32; dweight/dbias T
// or f32 (main grads); statistics f32. All arithmetic in f32.
//
// Forward and dinp: one warp per row with the row in registers where C is a few 16-byte
// vectors per lane (GPT-sized), else one block per row; warp or block reductions (fixed
// order). The weight/bias gradients are deterministic without atomics: blocks of 32 channels
// x a chunk of rows write f32 partial sums to scratch (the warp backward: a block per chunk,
// from its registers), then column_sum_finish adds the chunks up in order. The block path's
// column pass runs before its dinp pass, and the warp backward reads a row before writing it,
// so dinp may alias dout or inp (as on the CPU).
#include <algorithm>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "kernels_common.cuh"
#include "kernels_norm.cuh"
#include "ops.hpp"

namespace loom_cuda {
namespace {

// y[c, c + VW) = (v - m) * rs * weight + bias (bias NULL: none): a normalised row's output.
template <int VW, class T, class W>
__device__ __forceinline__ void store_affine(T* y, float (&v)[VW], const W* weight, const W* bias,
                                             int64_t c, float m, float rs) {
  float w[VW], bb[VW];
  load_row<VW>(weight + c, w);
  if (bias != nullptr) {
    load_row<VW>(bias + c, bb);
  } else {
#pragma unroll
    for (int i = 0; i < VW; ++i) bb[i] = 0.0f;
  }
#pragma unroll
  for (int i = 0; i < VW; ++i) v[i] = (v[i] - m) * rs * w[i] + bb[i];
  store_vec<VW>(y + c, v);
}

// v rounded to T and back: what a store of v to T memory and its load give.
template <class T>
__device__ __forceinline__ float round_to(float v) {
  return to_f32(from_f32<T>(v));
}
// loom.norm-residual/1's backward on VW gradient values g of a row at offset `at`, before
// their store: g = res + round_to<T>(g), the add op's arithmetic (res NULL: unchanged).
template <class T, int VW>
__device__ __forceinline__ void add_residual_grad(float (&g)[VW], const T* res, int64_t at) {
  if (res == nullptr) return;
  float r[VW];
  load_vec<VW>(res + at, r);
#pragma unroll
  for (int i = 0; i < VW; ++i) g[i] = r[i] + round_to<T>(g[i]);
}

// out(N,C), inp(N,C), weight(C), bias(C) or NULL, mean(N) (NULL for RMSNorm), rstd(N); with
// res(N,C), sum(N,C) = inp + res is written first and normalised (each thread rereads only
// the elements it wrote, so sum may alias inp or res).
template <class T, class W, int VW, bool kRms>
__global__ void norm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, const W* weight,
                                    const W* bias, int64_t N, int64_t C, float eps, const T* res,
                                    T* sum) {
  const int64_t c0 = static_cast<int64_t>(threadIdx.x) * VW, step = int64_t{blockDim.x} * VW;
  const float fc = static_cast<float>(C);  // divided by, as on the CPU (not times 1/C)
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* x = inp + n * C;
    if (res != nullptr) {
      for (int64_t c = c0; c < C; c += step) {
        float v[VW], r[VW];
        load_vec<VW>(x + c, v);
        load_vec<VW>(res + n * C + c, r);
#pragma unroll
        for (int i = 0; i < VW; ++i) v[i] += r[i];
        store_vec<VW>(sum + n * C + c, v);
      }
      x = sum + n * C;
    }
    float m = 0.0f;
    if constexpr (!kRms) {
      float s = 0.0f;
      for (int64_t c = c0; c < C; c += step) {
        float v[VW];
        load_vec<VW>(x + c, v);
#pragma unroll
        for (int i = 0; i < VW; ++i) s += v[i];
      }
      m = block_sum(s) / fc;
    }
    // Two-pass variance: sum((x-m)^2) does not cancel the way E[x^2] - m^2 does.
    float q = 0.0f;
    for (int64_t c = c0; c < C; c += step) {
      float v[VW];
      load_vec<VW>(x + c, v);
#pragma unroll
      for (int i = 0; i < VW; ++i) q += (v[i] - m) * (v[i] - m);
    }
    const float rs = 1.0f / sqrtf(block_sum(q) / fc + eps);
    T* y = out + n * C;
    for (int64_t c = c0; c < C; c += step) {
      float v[VW];
      load_vec<VW>(x + c, v);
      store_affine<VW>(y, v, weight, bias, c, m, rs);
    }
    if (threadIdx.x == 0) {
      if constexpr (!kRms) mean[n] = m;
      rstd[n] = rs;
    }
  }
}

// Partial weight/bias gradients. Block (32, 8): x = a group of VW channels of a 32 VW-channel
// slice (blockIdx.x; 16-byte loads when VW > 1), y = a row stripe of chunk blockIdx.y (rows
// [chunk*R, chunk*R + R)). part_w/part_b(chunks, C) f32; part_b NULL when no bias gradient
// is wanted. Shared rows are laid out [i][x]: 32 distinct banks for the stores and the sums.
template <class T, bool kRms, int VW>
__global__ void norm_dparams_partial_kernel(float* part_w, float* part_b, const T* dout,
                                            const T* inp, const float* mean, const float* rstd,
                                            int64_t N, int64_t C, int64_t rows_per_chunk) {
  __shared__ float sw[8][VW * 32], sb[8][VW * 32];
  const int64_t c0 = (int64_t{blockIdx.x} * 32 + threadIdx.x) * VW;
  const int64_t r0 = int64_t{blockIdx.y} * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
  float aw[VW], ab[VW];
#pragma unroll
  for (int i = 0; i < VW; ++i) aw[i] = ab[i] = 0.0f;
  if (c0 < C) {
    for (int64_t n = r0 + threadIdx.y; n < r1; n += blockDim.y) {
      float g[VW], x[VW];
      load_vec<VW>(dout + n * C + c0, g);
      load_vec<VW>(inp + n * C + c0, x);
      const float m = kRms ? 0.0f : mean[n], rs = rstd[n];
#pragma unroll
      for (int i = 0; i < VW; ++i) {
        aw[i] += g[i] * ((x[i] - m) * rs);
        ab[i] += g[i];
      }
    }
  }
#pragma unroll
  for (int i = 0; i < VW; ++i) {
    sw[threadIdx.y][i * 32 + threadIdx.x] = aw[i];
    sb[threadIdx.y][i * 32 + threadIdx.x] = ab[i];
  }
  __syncthreads();
  if (threadIdx.y == 0 && c0 < C) {
#pragma unroll
    for (int i = 0; i < VW; ++i) {
      float w = 0.0f, bsum = 0.0f;
      for (unsigned k = 0; k < blockDim.y; ++k) {
        w += sw[k][i * 32 + threadIdx.x];
        bsum += sb[k][i * 32 + threadIdx.x];
      }
      part_w[int64_t{blockIdx.y} * C + c0 + i] = w;
      if (part_b != nullptr) part_b[int64_t{blockIdx.y} * C + c0 + i] = bsum;
    }
  }
}

// dinp(N,C) = rstd * (dn - mean(dn) - xhat * mean(dn * xhat)), dn = dout * weight,
// xhat = (inp - mean) * rstd; RMSNorm drops the mean(dn) term and the mean.
// With res (N,C): dinp = res + that, rounded as loom.norm-residual/1 says.
template <class T, class W, int VW, bool kRms>
__global__ void norm_dinp_kernel(T* dinp, const T* dout, const T* inp, const W* weight,
                                 const float* mean, const float* rstd, int64_t N, int64_t C,
                                 const T* res) {
  const int64_t c0 = static_cast<int64_t>(threadIdx.x) * VW, step = int64_t{blockDim.x} * VW;
  const float fc = static_cast<float>(C);  // divided by, as on the CPU (not times 1/C)
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* x = inp + n * C;
    const T* g = dout + n * C;
    const float m = kRms ? 0.0f : mean[n], rs = rstd[n];
    float s1 = 0.0f, s2 = 0.0f;
    for (int64_t c = c0; c < C; c += step) {
      float xv[VW], gv[VW], w[VW];
      load_vec<VW>(x + c, xv);
      load_vec<VW>(g + c, gv);
      load_row<VW>(weight + c, w);
#pragma unroll
      for (int i = 0; i < VW; ++i) {
        const float dn = gv[i] * w[i];
        s1 += dn;
        s2 += dn * ((xv[i] - m) * rs);
      }
    }
    const float mean_dn = kRms ? 0.0f : block_sum(s1) / fc;
    const float mean_dnx = block_sum(s2) / fc;
    // Every read of this row by other threads finished inside block_sum's barriers; each
    // thread now rewrites only the elements it reads, so dinp may alias dout or inp.
    T* dx = dinp + n * C;
    for (int64_t c = c0; c < C; c += step) {
      float xv[VW], gv[VW], w[VW];
      load_vec<VW>(x + c, xv);
      load_vec<VW>(g + c, gv);
      load_row<VW>(weight + c, w);
#pragma unroll
      for (int i = 0; i < VW; ++i)
        xv[i] = rs * (gv[i] * w[i] - mean_dn - ((xv[i] - m) * rs) * mean_dnx);
      add_residual_grad<T, VW>(xv, res, n * C + c);
      store_vec<VW>(dx + c, xv);
    }
  }
}

// ---- one warp per row, the row in registers (C = 32 * VW * nv, nv <= kWarpVecs) ------------
// GPT-sized rows (C = 768 ... 2048 in bf16) are a few vectors per lane: a warp holds its row in
// registers, so the forward reads it once and reduces with shuffles alone, where the block
// kernels above reread it per pass and wait at two block barriers per row (36-44 % of the
// copy bandwidth on an H200, docs/performance.md); the backward also sums the parameter
// gradients on the way (up to 4 vectors a lane). Lane l holds vectors l, l + 32, ...
constexpr int kWarpVecs = 8;
constexpr int kWarpRowsPerBlock = 4;

// With res: sum = inp + res written as the row is loaded, and the rounded sum normalised.
template <class T, class W, int VW, bool kRms>
__global__ void norm_forward_warp_kernel(T* out, float* mean, float* rstd, const T* inp,
                                         const W* weight, const W* bias, int64_t N, int64_t C,
                                         int nv, float eps, const T* res, T* sum) {
  const int lane = threadIdx.x & 31;
  const float fc = static_cast<float>(C);
  const int64_t warps = int64_t{gridDim.x} * kWarpRowsPerBlock;
  for (int64_t n = int64_t{blockIdx.x} * kWarpRowsPerBlock + threadIdx.x / 32; n < N; n += warps) {
    const T* x = inp + n * C;
    float v[kWarpVecs][VW];
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < kWarpVecs; ++k)
      if (k < nv) {
        const int64_t c = (int64_t{k} * 32 + lane) * VW;
        load_vec<VW>(x + c, v[k]);
        if (res != nullptr) {
          float r[VW];
          load_vec<VW>(res + n * C + c, r);
#pragma unroll
          for (int i = 0; i < VW; ++i) v[k][i] += r[i];
          store_vec<VW>(sum + n * C + c, v[k]);
#pragma unroll
          for (int i = 0; i < VW; ++i) v[k][i] = round_to<T>(v[k][i]);
        }
#pragma unroll
        for (int i = 0; i < VW; ++i) s += v[k][i];
      }
    const float m = kRms ? 0.0f : warp_sum(s) / fc;
    float q = 0.0f;  // two-pass variance, from the registers
#pragma unroll
    for (int k = 0; k < kWarpVecs; ++k)
      if (k < nv) {
#pragma unroll
        for (int i = 0; i < VW; ++i) q += (v[k][i] - m) * (v[k][i] - m);
      }
    const float rs = 1.0f / sqrtf(warp_sum(q) / fc + eps);
    T* y = out + n * C;
#pragma unroll
    for (int k = 0; k < kWarpVecs; ++k)
      if (k < nv) store_affine<VW>(y, v[k], weight, bias, (int64_t{k} * 32 + lane) * VW, m, rs);
    if (lane == 0) {
      if constexpr (!kRms) mean[n] = m;
      rstd[n] = rs;
    }
  }
}

// The whole backward, one warp per row: dinp by norm_dinp_kernel's formula, and the
// weight/bias gradients' partial sums of chunk blockIdx.x (rows_per_chunk rows, row_chunks'),
// which each lane keeps in registers over its warp's rows and the block then adds up warp by
// warp (a fixed order): part_w/part_b(chunks, C), as norm_dparams_partial_kernel writes them,
// without its second read of dout and inp. Each lane writes only the elements it read, after
// the shuffles that end every read of the row: dinp may alias dout or inp.
// NV (vectors a lane) is a template argument: four arrays of NV vectors live in registers,
// and a runtime bound would size them for the largest (168 registers at NV = 4 in bf16: one
// block an SM). Up to NV = 3 (GPT-2's C = 768 in bf16) two blocks an SM are asked for.
constexpr int kBwdWarps = 8, kBwdVecs = 4;
template <class T, class W, int VW, bool kRms, int NV>
__global__ void __launch_bounds__(32 * kBwdWarps, NV <= 3 ? 2 : 1)
    norm_backward_warp_kernel(T* dinp, float* part_w, float* part_b, const T* dout, const T* inp,
                              const W* weight, const float* mean, const float* rstd, int64_t N,
                              int64_t C, int64_t rows_per_chunk, const T* res) {
  __shared__ float sw[kBwdWarps][32 * VW], sb[kBwdWarps][32 * VW];
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const float fc = static_cast<float>(C);
  const int64_t r0 = int64_t{blockIdx.x} * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
  float aw[NV][VW], ab[NV][VW];
#pragma unroll
  for (int k = 0; k < NV; ++k)
#pragma unroll
    for (int i = 0; i < VW; ++i) aw[k][i] = ab[k][i] = 0.0f;
  for (int64_t n = r0 + warp; n < r1; n += kBwdWarps) {
    const float m = kRms ? 0.0f : mean[n], rs = rstd[n];
    float xh[NV][VW], dn[NV][VW];
    float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int64_t c = (int64_t{k} * 32 + lane) * VW;
      float w[VW];
      load_vec<VW>(inp + n * C + c, xh[k]);
      load_vec<VW>(dout + n * C + c, dn[k]);
      load_row<VW>(weight + c, w);
#pragma unroll
      for (int i = 0; i < VW; ++i) {
        xh[k][i] = (xh[k][i] - m) * rs;
        aw[k][i] += dn[k][i] * xh[k][i];
        ab[k][i] += dn[k][i];
        dn[k][i] *= w[i];
        s1 += dn[k][i];
        s2 += dn[k][i] * xh[k][i];
      }
    }
    const float mean_dn = kRms ? 0.0f : warp_sum(s1) / fc;
    const float mean_dnx = warp_sum(s2) / fc;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
#pragma unroll
      for (int i = 0; i < VW; ++i) dn[k][i] = rs * (dn[k][i] - mean_dn - xh[k][i] * mean_dnx);
      const int64_t at = n * C + (int64_t{k} * 32 + lane) * VW;
      add_residual_grad<T, VW>(dn[k], res, at);
      store_vec<VW>(dinp + at, dn[k]);
    }
  }
  // The chunk's partial sums: the warps' registers added in warp order, one vector at a time.
#pragma unroll
  for (int k = 0; k < NV; ++k) {
#pragma unroll
    for (int i = 0; i < VW; ++i) {
      sw[warp][lane * VW + i] = aw[k][i];
      sb[warp][lane * VW + i] = ab[k][i];
    }
    __syncthreads();
    if (warp == 0) {
      const int64_t c = (int64_t{k} * 32 + lane) * VW;
#pragma unroll
      for (int i = 0; i < VW; ++i) {
        float w = 0.0f, bsum = 0.0f;
#pragma unroll
        for (int j = 0; j < kBwdWarps; ++j) {
          w += sw[j][lane * VW + i];
          bsum += sb[j][lane * VW + i];
        }
        part_w[int64_t{blockIdx.x} * C + c + i] = w;
        if (part_b != nullptr) part_b[int64_t{blockIdx.x} * C + c + i] = bsum;
      }
    }
    __syncthreads();
  }
}

// Vectors per lane when a row suits the warp kernels (whole 16-byte vectors, at most `most`
// per lane, every pointer aligned), else 0: the block kernels run.
template <class T>
int warp_row_vecs(int64_t C, bool aligned, int most) {
  constexpr int64_t per_warp = 32 * kVec<T>;
  if (!aligned || C % per_warp != 0 || C / per_warp > most) return 0;
  return static_cast<int>(C / per_warp);
}
// fn(std::integral_constant<int, v>{}) for the runtime v in [Lo, Hi].
template <int Lo, int Hi, class Fn>
void with_int(int v, Fn&& fn) {
  if constexpr (Lo <= Hi) {
    if (v == Lo) return fn(std::integral_constant<int, Lo>{});
    with_int<Lo + 1, Hi>(v, fn);
  }
}
inline unsigned warp_row_blocks(int64_t N) {
  return grid_rows((N + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock);
}

// Shared body of layernorm_forward (mean != NULL) and rmsnorm_forward (mean == NULL); with
// `residual`, loom.norm-residual/1's (its shapes and dtypes checked by the SDK slot).
template <bool kRms>
void norm_forward(const char* op, loom_backend& b, DLTensor* out, DLTensor* mean, DLTensor* rstd,
                  const DLTensor* inp, const DLTensor* weight, const DLTensor* bias, double eps,
                  const DLTensor* residual = nullptr, DLTensor* sum = nullptr) {
  Rows r = check_rows(op, inp);
  need(op, "out", out);
  need(op, "weight", weight);
  need_same_dtype(op, "out", out, "inp", inp);
  if (bias != nullptr) need_same_dtype(op, "bias", bias, "weight", weight);
  if (!kRms) check_stat(op, "mean", mean);
  check_stat(op, "rstd", rstd);
  check_eps(op, eps);
  const void* px = device_ptr(b, inp, op, "inp", r.N * r.C);
  void* py = device_ptr(b, out, op, "out", r.N * r.C);
  const void* pw = device_ptr(b, weight, op, "weight", r.C);
  const void* pb = bias ? device_ptr(b, bias, op, "bias", r.C) : nullptr;
  float* pm = kRms ? nullptr : static_cast<float*>(device_ptr(b, mean, op, "mean", r.N));
  float* prs = static_cast<float*>(device_ptr(b, rstd, op, "rstd", r.N));
  const void* pr = residual ? device_ptr(b, residual, op, "residual", r.N * r.C) : nullptr;
  void* ps = residual ? device_ptr(b, sum, op, "sum", r.N * r.C) : nullptr;
  if (r.N == 0) return;
  dispatch_float(op, "inp", inp, [&](auto tt) {
    using T = typename decltype(tt)::type;
    dispatch_param(op, "weight", weight, tt, [&](auto wt) {
      using W = typename decltype(wt)::type;
      const int nv = warp_row_vecs<T>(r.C, all_aligned16({px, py, pw, pb, pr, ps}), kWarpVecs);
      if (nv > 0) {
        norm_forward_warp_kernel<T, W, kVec<T>, kRms>
            <<<warp_row_blocks(r.N), 32 * kWarpRowsPerBlock, 0, b.stream>>>(
                static_cast<T*>(py), pm, prs, static_cast<const T*>(px), static_cast<const W*>(pw),
                static_cast<const W*>(pb), r.N, r.C, nv, static_cast<float>(eps),
                static_cast<const T*>(pr), static_cast<T*>(ps));
        LOOM_CUDA_LAUNCHED(op);
        return;
      }
      with_vec<T>(r.C % kVec<T> == 0, {px, py, pw, pb, pr, ps}, [&](auto vw) {
        constexpr int VW = decltype(vw)::value;
        norm_forward_kernel<T, W, VW, kRms><<<grid_rows(r.N), row_threads(r.C / VW), 0, b.stream>>>(
            static_cast<T*>(py), pm, prs, static_cast<const T*>(px), static_cast<const W*>(pw),
            static_cast<const W*>(pb), r.N, r.C, static_cast<float>(eps), static_cast<const T*>(pr),
            static_cast<T*>(ps));
        LOOM_CUDA_LAUNCHED(op);
      });
    });
  });
}

// Shared body of layernorm_backward and rmsnorm_backward (mean == NULL, dbias == NULL); with
// `residual`, loom.norm-residual/1's (its shape and dtype checked by the SDK slot).
template <bool kRms>
void norm_backward(const char* op, loom_backend& b, DLTensor* dinp, DLTensor* dweight,
                   DLTensor* dbias, const DLTensor* dout, const DLTensor* inp,
                   const DLTensor* weight, const DLTensor* mean, const DLTensor* rstd,
                   const DLTensor* residual = nullptr) {
  Rows r = check_rows(op, inp);
  need(op, "dinp", dinp);
  need(op, "dout", dout);
  need(op, "weight", weight);
  need(op, "dweight", dweight);
  need_same_dtype(op, "dinp", dinp, "inp", inp);
  need_same_dtype(op, "dout", dout, "inp", inp);
  if (dbias != nullptr) need_same_dtype(op, "dbias", dbias, "dweight", dweight);
  if (!kRms) check_stat(op, "mean", mean);
  check_stat(op, "rstd", rstd);
  const void* px = device_ptr(b, inp, op, "inp", r.N * r.C);
  const void* pg = device_ptr(b, dout, op, "dout", r.N * r.C);
  void* pdx = device_ptr(b, dinp, op, "dinp", r.N * r.C);
  const void* pw = device_ptr(b, weight, op, "weight", r.C);
  void* pdw = device_ptr(b, dweight, op, "dweight", r.C);
  void* pdb = dbias ? device_ptr(b, dbias, op, "dbias", r.C) : nullptr;
  const float* pm =
      kRms ? nullptr : static_cast<const float*>(device_ptr(b, mean, op, "mean", r.N));
  const float* prs = static_cast<const float*>(device_ptr(b, rstd, op, "rstd", r.N));
  const void* pr = residual ? device_ptr(b, residual, op, "residual", r.N * r.C) : nullptr;
  if (r.N == 0) return;

  const RowChunks rc = row_chunks(r.N);
  const int64_t chunks = rc.chunks, rows_per_chunk = rc.rows_per_chunk;
  const size_t part_bytes = round256(sizeof(float) * static_cast<size_t>(chunks * r.C));
  dispatch_float(op, "inp", inp, [&](auto tt) {
    using T = typename decltype(tt)::type;
    dispatch_param(op, "weight", weight, tt, [&](auto wt) {
      using W = typename decltype(wt)::type;
      dispatch_param(op, "dweight", dweight, tt, [&](auto gt) {
        using G = typename decltype(gt)::type;
        StreamScratch scratch(pdb ? 2 * part_bytes : part_bytes, *b.alloc);
        float* part_w = scratch.at<float>(0);
        float* part_b = pdb ? scratch.at<float>(part_bytes) : nullptr;
        const auto finish = [&] {  // dweight (and dbias) += the chunks' sums, in one launch
          column_sum_finish<G>
              <<<column_sum_grid(r.C, pdb ? 2 : 1), dim3(32, kColLanes), 0, b.stream>>>(
                  static_cast<G*>(pdw), part_w, static_cast<G*>(pdb), part_b, chunks, r.C);
          LOOM_CUDA_LAUNCHED(op);
        };
        const int nv = warp_row_vecs<T>(r.C, all_aligned16({px, pg, pdx, pw, pr}), kBwdVecs);
        if (nv > 0) {  // one pass over dout and inp, then the finish
          with_int<1, kBwdVecs>(nv, [&](auto vecs) {
            norm_backward_warp_kernel<T, W, kVec<T>, kRms, decltype(vecs)::value>
                <<<static_cast<unsigned>(chunks), 32 * kBwdWarps, 0, b.stream>>>(
                    static_cast<T*>(pdx), part_w, part_b, static_cast<const T*>(pg),
                    static_cast<const T*>(px), static_cast<const W*>(pw), pm, prs, r.N, r.C,
                    rows_per_chunk, static_cast<const T*>(pr));
            LOOM_CUDA_LAUNCHED(op);
          });
          finish();
          return;
        }
        with_vec<T>(r.C % kVec<T> == 0, {px, pg}, [&](auto vw) {
          constexpr int VW = decltype(vw)::value;
          dim3 grid(static_cast<unsigned>((r.C + 32 * VW - 1) / (32 * VW)),
                    static_cast<unsigned>(chunks));
          norm_dparams_partial_kernel<T, kRms, VW><<<grid, dim3(32, 8), 0, b.stream>>>(
              part_w, part_b, static_cast<const T*>(pg), static_cast<const T*>(px), pm, prs, r.N,
              r.C, rows_per_chunk);
          LOOM_CUDA_LAUNCHED(op);
        });
        finish();
        with_vec<T>(r.C % kVec<T> == 0, {px, pg, pdx, pw, pr}, [&](auto vw) {
          constexpr int VW = decltype(vw)::value;
          norm_dinp_kernel<T, W, VW, kRms><<<grid_rows(r.N), row_threads(r.C / VW), 0, b.stream>>>(
              static_cast<T*>(pdx), static_cast<const T*>(pg), static_cast<const T*>(px),
              static_cast<const W*>(pw), pm, prs, r.N, r.C, static_cast<const T*>(pr));
          LOOM_CUDA_LAUNCHED(op);
        });
      });
    });
  });
}

}  // namespace

loom_error* layernorm_forward(loom_backend* be, DLTensor* out, DLTensor* mean, DLTensor* rstd,
                              const DLTensor* inp, const DLTensor* weight, const DLTensor* bias,
                              double eps) noexcept {
  return run_op(be, "layernorm_forward", [&](loom_backend& b) {
    norm_forward<false>("layernorm_forward", b, out, mean, rstd, inp, weight, bias, eps);
  });
}

loom_error* layernorm_backward(loom_backend* be, DLTensor* dinp, DLTensor* dweight, DLTensor* dbias,
                               const DLTensor* dout, const DLTensor* inp, const DLTensor* weight,
                               const DLTensor* mean, const DLTensor* rstd) noexcept {
  return run_op(be, "layernorm_backward", [&](loom_backend& b) {
    norm_backward<false>("layernorm_backward", b, dinp, dweight, dbias, dout, inp, weight, mean,
                         rstd);
  });
}

loom_error* rmsnorm_forward(loom_backend* be, DLTensor* out, DLTensor* rstd, const DLTensor* inp,
                            const DLTensor* weight, double eps) noexcept {
  return run_op(be, "rmsnorm_forward", [&](loom_backend& b) {
    norm_forward<true>("rmsnorm_forward", b, out, nullptr, rstd, inp, weight, nullptr, eps);
  });
}

loom_error* rmsnorm_backward(loom_backend* be, DLTensor* dinp, DLTensor* dweight,
                             const DLTensor* dout, const DLTensor* inp, const DLTensor* weight,
                             const DLTensor* rstd) noexcept {
  return run_op(be, "rmsnorm_backward", [&](loom_backend& b) {
    norm_backward<true>("rmsnorm_backward", b, dinp, dweight, nullptr, dout, inp, weight, nullptr,
                        rstd);
  });
}

loom_error* norm_residual_forward(loom_backend* be, const loom_norm_fwd_args* a,
                                  const loom_norm_residual* r) noexcept {
  return run_op(be, "norm_forward", [&](loom_backend& b) {
    if (a->kind == LOOM_NORM_RMS)
      norm_forward<true>("norm_forward", b, a->out, nullptr, a->rstd, a->inp, a->weight, nullptr,
                         a->eps, r->residual, r->sum);
    else
      norm_forward<false>("norm_forward", b, a->out, a->mean, a->rstd, a->inp, a->weight, a->bias,
                          a->eps, r->residual, r->sum);
  });
}

loom_error* norm_residual_backward(loom_backend* be, const loom_norm_bwd_args* a,
                                   const loom_norm_residual* r) noexcept {
  return run_op(be, "norm_backward", [&](loom_backend& b) {
    if (a->kind == LOOM_NORM_RMS)
      norm_backward<true>("norm_backward", b, a->dinp, a->dweight, nullptr, a->dout, a->inp,
                          a->weight, nullptr, a->rstd, r->residual);
    else
      norm_backward<false>("norm_backward", b, a->dinp, a->dweight, a->dbias, a->dout, a->inp,
                           a->weight, a->mean, a->rstd, r->residual);
  });
}

}  // namespace loom_cuda
