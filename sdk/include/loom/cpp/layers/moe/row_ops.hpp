// Loom layer library (loom/cpp/layers/moe/moe.hpp has the overview): the per-row operations a
// mixture of experts builds on (row_ops.cpp), through backend ops so that they run on any
// backend: rows scaled or dotted with batched 1 x 1 GEMMs, host doubles to and from a device
// tensor, and a parameter gradient that a split backward may defer.
#pragma once

#include <vector>

#include "loom/cpp/layers/core/context.hpp"
#include "loom/cpp/weight_grads.hpp"

namespace loom::layers {

// A parameter-gradient computation fn(ctx, in...) through loom::weight_grad_reading: now, or
// within a split backward's B at its W, on a Ctx whose backend computes.
template <class Fn, class... T>
void param_grad(const Ctx& c, Fn fn, T... in) {
  weight_grad_reading(
      c.be,
      [c, fn](const Backend& b, auto... t) {
        Ctx k = c;
        k.be = b;
        fn(k, t...);
      },
      in...);
}

// out(M,C) = p(M) * x(M,C), row by row.
void scale_rows(const Ctx& c, const DLTensor* p, const DLTensor* x, DLTensor* out, int64_t M,
                int64_t C);
// out(M) = the row dots of a(M,C) and b(M,C).
void row_dots(const Ctx& c, const DLTensor* a, const DLTensor* b, DLTensor* out, int64_t M,
              int64_t C);
// Host doubles <-> a device tensor of any float dtype, through the statistics dtype: out
// (resized to n) from t's first n elements; v into t's first v.size() elements.
void download(const Ctx& c, const DLTensor* t, int64_t n, std::vector<double>& out);
void upload(const Ctx& c, const std::vector<double>& v, DLTensor* t);

}  // namespace loom::layers
