// Mamba-2's causal depthwise convolution and gated RMSNorm (ABI 2.22): forward against naive
// double loops (with and without bias and SiLU; groups of C and C/2 channels), the
// convolution's state (pieces == the whole, pieces shorter than K-1 included), every
// backward against central finite differences in f64, bf16 against f32, and their refusals.
#include <cstddef>

#include "ops_support.hpp"

using namespace opstest;

namespace {

constexpr double kEps = 1e-5;
double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

// B = 2 sequences of T = 9 steps, C = 6 channels, K = 4 taps.
struct Conv {
  int64_t b = 2, T = 9, C = 6, K = 4;
};

// out = [silu](bias + causal convolution); state (B,K-1,C) in and out when given.
Vec naive_conv(const Conv& d, const Vec& x, const Vec& w, const Vec* bias, bool silu,
               Vec* state = nullptr) {
  Vec out(x.size());
  auto in = [&](int64_t b, int64_t s, int64_t c) {
    if (s >= 0) return x[(b * d.T + s) * d.C + c];
    return state ? (*state)[(b * (d.K - 1) + d.K - 1 + s) * d.C + c] : 0.0;
  };
  for (int64_t b = 0; b < d.b; ++b)
    for (int64_t t = 0; t < d.T; ++t)
      for (int64_t c = 0; c < d.C; ++c) {
        double pre = bias ? (*bias)[c] : 0.0;
        for (int64_t k = 0; k < d.K; ++k) pre += w[c * d.K + k] * in(b, t - d.K + 1 + k, c);
        out[(b * d.T + t) * d.C + c] = silu ? pre * sigmoid(pre) : pre;
      }
  if (state) {
    Vec next(state->size());
    for (int64_t b = 0; b < d.b; ++b)
      for (int64_t j = 0; j < d.K - 1; ++j)
        for (int64_t c = 0; c < d.C; ++c)
          next[(b * (d.K - 1) + j) * d.C + c] = in(b, d.T - d.K + 1 + j, c);
    *state = next;
  }
  return out;
}

Vec run_conv(DLDataType t, const Conv& d, const Vec& x, const Vec& w, const Vec* bias, bool silu) {
  loom::Tensor X = make(t, {d.b, d.T, d.C}, x), W = make(t, {d.C, d.K}, w),
               O(B(), t, {d.b, d.T, d.C});
  loom::Tensor Bs;
  if (bias) Bs = make(t, {d.C}, *bias);
  loom::ssm_conv_forward(B(), O, X, W, bias ? Bs.get() : nullptr, silu, nullptr);
  return get(O);
}

// g = inp * silu(gate), out = g * rstd * w per group of gs channels; rstd (N, C/gs).
Vec naive_gated(const Vec& x, const Vec& z, const Vec& w, int64_t N, int64_t C, int64_t gs,
                Vec* rstd) {
  Vec out(N * C);
  if (rstd) rstd->assign(N * (C / gs), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < C / gs; ++k) {
      double ss = 0;
      for (int64_t c = k * gs; c < (k + 1) * gs; ++c) {
        const double g = x[n * C + c] * z[n * C + c] * sigmoid(z[n * C + c]);
        ss += g * g;
      }
      const double rs = 1.0 / std::sqrt(ss / gs + kEps);
      for (int64_t c = k * gs; c < (k + 1) * gs; ++c)
        out[n * C + c] = x[n * C + c] * z[n * C + c] * sigmoid(z[n * C + c]) * rs * w[c];
      if (rstd) (*rstd)[n * (C / gs) + k] = rs;
    }
  return out;
}

}  // namespace

TEST_CASE("ssm_conv_forward matches a naive causal convolution, with and without bias and silu") {
  const Conv d;
  const Vec x = random_vec(d.b * d.T * d.C, 1, -2, 2), w = random_vec(d.C * d.K, 2),
            bias = random_vec(d.C, 3);
  for (bool with_bias : {true, false})
    for (bool silu : {true, false}) {
      CAPTURE(with_bias);
      CAPTURE(silu);
      const Vec want = naive_conv(d, x, w, with_bias ? &bias : nullptr, silu);
      check_close(run_conv(loom_f64(), d, x, w, with_bias ? &bias : nullptr, silu), want, 1e-12,
                  1e-12, "conv f64");
      check_close(run_conv(loom_f32(), d, x, w, with_bias ? &bias : nullptr, silu), want, 1e-5,
                  1e-5, "conv f32");
    }
}

