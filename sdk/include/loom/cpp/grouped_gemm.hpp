// Loom SDK C++ helpers: loom_grouped_gemm_args (backend.h, ABI 2.5) checked against its
// tensors and expanded into one loom_gemm_args per group. A backend without a grouped kernel
// of its own runs the groups through its gemm (loom::OpsSlots does this), and a caller can
// ask what one group's GEMM is.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/backend.h"

namespace loom {

namespace detail {
// The stored (rows, cols) of an operand that is op(X)(r, c) with `trans`.
inline void stored(int trans, int64_t r, int64_t c, int64_t& rows, int64_t& cols) {
  rows = trans ? c : r;
  cols = trans ? r : c;
}
}  // namespace detail

// Why `g` cannot run ("" when it can): the group extent's place, sizes, and that each
// tensor holds what its packed or stacked groups need.
inline std::string grouped_gemm_refusal(const loom_grouped_gemm_args& g) {
  const bool gm = g.m == LOOM_GROUP_SIZE, gk = g.k == LOOM_GROUP_SIZE;
  if (g.n == LOOM_GROUP_SIZE || gm == gk)
    return "exactly one of m and k must be LOOM_GROUP_SIZE (n never is: it is C's columns)";
  if (gm && g.trans_a) return "m = LOOM_GROUP_SIZE needs trans_a = 0 (A packed by rows)";
  if (gk && (!g.trans_a || g.trans_b))
    return "k = LOOM_GROUP_SIZE needs trans_a = 1 and trans_b = 0 (A and B packed by rows)";
  if (g.num_groups < 0 || (g.num_groups > 0 && g.sizes == nullptr))
    return "num_groups must be >= 0, with its sizes";
  if ((!gm && g.m < 0) || g.n < 0 || (!gk && g.k < 0)) return "negative m, n or k";
  if (!g.a || !g.b || !g.c) return "a, b and c must be given";
  int64_t total = 0;
  for (int64_t i = 0; i < g.num_groups; ++i) {
    if (g.sizes[i] < 0) return "sizes[" + std::to_string(i) + "] is negative";
    total += g.sizes[i];
  }
  auto need = [&](const char* name, const DLTensor* t, bool packed, int64_t cols,
                  int64_t fixed_rows) -> std::string {
    const int64_t want = packed ? total * cols : g.num_groups * fixed_rows * cols;
    const int64_t have = loom_tensor_numel(t);
    if (have >= want) return {};
    return std::string(name) + " holds " + std::to_string(have) + " elements; its " +
           (packed ? "packed" : "stacked") + " groups need " + std::to_string(want);
  };
  int64_t ar, ac, br, bc;
  detail::stored(g.trans_a, gm ? 0 : g.m, gk ? 0 : g.k, ar, ac);
  detail::stored(g.trans_b, gk ? 0 : g.k, g.n, br, bc);
  std::string why = need("a", g.a, true, ac, ar);
  if (why.empty()) why = need("b", g.b, gk, bc, br);
  if (why.empty()) why = need("c", g.c, gm, g.n, g.m);
  return why;
}

// One loom_gemm_args per group of a checked `g`, in order; groups with no rows (m = 0) are
// left out, and groups of k = 0 are kept (their C_g becomes beta * C_g).
inline std::vector<loom_gemm_args> grouped_gemm_calls(const loom_grouped_gemm_args& g) {
  const bool gm = g.m == LOOM_GROUP_SIZE;
  std::vector<loom_gemm_args> out;
  int64_t row0 = 0;  // the group's first row in the packed operands
  for (int64_t i = 0; i < g.num_groups; ++i) {
    const int64_t sz = g.sizes[i];
    loom_gemm_args x{};
    x.struct_size = LOOM_GEMM_ARGS_SIZE_V2;
    x.trans_a = g.trans_a;
    x.trans_b = g.trans_b;
    x.m = gm ? sz : g.m;
    x.n = g.n;
    x.k = gm ? g.k : sz;
    x.alpha = g.alpha;
    x.beta = g.beta;
    int64_t ar, ac, br, bc;
    detail::stored(x.trans_a, x.m, x.k, ar, ac);
    detail::stored(x.trans_b, x.k, x.n, br, bc);
    x.a = g.a;
    x.lda = ac;
    x.offset_a = row0 * ac;  // A is packed either way
    x.b = g.b;
    x.ldb = bc;
    x.offset_b = gm ? i * br * bc : row0 * bc;
    x.c = g.c;
    x.ldc = x.n;
    x.offset_c = gm ? row0 * x.n : i * x.m * x.n;
    x.batch = 1;
    row0 += sz;
    if (x.m > 0 && x.n > 0) out.push_back(x);
  }
  return out;
}

}  // namespace loom
