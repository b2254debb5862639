// layernorm and rmsnorm: forward against naive double loops, backward against central finite
// differences in f64 (inp, weight, bias), the = / += accumulation rules, in-place dinp, f32
// against f64, and shape errors.
#include <cstddef>

#include "ops_support.hpp"

using namespace opstest;

namespace {

constexpr double kEps = 1e-5;

struct LnRef {
  Vec out, mean, rstd;
};
LnRef naive_layernorm(const Vec& x, const Vec& w, const Vec* b, int64_t N, int64_t C) {
  LnRef r{Vec(N * C), Vec(N), Vec(N)};
  for (int64_t n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += x[n * C + c];
    m /= C;
    for (int64_t c = 0; c < C; ++c) v += (x[n * C + c] - m) * (x[n * C + c] - m);
    v /= C;  // biased, like PyTorch
    double rs = 1.0 / std::sqrt(v + kEps);
    for (int64_t c = 0; c < C; ++c)
      r.out[n * C + c] = (x[n * C + c] - m) * rs * w[c] + (b ? (*b)[c] : 0.0);
    r.mean[n] = m;
    r.rstd[n] = rs;
  }
  return r;
}

Vec naive_rmsnorm(const Vec& x, const Vec& w, int64_t N, int64_t C, Vec* rstd) {
  Vec out(N * C);
  for (int64_t n = 0; n < N; ++n) {
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += x[n * C + c] * x[n * C + c];
    double rs = 1.0 / std::sqrt(ss / C + kEps);
    for (int64_t c = 0; c < C; ++c) out[n * C + c] = x[n * C + c] * rs * w[c];
    if (rstd) (*rstd)[n] = rs;
  }
  return out;
}

// Runs layernorm_forward in dtype dt; returns out, and mean/rstd through the pointers.
Vec run_layernorm(DLDataType dt, const Vec& x, const Vec& w, const Vec* b, int64_t N, int64_t C,
                  Vec* mean = nullptr, Vec* rstd = nullptr) {
  auto X = make(dt, {N, C}, x);
  auto W = make(dt, {C}, w);
  loom::Tensor Bb;
  if (b) Bb = make(dt, {C}, *b);
  loom::Tensor O(B(), dt, {N, C}), M(B(), dt, {N}), R(B(), dt, {N});
  loom::layernorm_forward(B(), O.get(), M.get(), R.get(), X.get(), W.get(), b ? Bb.get() : nullptr,
                          kEps);
  if (mean) *mean = get(M);
  if (rstd) *rstd = get(R);
  return get(O);
}

}  // namespace

TEST_CASE("layernorm_forward matches a naive recomputation, with and without bias") {
  const int64_t N = 4, C = 12;
  Vec x = random_vec(N * C, 1, -2, 3), w = random_vec(C, 2), b = random_vec(C, 3);
  for (bool with_bias : {true, false}) {
    LnRef ref = naive_layernorm(x, w, with_bias ? &b : nullptr, N, C);
    Vec mean, rstd;
    Vec out = run_layernorm(loom_f64(), x, w, with_bias ? &b : nullptr, N, C, &mean, &rstd);
    check_close(out, ref.out, 1e-12, 1e-12, "layernorm out");
    check_close(mean, ref.mean, 1e-12, 1e-12, "layernorm mean");
    check_close(rstd, ref.rstd, 1e-12, 1e-12, "layernorm rstd");
  }
}

