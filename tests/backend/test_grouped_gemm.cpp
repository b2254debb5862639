// grouped_gemm (ABI 2.5): a mixture of experts' three GEMMs (forward, dX, dW) over groups of
// uneven sizes, empty groups included, against a float64 recomputation written here from
// backend.h's definition, in f64, f32 and bf16 (activations bf16, the dW accumulator f32);
// then the refusals, each naming the rule.
#include <cmath>

#include "ops_support.hpp"

using namespace opstest;

namespace {

// Packed tokens X (sum of sizes, C), stacked weights W (E, F, C) and the gradients.
struct Moe {
  std::vector<int64_t> sizes;
  int64_t C, F;
  int64_t total() const {
    int64_t t = 0;
    for (int64_t s : sizes) t += s;
    return t;
  }
  int64_t E() const { return (int64_t)sizes.size(); }
};

// Y_g = X_g W_g^T; dX_g = dY_g W_g; dW_g = dW0_g + dY_g^T X_g, in double.
void expected(const Moe& m, const Vec& x, const Vec& w, const Vec& dy, const Vec& dw0, Vec& y,
              Vec& dx, Vec& dw) {
  const int64_t C = m.C, F = m.F;
  y.assign(m.total() * F, 0.0);
  dx.assign(m.total() * C, 0.0);
  dw = dw0;
  int64_t r0 = 0;
  for (int64_t g = 0; g < m.E(); ++g) {
    const double* W = w.data() + g * F * C;
    for (int64_t r = r0; r < r0 + m.sizes[g]; ++r)
      for (int64_t f = 0; f < F; ++f)
        for (int64_t c = 0; c < C; ++c) {
          y[r * F + f] += x[r * C + c] * W[f * C + c];
          dx[r * C + c] += dy[r * F + f] * W[f * C + c];
          dw[g * F * C + f * C + c] += dy[r * F + f] * x[r * C + c];
        }
    r0 += m.sizes[g];
  }
}

loom_grouped_gemm_args grouped(const Moe& m, int ta, int tb, int64_t M, int64_t N, int64_t K,
                               double beta, const DLTensor* a, const DLTensor* b, DLTensor* c) {
  loom_grouped_gemm_args g{};
  g.struct_size = LOOM_GROUPED_GEMM_ARGS_SIZE_V2_5;
  g.trans_a = ta;
  g.trans_b = tb;
  g.m = M;
  g.n = N;
  g.k = K;
  g.num_groups = m.E();
  g.sizes = m.sizes.data();
  g.alpha = 1.0;
  g.beta = beta;
  g.a = a;
  g.b = b;
  g.c = c;
  return g;
}

// A tensor of dtype dt holding vals (16-bit ones cast from f32 by `copy`), and its values.
loom::Tensor T(DLDataType dt, const std::vector<int64_t>& shape, const Vec& vals) {
  loom::Tensor f = make(dt.bits == 64 ? dt : loom_f32(), shape, vals);
  if (dt.bits != 16) return f;
  loom::Tensor t(B(), dt, shape);
  B().call(&loom_ops::copy, t.get(), (const DLTensor*)f.get());
  return t;
}
Vec G(const loom::Tensor& t) {
  if (t.get()->dtype.bits != 16) return get(t);
  loom::Tensor f(B(), loom_f32(),
                 std::vector<int64_t>(t.get()->shape, t.get()->shape + t.get()->ndim));
  B().call(&loom_ops::copy, f.get(), (const DLTensor*)t.get());
  return get(f);
}

// max |got - want| <= rel * max |want|.
void check_rel(const Vec& got, const Vec& want, double rel, const std::string& what) {
  REQUIRE(got.size() == want.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::fabs(got[i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  INFO(what << ": max |diff| " << worst << ", max |want| " << scale);
  CHECK(worst <= rel * scale);
}

void run_case(const Moe& m, DLDataType dt, double rel) {
  const int64_t N = m.total(), C = m.C, F = m.F, E = m.E();
  // the inputs rounded to dt, so that the reference sees the numbers the backend does
  const Vec x = G(T(dt, {N, C}, random_vec(N * C, 1)));
  const Vec w = G(T(dt, {E, F, C}, random_vec(E * F * C, 2)));
  const Vec dy = G(T(dt, {N, F}, random_vec(N * F, 3)));
  const Vec dw0 = random_vec(E * F * C, 4);  // what dW already holds: the call adds to it
  Vec y, dx, dw;
  expected(m, x, w, dy, dw0, y, dx, dw);
  const DLDataType acc = dt.bits == 64 ? dt : loom_f32();
  auto X = T(dt, {N, C}, x), W = T(dt, {E, F, C}, w), dY = T(dt, {N, F}, dy);
  auto Y = T(dt, {N, F}, Vec(N * F, 7.0)), dX = T(dt, {N, C}, Vec(N * C, 7.0));
  auto dW = make(acc, {E, F, C}, dw0);
  auto fwd = grouped(m, 0, 1, LOOM_GROUP_SIZE, F, C, 0.0, X, W, Y);
  B().call(&loom_ops::grouped_gemm, &fwd);
  auto bwd_x = grouped(m, 0, 0, LOOM_GROUP_SIZE, C, F, 0.0, dY, W, dX);
  B().call(&loom_ops::grouped_gemm, &bwd_x);
  auto bwd_w = grouped(m, 1, 0, F, C, LOOM_GROUP_SIZE, 1.0, dY, X, dW);
  B().call(&loom_ops::grouped_gemm, &bwd_w);
  check_rel(G(Y), y, rel, "Y");
  check_rel(G(dX), dx, rel, "dX");
  check_rel(get(dW), dw, rel, "dW");
}

}  // namespace

TEST_CASE("grouped_gemm: a mixture of experts' forward, dX and dW equal float64 loops") {
  // uneven groups, an empty one (its dW stays as it was), one of a single row
  const Moe cases[] = {{{5, 0, 3, 1}, 6, 10}, {{17, 9, 0, 0, 30, 2}, 16, 24}, {{0, 0}, 4, 4}};
  for (const Moe& m : cases) {
    CAPTURE(m.total());
    run_case(m, loom_f64(), 1e-13);
    run_case(m, loom_f32(), 1e-5);
    run_case(m, loom_bf16(), 1e-2);  // bf16 outputs: 2^-9 relative rounding
  }
}

TEST_CASE("grouped_gemm: refusals name the rule") {
  const Moe m{{2, 1}, 4, 3};
  auto X = make(loom_f64(), {3, 4}, Vec(12, 0.5)), W = make(loom_f64(), {2, 3, 4}, Vec(24, 0.5));
  auto Y = make(loom_f64(), {3, 3}, Vec(9, 0.0)), small = make(loom_f64(), {2, 3}, Vec(6, 0.0));
  auto refused = [&](loom_grouped_gemm_args g, const std::string& needle) {
    expect_error([&] { B().call(&loom_ops::grouped_gemm, &g); }, LOOM_ERR_INVALID_ARGUMENT, needle);
  };
  refused(grouped(m, 0, 1, 3, LOOM_GROUP_SIZE, 4, 0.0, X, W, Y), "n never is");
  refused(grouped(m, 0, 1, 3, 3, 4, 0.0, X, W, Y), "exactly one of m and k");
  refused(grouped(m, 1, 1, LOOM_GROUP_SIZE, 3, 4, 0.0, X, W, Y), "needs trans_a = 0");
  refused(grouped(m, 0, 0, 3, 4, LOOM_GROUP_SIZE, 1.0, Y, X, W), "needs trans_a = 1");
  refused(grouped(m, 0, 1, LOOM_GROUP_SIZE, 3, 4, 0.0, X, W, small), "c holds 6 elements");
  const int64_t negative[] = {2, -1};
  auto g = grouped(m, 0, 1, LOOM_GROUP_SIZE, 3, 4, 0.0, X, W, Y);
  g.sizes = negative;
  refused(g, "sizes[1] is negative");
}
