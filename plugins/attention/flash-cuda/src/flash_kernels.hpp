// Launchers of attention/flash-cuda's kernels (flash_forward.cu, flash_backward.cu), called by
// the plugin glue (attention_flash_cuda.cpp) with validated shapes and raw device pointers.
// Layouts as loom/attention.h: q,out,dout,dq (B,T,Hq,D); k,v,dk,dv (B,S,Hkv,D); lse (B,Hq,T)
// f32. Queries are the last T of S positions.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flash {

enum class Dtype { kF32, kBF16, kF16 };

// lseT: the positions of a head's row of lse (and delta), T unless a launch covers part of a
// batch row (one variable-length sequence: T its queries, lseT the row's).
struct Dims {
  int64_t B, T, S, Hq, Hkv, D, lseT;
};

// What else shapes the scores besides causal: a sliding window (loom.attention-window/1:
// query t sees keys t + S - T - window < s <= t + S - T; 0 = none) and an additive bias
// (loom.attention-bias/1) read at bias[h * bias_h + t * bias_t + s], q's element type,
// whose gradient the backward adds (atomically, f32) at the same place of dbias.
struct Masks {
  int64_t window = 0;
  const void* bias = nullptr;
  float* dbias = nullptr;
  int64_t bias_h = 0, bias_t = 0;
};

// out = softmax(scale * q k^T + bias [causal mask, window]) v; lse (may be null) = row
// logsumexp.
cudaError_t forward(Dtype dt, const Dims& d, const void* q, const void* k, const void* v, void* out,
                    float* lse, float scale, bool causal, const Masks& m, cudaStream_t stream);

// delta (B,Hq,lseT) = rowsum(dout * out), the backward's first pass, for B*Hq*T rows.
cudaError_t backward_delta(Dtype dt, const Dims& d, const void* dout, const void* out, float* delta,
                           cudaStream_t stream);

// FA2 backward after backward_delta. dq_acc (B,T,Hq,D) f32 is added to (atomically) and dk,
// dv are written (=); backward_cast then writes dq from dq_acc.
cudaError_t backward_tiles(Dtype dt, const Dims& d, const void* dout, const void* q, const void* k,
                           const void* v, const float* lse, const float* delta, float* dq_acc,
                           void* dk, void* dv, float scale, bool causal, const Masks& m,
                           cudaStream_t stream);
cudaError_t backward_cast(Dtype dt, int64_t n, const float* dq_acc, void* dq, cudaStream_t stream);

// loom.attention-partial/1's merge: out, lse (rows row0.. of (B,T,Hq,D) and (B,Hq,T)) fold in
// part_out (B,Tp,Hq,D) and part_lse (B,Hq,Tp) row by row (attention.h).
cudaError_t merge(Dtype dt, const Dims& d, int64_t Tp, int64_t row0, void* out, float* lse,
                  const void* part_out, const float* part_lse, cudaStream_t stream);

}  // namespace flash