TEST_CASE("ssm_conv_forward: the state carried over pieces (some shorter than K-1) == the whole") {
  const Conv d;
  const Vec x = random_vec(d.b * d.T * d.C, 10), w = random_vec(d.C * d.K, 11),
            bias = random_vec(d.C, 12), s0 = random_vec(d.b * (d.K - 1) * d.C, 13);
  for (DLDataType t : {loom_f64(), loom_f32()}) {
    const double tol = t.bits == 64 ? 1e-12 : 1e-5;
    Vec ref_state = s0;
    const Vec want = naive_conv(d, x, w, &bias, true, &ref_state);
    auto W = make(t, {d.C, d.K}, w), Bs = make(t, {d.C}, bias);
    auto state = make(t, {d.b, d.K - 1, d.C}, s0);
    Vec got(want.size());  // (B,T,C) put together from the pieces
    int64_t t0 = 0;
    for (int64_t len : {1, 2, 6}) {
      Vec xp;
      for (int64_t b = 0; b < d.b; ++b)
        xp.insert(xp.end(), x.begin() + (b * d.T + t0) * d.C,
                  x.begin() + (b * d.T + t0 + len) * d.C);
      loom::Tensor O(B(), t, {d.b, len, d.C});
      loom::ssm_conv_forward(B(), O, make(t, {d.b, len, d.C}, xp), W, Bs, true, state);
      const Vec o = get(O);
      for (int64_t b = 0; b < d.b; ++b)
        std::copy(o.begin() + b * len * d.C, o.begin() + (b + 1) * len * d.C,
                  got.begin() + (b * d.T + t0) * d.C);
      t0 += len;
    }
    check_close(got, want, tol, tol, "conv in pieces");
    check_close(get(state), ref_state, tol, tol, "conv state after the pieces");
  }
}

TEST_CASE("ssm_conv_backward against finite differences (x, weight, bias), dx aliasing dout") {
  const Conv d;
  Vec x = random_vec(d.b * d.T * d.C, 20, -2, 2), w = random_vec(d.C * d.K, 21),
      bias = random_vec(d.C, 22);
  const Vec R = random_vec(x.size(), 23);
  for (bool silu : {true, false}) {
    CAPTURE(silu);
    auto L = [&] { return dot(naive_conv(d, x, w, &bias, silu), R); };
    const Vec fd_x = fd_grad(x, L), fd_w = fd_grad(w, L), fd_b = fd_grad(bias, L);
    const Vec w0 = random_vec(w.size(), 24), b0 = random_vec(d.C, 25);
    auto X = make64({d.b, d.T, d.C}, x), W = make64({d.C, d.K}, w), Bs = make64({d.C}, bias);
    auto dX = make64({d.b, d.T, d.C}, Vec(x.size(), 99.0));
    auto dW = make64({d.C, d.K}, w0), dB = make64({d.C}, b0);
    loom::ssm_conv_backward(B(), dX, dW, dB, make64({d.b, d.T, d.C}, R), X, W, Bs, silu);
    Vec gw = get(dW), gb = get(dB);
    for (size_t i = 0; i < gw.size(); ++i) gw[i] -= w0[i];
    for (size_t i = 0; i < gb.size(); ++i) gb[i] -= b0[i];
    check_close(get(dX), fd_x, kFdRtol, kFdAtol, "conv dx vs FD");
    check_close(gw, fd_w, kFdRtol, kFdAtol, "conv dweight vs FD");
    check_close(gb, fd_b, kFdRtol, kFdAtol, "conv dbias vs FD");

    auto dO = make64({d.b, d.T, d.C}, R);  // dx in place of dout, and no bias gradient
    auto dW2 = make64({d.C, d.K}, Vec(w.size(), 0.0));
    loom::ssm_conv_backward(B(), dO, dW2, nullptr, dO, X, W, Bs, silu);
    check_close(get(dO), fd_x, kFdRtol, kFdAtol, "conv dx in place of dout");
    check_close(get(dW2), fd_w, kFdRtol, kFdAtol, "conv dweight (dx aliasing dout)");
  }
}

