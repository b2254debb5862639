// Normalisation layers, per row of C channels (LayerNorm and RMSNorm share every kernel; kRms
// drops the mean and the bias).
//   layernorm_forward:  out(N,C) = (inp - mean) * rstd * weight(C) + bias(C)
//                       mean(N), rstd(N) = 1/sqrt(var + eps) saved, f32 (biased variance,
//                       like PyTorch); bias may be NULL
//   layernorm_backward: dinp(N,C) = ; dweight(C) += ; dbias(C) += (may be NULL)
//   rmsnorm_forward:    out(N,C) = inp * rstd * weight(C), rstd(N) = 1/sqrt(mean(inp^2) + eps)
//   rmsnorm_backward:   dinp(N,C) = ; dweight(C) +=
//   rmsnorm_gated_*:    Mamba-2's (loom.norm-gate/1): the RMSNorm of g = inp * silu(gate) over
//                       groups of group_size channels, rstd (N * C / group_size); backward
//                       also writes dgate (N,C) =, g recomputed from inp and gate
// Activation gradients are written (=), parameter gradients accumulate (+=).
// dtypes: inp/out/dinp/dout one of f32/bf16/f16 (T); weight/bias T or f32; dweight/dbias T
// or f32 (main grads); statistics f32. All arithmetic in f32.
//
// Forward and dinp: one block per row, block reductions (fixed order). The weight/bias
// gradients are deterministic without atomics: blocks of 32 channels x a chunk of rows write
// f32 partial sums to scratch, then one thread per channel adds the chunks up in order. That
// column pass runs before the dinp pass, so dinp may alias dout or inp (as on the CPU).
// The gated norm is the same design over rows of one group (N * C / group_size rows of
// group_size channels, weight offset by the group), scalar accesses; its dinp and dgate pass
// reads each element before the same thread writes it, so both may alias dout, inp or gate.
#include <algorithm>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "kernels_common.cuh"
#include "ops.hpp"

namespace loom_cuda {
namespace {

// out(N,C), inp(N,C), weight(C), bias(C) or NULL, mean(N) (NULL for RMSNorm), rstd(N).
template <class T, class W, int VW, bool kRms>
__global__ void norm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, const W* weight,
                                    const W* bias, int64_t N, int64_t C, float eps) {
  const int64_t c0 = static_cast<int64_t>(threadIdx.x) * VW, step = int64_t{blockDim.x} * VW;
  const float fc = static_cast<float>(C);  // divided by, as on the CPU (not times 1/C)
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* x = inp + n * C;
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
      float v[VW], w[VW], bb[VW];
      load_vec<VW>(x + c, v);
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
template <class T, class W, int VW, bool kRms>
__global__ void norm_dinp_kernel(T* dinp, const T* dout, const T* inp, const W* weight,
                                 const float* mean, const float* rstd, int64_t N, int64_t C) {
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
      store_vec<VW>(dx + c, xv);
    }
  }
}

// ---- the gated RMSNorm (loom.norm-gate/1) ------------------------------------------------------
// Rows of gs channels: row r is group r % (C / gs) of token r / (C / gs), contiguous in memory.

__device__ __forceinline__ float gate_silu(float z) { return z / (1.0f + expf(-z)); }

// out = g * rstd * weight, g = inp * silu(gate), rstd(rows) = 1/sqrt(mean over the row of g^2 +
// eps). One block per row.
template <class T, class W>
__global__ void gated_forward_kernel(T* out, float* rstd, const T* inp, const T* gate,
                                     const W* weight, int64_t rows, int64_t gs, int64_t groups,
                                     float eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *x = inp + r * gs, *z = gate + r * gs;
    float ss = 0.0f;
    for (int64_t c = threadIdx.x; c < gs; c += blockDim.x) {
      const float g = to_f32(x[c]) * gate_silu(to_f32(z[c]));
      ss += g * g;
    }
    const float rs = 1.0f / sqrtf(block_sum(ss) / static_cast<float>(gs) + eps);
    const W* w = weight + (r % groups) * gs;
    for (int64_t c = threadIdx.x; c < gs; c += blockDim.x)
      out[r * gs + c] = from_f32<T>(to_f32(x[c]) * gate_silu(to_f32(z[c])) * rs * to_f32(w[c]));
    if (threadIdx.x == 0) rstd[r] = rs;
  }
}

