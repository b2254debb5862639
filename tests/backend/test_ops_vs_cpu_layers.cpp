// Every loom_ops slot on the device backend against backend/cpu, part 2: normalisation,
// activations, attention pieces (softmax, RoPE), the losses and the optimizer steps. Same
// rules as part 1 (test_ops_vs_cpu.cpp): identical inputs, poisoned outputs, f32/bf16 bounds
// relative to the reference's largest magnitude. Mixed precision as backend.h: bf16
// activations with f32 statistics (mean, rstd, lse, CE stats), f32 losses, and f32 parameter
// gradients (dweight, dbias); the optimizers are f32 only.
#include <cmath>

#include "gpu_pair.hpp"
#include "loom/cpp/norm_residual.hpp"

using namespace gputest;

namespace {

// The cpu's saved statistics, handed to both sides' backward: the backward is then tested
// on its own, not through the forward's rounding.
Vec cpu_values(Pair& p) { return download(p.cpu_side()); }

// ---- layernorm / rmsnorm ----------------------------------------------------------------------
void run_layernorm(DLDataType dt, int64_t N, int64_t C, bool with_bias) {
  CAPTURE(N);
  CAPTURE(C);
  CAPTURE(with_bias);
  const double tol = tol_for(dt);
  Pair inp(dt, {N, C}, random_vec(N * C, 101, -2.0, 3.0));  // mean far from 0
  Pair w(dt, {C}, random_vec(C, 102, 0.5, 1.5)), b(dt, {C}, random_vec(C, 103, -0.5, 0.5));
  Pair out(dt, {N, C}), mean(f32(), {N}), rstd(f32(), {N});
  run_both([&](const loom::Backend& B, int s) {
    loom::layernorm_forward(B, out[s], mean[s], rstd[s], inp[s], w[s], with_bias ? b[s] : nullptr,
                            1e-5);
  });
  expect_close(out, tol, "layernorm_forward out");
  expect_close(mean, kTolF32, "layernorm_forward mean");
  expect_close(rstd, kTolF32, "layernorm_forward rstd");

  mean.set(cpu_values(mean));
  rstd.set(cpu_values(rstd));
  Pair dout(dt, {N, C}, random_vec(N * C, 104)), dinp(dt, {N, C});
  const Vec dw0 = random_vec(C, 105), db0 = random_vec(C, 106);
  Pair dw(f32(), {C}, dw0), db(f32(), {C}, db0);
  run_both([&](const loom::Backend& B, int s) {
    loom::layernorm_backward(B, dinp[s], dw[s], with_bias ? db[s] : nullptr, dout[s], inp[s], w[s],
                             mean[s], rstd[s]);
  });
  expect_close(dinp, tol, "layernorm_backward dinp (=)");
  expect_close(dw, tol, "layernorm_backward dweight (+=)");
  if (with_bias) expect_close(db, tol, "layernorm_backward dbias (+=)");
  const Vec first = download(dw.dev_side());
  upload(dw.dev_side(), dw0);
  loom::layernorm_backward(dev(), dinp[1], dw[1], with_bias ? db[1] : nullptr, dout[1], inp[1],
                           w[1], mean[1], rstd[1]);
  expect_same(download(dw.dev_side()), first, "layernorm_backward dweight");
}

void run_rmsnorm(DLDataType dt, int64_t N, int64_t C) {
  CAPTURE(N);
  CAPTURE(C);
  const double tol = tol_for(dt);
  Pair inp(dt, {N, C}, random_vec(N * C, 111, -2.0, 3.0));
  Pair w(dt, {C}, random_vec(C, 112, 0.5, 1.5));
  Pair out(dt, {N, C}), rstd(f32(), {N});
  run_both([&](const loom::Backend& B, int s) {
    loom::rmsnorm_forward(B, out[s], rstd[s], inp[s], w[s], 1e-5);
  });
  expect_close(out, tol, "rmsnorm_forward out");
  expect_close(rstd, kTolF32, "rmsnorm_forward rstd");

  rstd.set(cpu_values(rstd));
  Pair dout(dt, {N, C}, random_vec(N * C, 113)), dinp(dt, {N, C});
  const Vec dw0 = random_vec(C, 114);
  Pair dw(f32(), {C}, dw0);
  run_both([&](const loom::Backend& B, int s) {
    loom::rmsnorm_backward(B, dinp[s], dw[s], dout[s], inp[s], w[s], rstd[s]);
  });
  expect_close(dinp, tol, "rmsnorm_backward dinp (=)");
  expect_close(dw, tol, "rmsnorm_backward dweight (+=)");
  const Vec first = download(dw.dev_side());
  upload(dw.dev_side(), dw0);
  loom::rmsnorm_backward(dev(), dinp[1], dw[1], dout[1], inp[1], w[1], rstd[1]);
  expect_same(download(dw.dev_side()), first, "rmsnorm_backward dweight");
}

// Rows that take each of backend/cuda's paths: 771 the block kernels; 768 one warp a row
// (forward in every dtype, backward in bf16/f16: 3 vectors a lane); 384 the warp backward in
// f32 too (3 vectors of 4) and the block backward in bf16/f16; 2048 the warp forward only.
// 1000 rows span several row chunks of the backward's partial sums.
void run_norms(DLDataType dt) {
  run_layernorm(dt, 37, 771, true);
  run_layernorm(dt, 37, 771, false);
  run_layernorm(dt, 256, 768, true);
  run_layernorm(dt, 1000, 384, true);
  run_layernorm(dt, 1000, 384, false);
  run_layernorm(dt, 3, 2048, true);
  run_rmsnorm(dt, 37, 771);
  run_rmsnorm(dt, 256, 768);
  run_rmsnorm(dt, 1000, 384);
  run_rmsnorm(dt, 3, 2048);
}

// ---- loom.norm-residual/1 (ABI 2.29) --------------------------------------------------------
// The norm with the residual add against the cpu's (which composes the add op and the plain
// norm), with the block's aliasing (sum over inp, dinp over the residual); then the device's
// own add op and plain norm, which it must equal to the bit (the extension's contract).
loom_norm_fwd_args norm_fwd(loom_norm_kind kind, DLTensor* out, DLTensor* mean, DLTensor* rstd,
                            const DLTensor* inp, const DLTensor* w, const DLTensor* b) {
  return {LOOM_NORM_FWD_ARGS_SIZE_V2, kind, out, mean, rstd, inp, w, b, 1e-5, nullptr};
}
loom_norm_bwd_args norm_bwd(loom_norm_kind kind, DLTensor* dinp, DLTensor* dw, DLTensor* db,
                            const DLTensor* dout, const DLTensor* inp, const DLTensor* w,
                            const DLTensor* mean, const DLTensor* rstd) {
  return {LOOM_NORM_BWD_ARGS_SIZE_V2, kind, dinp, dw, db, dout, inp, w, mean, rstd, nullptr};
}
void run_norm_residual(DLDataType dt, int64_t N, int64_t C, loom_norm_kind kind) {
  CAPTURE(N);
  CAPTURE(C);
  CAPTURE(kind);
  const bool ln = kind == LOOM_NORM_LAYER;
  const double tol = tol_for(dt);
  const Vec x = random_vec(N * C, 121, -2.0, 3.0), r = random_vec(N * C, 122);
  Pair inp(dt, {N, C}, x), res(dt, {N, C}, r), w(dt, {C}, random_vec(C, 123, 0.5, 1.5));
  Pair b(dt, {C}, random_vec(C, 124, -0.5, 0.5));
  Pair out(dt, {N, C}), mean(f32(), {N}), rstd(f32(), {N});
  run_both([&](const loom::Backend& B, int s) {
    const loom_norm_residual e = loom::norm_residual(res[s], inp[s]);
    loom_norm_fwd_args a =
        norm_fwd(kind, out[s], ln ? mean[s] : nullptr, rstd[s], inp[s], w[s], ln ? b[s] : nullptr);
    a.ext = &e.base;
    B.call(&loom_ops::norm_forward, &a);
  });
  expect_close(inp, tol, "norm-residual forward: the sum over inp");
  expect_close(out, tol, "norm-residual forward: out");
  // bf16: the device normalises the sum rounded to bf16, the cpu's f32 copy the f32 sum
  expect_close(rstd, tol, "norm-residual forward: rstd");
  if (ln) expect_close(mean, tol, "norm-residual forward: mean");
  {  // the device's add op and plain norm
    Pair x2(dt, {N, C}, x), r2(dt, {N, C}, r), o2(dt, {N, C}), m2(f32(), {N}), s2(f32(), {N});
    dev().call(&loom_ops::add, x2[1], (const DLTensor*)x2[1], (const DLTensor*)r2[1]);
    const loom_norm_fwd_args a =
        norm_fwd(kind, o2[1], ln ? m2[1] : nullptr, s2[1], x2[1], w[1], ln ? b[1] : nullptr);
    dev().call(&loom_ops::norm_forward, &a);
    expect_same(download(inp.dev_side()), download(x2.dev_side()), "the sum, fused and not");
    expect_same(download(out.dev_side()), download(o2.dev_side()), "out, fused and not");
    expect_same(download(rstd.dev_side()), download(s2.dev_side()), "rstd, fused and not");
    if (ln) expect_same(download(mean.dev_side()), download(m2.dev_side()), "mean, fused and not");
  }
  // backward: inp now holds the sum on both sides; dres over dinp
  rstd.set(cpu_values(rstd));
  if (ln) mean.set(cpu_values(mean));
  const Vec d = random_vec(N * C, 125), dw0 = random_vec(C, 126), db0 = random_vec(C, 127);
  Pair dout(dt, {N, C}, random_vec(N * C, 128)), dres(dt, {N, C}, d);
  Pair dw(f32(), {C}, dw0), db(f32(), {C}, db0);
  run_both([&](const loom::Backend& B, int s) {
    const loom_norm_residual e = loom::norm_residual(dres[s], nullptr);
    loom_norm_bwd_args a = norm_bwd(kind, dres[s], dw[s], ln ? db[s] : nullptr, dout[s], inp[s],
                                    w[s], ln ? mean[s] : nullptr, rstd[s]);
    a.ext = &e.base;
    B.call(&loom_ops::norm_backward, &a);
  });
  expect_close(dres, tol, "norm-residual backward: dres + dinp");
  expect_close(dw, tol, "norm-residual backward: dweight (+=)");
  if (ln) expect_close(db, tol, "norm-residual backward: dbias (+=)");
  Pair d2(dt, {N, C}, d), g2(dt, {N, C}), w2(f32(), {C}, dw0), b2(f32(), {C}, db0);
  const loom_norm_bwd_args a = norm_bwd(kind, g2[1], w2[1], ln ? b2[1] : nullptr, dout[1], inp[1],
                                        w[1], ln ? mean[1] : nullptr, rstd[1]);
  dev().call(&loom_ops::norm_backward, &a);
  dev().call(&loom_ops::add, d2[1], (const DLTensor*)d2[1], (const DLTensor*)g2[1]);
  expect_same(download(dres.dev_side()), download(d2.dev_side()), "dres, fused and not");
  expect_same(download(dw.dev_side()), download(w2.dev_side()), "dweight, fused and not");
  if (ln) expect_same(download(db.dev_side()), download(b2.dev_side()), "dbias, fused and not");
}
// The paths of run_norms' rows: block kernels (771), one warp a row (768), the warp backward
// in f32 and the block backward in bf16 (384).
void run_norm_residuals(DLDataType dt) {
  for (loom_norm_kind kind : {LOOM_NORM_LAYER, LOOM_NORM_RMS})
    for (int64_t C : {771, 768, 384}) run_norm_residual(dt, 300, C, kind);
}

// ---- gelu (tanh and erf), tanh, swiglu
// --------------------------------------------------------------------------
void run_activations(DLDataType dt, int64_t N, int64_t H) {
  CAPTURE(N);
  CAPTURE(H);
  const double tol = tol_for(dt);
  Pair x(dt, {N, H}, random_vec(N * H, 121, -6.0, 6.0)), y(dt, {N, H});
  run_both(
      [&](const loom::Backend& B, int s) { loom::act_forward(B, LOOM_ACT_GELU_TANH, y[s], x[s]); });
  expect_close(y, tol, "gelu_forward");
  Pair dy(dt, {N, H}, random_vec(N * H, 122)), dx(dt, {N, H});
  run_both([&](const loom::Backend& B, int s) {
    loom::act_backward(B, LOOM_ACT_GELU_TANH, dx[s], x[s], dy[s]);
  });
  expect_close(dx, tol, "gelu_backward");

  // BERT's exact GELU and its pooler's tanh (LOOM_ACT_GELU, LOOM_ACT_TANH); Nemotron-H's
  // squared ReLU (LOOM_ACT_SQUARED_RELU, ABI 2.24)
  using Act = std::pair<loom_act_kind, const char*>;
  for (const auto& [kind, name] : {Act{LOOM_ACT_GELU, "gelu (erf)"}, Act{LOOM_ACT_TANH, "tanh"},
                                   Act{LOOM_ACT_SQUARED_RELU, "squared relu"}}) {
    run_both([&](const loom::Backend& B, int s) { loom::act_forward(B, kind, y[s], x[s]); });
    expect_close(y, tol, std::string(name) + " forward");
    run_both(
        [&](const loom::Backend& B, int s) { loom::act_backward(B, kind, dx[s], x[s], dy[s]); });
    expect_close(dx, tol, std::string(name) + " backward");
  }

  Pair gu(dt, {N, 2 * H}, random_vec(N * 2 * H, 123, -6.0, 6.0)), h(dt, {N, H});
  run_both(
      [&](const loom::Backend& B, int s) { loom::act_forward(B, LOOM_ACT_SWIGLU, h[s], gu[s]); });
  expect_close(h, tol, "swiglu_forward");
  Pair dgu(dt, {N, 2 * H});
  run_both([&](const loom::Backend& B, int s) {
    loom::act_backward(B, LOOM_ACT_SWIGLU, dgu[s], gu[s], dy[s]);
  });
  expect_close(dgu, tol, "swiglu_backward");
}

// ---- softmax / rope ----------------------------------------------------------------------------
void run_softmax(DLDataType dt, int64_t Bt, int64_t Tq, int64_t Tk, bool causal, bool with_lse,
                 int64_t window = 0) {
  CAPTURE(Bt);
  CAPTURE(Tq);
  CAPTURE(Tk);
  CAPTURE(causal);
  CAPTURE(window);
  const double tol = tol_for(dt);
  Pair s_(dt, {Bt, Tq, Tk}, random_vec(Bt * Tq * Tk, 131, -4.0, 4.0));
  Pair lse(f32(), {Bt, Tq});
  run_both([&](const loom::Backend& B, int s) {
    loom::softmax_forward(B, s_[s], with_lse ? lse[s] : nullptr, 0.35, causal, window);
  });
  expect_close(s_, tol, "softmax_forward probabilities");
  if (with_lse) expect_close(lse, kTolF32, "softmax_forward lse");

  Pair p(dt, {Bt, Tq, Tk}, cpu_values(s_));
  Pair dp(dt, {Bt, Tq, Tk}, random_vec(Bt * Tq * Tk, 132)), ds(dt, {Bt, Tq, Tk});
  run_both(
      [&](const loom::Backend& B, int s) { loom::softmax_backward(B, ds[s], p[s], dp[s], 0.35); });
  expect_close(ds, tol, "softmax_backward");
  run_both(
      [&](const loom::Backend& B, int s) { loom::softmax_backward(B, dp[s], p[s], dp[s], 0.35); });
  expect_close(dp, tol, "softmax_backward, ds aliasing dp");
}

void run_rope(DLDataType dt, int64_t B_, int64_t T, int64_t H, int64_t D, int64_t pos,
              double theta) {
  CAPTURE(T);
  CAPTURE(D);
  CAPTURE(pos);
  CAPTURE(theta);
  const int64_t n = B_ * T * H * D;
  Pair x(dt, {B_, T, H, D}, random_vec(n, 141));
  run_both([&](const loom::Backend& B, int s) { loom::rope_forward(B, x[s], pos, theta); });
  expect_close(x, tol_for(dt), "rope_forward");
  x.set(random_vec(n, 142));
  run_both([&](const loom::Backend& B, int s) { loom::rope_backward(B, x[s], pos, theta); });
  expect_close(x, tol_for(dt), "rope_backward");
}

}  // namespace

