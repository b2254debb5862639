// Launchers of attention/flash-cuda's kernels (flash_forward.cu, flash_backward.cu), called by
// the plugin glue (attention_flash_cuda.cpp) with validated shapes and raw device pointers.
// Layouts as loom/attention.h: q,out,dout,dq (B,T,Hq,D); k,v,dk,dv (B,S,Hkv,D); lse (B,Hq,T)
// f32. Queries are the last T of S positions.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flash {

enum class Dtype { kF32, kBF16, kF16 };

struct Dims {
  int64_t B, T, S, Hq, Hkv, D;
};

// out = softmax(scale * q k^T [causal mask]) v; lse (may be null) = row logsumexp.
cudaError_t forward(Dtype dt, const Dims& d, const void* q, const void* k, const void* v, void* out,
                    float* lse, float scale, bool causal, cudaStream_t stream);

// FA2 backward. Workspace: dq_acc (B,T,Hq,D) f32 and delta (B,Hq,T) f32, both overwritten.
// dq, dk, dv are written (=).
cudaError_t backward(Dtype dt, const Dims& d, const void* dout, const void* q, const void* k,
                     const void* v, const void* out, const float* lse, void* dq, void* dk, void* dv,
                     float* dq_acc, float* delta, float scale, bool causal, cudaStream_t stream);

}  // namespace flash