// Partial weight gradients, as norm_dparams_partial_kernel (block (32, 8), a chunk of token
// rows per blockIdx.y): part_w(chunks, C) = sum of dout * g * rstd of the channel's group.
template <class T>
__global__ void gated_dweight_partial_kernel(float* part_w, const T* dout, const T* inp,
                                             const T* gate, const float* rstd, int64_t N, int64_t C,
                                             int64_t gs, int64_t rows_per_chunk) {
  __shared__ float sw[8][32];
  const int64_t c = int64_t{blockIdx.x} * 32 + threadIdx.x;
  const int64_t r0 = int64_t{blockIdx.y} * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
  float aw = 0.0f;
  if (c < C)
    for (int64_t n = r0 + threadIdx.y; n < r1; n += blockDim.y) {
      const int64_t i = n * C + c;
      aw += to_f32(dout[i]) * (to_f32(inp[i]) * gate_silu(to_f32(gate[i]))) *
            rstd[n * (C / gs) + c / gs];
    }
  sw[threadIdx.y][threadIdx.x] = aw;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float w = 0.0f;
    for (unsigned k = 0; k < blockDim.y; ++k) w += sw[k][threadIdx.x];
    part_w[int64_t{blockIdx.y} * C + c] = w;
  }
}

// Per row: dg = rstd (dout w - xhat mean(dout w xhat)), xhat = g rstd; dinp = dg silu(gate),
// dgate = dg inp silu'(gate), silu'(z) = sigmoid(z) (1 + z (1 - sigmoid(z))).
template <class T, class W>
__global__ void gated_dinp_kernel(T* dinp, T* dgate, const T* dout, const T* inp, const T* gate,
                                  const W* weight, const float* rstd, int64_t rows, int64_t gs,
                                  int64_t groups) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t at = r * gs;
    const W* w = weight + (r % groups) * gs;
    const float rs = rstd[r];
    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < gs; c += blockDim.x)
      s += to_f32(dout[at + c]) * to_f32(w[c]) *
           (to_f32(inp[at + c]) * gate_silu(to_f32(gate[at + c])) * rs);
    const float mean_dnx = block_sum(s) / static_cast<float>(gs);
    // Every read of the row by other threads ended in block_sum's barriers; each thread now
    // reads its elements before writing them: dinp and dgate may alias dout, inp or gate.
    for (int64_t c = threadIdx.x; c < gs; c += blockDim.x) {
      const float x = to_f32(inp[at + c]), z = to_f32(gate[at + c]), g = to_f32(dout[at + c]);
      const float sg = 1.0f / (1.0f + expf(-z));
      const float dg = rs * (g * to_f32(w[c]) - x * z * sg * rs * mean_dnx);
      dinp[at + c] = from_f32<T>(dg * z * sg);
      dgate[at + c] = from_f32<T>(dg * x * sg * (1.0f + z * (1.0f - sg)));
    }
  }
}

struct Rows {
  int64_t N, C;
};
Rows check_rows(const char* op, const DLTensor* inp) {
  need(op, "inp", inp);
  need_float(op, "inp", inp);
  const int64_t C = last_dim(op, "inp", inp);
  if (C <= 0) fail(op, "inp has " + std::to_string(C) + " channels");
  return {numel(inp) / C, C};
}
void check_stat(const char* op, const char* name, const DLTensor* t) {
  need(op, name, t);
  need_dtype(op, name, t, loom_f32());
}
void check_eps(const char* op, double eps) {
  if (!(eps >= 0) || !std::isfinite(eps))
    fail(op, "eps = " + std::to_string(eps) + " must be >= 0");
}

