// Attention pieces: the row softmax (scale, causal mask with Tq < Tk and Tq > Tk, lse,
// flattened leading dims) and RoPE (rotate-half), forward against naive loops, backward
// against central finite differences in f64.
#include <cstddef>
#include <limits>

#include "ops_support.hpp"

using namespace opstest;

namespace {

// Naive softmax of scale*s per row, masking j > i + (Tk - Tq) when causal and, with a window
// W > 0, also j <= i + (Tk - Tq) - W.
Vec naive_softmax(const Vec& s, int64_t rows, int64_t Tq, int64_t Tk, double scale, bool causal,
                  Vec* lse, int64_t window = 0) {
  Vec p(s.size(), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t i = r % Tq;
    auto seen = [&](int64_t j) {
      const int64_t pos = i + (Tk - Tq);
      return (!causal || j <= pos) && (window == 0 || j > pos - window);
    };
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < Tk; ++j)
      if (seen(j)) mx = std::max(mx, scale * s[r * Tk + j]);
    double sum = 0;
    for (int64_t j = 0; j < Tk; ++j)
      if (seen(j)) sum += std::exp(scale * s[r * Tk + j] - mx);
    for (int64_t j = 0; j < Tk; ++j)
      if (seen(j)) p[r * Tk + j] = std::exp(scale * s[r * Tk + j] - mx) / sum;
    if (lse) (*lse)[r] = sum > 0 ? mx + std::log(sum) : -std::numeric_limits<double>::infinity();
  }
  return p;
}

Vec run_softmax(DLDataType dt, const std::vector<int64_t>& shape, const Vec& s, double scale,
                bool causal, Vec* lse = nullptr, int64_t window = 0) {
  auto S = make(dt, shape, s);
  int64_t rows = S.numel() / shape.back();
  loom::Tensor L(B(), dt, {rows});
  loom::softmax_forward(B(), S.get(), L.get(), scale, causal, window);
  if (lse) *lse = get(L);
  return get(S);
}

// freqs: D/2 inverse frequencies (loom.rope-freqs/1) or empty for theta's; cos and sin
// times scale.
Vec naive_rope(const Vec& x, int64_t Bn, int64_t T, int64_t H, int64_t D, int64_t off, double theta,
               const Vec& freqs = {}, double scale = 1.0) {
  Vec y = x;
  for (int64_t b = 0; b < Bn; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < D / 2; ++i) {
          const double f = freqs.empty() ? std::pow(theta, -2.0 * i / D) : freqs[i];
          double ang = static_cast<double>(off + t) * f;
          int64_t base = ((b * T + t) * H + h) * D;
          double x1 = x[base + i], x2 = x[base + i + D / 2];
          y[base + i] = scale * (x1 * std::cos(ang) - x2 * std::sin(ang));
          y[base + i + D / 2] = scale * (x2 * std::cos(ang) + x1 * std::sin(ang));
        }
  return y;
}

Vec run_rope(DLDataType dt, const Vec& x, std::vector<int64_t> shape, int64_t off, double theta,
             bool backward = false, const loom_rope_freqs* freqs = nullptr) {
  auto X = make(dt, shape, x);
  (backward ? loom::rope_backward : loom::rope_forward)(B(), X.get(), off, theta, freqs);
  return get(X);
}

}  // namespace

TEST_CASE("softmax_forward: values and lse, causal with Tq < Tk, plain, 4-D scores") {
  struct Case {
    std::vector<int64_t> shape;
    bool causal;
  };
  for (const Case& c : {Case{{2, 3, 5}, true}, Case{{2, 3, 5}, false}, Case{{2, 2, 3, 5}, true},
                        Case{{1, 4, 4}, true}}) {
    int64_t Tk = c.shape.back(), Tq = c.shape[c.shape.size() - 2];
    int64_t n = 1;
    for (auto d : c.shape) n *= d;
    Vec s = random_vec(n, 1 + n, -3, 3);
    Vec lse, ref_lse(n / Tk);
    Vec p = run_softmax(loom_f64(), c.shape, s, 0.6, c.causal, &lse);
    check_close(p, naive_softmax(s, n / Tk, Tq, Tk, 0.6, c.causal, &ref_lse), 1e-14, 1e-15,
                "softmax probabilities");
    check_close(lse, ref_lse, 1e-14, 1e-14, "softmax lse");
  }
}