TEST_CASE("layernorm_backward against finite differences (inp, weight, bias)") {
  const int64_t N = 3, C = 10;
  Vec x = random_vec(N * C, 10), w = random_vec(C, 11), b = random_vec(C, 12);
  Vec R = random_vec(N * C, 13);
  auto L = [&] { return dot(run_layernorm(loom_f64(), x, w, &b, N, C), R); };
  Vec fd_x = fd_grad(x, L), fd_w = fd_grad(w, L), fd_b = fd_grad(b, L);

  auto X = make64({N, C}, x);
  auto W = make64({C}, w);
  auto Bb = make64({C}, b);
  loom::Tensor O(B(), loom_f64(), {N, C}), M(B(), loom_f64(), {N}), Rs(B(), loom_f64(), {N});
  loom::layernorm_forward(B(), O.get(), M.get(), Rs.get(), X.get(), W.get(), Bb.get(), kEps);
  // dinp starts as garbage (it is written), dweight/dbias as nonzero (they accumulate).
  Vec dw0 = random_vec(C, 14), db0 = random_vec(C, 15);
  auto dX = make64({N, C}, random_vec(N * C, 16, 1e3, 2e3));
  auto dW = make64({C}, dw0);
  auto dB = make64({C}, db0);
  loom::layernorm_backward(B(), dX.get(), dW.get(), dB.get(), make64({N, C}, R).get(), X.get(),
                           W.get(), M.get(), Rs.get());
  Vec gw = get(dW), gb = get(dB);
  for (int64_t c = 0; c < C; ++c) {
    gw[c] -= dw0[c];
    gb[c] -= db0[c];
  }
  check_close(get(dX), fd_x, kFdRtol, kFdAtol, "layernorm dinp vs FD");
  check_close(gw, fd_w, kFdRtol, kFdAtol, "layernorm dweight vs FD");
  check_close(gb, fd_b, kFdRtol, kFdAtol, "layernorm dbias vs FD");

  // dinp may alias dout, and dbias may be NULL.
  auto dO = make64({N, C}, R);
  auto dW2 = make64({C}, Vec(C, 0.0));
  loom::layernorm_backward(B(), dO.get(), dW2.get(), nullptr, dO.get(), X.get(), W.get(), M.get(),
                           Rs.get());
  check_close(get(dO), fd_x, kFdRtol, kFdAtol, "layernorm dinp in place of dout");
  check_close(get(dW2), fd_w, kFdRtol, kFdAtol, "layernorm dweight (dinp aliasing dout)");
}

TEST_CASE("rmsnorm forward and backward against finite differences") {
  const int64_t N = 4, C = 9;
  Vec x = random_vec(N * C, 20, -2, 2), w = random_vec(C, 21), R = random_vec(N * C, 22);
  auto run = [&](const Vec& xv, const Vec& wv, Vec* rstd) {
    auto X = make64({N, C}, xv);
    auto W = make64({C}, wv);
    loom::Tensor O(B(), loom_f64(), {N, C}), Rs(B(), loom_f64(), {N});
    loom::rmsnorm_forward(B(), O.get(), Rs.get(), X.get(), W.get(), kEps);
    if (rstd) *rstd = get(Rs);
    return get(O);
  };
  Vec rstd, ref_rstd(N);
  check_close(run(x, w, &rstd), naive_rmsnorm(x, w, N, C, &ref_rstd), 1e-12, 1e-12, "rmsnorm out");
  check_close(rstd, ref_rstd, 1e-12, 1e-12, "rmsnorm rstd");

  auto L = [&] { return dot(run(x, w, nullptr), R); };
  Vec fd_x = fd_grad(x, L), fd_w = fd_grad(w, L);
  Vec dw0 = random_vec(C, 23);
  auto dX = make64({N, C}, Vec(N * C, 99.0));
  auto dW = make64({C}, dw0);
  loom::rmsnorm_backward(B(), dX.get(), dW.get(), make64({N, C}, R).get(), make64({N, C}, x).get(),
                         make64({C}, w).get(), make64({N}, rstd).get());
  Vec gw = get(dW);
  for (int64_t c = 0; c < C; ++c) gw[c] -= dw0[c];
  check_close(get(dX), fd_x, kFdRtol, kFdAtol, "rmsnorm dinp vs FD");
  check_close(gw, fd_w, kFdRtol, kFdAtol, "rmsnorm dweight vs FD");
}

TEST_CASE("layernorm and rmsnorm: f32 (f32 statistics) matches f64") {
  const int64_t N = 64, C = 768;  // GPT-2 width, past the parallel threshold
  Vec x = random_vec(N * C, 30, -3, 3), w = random_vec(C, 31, 0.5, 1.5), b = random_vec(C, 32);
  Vec R = random_vec(N * C, 33);
  check_close(run_layernorm(loom_f32(), x, w, &b, N, C), run_layernorm(loom_f64(), x, w, &b, N, C),
              1e-5, 1e-5, "layernorm_forward f32 vs f64");

  Vec grads[2];
  DLDataType dts[2] = {loom_f32(), loom_f64()};
  for (int k = 0; k < 2; ++k) {
    auto X = make(dts[k], {N, C}, x);
    auto W = make(dts[k], {C}, w);
    loom::Tensor O(B(), dts[k], {N, C}), Rs(B(), dts[k], {N}), dX(B(), dts[k], {N, C});
    auto dW = make(dts[k], {C}, Vec(C, 0.0));
    loom::rmsnorm_forward(B(), O.get(), Rs.get(), X.get(), W.get(), kEps);
    loom::rmsnorm_backward(B(), dX.get(), dW.get(), make(dts[k], {N, C}, R).get(), X.get(), W.get(),
                           Rs.get());
    grads[k] = get(dX);
  }
  check_close(grads[0], grads[1], 1e-5, 1e-5, "rmsnorm_backward f32 vs f64");
}