TEST_CASE("layernorm, rmsnorm f32") { run_norms(f32()); }
TEST_CASE("layernorm, rmsnorm [bf16]") { run_norms(bf16()); }
TEST_CASE("norm_forward, norm_backward with loom.norm-residual/1 f32") {
  run_norm_residuals(f32());
}
TEST_CASE("norm_forward, norm_backward with loom.norm-residual/1 [bf16]") {
  run_norm_residuals(bf16());
}

TEST_CASE("gelu, swiglu f32") {
  run_activations(f32(), 37, 771);
  run_activations(f32(), 64, 3072);
}
TEST_CASE("gelu, swiglu [bf16]") {
  run_activations(bf16(), 37, 771);
  run_activations(bf16(), 64, 3072);
}

namespace {
void run_softmaxes(DLDataType dt) {
  run_softmax(dt, 5, 33, 33, false, true);
  run_softmax(dt, 5, 33, 33, true, true);
  run_softmax(dt, 3, 7, 45, true, true);      // Tq < Tk: queries are the last 7 of 45 positions
  run_softmax(dt, 2, 9, 5, true, true);       // Tq > Tk: the first 4 rows fully masked (lse -inf)
  run_softmax(dt, 4, 17, 17, true, false);    // no lse
  run_softmax(dt, 12, 256, 256, true, true);  // GPT-2 heads
  run_softmax(dt, 2, 3, 1029, false, true);   // a row longer than any block
  run_softmax(dt, 5, 33, 33, true, true, 7);  // sliding window
  run_softmax(dt, 3, 7, 45, true, true, 20);  // sliding window, Tq < Tk
  run_softmax(dt, 2, 3, 1029, true, true, 600);  // a window longer than a block
}
void run_ropes(DLDataType dt) {
  run_rope(dt, 2, 7, 3, 64, 0, 10000.0);
  run_rope(dt, 1, 5, 2, 6, 5, 10000.0);  // D/2 = 3: odd half
  // Positions of a 2048/4096-token context: angles must be as exact as the cpu's (double).
  run_rope(dt, 1, 4, 2, 128, 4090, 500000.0);
  run_rope(dt, 2, 64, 4, 64, 0, 10000.0);
}
}  // namespace