TEST_CASE("gated rmsnorm (loom.norm-gate/1): forward against naive, backward against FD") {
  const int64_t N = 3, C = 8;
  Vec x = random_vec(N * C, 30, -2, 2), z = random_vec(N * C, 31, -2, 2), w = random_vec(C, 32);
  const Vec R = random_vec(N * C, 33);
  for (int64_t gs : {C, C / 2}) {
    CAPTURE(gs);
    auto run = [&](DLDataType t, Vec* rstd) {
      loom::Tensor O(B(), t, {N, C}), Rs(B(), t, {N, C / gs});
      loom::gated_rmsnorm_forward(B(), O, Rs, make(t, {N, C}, x), make(t, {N, C}, z),
                                  make(t, {C}, w), kEps, gs);
      if (rstd) *rstd = get(Rs);
      return get(O);
    };
    Vec rstd, ref_rstd;
    const Vec want = naive_gated(x, z, w, N, C, gs, &ref_rstd);
    check_close(run(loom_f64(), &rstd), want, 1e-12, 1e-12, "gated rmsnorm out");
    check_close(rstd, ref_rstd, 1e-12, 1e-12, "gated rmsnorm rstd");
    check_close(run(loom_f32(), nullptr), want, 1e-5, 1e-5, "gated rmsnorm out f32");

    auto L = [&] { return dot(naive_gated(x, z, w, N, C, gs, nullptr), R); };
    const Vec fd_x = fd_grad(x, L), fd_z = fd_grad(z, L), fd_w = fd_grad(w, L);
    const Vec w0 = random_vec(C, 34);
    auto dX = make64({N, C}, Vec(N * C, 99.0)), dZ = make64({N, C}, Vec(N * C, 99.0));
    auto dW = make64({C}, w0);
    loom::gated_rmsnorm_backward(B(), dX, dZ, dW, make64({N, C}, R), make64({N, C}, x),
                                 make64({N, C}, z), make64({C}, w), make64({N, C / gs}, rstd), gs);
    Vec gw = get(dW);
    for (int64_t c = 0; c < C; ++c) gw[c] -= w0[c];
    check_close(get(dX), fd_x, kFdRtol, kFdAtol, "gated rmsnorm dinp vs FD");
    check_close(get(dZ), fd_z, kFdRtol, kFdAtol, "gated rmsnorm dgate vs FD");
    check_close(gw, fd_w, kFdRtol, kFdAtol, "gated rmsnorm dweight vs FD");
  }
}

TEST_CASE("ssm conv and gated rmsnorm: bf16 activations with f32 gradients == f32") {
  const Conv d;
  const int64_t N = d.b * d.T;
  // Values rounded to bf16 first, so that both runs see the same numbers.
  auto cast = [&](DLDataType to, const DLTensor* from) {
    loom::Tensor t(B(), to, std::vector<int64_t>(from->shape, from->shape + from->ndim));
    B().call(&loom_ops::copy, t.get(), from);
    return t;
  };
  auto pair = [&](const std::vector<int64_t>& shape, const Vec& v) {
    loom::Tensor h = cast(loom_bf16(), make(loom_f32(), shape, v));
    loom::Tensor f = cast(loom_f32(), h);
    return std::pair{std::move(h), std::move(f)};
  };
  auto x = pair({d.b, d.T, d.C}, random_vec(N * d.C, 40)),
       w = pair({d.C, d.K}, random_vec(d.C * d.K, 41));
  auto bias = pair({d.C}, random_vec(d.C, 42)),
       dout = pair({d.b, d.T, d.C}, random_vec(N * d.C, 43));
  auto z = pair({d.b, d.T, d.C}, random_vec(N * d.C, 44)), nw = pair({d.C}, random_vec(d.C, 45));
  Vec out[2], grads[2];
  for (int k = 0; k < 2; ++k) {
    const bool half = k == 0;
    auto pick = [&](const std::pair<loom::Tensor, loom::Tensor>& p) {
      return half ? p.first.get() : p.second.get();
    };
    const DLDataType at = half ? loom_bf16() : loom_f32();
    loom::Tensor y(B(), at, {d.b, d.T, d.C}), dx(B(), at, {d.b, d.T, d.C});
    loom::Tensor dw(B(), loom_f32(), {d.C, d.K}), db(B(), loom_f32(), {d.C});
    loom::ssm_conv_forward(B(), y, pick(x), pick(w), pick(bias), true, nullptr);
    loom::ssm_conv_backward(B(), dx, dw, db, pick(dout), pick(x), pick(w), pick(bias), true);
    loom::Tensor n(B(), at, {N, d.C}), rstd(B(), loom_f32(), {N, 2});
    loom::Tensor dn(B(), at, {N, d.C}), dz(B(), at, {N, d.C}), dnw(B(), loom_f32(), {d.C});
    loom::View x2(pick(x), {N, d.C}), z2(pick(z), {N, d.C}), g2(pick(dout), {N, d.C});
    loom::gated_rmsnorm_forward(B(), n, rstd, x2, z2, pick(nw), kEps, d.C / 2);
    loom::gated_rmsnorm_backward(B(), dn, dz, dnw, g2, x2, z2, pick(nw), rstd, d.C / 2);
    for (const loom::Tensor* t : {&y, &n}) {
      const Vec v = get(cast(loom_f32(), *t));
      out[k].insert(out[k].end(), v.begin(), v.end());
    }
    for (const loom::Tensor* t : {&dx, &dw, &db, &dn, &dz, &dnw}) {
      const Vec v = get(cast(loom_f32(), *t));
      grads[k].insert(grads[k].end(), v.begin(), v.end());
    }
  }
  check_rel(out[0], out[1], 1e-2, "bf16 conv and gated norm outputs vs f32");
  check_rel(grads[0], grads[1], 1e-2, "bf16 conv and gated norm gradients vs f32");
}

