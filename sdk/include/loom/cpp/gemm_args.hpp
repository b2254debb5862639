// Loom SDK C++ helpers for backend plugins: the checks of loom_gemm_args that do not depend on
// where the matrices live, so that every backend refuses a bad GEMM in one wording. Each
// backend still checks its operands' tensors (dtype, device, extent) itself, between the two.
#pragma once

#include <cstdint>
#include <string>

#include "loom/backend.h"

namespace loom {

// Why gemm's sizes are refused ("" when they are not): m, n, k >= 0 and batch >= 1.
inline std::string gemm_sizes_refusal(const loom_gemm_args& g) {
  if (g.m < 0 || g.n < 0 || g.k < 0)
    return "m, n, k = " + std::to_string(g.m) + ", " + std::to_string(g.n) + ", " +
           std::to_string(g.k) + " must be >= 0";
  if (g.batch < 1) return "batch = " + std::to_string(g.batch) + " must be >= 1";
  return "";
}

// Why gemm's output matrices are refused ("" when they are not): they must be disjoint,
// stacked one after another, or interleaved side by side within each row pitch (per-head
// slices of a (T, H*D) tensor).
inline std::string gemm_overlap_refusal(const loom_gemm_args& g) {
  const bool stacked = g.stride_c >= (g.m - 1) * g.ldc + g.n;
  const bool interleaved = g.stride_c >= g.n && (g.batch - 1) * g.stride_c + g.n <= g.ldc;
  if (g.batch > 1 && g.m > 0 && g.n > 0 && !stacked && !interleaved)
    return "stride_c = " + std::to_string(g.stride_c) + " makes the " + std::to_string(g.batch) +
           " output matrices overlap";
  return "";
}

}  // namespace loom