// Shared body of layernorm_forward (mean != NULL) and rmsnorm_forward (mean == NULL).
template <bool kRms>
void norm_forward(const char* op, loom_backend& b, DLTensor* out, DLTensor* mean, DLTensor* rstd,
                  const DLTensor* inp, const DLTensor* weight, const DLTensor* bias, double eps) {
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
  if (r.N == 0) return;
  dispatch_float(op, "inp", inp, [&](auto tt) {
    using T = typename decltype(tt)::type;
    dispatch_param(op, "weight", weight, tt, [&](auto wt) {
      using W = typename decltype(wt)::type;
      with_vec<T>(r.C % kVec<T> == 0, {px, py, pw, pb}, [&](auto vw) {
        constexpr int VW = decltype(vw)::value;
        norm_forward_kernel<T, W, VW, kRms><<<grid_rows(r.N), row_threads(r.C / VW), 0, b.stream>>>(
            static_cast<T*>(py), pm, prs, static_cast<const T*>(px), static_cast<const W*>(pw),
            static_cast<const W*>(pb), r.N, r.C, static_cast<float>(eps));
        LOOM_CUDA_LAUNCHED(op);
      });
    });
  });
}

// Shared body of layernorm_backward and rmsnorm_backward (mean == NULL, dbias == NULL).
template <bool kRms>
void norm_backward(const char* op, loom_backend& b, DLTensor* dinp, DLTensor* dweight,
                   DLTensor* dbias, const DLTensor* dout, const DLTensor* inp,
                   const DLTensor* weight, const DLTensor* mean, const DLTensor* rstd) {
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
        with_vec<T>(r.C % kVec<T> == 0, {px, pg}, [&](auto vw) {
          constexpr int VW = decltype(vw)::value;
          dim3 grid(static_cast<unsigned>((r.C + 32 * VW - 1) / (32 * VW)),
                    static_cast<unsigned>(chunks));
          norm_dparams_partial_kernel<T, kRms, VW><<<grid, dim3(32, 8), 0, b.stream>>>(
              part_w, part_b, static_cast<const T*>(pg), static_cast<const T*>(px), pm, prs, r.N,
              r.C, rows_per_chunk);
          LOOM_CUDA_LAUNCHED(op);
        });
        // dweight (and dbias) += the chunks' sums, both in one launch
        column_sum_finish<G>
            <<<column_sum_grid(r.C, pdb ? 2 : 1), dim3(32, kColLanes), 0, b.stream>>>(
                static_cast<G*>(pdw), part_w, static_cast<G*>(pdb), part_b, chunks, r.C);
        LOOM_CUDA_LAUNCHED(op);
        with_vec<T>(r.C % kVec<T> == 0, {px, pg, pdx, pw}, [&](auto vw) {
          constexpr int VW = decltype(vw)::value;
          norm_dinp_kernel<T, W, VW, kRms><<<grid_rows(r.N), row_threads(r.C / VW), 0, b.stream>>>(
              static_cast<T*>(pdx), static_cast<const T*>(pg), static_cast<const T*>(px),
              static_cast<const W*>(pw), pm, prs, r.N, r.C);
          LOOM_CUDA_LAUNCHED(op);
        });
      });
    });
  });
}

void check_group(const char* op, const Rows& r, int64_t gs) {
  if (gs <= 0 || r.C % gs != 0)  // the SDK slot checked it; the kernels divide by it
    fail(op, "group_size = " + std::to_string(gs) + " must divide C = " + std::to_string(r.C));
}

}  // namespace

loom_error* rmsnorm_gated_forward(loom_backend* be, DLTensor* out, DLTensor* rstd,
                                  const DLTensor* inp, const DLTensor* gate, const DLTensor* weight,
                                  double eps, int64_t group_size) noexcept {
  return run_op(be, "rmsnorm_gated_forward", [&](loom_backend& b) {
    const char* op = "rmsnorm_gated_forward";
    const Rows r = check_rows(op, inp);
    check_group(op, r, group_size);
    need(op, "out", out);
    need(op, "gate", gate);
    need(op, "weight", weight);
    need_same_dtype(op, "out", out, "inp", inp);
    need_same_dtype(op, "gate", gate, "inp", inp);
    check_stat(op, "rstd", rstd);
    check_eps(op, eps);
    const int64_t rows = r.N * (r.C / group_size);
    const void* px = device_ptr(b, inp, op, "inp", r.N * r.C);
    const void* pz = device_ptr(b, gate, op, "gate", r.N * r.C);
    void* py = device_ptr(b, out, op, "out", r.N * r.C);
    const void* pw = device_ptr(b, weight, op, "weight", r.C);
    float* prs = static_cast<float*>(device_ptr(b, rstd, op, "rstd", rows));
    if (rows == 0) return;
    dispatch_float(op, "inp", inp, [&](auto tt) {
      using T = typename decltype(tt)::type;
      dispatch_param(op, "weight", weight, tt, [&](auto wt) {
        using W = typename decltype(wt)::type;
        gated_forward_kernel<T, W><<<grid_rows(rows), row_threads(group_size), 0, b.stream>>>(
            static_cast<T*>(py), prs, static_cast<const T*>(px), static_cast<const T*>(pz),
            static_cast<const W*>(pw), rows, group_size, r.C / group_size, static_cast<float>(eps));
        LOOM_CUDA_LAUNCHED(op);
      });
    });
  });
}