TEST_CASE("ssm conv and loom.norm-gate/1: refusals name the mismatch") {
  const Conv d;
  auto X = make(loom_f32(), {d.b, d.T, d.C}, random_vec(d.b * d.T * d.C, 50));
  loom::Tensor O(B(), loom_f32(), {d.b, d.T, d.C}), W(B(), loom_f32(), {d.C + 1, d.K});
  expect_error([&] { loom::ssm_conv_forward(B(), O, X, W, nullptr, true, nullptr); },
               LOOM_ERR_INVALID_ARGUMENT,
               "ssm_conv_forward: weight has shape (7,4), expected (C,K) with C = 6");
  loom::Tensor Wok(B(), loom_f32(), {d.C, d.K}), S(B(), loom_f32(), {d.b, d.K, d.C});
  expect_error([&] { loom::ssm_conv_forward(B(), O, X, Wok, nullptr, true, S); },
               LOOM_ERR_INVALID_ARGUMENT,
               "ssm_conv_forward: state has shape (2,4,6), expected (B,K-1,C) = (2,3,6)");
  loom::Tensor dW(B(), loom_f32(), {d.C, d.K + 1});
  expect_error([&] { loom::ssm_conv_backward(B(), O, dW, nullptr, O, X, Wok, nullptr, false); },
               LOOM_ERR_INVALID_ARGUMENT,
               "ssm_conv_backward: dweight has shape (6,5), expected (C,K) = (6,4)");

  const int64_t N = 4, C = 8;
  auto In = make(loom_f32(), {N, C}, random_vec(N * C, 51)),
       Wn = make(loom_f32(), {C}, Vec(C, 1.0));
  loom::Tensor On(B(), loom_f32(), {N, C}), Rs(B(), loom_f32(), {N}), M(B(), loom_f32(), {N});
  loom::Tensor Gate(B(), loom_f32(), {N, C - 1});
  expect_error([&] { loom::gated_rmsnorm_forward(B(), On, Rs, In, In, Wn, kEps, 3); },
               LOOM_ERR_INVALID_ARGUMENT,
               "norm_forward: group_size = 3 does not divide inp's 8 channels");
  expect_error([&] { loom::gated_rmsnorm_forward(B(), On, Rs, In, Gate, Wn, kEps, C); },
               LOOM_ERR_INVALID_ARGUMENT,
               "norm_forward: gate has shape (4,7), expected inp's (4,8)");
  expect_error([&] { loom::gated_rmsnorm_backward(B(), On, nullptr, Wn, In, In, In, Wn, Rs, C); },
               LOOM_ERR_INVALID_ARGUMENT, "norm_backward: dgate is NULL, expected inp's (4,8)");
  // The gate on a LayerNorm: refused, not run as a plain LayerNorm.
  const loom_norm_gate g{
      {sizeof(loom_norm_gate), LOOM_EXT_NORM_GATE, LOOM_EXT_REQUIRED, nullptr}, In, nullptr, C};
  const loom_norm_fwd_args ln{
      LOOM_NORM_FWD_ARGS_SIZE_V2, LOOM_NORM_LAYER, On, M, Rs, In, Wn, nullptr, kEps, &g.base};
  expect_error([&] { B().call(&loom_ops::norm_forward, &ln); }, LOOM_ERR_INVALID_ARGUMENT,
               "norm_forward: " LOOM_EXT_NORM_GATE " takes kind LOOM_NORM_RMS (1), not 0");
  // rstd holds one value per group: N * C / group_size.
  expect_error([&] { loom::gated_rmsnorm_forward(B(), On, Rs, In, In, Wn, kEps, C / 2); },
               LOOM_ERR_INVALID_ARGUMENT, "rmsnorm_gated_forward: rstd has 4 elements, expected 8");
}