TEST_CASE("layernorm: f64 data with f32 statistics is accepted (backend.h's f32 stats)") {
  const int64_t N = 2, C = 8;
  Vec x = random_vec(N * C, 40), w = random_vec(C, 41);
  auto X = make64({N, C}, x);
  auto W = make64({C}, w);
  loom::Tensor O(B(), loom_f64(), {N, C}), M(B(), loom_f32(), {N}), Rs(B(), loom_f32(), {N});
  loom::layernorm_forward(B(), O.get(), M.get(), Rs.get(), X.get(), W.get(), nullptr, kEps);
  check_close(get(O), naive_layernorm(x, w, nullptr, N, C).out, 1e-12, 1e-12,
              "layernorm f64 with f32 stats");
}

TEST_CASE("norms: shape and dtype errors name the op and the mismatch") {
  const int64_t N = 2, C = 768;
  auto X = make(loom_f32(), {N, C}, Vec(N * C, 0.5));
  auto W = make(loom_f32(), {C - 1}, Vec(C - 1, 1.0));
  loom::Tensor O(B(), loom_f32(), {N, C}), M(B(), loom_f32(), {N}), Rs(B(), loom_f32(), {N});
  expect_error(
      [&] {
        loom::layernorm_forward(B(), O.get(), M.get(), Rs.get(), X.get(), W.get(), nullptr, kEps);
      },
      LOOM_ERR_INVALID_ARGUMENT, "layernorm_forward: weight has 767 elements, expected 768");
  auto W64 = make64({C}, Vec(C, 1.0));
  expect_error([&] { loom::rmsnorm_forward(B(), O.get(), Rs.get(), X.get(), W64.get(), kEps); },
               LOOM_ERR_INVALID_ARGUMENT,
               "rmsnorm_forward: weight is f64, expected f32 (the dtype of inp)");
  loom::Tensor M3(B(), loom_f32(), {N + 1});
  auto Wok = make(loom_f32(), {C}, Vec(C, 1.0));
  expect_error(
      [&] {
        loom::layernorm_forward(B(), O.get(), M3.get(), Rs.get(), X.get(), Wok.get(), nullptr,
                                kEps);
      },
      LOOM_ERR_INVALID_ARGUMENT, "layernorm_forward: mean has 3 elements, expected 2");
  loom::Tensor Xb(B(), loom_i32(), {N, C});  // bf16/f16: mixed precision (test_mixed.cpp)
  expect_error(
      [&] {
        loom::layernorm_forward(B(), O.get(), M.get(), Rs.get(), Xb.get(), Wok.get(), nullptr,
                                kEps);
      },
      LOOM_ERR_UNIMPLEMENTED, "layernorm_forward: inp is i32");
}

TEST_CASE(
    "norm_forward/norm_backward: args of an unknown kind, short or with an unknown required "
    "extension are refused") {
  loom::Tensor X = make(loom_f32(), {2, 4}, Vec(8, 0.5)), W = make(loom_f32(), {4}, Vec(4, 1.0));
  loom::Tensor O(B(), loom_f32(), {2, 4}), R(B(), loom_f32(), {2});
  loom_norm_fwd_args a{LOOM_NORM_FWD_ARGS_SIZE_V2,
                       7,
                       O.get(),
                       nullptr,
                       R.get(),
                       X.get(),
                       W.get(),
                       nullptr,
                       1e-5,
                       nullptr};
  expect_error([&] { B().call(&loom_ops::norm_forward, &a); }, LOOM_ERR_INVALID_ARGUMENT,
               "norm_forward: args of an unknown kind (7)");
  a.kind = LOOM_NORM_RMS;
  const loom_ext future{sizeof(loom_ext), "loom.norm-future/1", LOOM_EXT_REQUIRED, nullptr};
  a.ext = &future;  // e.g. a groupwise norm this backend was built before
  expect_error([&] { B().call(&loom_ops::norm_forward, &a); }, LOOM_ERR_INVALID_ARGUMENT,
               "norm_forward: unknown required extension loom.norm-future/1");
  a.ext = nullptr;
  a.struct_size = offsetof(loom_norm_fwd_args, ext);
  expect_error([&] { B().call(&loom_ops::norm_forward, &a); }, LOOM_ERR_INVALID_ARGUMENT,
               "norm_forward: args older than ABI 2.0");
  a.struct_size = LOOM_NORM_FWD_ARGS_SIZE_V2;
  B().call(&loom_ops::norm_forward, &a);  // a valid RMSNorm goes through
  expect_error([&] { B().call(&loom_ops::norm_backward, nullptr); }, LOOM_ERR_INVALID_ARGUMENT,
               "norm_backward: args NULL");
}
