// The norms' shared argument checks (kernels_norm.cu, kernels_norm_gated.cu): rows of C
// channels, f32 statistics, a usable eps.
#pragma once

#include <cmath>
#include <string>

#include "kernels_common.cuh"

namespace loom_cuda {

struct Rows {
  int64_t N, C;
};
inline Rows check_rows(const char* op, const DLTensor* inp) {
  need(op, "inp", inp);
  need_float(op, "inp", inp);
  const int64_t C = last_dim(op, "inp", inp);
  if (C <= 0) fail(op, "inp has " + std::to_string(C) + " channels");
  return {numel(inp) / C, C};
}
inline void check_stat(const char* op, const char* name, const DLTensor* t) {
  need(op, name, t);
  need_dtype(op, name, t, loom_f32());
}
inline void check_eps(const char* op, double eps) {
  if (!(eps >= 0) || !std::isfinite(eps))
    fail(op, "eps = " + std::to_string(eps) + " must be >= 0");
}

}  // namespace loom_cuda
