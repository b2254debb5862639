// Vocab-parallel cross-entropy (vocab_ce_stats / vocab_ce_backward): a random (N,V) logits
// matrix is split into 2 and 3 vocabulary slices, the slices' stats are combined on the host
// the way the tensor-parallel ranks would (lse = M + log sum_r s_r exp(m_r - M)), and the
// loss and the concatenated dlogits are checked against the full-vocabulary
// softmax_cross_entropy op and a float64 host recomputation. Also: ignored targets, targets
// in every slice, dlogits aliasing logits, argument errors.
#include <algorithm>
#include <limits>

#include "ops_support.hpp"

using namespace opstest;

namespace {

// Columns [c0, c1) of the row-major (N,V) matrix x.
Vec slice_cols(const Vec& x, int64_t N, int64_t V, int64_t c0, int64_t c1) {
  Vec out;
  out.reserve(static_cast<size_t>(N * (c1 - c0)));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = c0; j < c1; ++j) out.push_back(x[n * V + j]);
  return out;
}

// Float64 reference of logsumexp per row and loss (0 for ignored rows).
void ref_lse_loss(const Vec& x, const std::vector<int32_t>& t, int64_t N, int64_t V, Vec* lse,
                  Vec* loss) {
  lse->assign(N, 0.0);
  loss->assign(N, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, x[n * V + j]);
    double s = 0;
    for (int64_t j = 0; j < V; ++j) s += std::exp(x[n * V + j] - mx);
    (*lse)[n] = mx + std::log(s);
    if (t[n] >= 0) (*loss)[n] = (*lse)[n] - x[n * V + t[n]];
  }
}

struct SplitResult {
  Vec lse, loss, dlogits;  // dlogits: the slices' gradients concatenated back to (N,V)
};

// Runs both vocab ops over the slices bounded by `cuts` (0 = c_0 < ... < c_R = V), combining
// the stats on the host in double. `in_place` lets vocab_ce_backward overwrite the logits.
SplitResult run_split(DLDataType dt, const Vec& x, const std::vector<int32_t>& t, int64_t N,
                      int64_t V, const std::vector<int64_t>& cuts, double dloss, bool in_place) {
  const size_t R = cuts.size() - 1;
  auto T = make_i32({N}, t);
  std::vector<Vec> stats(R);
  std::vector<loom::Tensor> X(R);
  for (size_t r = 0; r < R; ++r) {
    int64_t Vl = cuts[r + 1] - cuts[r];
    X[r] = make(dt, {N, Vl}, slice_cols(x, N, V, cuts[r], cuts[r + 1]));
    loom::Tensor S(B(), dt, {N, 3});
    set(S, Vec(3 * N, 42.0));  // written, not accumulated
    loom::vocab_ce_stats(B(), S.get(), X[r].get(), T.get(), cuts[r]);
    stats[r] = get(S);
  }
  SplitResult out;
  out.lse.assign(N, 0.0);
  out.loss.assign(N, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    double M = -std::numeric_limits<double>::infinity(), tsum = 0, s = 0;
    for (size_t r = 0; r < R; ++r) M = std::max(M, stats[r][3 * n]);
    for (size_t r = 0; r < R; ++r) {
      s += stats[r][3 * n + 1] * std::exp(stats[r][3 * n] - M);
      tsum += stats[r][3 * n + 2];
    }
    out.lse[n] = M + std::log(s);
    out.loss[n] = t[n] < 0 ? 0.0 : out.lse[n] - tsum;
  }
  auto L = make(dt, {N}, out.lse);
  out.dlogits.assign(N * V, 0.0);
  for (size_t r = 0; r < R; ++r) {
    int64_t Vl = cuts[r + 1] - cuts[r];
    loom::Tensor D;
    if (!in_place) D = make(dt, {N, Vl}, Vec(N * Vl, 42.0));
    DLTensor* d = in_place ? X[r].get() : D.get();
    loom::vocab_ce_backward(B(), d, X[r].get(), T.get(), cuts[r], L.get(), dloss);
    Vec g = in_place ? get(X[r]) : get(D);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < Vl; ++j) out.dlogits[n * V + cuts[r] + j] = g[n * Vl + j];
  }
  return out;
}

