// attention/cudnn's grouped-query attention. The SDPA graphs this plugin builds are for
// Hq == Hkv heads, so for Hq = G * Hkv each pass works on K and V repeated to Hq heads
// (query head h reads kv head h / G, attention.h), and the backward sums the repeated heads'
// dK and dV back over each group of G. Both are one pass over memory, small beside the
// attention itself, and keep the validated MHA graphs as the only cuDNN code path.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace cudnn_attn {

// out (rows * group, D) with out row r * group + g = in row r; 16-bit elements, D % 8 == 0.
// For K (B,S,Hkv,D): rows = B*S*Hkv, and out is (B,S,Hkv*group,D).
void repeat_heads(const void* in, void* out, int64_t rows, int64_t group, int64_t D,
                  cudaStream_t stream);
// out (rows, D) = the sum over g of in row r * group + g, in f32, rounded once; f16 or bf16.
void sum_head_groups(const void* in, void* out, int64_t rows, int64_t group, int64_t D, bool f16,
                     cudaStream_t stream);

}  // namespace cudnn_attn