loom_error* rmsnorm_gated_backward(loom_backend* be, DLTensor* dinp, DLTensor* dgate,
                                   DLTensor* dweight, const DLTensor* dout, const DLTensor* inp,
                                   const DLTensor* gate, const DLTensor* weight,
                                   const DLTensor* rstd, int64_t group_size) noexcept {
  return run_op(be, "rmsnorm_gated_backward", [&](loom_backend& b) {
    const char* op = "rmsnorm_gated_backward";
    const Rows r = check_rows(op, inp);
    check_group(op, r, group_size);
    for (const auto& [name, t] : {std::pair<const char*, const DLTensor*>{"dinp", dinp},
                                  {"dgate", dgate},
                                  {"dout", dout},
                                  {"gate", gate}}) {
      need(op, name, t);
      need_same_dtype(op, name, t, "inp", inp);
    }
    need(op, "weight", weight);
    need(op, "dweight", dweight);
    check_stat(op, "rstd", rstd);
    const int64_t n = r.N * r.C, groups = r.C / group_size, rows = r.N * groups;
    const void* px = device_ptr(b, inp, op, "inp", n);
    const void* pz = device_ptr(b, gate, op, "gate", n);
    const void* pg = device_ptr(b, dout, op, "dout", n);
    void* pdx = device_ptr(b, dinp, op, "dinp", n);
    void* pdz = device_ptr(b, dgate, op, "dgate", n);
    const void* pw = device_ptr(b, weight, op, "weight", r.C);
    void* pdw = device_ptr(b, dweight, op, "dweight", r.C);
    const float* prs = static_cast<const float*>(device_ptr(b, rstd, op, "rstd", rows));
    if (r.N == 0) return;
    const RowChunks rc = row_chunks(r.N);
    const int64_t chunks = rc.chunks, rows_per_chunk = rc.rows_per_chunk;
    dispatch_float(op, "inp", inp, [&](auto tt) {
      using T = typename decltype(tt)::type;
      dispatch_param(op, "weight", weight, tt, [&](auto wt) {
        using W = typename decltype(wt)::type;
        dispatch_param(op, "dweight", dweight, tt, [&](auto gt) {
          using G = typename decltype(gt)::type;
          StreamScratch scratch(sizeof(float) * static_cast<size_t>(chunks * r.C), *b.alloc);
          float* part_w = scratch.at<float>(0);
          const dim3 grid(static_cast<unsigned>((r.C + 31) / 32), static_cast<unsigned>(chunks));
          gated_dweight_partial_kernel<T><<<grid, dim3(32, 8), 0, b.stream>>>(
              part_w, static_cast<const T*>(pg), static_cast<const T*>(px),
              static_cast<const T*>(pz), prs, r.N, r.C, group_size, rows_per_chunk);
          LOOM_CUDA_LAUNCHED(op);
          column_sum_finish<G><<<column_sum_grid(r.C, 1), dim3(32, kColLanes), 0, b.stream>>>(
              static_cast<G*>(pdw), part_w, nullptr, nullptr, chunks, r.C);
          LOOM_CUDA_LAUNCHED(op);
          gated_dinp_kernel<T, W><<<grid_rows(rows), row_threads(group_size), 0, b.stream>>>(
              static_cast<T*>(pdx), static_cast<T*>(pdz), static_cast<const T*>(pg),
              static_cast<const T*>(px), static_cast<const T*>(pz), static_cast<const W*>(pw), prs,
              rows, group_size, groups);
          LOOM_CUDA_LAUNCHED(op);
        });
      });
    });
  });
}

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

}  // namespace loom_cuda