// The full-vocabulary op: losses and dlogits.
void run_full(DLDataType dt, const Vec& x, const std::vector<int32_t>& t, int64_t N, int64_t V,
              double dloss, Vec* loss, Vec* dlogits) {
  auto X = make(dt, {N, V}, x);
  loom::Tensor Ls(B(), dt, {N});
  loom::Tensor D(B(), dt, {N, V});
  loom::softmax_cross_entropy(B(), Ls.get(), D.get(), X.get(), make_i32({N}, t).get(), dloss);
  *loss = get(Ls);
  *dlogits = get(D);
}

// Float64 reference gradient: dloss * (softmax - onehot), zero rows for ignored targets.
Vec ref_dlogits(const Vec& x, const std::vector<int32_t>& t, const Vec& lse, int64_t N, int64_t V,
                double dloss) {
  Vec d(N * V, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    if (t[n] < 0) continue;
    for (int64_t j = 0; j < V; ++j) d[n * V + j] = dloss * std::exp(x[n * V + j] - lse[n]);
    d[n * V + t[n]] -= dloss;
  }
  return d;
}

}  // namespace

TEST_CASE("vocab_ce: 2 and 3 slices match softmax_cross_entropy and a float64 reference") {
  const int64_t N = 9, V = 37;
  const double dloss = 0.125;
  // Cuts: 2 slices [0,18) [18,37); 3 slices [0,12) [12,25) [25,37). Targets hit every slice,
  // both edges of a slice, and -1 (ignored) twice.
  const std::vector<int32_t> t = {0, 17, 18, -1, 11, 12, 24, 36, -1};
  const std::vector<std::vector<int64_t>> splits = {{0, 18, 37}, {0, 12, 25, 37}};
  Vec x = random_vec(N * V, 7, -6, 6);
  x[2 * V + 5] = 30.0;  // one row with a dominant logit outside the target's slice
  Vec ref_lse, ref_loss;
  ref_lse_loss(x, t, N, V, &ref_lse, &ref_loss);
  Vec ref_d = ref_dlogits(x, t, ref_lse, N, V, dloss);

  struct Prec {
    DLDataType dt;
    double rtol, atol;
    const char* name;
  };
  for (const Prec& p :
       {Prec{loom_f64(), 1e-12, 1e-14, "f64"}, Prec{loom_f32(), 1e-5, 1e-6, "f32"}}) {
    Vec full_loss, full_d;
    run_full(p.dt, x, t, N, V, dloss, &full_loss, &full_d);
    for (const auto& cuts : splits) {
      for (bool in_place : {false, true}) {
        CAPTURE(p.name);
        CAPTURE(cuts.size() - 1);
        CAPTURE(in_place);
        SplitResult s = run_split(p.dt, x, t, N, V, cuts, dloss, in_place);
        check_close(s.lse, ref_lse, p.rtol, p.atol, "lse vs float64");
        check_close(s.loss, ref_loss, p.rtol, p.atol, "loss vs float64");
        check_close(s.loss, full_loss, p.rtol, p.atol, "loss vs softmax_cross_entropy");
        // Gradient entries are dloss * probabilities: absolute tolerance scaled by dloss.
        check_close(s.dlogits, ref_d, p.rtol, p.atol * dloss, "dlogits vs float64");
        check_close(s.dlogits, full_d, p.rtol, p.atol * dloss, "dlogits vs softmax_cross_entropy");
        for (int64_t j = 0; j < V; ++j) {
          CHECK(s.dlogits[3 * V + j] == 0.0);  // ignored rows: exactly zero
          CHECK(s.dlogits[8 * V + j] == 0.0);
        }
        CHECK(s.loss[3] == 0.0);
      }
    }
  }
}

TEST_CASE("vocab_ce_stats: per-slice values, target outside the slice and ignored rows give 0") {
  const int64_t N = 3, Vl = 4;
  Vec x = {1.0, 2.0, 3.0, 0.5, -1.0, 4.0, 0.0, 2.0, 1000.0, 999.0, 998.0, 1001.0};
  auto X = make64({N, Vl}, x);
  // Slice [10, 14): row 0 target 12 (local 2), row 1 target 3 (another slice), row 2 ignored.
  auto T = make_i32({N}, {12, 3, -1});
  loom::Tensor S(B(), loom_f64(), {N, 3});
  loom::vocab_ce_stats(B(), S.get(), X.get(), T.get(), int64_t{10});
  Vec s = get(S);
  for (int64_t n = 0; n < N; ++n) {
    double m = *std::max_element(x.begin() + n * Vl, x.begin() + (n + 1) * Vl);
    double sum = 0;
    for (int64_t j = 0; j < Vl; ++j) sum += std::exp(x[n * Vl + j] - m);
    CHECK(s[3 * n] == m);
    CHECK(s[3 * n + 1] == doctest::Approx(sum).epsilon(1e-14));
  }
  CHECK(s[2] == 3.0);
  CHECK(s[5] == 0.0);
  CHECK(s[8] == 0.0);
  CHECK(std::isfinite(s[7]));  // large logits: stable
}

