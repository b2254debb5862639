// Mamba-2's gated RMSNorm (loom.norm-gate/1), beside the plain norms of kernels_norm.cu:
//   rmsnorm_gated_forward:  the RMSNorm of g = inp * silu(gate) over groups of group_size
//                           channels, rstd (N * C / group_size) f32 saved
//   rmsnorm_gated_backward: dinp (N,C) =, dgate (N,C) =, dweight(C) +=; g recomputed from
//                           inp and gate
// The same design as the plain norms over rows of one group (N * C / group_size rows of
// group_size channels, weight offset by the group), scalar accesses: one block per row, the
// weight gradient as f32 partial sums per chunk of rows, then column_sum_finish. The dinp and
// dgate pass reads each element before the same thread writes it, so both may alias dout, inp
// or gate.
#include <algorithm>

#include "kernels_common.cuh"
#include "kernels_norm.cuh"
#include "ops.hpp"

namespace loom_cuda {
namespace {

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

}  // namespace loom_cuda