TEST_CASE("softmax_forward: a sliding window keeps each query's last W positions") {
  for (int64_t W : {1, 2, 3, 5, 9}) {
    for (const std::vector<int64_t>& shape : {std::vector<int64_t>{2, 4, 7}, {3, 6, 6}}) {
      CAPTURE(W);
      const int64_t Tk = shape.back(), Tq = shape[1], n = shape[0] * Tq * Tk;
      Vec s = random_vec(n, 40 + W, -3, 3);
      Vec lse, ref_lse(n / Tk);
      Vec p = run_softmax(loom_f64(), shape, s, 0.8, true, &lse, W);
      check_close(p, naive_softmax(s, n / Tk, Tq, Tk, 0.8, true, &ref_lse, W), 1e-14, 1e-15,
                  "windowed softmax probabilities");
      check_close(lse, ref_lse, 1e-14, 1e-14, "windowed softmax lse");
      // Each row sums to 1 over exactly min(W, position + 1) nonzero entries.
      for (int64_t r = 0; r < n / Tk; ++r) {
        const int64_t pos = r % Tq + Tk - Tq;
        int64_t nonzero = 0;
        for (int64_t j = 0; j < Tk; ++j) nonzero += p[r * Tk + j] != 0.0;
        CHECK(nonzero == std::min(W, pos + 1));
      }
      // A window as long as the sequence is plain causal attention, to the bit.
      if (W >= Tk) CHECK(p == run_softmax(loom_f64(), shape, s, 0.8, true, nullptr, 0));
    }
  }
  auto S = make64({1, 2, 3}, Vec(6, 0.5));
  expect_error([&] { loom::softmax_forward(B(), S.get(), nullptr, 1.0, false, 2); },
               LOOM_ERR_INVALID_ARGUMENT, "softmax_forward: a sliding window needs causal");
  expect_error([&] { loom::softmax_forward(B(), S.get(), nullptr, 1.0, true, -1); },
               LOOM_ERR_INVALID_ARGUMENT, "softmax_forward: window = -1 is negative");
}

TEST_CASE("softmax_forward: Tq > Tk leaves fully masked rows at 0 with lse -inf") {
  Vec s = random_vec(8, 5);
  Vec lse;
  Vec p = run_softmax(loom_f64(), {1, 4, 2}, s, 1.0, true, &lse);
  CHECK(p[0] == 0.0);
  CHECK(p[1] == 0.0);
  CHECK(p[2] == 0.0);
  CHECK(p[3] == 0.0);
  CHECK(std::isinf(lse[0]));
  CHECK(lse[0] < 0);
  CHECK(p[4] == 1.0);
  CHECK(p[5] == 0.0);
  CHECK(p[6] + p[7] == doctest::Approx(1.0));
}

TEST_CASE("softmax_backward against finite differences (causal, Tq < Tk)") {
  const std::vector<int64_t> shape = {2, 3, 5};
  const double scale = 0.7;
  Vec s = random_vec(30, 10, -2, 2), R = random_vec(30, 11);
  auto L = [&] { return dot(run_softmax(loom_f64(), shape, s, scale, true), R); };
  Vec fd = fd_grad(s, L);
  auto P = make64(shape, run_softmax(loom_f64(), shape, s, scale, true));
  auto dS = make64(shape, Vec(30, 5.0));
  loom::softmax_backward(B(), dS.get(), P.get(), make64(shape, R).get(), scale);
  check_close(get(dS), fd, kFdRtol, kFdAtol, "softmax_backward vs FD");
  auto dP = make64(shape, R);  // ds aliasing dp
  loom::softmax_backward(B(), dP.get(), P.get(), dP.get(), scale);
  check_close(get(dP), fd, kFdRtol, kFdAtol, "softmax_backward in place");
}

TEST_CASE("softmax: f32 matches f64, and lse may be f32 or NULL") {
  const std::vector<int64_t> shape = {48, 64, 64};  // 12 heads x 4 sequences of 64
  Vec s = random_vec(48 * 64 * 64, 20, -8, 8);
  Vec l32, l64;
  check_close(run_softmax(loom_f32(), shape, s, 0.125, true, &l32),
              run_softmax(loom_f64(), shape, s, 0.125, true, &l64), 1e-5, 1e-7,
              "softmax f32 vs f64");
  check_close(l32, l64, 1e-5, 1e-6, "lse f32 vs f64");
  auto S = make64({2, 3}, Vec{1, 2, 3, 4, 5, 6});
  loom::softmax_forward(B(), S.get(), static_cast<DLTensor*>(nullptr), 1.0, 0);
  CHECK(get(S)[2] == doctest::Approx(naive_softmax({1, 2, 3}, 1, 1, 3, 1.0, false, nullptr)[2]));
  auto L32 = make(loom_f32(), {2}, Vec(2, 0.0));
  loom::softmax_forward(B(), make64({2, 3}, Vec{1, 2, 3, 4, 5, 6}).get(), L32.get(), 1.0, 0);
  CHECK(get(L32)[0] == doctest::Approx(3.0 + std::log(1 + std::exp(-1) + std::exp(-2))));
  expect_error([&] { loom::softmax_forward(B(), S.get(), make64({3}, Vec(3)).get(), 1.0, 0); },
               LOOM_ERR_INVALID_ARGUMENT, "softmax_forward: lse has 3 elements, expected 2");
}