TEST_CASE("softmax_forward, softmax_backward f32") { run_softmaxes(f32()); }
TEST_CASE("softmax_forward, softmax_backward [bf16]") { run_softmaxes(bf16()); }
TEST_CASE("rope_forward, rope_backward f32") { run_ropes(f32()); }
TEST_CASE("rope_forward, rope_backward [bf16]") { run_ropes(bf16()); }

// ---- losses -------------------------------------------------------------------------------------
namespace {
// Targets over [0, V) with every 5th ignored (-1).
std::vector<int32_t> targets_for(int64_t N, int32_t V, uint64_t seed) {
  std::vector<int32_t> t = random_ids(N, seed, 0, V - 1);
  for (int64_t i = 0; i < N; i += 5) t[i] = -1;
  return t;
}

// loom.ce-loss-total/1 (ABI 2.28): the losses' sum added into a (1) f64 total on each side
// (the device's order against the cpu's index order: f32-tight, as the losses are), the
// gradient as without it, and a row whose target logit is -inf (an infinite loss) a NaN
// gradient row on both sides. `logits` is rewritten.
void check_loss_total(DLDataType dt, int64_t N, int64_t V, Pair& logits, const Pair& tg) {
  Vec x = random_vec(N * V, 153, -5.0, 5.0);
  logits.set(x);
  Pair losses(f32(), {N}), dlogits(dt, {N, V});
  loom::Tensor total[2];
  run_both([&](const loom::Backend& B, int s) {
    total[s] = loom::Tensor(B, loom_f64(), {1});
    B.call(&loom_ops::fill, total[s].get(), 0.5);
    loom::softmax_cross_entropy(B, losses[s], dlogits[s], logits[s], tg[s], 1.0 / 29,
                                total[s].get());
  });
  expect_close(dlogits, tol_for(dt), "softmax_cross_entropy dlogits, with a total");
  const double t0 = total[0].download<double>()[0], t1 = total[1].download<double>()[0];
  CHECK_MESSAGE(std::fabs(t1 - t0) <= kTolF32 * std::fabs(t0), "total " << t1 << " vs " << t0);
  const Vec want = cpu_values(losses);
  double sum = 0.5;
  for (double l : want) sum += l;
  CHECK(t0 == sum);       // the cpu's is its index order, to the bit
  const int64_t row = 1;  // a counted row (every 5th from 0 is ignored), targets as the caller's
  const int32_t t = targets_for(N, static_cast<int32_t>(V), 152)[row];
  x[row * V + t] = -INFINITY;
  logits.set(x);
  run_both([&](const loom::Backend& B, int s) {
    B.call(&loom_ops::fill, total[s].get(), 0.0);
    loom::softmax_cross_entropy(B, losses[s], dlogits[s], logits[s], tg[s], 1.0 / 29,
                                total[s].get());
  });
  const Vec d = download(dlogits.dev_side());
  CHECK(std::isinf(total[1].download<double>()[0]));
  for (int64_t v = 0; v < V; ++v) CHECK(std::isnan(d[row * V + v]));
  CHECK(std::isfinite(d[(row + 1) * V]));
}

void run_cross_entropy(DLDataType dt, int64_t N, int64_t V) {
  CAPTURE(N);
  CAPTURE(V);
  const double tol = tol_for(dt);
  Pair logits(dt, {N, V}, random_vec(N * V, 151, -5.0, 5.0));
  Pair tg = Pair::ids({N}, targets_for(N, static_cast<int32_t>(V), 152));
  Pair losses(f32(), {N}), dlogits(dt, {N, V});
  const double dloss = 1.0 / 29;
  run_both([&](const loom::Backend& B, int s) {
    loom::softmax_cross_entropy(B, losses[s], dlogits[s], logits[s], tg[s], dloss);
  });
  // Losses are f32 but computed from bf16 logits: the f32 bound holds (same inputs).
  expect_close(losses, kTolF32, "softmax_cross_entropy losses");
  expect_close(dlogits, tol, "softmax_cross_entropy dlogits");
  losses.poison_both();
  run_both([&](const loom::Backend& B, int s) {
    loom::softmax_cross_entropy(B, losses[s], nullptr, logits[s], tg[s], dloss);
  });
  expect_close(losses, kTolF32, "softmax_cross_entropy losses, no dlogits");
  run_both([&](const loom::Backend& B, int s) {
    loom::softmax_cross_entropy(B, losses[s], logits[s], logits[s], tg[s], dloss);
  });
  expect_close(logits, tol, "softmax_cross_entropy dlogits aliasing logits");
  check_loss_total(dt, N, V, logits, tg);
}

// One vocabulary slice [vs, vs + Vl) of a larger vocabulary; targets anywhere in it.
void run_vocab_ce(DLDataType dt, int64_t N, int64_t Vl, int64_t vs) {
  CAPTURE(N);
  CAPTURE(Vl);
  CAPTURE(vs);
  Pair logits(dt, {N, Vl}, random_vec(N * Vl, 161, -5.0, 5.0));
  std::vector<int32_t> t = targets_for(N, static_cast<int32_t>(vs + Vl + 500), 162);
  for (int64_t i = 1; i < N; i += 3) t[i] = static_cast<int32_t>(vs + (i * 7919) % Vl);  // in slice
  Pair tg = Pair::ids({N}, t);
  Pair stats(f32(), {N, 3});
  run_both([&](const loom::Backend& B, int s) {
    loom::vocab_ce_stats(B, stats[s], logits[s], tg[s], vs);
  });
  expect_close(stats, kTolF32, "vocab_ce_stats");

  // A global lse as if another slice held as much mass again: lse = m + log(2 s).
  const Vec st = cpu_values(stats);
  Vec lse(N);
  for (int64_t n = 0; n < N; ++n) lse[n] = st[3 * n] + std::log(2 * st[3 * n + 1]);
  Pair l(f32(), {N}, lse), dlogits(dt, {N, Vl});
  run_both([&](const loom::Backend& B, int s) {
    loom::vocab_ce_backward(B, dlogits[s], logits[s], tg[s], vs, l[s], 0.25);
  });
  expect_close(dlogits, tol_for(dt), "vocab_ce_backward");
  run_both([&](const loom::Backend& B, int s) {
    loom::vocab_ce_backward(B, logits[s], logits[s], tg[s], vs, l[s], 0.25);
  });
  expect_close(logits, tol_for(dt), "vocab_ce_backward aliasing logits");
}

void run_losses(DLDataType dt) {
  run_cross_entropy(dt, 37, 1001);
  run_cross_entropy(dt, 64, 50257);  // GPT-2's vocabulary
  run_vocab_ce(dt, 37, 1001, 0);
  run_vocab_ce(dt, 37, 1001, 1000);
  run_vocab_ce(dt, 32, 25129, 25128);  // half of GPT-2's vocabulary at tensor = 2
}
}  // namespace

