// Fused softmax + cross-entropy: losses against a naive logsumexp, ignore index -1, dlogits
// against central finite differences of dloss * sum(losses), in-place dlogits, stability at
// large logits, f32 against f64, and target validation.
#include <limits>

#include "ops_support.hpp"

using namespace opstest;

namespace {

Vec naive_losses(const Vec& logits, const std::vector<int32_t>& t, int64_t N, int64_t V) {
  Vec out(N, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    if (t[n] < 0) continue;
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, logits[n * V + v]);
    double s = 0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(logits[n * V + v] - mx);
    out[n] = mx + std::log(s) - logits[n * V + t[n]];
  }
  return out;
}

Vec run_ce(DLDataType dt, const Vec& logits, const std::vector<int32_t>& t, int64_t N, int64_t V,
           double dloss, Vec* dlogits) {
  auto X = make(dt, {N, V}, logits);
  auto T = make_i32({N}, t);
  loom::Tensor Ls(B(), dt, {N});
  loom::Tensor dX;
  if (dlogits) dX = make(dt, {N, V}, Vec(N * V, 42.0));  // written, not accumulated
  loom::softmax_cross_entropy(B(), Ls.get(), dlogits ? dX.get() : nullptr, X.get(), T.get(), dloss);
  if (dlogits) *dlogits = get(dX);
  return get(Ls);
}

}  // namespace

TEST_CASE("softmax_cross_entropy: losses, ignore index, gradient against FD") {
  const int64_t N = 5, V = 11;
  const double dloss = 0.25;
  std::vector<int32_t> t = {3, -1, 0, 10, 7};
  Vec x = random_vec(N * V, 1, -3, 3);
  Vec d;
  Vec losses = run_ce(loom_f64(), x, t, N, V, dloss, &d);
  check_close(losses, naive_losses(x, t, N, V), 1e-14, 1e-14, "losses");
  CHECK(losses[1] == 0.0);

  auto L = [&] {
    Vec l = run_ce(loom_f64(), x, t, N, V, dloss, nullptr);
    double s = 0;
    for (double v : l) s += v;
    return dloss * s;
  };
  Vec fd = fd_grad(x, L);
  check_close(d, fd, kFdRtol, kFdAtol, "dlogits vs FD");
  for (int64_t v = 0; v < V; ++v) CHECK(d[1 * V + v] == 0.0);  // ignored row: zero gradient

  // dlogits aliasing logits.
  auto X = make64({N, V}, x);
  loom::Tensor Ls(B(), loom_f64(), {N});
  loom::softmax_cross_entropy(B(), Ls.get(), X.get(), X.get(), make_i32({N}, t).get(), dloss);
  check_close(get(Ls), losses, 1e-15, 1e-15, "losses with dlogits aliasing logits");
  check_close(get(X), d, 1e-15, 1e-15, "dlogits in place");
}

TEST_CASE("softmax_cross_entropy: stable at large logits; f32 matches f64 at GPT-2 vocab") {
  Vec x = {1000.0, 1001.0, 999.0, -1000.0};
  Vec d;
  Vec l = run_ce(loom_f32(), x, {1}, 1, 4, 1.0, &d);
  double want = std::log(std::exp(-1.0) + 1.0 + std::exp(-2.0));
  CHECK(l[0] == doctest::Approx(want).epsilon(1e-6));
  CHECK(std::isfinite(d[0]));

  const int64_t N = 8, V = 50257;
  std::vector<int32_t> t(N);
  for (int64_t n = 0; n < N; ++n) t[n] = static_cast<int32_t>((n * 7919) % V);
  t[3] = -1;
  Vec big = random_vec(N * V, 2, -10, 10);
  Vec d32, d64;
  check_close(run_ce(loom_f32(), big, t, N, V, 1.0 / N, &d32),
              run_ce(loom_f64(), big, t, N, V, 1.0 / N, &d64), 1e-5, 1e-6, "losses f32 vs f64");
  check_close(d32, d64, 1e-4, 1e-9, "dlogits f32 vs f64");
}

TEST_CASE("softmax_cross_entropy: bad targets and shapes are refused") {
  auto X = make64({2, 4}, Vec(8, 0.0));
  loom::Tensor Ls(B(), loom_f64(), {2});
  expect_error(
      [&] {
        loom::softmax_cross_entropy(B(), Ls.get(), static_cast<DLTensor*>(nullptr), X.get(),
                                    make_i32({2}, {1, 4}).get(), 1.0);
      },
      LOOM_ERR_INVALID_ARGUMENT,
      "softmax_cross_entropy: targets[1] = 4 is outside [0, 4) and not -1");
  expect_error(
      [&] {
        loom::softmax_cross_entropy(B(), Ls.get(), static_cast<DLTensor*>(nullptr), X.get(),
                                    make_i32({3}, {1, 2, 3}).get(), 1.0);
      },
      LOOM_ERR_INVALID_ARGUMENT, "targets has 3 elements, expected 2");
  loom::Tensor L32(B(), loom_f32(), {2});
  expect_error(
      [&] {
        loom::softmax_cross_entropy(B(), L32.get(), static_cast<DLTensor*>(nullptr), X.get(),
                                    make_i32({2}, {1, 2}).get(), 1.0);
      },
      LOOM_ERR_INVALID_ARGUMENT, "losses is f32, expected f64 (the dtype of logits)");
}