TEST_CASE("rope forward matches the rotate-half formula; backward inverts it and matches FD") {
  const int64_t Bn = 2, T = 3, H = 2, D = 8, off = 5;
  const double theta = 10000.0;
  std::vector<int64_t> shape = {Bn, T, H, D};
  Vec x = random_vec(Bn * T * H * D, 30), R = random_vec(x.size(), 31);
  check_close(run_rope(loom_f64(), x, shape, off, theta), naive_rope(x, Bn, T, H, D, off, theta),
              1e-14, 1e-14, "rope_forward");
  check_close(
      run_rope(loom_f64(), run_rope(loom_f64(), x, shape, off, theta), shape, off, theta, true), x,
      1e-14, 1e-14, "rope_backward(rope_forward(x)) == x");

  auto L = [&] { return dot(run_rope(loom_f64(), x, shape, off, theta), R); };
  Vec fd = fd_grad(x, L);
  check_close(run_rope(loom_f64(), R, shape, off, theta, true), fd, kFdRtol, kFdAtol,
              "rope_backward vs FD");

  Vec big = random_vec(4 * 64 * 12 * 64, 32);
  check_close(run_rope(loom_f32(), big, {4, 64, 12, 64}, 100000, 10000.0),
              run_rope(loom_f64(), big, {4, 64, 12, 64}, 100000, 10000.0), 1e-5, 1e-6,
              "rope f32 vs f64 at large positions");

  auto X = make64({2, 3, 7}, Vec(42, 0.0));
  expect_error([&] { loom::rope_forward(B(), X.get(), int64_t{0}, theta); },
               LOOM_ERR_INVALID_ARGUMENT, "rope_forward: x has shape (2,3,7), expected 4");
  auto Y = make64({1, 2, 1, 7}, Vec(14, 0.0));
  expect_error([&] { loom::rope_backward(B(), Y.get(), int64_t{0}, theta); },
               LOOM_ERR_INVALID_ARGUMENT, "head dimension D = 7");
}

TEST_CASE("rope with loom.rope-freqs/1: a frequency table and a scale, backward its transpose") {
  const int64_t Bn = 2, T = 3, H = 2, D = 8, off = 7;
  std::vector<int64_t> shape = {Bn, T, H, D};
  const Vec freqs = {1.0, 0.3, 0.02, 1e-4};  // any table: Llama 3's and YaRN's are such
  const double scale = 1.25;
  const loom_rope_freqs ext{
      {sizeof(loom_rope_freqs), LOOM_EXT_ROPE_FREQS, LOOM_EXT_REQUIRED, nullptr},
      freqs.data(),
      (int64_t)freqs.size(),
      scale};
  Vec x = random_vec(Bn * T * H * D, 40), R = random_vec(x.size(), 41);
  check_close(run_rope(loom_f64(), x, shape, off, 0.0, false, &ext),
              naive_rope(x, Bn, T, H, D, off, 0.0, freqs, scale), 1e-14, 1e-14,
              "rope_forward with a table");
  auto L = [&] { return dot(run_rope(loom_f64(), x, shape, off, 0.0, false, &ext), R); };
  check_close(run_rope(loom_f64(), R, shape, off, 0.0, true, &ext), fd_grad(x, L), kFdRtol, kFdAtol,
              "rope_backward with a table vs FD");
  check_close(run_rope(loom_f32(), x, shape, off, 0.0, false, &ext),
              naive_rope(x, Bn, T, H, D, off, 0.0, freqs, scale), 1e-6, 1e-6, "f32");
  // a table whose size is not D/2 is refused by name
  const loom_rope_freqs short_table{ext.base, freqs.data(), 3, 1.0};
  auto X = make64(shape, x);
  expect_error([&] { loom::rope_forward(B(), X.get(), int64_t{0}, 0.0, &short_table); },
               LOOM_ERR_INVALID_ARGUMENT, "needs one frequency per pair");
}
