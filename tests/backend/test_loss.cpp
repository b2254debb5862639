// Fused softmax + cross-entropy: losses against a naive logsumexp, ignore index -1, dlogits
// against central finite differences of dloss * sum(losses), in-place dlogits, stability at
// large logits, f32 against f64, target validation, and loom.ce-loss-total/1 (the losses' sum
// on the device, to the bit of the host's loop, and NaN gradient rows where a loss is not
// finite).
#include <cmath>
#include <cstring>
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

// ABI 2.28: the sum the models read back and add on the host (index order from 0, in double),
// added into the total by the backend instead; losses and finite gradient rows as without
// the extension, to the bit. A target logit of -inf makes that row's loss infinite while its
// plain gradient (softmax - onehot) stays finite: with the total it is NaN, which the step's
// gradient norm then carries to a clip decided on the device.
TEST_CASE("loom.ce-loss-total/1: the host's sum to the bit; NaN rows where a loss is infinite") {
  CHECK(loomtest::lists_capability("backend", "cpu", LOOM_EXT_CE_LOSS_TOTAL));
  const int64_t N = 6, V = 9;
  std::vector<int32_t> t = {3, -1, 0, 8, 5, 2};
  for (DLDataType dt : {loom_f64(), loom_f32()}) {
    CAPTURE(dt.bits);
    for (bool infinite : {false, true}) {
      CAPTURE(infinite);
      Vec x = random_vec(N * V, 7, -4, 4);
      if (infinite) x[4 * V + 5] = -std::numeric_limits<double>::infinity();  // row 4's target
      auto X = make(dt, {N, V}, x);
      auto T = make_i32({N}, t);
      loom::Tensor L0(B(), dt, {N}), L1(B(), dt, {N});
      auto D0 = make(dt, {N, V}, Vec(N * V, 0.0)), D1 = make(dt, {N, V}, Vec(N * V, 0.0));
      loom::softmax_cross_entropy(B(), L0.get(), D0.get(), X.get(), T.get(), 0.125);
      auto total = make64({1}, {0.5});
      loom::softmax_cross_entropy(B(), L1.get(), D1.get(), X.get(), T.get(), 0.125, total.get());
      const Vec l0 = get(L0), d0 = get(D0), d1 = get(D1);
      CHECK(get(L1) == l0);
      double sum = 0.0;
      for (double l : l0) sum += l;  // the decoder's own loop over the losses it read
      CHECK(std::isinf(l0[4]) == infinite);
      CHECK(get(total)[0] == 0.5 + sum);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t v = 0; v < V; ++v) {
          CAPTURE(n);
          if (infinite && n == 4)
            CHECK(std::isnan(d1[n * V + v]));
          else
            CHECK(d1[n * V + v] == d0[n * V + v]);
          if (infinite && n == 4) CHECK(std::isfinite(d0[n * V + v]));  // why the NaN rows
        }
    }
  }
  SUBCASE("bf16 logits: the NaN row in bf16's bits (0x7fc0)") {
    std::vector<uint16_t> bits(N * V);
    for (int64_t i = 0; i < N * V; ++i) {  // multiples of 1/2 in [-2, 2]: exact in bf16
      const float f = 0.5f * (float)(i % 9 - 4);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      bits[i] = (uint16_t)(u >> 16);
    }
    bits[4 * V + 5] = 0xff80;  // -inf, row 4's target
    loom::Tensor X(B(), loom_bf16(), {N, V}), D0(B(), loom_bf16(), {N, V}),
        D1(B(), loom_bf16(), {N, V});
    X.upload(bits);
    loom::Tensor L(B(), loom_f32(), {N});
    auto T = make_i32({N}, t);
    auto total = make64({1}, {0.0});
    loom::softmax_cross_entropy(B(), L.get(), D0.get(), X.get(), T.get(), 1.0);
    loom::softmax_cross_entropy(B(), L.get(), D1.get(), X.get(), T.get(), 1.0, total.get());
    CHECK(std::isinf(get(total)[0]));
    const auto d0 = D0.download<uint16_t>(), d1 = D1.download<uint16_t>();
    for (int64_t i = 0; i < N * V; ++i) CHECK(d1[i] == (i / V == 4 ? uint16_t{0x7fc0} : d0[i]));
  }
  auto X = make64({2, 4}, Vec(8, 0.0));
  loom::Tensor Ls(B(), loom_f64(), {2}), wide(B(), loom_f64(), {2});
  expect_error(
      [&] {
        loom::softmax_cross_entropy(B(), Ls.get(), static_cast<DLTensor*>(nullptr), X.get(),
                                    make_i32({2}, {1, 2}).get(), 1.0, wide.get());
      },
      LOOM_ERR_INVALID_ARGUMENT, "loom.ce-loss-total/1's total must be a (1) f64 tensor");
}