TEST_CASE("softmax_cross_entropy, vocab_ce_stats, vocab_ce_backward f32") { run_losses(f32()); }
TEST_CASE("softmax_cross_entropy, vocab_ce_stats, vocab_ce_backward [bf16]") { run_losses(bf16()); }

// ---- optimizer steps (f32 main params, grads and state) -----------------------------------------
// The optimizers bring their own kernels (ABI 2: no backend op): the host one for
// backend/cpu and a CUDA one enqueued on backend/cuda's stream through loom.device-stream/1.
// Three steps from the same parameters on both sides; the updates (p - p0) compared, so the
// bound measures the step, not the parameter's last bits. Lion's update is +-lr per element,
// so an element whose interpolated momentum is within rounding of 0 may take the other sign
// on the device (a fused multiply-add there): at most 1 in 10^4 elements may differ, by 2 lr.
// With `schedule`, the device's update reads the learning rate and the step count from a
// device tensor (loom.opt-schedule/1: AdamW's bias corrections made by each thread) and its
// args carry NaN and 0; the cpu's takes them from its args.
namespace {
void check_optimizer(const std::string& name, const std::map<std::string, std::string>& keys,
                     size_t num_state, bool sign_update, bool schedule = false) {
  CAPTURE(name);
  CAPTURE(schedule);
  const int64_t n = 100003;
  Pair p(f32(), {n}, random_vec(n, 191)), g(f32(), {n}, random_vec(n, 192));
  const loom_plugin_descriptor* d = loomtest::load_descriptor("optimizer", name);
  const auto* api = static_cast<const loom_optimizer_api*>(d->api);
  loom_config cfg = loomtest::TestHost::config(d, keys);
  loom_optimizer* opt[2] = {nullptr, nullptr};
  for (int s = 0; s < 2; ++s) {
    const loom_opt_param prm{LOOM_OPT_PARAM_SIZE_V2, "w", p[s], g[s], 1};
    const loom_opt_create_args args{LOOM_OPT_CREATE_ARGS_SIZE_V2, &prm, 1, nullptr};
    loom::check(side(s).host(), api->create(side(s).host(), &cfg, &args, &opt[s]));
  }
  for (int64_t step = 1; step <= 3; ++step) {
    CAPTURE(step);
    const Vec before = download(p.cpu_side());
    p.set(before);
    const double lr = 1e-3 / (double)step;
    loom::Tensor values(dev(), loom_f64(), {2});
    const double v[2] = {lr, (double)step};
    loom::check(dev().host(), dev().api()->from_host(dev().self(), values.get(), v, sizeof v));
    const loom_opt_schedule sch{
        {sizeof(loom_opt_schedule), LOOM_EXT_OPT_SCHEDULE, LOOM_EXT_REQUIRED, nullptr},
        values.get()};
    for (int s = 0; s < 2; ++s) {
      loom_opt_step_args a{LOOM_OPT_STEP_ARGS_SIZE_V2, lr, step, 0.5, nullptr};
      if (s == 1 && schedule) a.lr = std::nan(""), a.step = 0, a.ext = &sch.base;
      loom::check(side(s).host(), api->step(opt[s], &a));
    }
    Vec got = download(p.dev_side()), want = download(p.cpu_side());
    for (int64_t i = 0; i < n; ++i) got[i] -= before[i], want[i] -= before[i];
    if (sign_update) {
      int64_t differ = 0;
      for (int64_t i = 0; i < n; ++i) {
        differ += std::fabs(got[i] - want[i]) > 1e-6;
        REQUIRE(std::fabs(got[i] - want[i]) <= 2.0 * lr + 1e-6);  // at worst the other sign
      }
      CHECK(differ <= n / 10000);
    } else {
      expect_close(got, want, 1e-3, name + " update");
    }
    g.set(random_vec(n, 193 + step));
  }
  REQUIRE(api->num_state(opt[0]) == num_state);
  for (size_t i = 0; i < num_state; ++i) {  // every state tensor the same on both sides
    std::vector<float> st[2];
    const char* sname = nullptr;
    for (int s = 0; s < 2; ++s) {
      DLTensor* t = nullptr;
      loom::check(side(s).host(), api->get_state(opt[s], i, &sname, &t));
      st[s].resize(n);
      loom::check(side(s).host(),
                  side(s).api()->to_host(side(s).self(), t, st[s].data(), n * sizeof(float)));
    }
    expect_close(Vec(st[1].begin(), st[1].end()), Vec(st[0].begin(), st[0].end()), kTolF32,
                 name + " " + sname);
  }
  for (loom_optimizer* o : opt) api->destroy(o);
}
}  // namespace

TEST_CASE("optimizer/adamw: its device kernel on the backend's stream matches its cpu kernel") {
  for (bool schedule : {false, true})
    check_optimizer("adamw", {{"weight_decay", "0.1"}}, 2, false, schedule);
}
TEST_CASE("optimizer/sgd: its device kernel (momentum, and none) matches its cpu kernel") {
  for (bool schedule : {false, true}) {
    check_optimizer("sgd", {{"momentum", "0.9"}, {"weight_decay", "0.01"}}, 1, false, schedule);
    check_optimizer("sgd", {{"weight_decay", "0.01"}}, 0, false, schedule);
  }
}
TEST_CASE("optimizer/lion: its device kernel on the backend's stream matches its cpu kernel") {
  for (bool schedule : {false, true})
    check_optimizer("lion", {{"weight_decay", "0.5"}}, 1, true, schedule);
}
