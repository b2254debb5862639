// Loom layer library, a mixture of experts' per-row operations (loom/cpp/layers/moe/row_ops.hpp).
#include "loom/cpp/layers/moe/row_ops.hpp"

#include <algorithm>

namespace loom::layers {

// out(M,C) = p(M) * x(M,C), row by row: M GEMMs of (1 x 1) @ (1 x C).
void scale_rows(const Ctx& c, const DLTensor* p, const DLTensor* x, DLTensor* out, int64_t M,
                int64_t C) {
  if (M == 0) return;
  loom_gemm_args g{};
  g.struct_size = LOOM_GEMM_ARGS_SIZE_V2;
  g.m = 1;
  g.n = C;
  g.k = 1;
  g.alpha = 1.0;
  g.a = p;
  g.lda = 1;
  g.stride_a = 1;
  g.b = x;
  g.ldb = C;
  g.stride_b = C;
  g.c = out;
  g.ldc = C;
  g.stride_c = C;
  g.batch = M;
  c.call(&loom_ops::gemm, &g);
}

// out(M) = the row dots of a(M,C) and b(M,C): M GEMMs of (1 x C) @ (C x 1).
void row_dots(const Ctx& c, const DLTensor* a, const DLTensor* b, DLTensor* out, int64_t M,
              int64_t C) {
  if (M == 0) return;
  loom_gemm_args g{};
  g.struct_size = LOOM_GEMM_ARGS_SIZE_V2;
  g.trans_b = 1;
  g.m = 1;
  g.n = 1;
  g.k = C;
  g.alpha = 1.0;
  g.a = a;
  g.lda = C;
  g.stride_a = C;
  g.b = b;
  g.ldb = C;
  g.stride_b = C;
  g.c = out;
  g.ldc = 1;
  g.stride_c = 1;
  g.batch = M;
  c.call(&loom_ops::gemm, &g);
}

// Through the statistics dtype: the backend copies between float dtypes.
void download(const Ctx& c, const DLTensor* t, int64_t n, std::vector<double>& out) {
  out.resize((size_t)n);
  if (n == 0) return;
  Tensor wide = c.alloc(c.stat_dtype(), {n});
  View src = view(t, {n});
  c.call(&loom_ops::copy, wide.get(), (const DLTensor*)src);
  if (c.stat_dtype().bits == 64) {
    loom::check(c.host, c.be.api()->to_host(c.be.self(), wide.get(), out.data(), n * 8));
  } else {
    std::vector<float> f((size_t)n);
    loom::check(c.host, c.be.api()->to_host(c.be.self(), wide.get(), f.data(), n * 4));
    std::copy(f.begin(), f.end(), out.begin());
  }
}
void upload(const Ctx& c, const std::vector<double>& v, DLTensor* t) {
  const int64_t n = (int64_t)v.size();
  if (n == 0) return;
  Tensor wide = c.alloc(c.stat_dtype(), {n});
  if (c.stat_dtype().bits == 64) {
    loom::check(c.host, c.be.api()->from_host(c.be.self(), wide.get(), v.data(), n * 8));
  } else {
    std::vector<float> f(v.begin(), v.end());
    loom::check(c.host, c.be.api()->from_host(c.be.self(), wide.get(), f.data(), n * 4));
  }
  View dst = view(t, {n});
  c.call(&loom_ops::copy, dst.get(), (const DLTensor*)wide.get());
}

}  // namespace loom::layers