TEST_CASE("vocab_ce: f32 matches f64 on a GPT-2-sized vocabulary split in 2") {
  const int64_t N = 4, V = 50257, half = 25128;
  std::vector<int32_t> t = {5, 30000, -1, half};
  Vec x = random_vec(N * V, 11, -10, 10);
  SplitResult a = run_split(loom_f32(), x, t, N, V, {0, half, V}, 1.0 / N, false);
  SplitResult b = run_split(loom_f64(), x, t, N, V, {0, half, V}, 1.0 / N, true);
  check_close(a.loss, b.loss, 1e-5, 1e-6, "loss f32 vs f64");
  check_close(a.dlogits, b.dlogits, 1e-4, 1e-9, "dlogits f32 vs f64");
}

TEST_CASE("vocab_ce: bad shapes, dtypes and targets are refused") {
  auto X = make64({2, 4}, Vec(8, 0.0));
  auto T = make_i32({2}, {1, 5});
  loom::Tensor S(B(), loom_f64(), {2, 3});
  loom::Tensor L(B(), loom_f64(), {2});
  loom::Tensor D(B(), loom_f64(), {2, 4});
  loom::Tensor S_bad(B(), loom_f64(), {2, 2});
  expect_error([&] { loom::vocab_ce_stats(B(), S_bad.get(), X.get(), T.get(), int64_t{0}); },
               LOOM_ERR_INVALID_ARGUMENT, "vocab_ce_stats: stats has 4 elements, expected 6");
  loom::Tensor S32(B(), loom_f32(), {2, 3});
  expect_error([&] { loom::vocab_ce_stats(B(), S32.get(), X.get(), T.get(), int64_t{0}); },
               LOOM_ERR_INVALID_ARGUMENT, "stats is f32, expected f64");
  expect_error(
      [&] {
        loom::vocab_ce_stats(B(), S.get(), X.get(), make_i32({3}, {1, 2, 3}).get(), int64_t{0});
      },
      LOOM_ERR_INVALID_ARGUMENT, "targets has 3 elements, expected 2");
  expect_error(
      [&] {
        loom::vocab_ce_stats(B(), S.get(), X.get(), make_i32({2}, {1, -2}).get(), int64_t{0});
      },
      LOOM_ERR_INVALID_ARGUMENT, "targets[1] = -2 is negative and not -1");
  expect_error([&] { loom::vocab_ce_stats(B(), S.get(), X.get(), T.get(), int64_t{-4}); },
               LOOM_ERR_INVALID_ARGUMENT, "vocab_start = -4 is negative");
  loom::Tensor D_bad(B(), loom_f64(), {2, 5});
  expect_error(
      [&] {
        loom::vocab_ce_backward(B(), D_bad.get(), X.get(), T.get(), int64_t{0}, L.get(), 1.0);
      },
      LOOM_ERR_INVALID_ARGUMENT, "vocab_ce_backward: dlogits has 10 elements, expected 8");
  loom::Tensor L_bad(B(), loom_f64(), {3});
  expect_error(
      [&] {
        loom::vocab_ce_backward(B(), D.get(), X.get(), T.get(), int64_t{0}, L_bad.get(), 1.0);
      },
      LOOM_ERR_INVALID_ARGUMENT, "lse has 3 elements, expected 2");
  expect_error(
      [&] {
        loom::vocab_ce_backward(B(), D.get(), X.get(), T.get(), int64_t{0},
                                static_cast<const DLTensor*>(nullptr), 1.0);
      },
      LOOM_ERR_INVALID_ARGUMENT, "vocab_ce_backward: lse");
  auto Xi = make_i32({2, 4}, std::vector<int32_t>(8, 0));
  loom::Tensor Si(B(), loom_i32(), {2, 3});
  expect_error([&] { loom::vocab_ce_stats(B(), Si.get(), Xi.get(), T.get(), int64_t{0}); },
               LOOM_ERR_UNIMPLEMENTED, "vocab_ce_stats: logits");
}
