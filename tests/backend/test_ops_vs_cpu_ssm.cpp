// Every loom_ops slot on the device backend against backend/cpu, part 3: ABI 2.22's Mamba-2
// ops (the causal convolution, the selective scan), the gated RMSNorm (loom.norm-gate/1) and
// RoPE with a frequency table (loom.rope-freqs/1). Same rules as parts 1 and 2: identical
// inputs, poisoned outputs, accumulated outputs from the same random values, bounds relative
// to the reference's largest magnitude (f32 1e-5, bf16 1e-2). Mixed precision as the hybrid
// model runs it: bf16 activations, f32 parameters and parameter gradients, f32 scan states.
// Shapes are odd on purpose: T not a multiple of the chunk, P and N not multiples of 32 (and
// over 32 and 64, so a warp's lanes hold 2 and 4 elements), G < H, T < K-1 with a state.
#include <cmath>

#include "gpu_pair.hpp"

using namespace gputest;

namespace {

Vec cpu_values(Pair& p) { return download(p.cpu_side()); }

// ---- the convolution ------------------------------------------------------------------------
void run_conv(DLDataType dt, int64_t B_, int64_t T, int64_t C, int64_t K, bool silu, bool bias,
              bool state) {
  CAPTURE(T);
  CAPTURE(C);
  CAPTURE(K);
  CAPTURE(silu);
  CAPTURE(bias);
  CAPTURE(state);
  const double tol = tol_for(dt);
  Pair x(dt, {B_, T, C}, random_vec(B_ * T * C, 301, -2.0, 2.0)), out(dt, {B_, T, C});
  Pair w(f32(), {C, K}, random_vec(C * K, 302)), b(f32(), {C}, random_vec(C, 303));
  Pair st(dt, {B_, K - 1, C}, random_vec(B_ * (K - 1) * C, 304));
  run_both([&](const loom::Backend& Be, int s) {
    loom::ssm_conv_forward(Be, out[s], x[s], w[s], bias ? b[s] : nullptr, silu,
                           state ? st[s] : nullptr);
  });
  expect_close(out, tol, "ssm_conv_forward out");
  if (state) expect_close(st, tol, "ssm_conv_forward state (the last K-1 inputs)");
}

void run_conv_backward(DLDataType dt, int64_t B_, int64_t T, int64_t C, int64_t K, bool silu,
                       bool bias) {
  CAPTURE(T);
  CAPTURE(C);
  CAPTURE(K);
  CAPTURE(silu);
  CAPTURE(bias);
  const double tol = tol_for(dt);
  const int64_t n = B_ * T * C;
  const Vec xv = random_vec(n, 311, -2.0, 2.0), gv = random_vec(n, 312);
  Pair x(dt, {B_, T, C}, xv), dout(dt, {B_, T, C}, gv), dx(dt, {B_, T, C});
  Pair w(f32(), {C, K}, random_vec(C * K, 313)), b(f32(), {C}, random_vec(C, 314));
  const Vec dw0 = random_vec(C * K, 315), db0 = random_vec(C, 316);
  Pair dw(f32(), {C, K}, dw0), db(f32(), {C}, db0);
  run_both([&](const loom::Backend& Be, int s) {
    loom::ssm_conv_backward(Be, dx[s], dw[s], bias ? db[s] : nullptr, dout[s], x[s], w[s],
                            bias ? b[s] : nullptr, silu);
  });
  expect_close(dx, tol, "ssm_conv_backward dx (=)");
  expect_close(dw, tol, "ssm_conv_backward dweight (+=)");
  if (bias) expect_close(db, tol, "ssm_conv_backward dbias (+=)");
  const Vec first = download(dw.dev_side());
  upload(dw.dev_side(), dw0);
  loom::ssm_conv_backward(dev(), dx[1], dw[1], bias ? db[1] : nullptr, dout[1], x[1], w[1],
                          bias ? b[1] : nullptr, silu);
  expect_same(download(dw.dev_side()), first, "ssm_conv_backward dweight");

  // dx may alias dout, or x (backend.h's convolution backward): the result must not change.
  const Vec want = download(dx.dev_side());
  auto aliased = [&](Pair& into) {
    run_both([&](const loom::Backend& Be, int s) {
      loom::ssm_conv_backward(Be, into[s], dw[s], bias ? db[s] : nullptr, dout[s], x[s], w[s],
                              bias ? b[s] : nullptr, silu);
    });
  };
  aliased(dout);
  expect_close(download(dout.dev_side()), want, 0.0, "dx aliasing dout against dx apart");
  expect_close(dout, tol, "ssm_conv_backward, dx aliasing dout");
  dout.set(gv);
  aliased(x);
  expect_close(download(x.dev_side()), want, 0.0, "dx aliasing x against dx apart");
  expect_close(x, tol, "ssm_conv_backward, dx aliasing x");
}

void run_convs(DLDataType dt) {
  for (bool silu : {true, false})
    for (bool bias : {true, false}) {
      run_conv(dt, 2, 11, 37, 4, silu, bias, false);
      run_conv(dt, 2, 11, 37, 4, silu, bias, true);
      run_conv_backward(dt, 2, 11, 37, 4, silu, bias);
    }
  run_conv(dt, 3, 2, 19, 4, true, true, true);    // T < K-1: part of the old state stays
  run_conv(dt, 1, 5, 8, 1, false, true, true);    // K = 1: an empty state
  run_conv_backward(dt, 1, 3, 5, 5, true, true);  // K > T
  run_conv(dt, 4, 64, 256, 4, true, true, false);
  run_conv_backward(dt, 4, 64, 256, 4, true, true);
}

// ---- the selective scan ----------------------------------------------------------------------
struct ScanCase {
  int64_t B, T, H, P, G, N, chunk;
};

// The scan's inputs on both sides: x, dt in softplus' interesting range, B, C, and the
// per-head parameters (A_log in [-1, 1]: A in [-2.7, -0.37]).
struct ScanInputs {
  Pair x, dt, Bm, Cm, A_log, D, dt_bias;
  ScanInputs(DLDataType d, const ScanCase& c)
      : x(d, {c.B, c.T, c.H, c.P}, random_vec(c.B * c.T * c.H * c.P, 321)),
        dt(d, {c.B, c.T, c.H}, random_vec(c.B * c.T * c.H, 322, -3.0, 1.0)),
        Bm(d, {c.B, c.T, c.G, c.N}, random_vec(c.B * c.T * c.G * c.N, 323)),
        Cm(d, {c.B, c.T, c.G, c.N}, random_vec(c.B * c.T * c.G * c.N, 324)),
        A_log(f32(), {c.H}, random_vec(c.H, 325)),
        D(f32(), {c.H}, random_vec(c.H, 326)),
        dt_bias(f32(), {c.H}, random_vec(c.H, 327, -1.0, 0.5)) {}
};

Shape chunk_shape(const ScanCase& c) { return {c.B, (c.T + c.chunk - 1) / c.chunk, c.H, c.P, c.N}; }

void run_scan(DLDataType d, const ScanCase& c, bool with_state) {
  CAPTURE(c.T);
  CAPTURE(c.H);
  CAPTURE(c.P);
  CAPTURE(c.G);
  CAPTURE(c.N);
  CAPTURE(c.chunk);
  CAPTURE(with_state);
  const double tol = tol_for(d);
  ScanInputs in(d, c);
  Pair y(d, {c.B, c.T, c.H, c.P}), cs(f32(), chunk_shape(c));
  Pair st(f32(), {c.B, c.H, c.P, c.N}, random_vec(c.B * c.H * c.P * c.N, 328));
  run_both([&](const loom::Backend& Be, int s) {
    loom::ssm_scan_forward(Be, y[s], in.x[s], in.dt[s], in.A_log[s], in.Bm[s], in.Cm[s], in.D[s],
                           in.dt_bias[s], c.chunk, cs[s], with_state ? st[s] : nullptr);
  });
  expect_close(y, tol, "ssm_scan_forward y");
  expect_close(cs, tol, "ssm_scan_forward chunk_states");
  if (with_state) expect_close(st, tol, "ssm_scan_forward state (S_{T-1})");
}

void run_scan_backward(DLDataType d, const ScanCase& c) {
  CAPTURE(c.T);
  CAPTURE(c.H);
  CAPTURE(c.P);
  CAPTURE(c.G);
  CAPTURE(c.N);
  CAPTURE(c.chunk);
  const double tol = tol_for(d);
  ScanInputs in(d, c);
  // The cpu forward's chunk states, handed to both backwards (the backward tested on its own).
  Pair y(d, {c.B, c.T, c.H, c.P}), cs(f32(), chunk_shape(c));
  loom::ssm_scan_forward(cpu(), y[0], in.x[0], in.dt[0], in.A_log[0], in.Bm[0], in.Cm[0], in.D[0],
                         in.dt_bias[0], c.chunk, cs[0], nullptr);
  cs.set(cpu_values(cs));
  Pair dy(d, {c.B, c.T, c.H, c.P}, random_vec(c.B * c.T * c.H * c.P, 331));
  Pair dx(d, {c.B, c.T, c.H, c.P}), ddt(d, {c.B, c.T, c.H});
  Pair dB(d, {c.B, c.T, c.G, c.N}), dC(d, {c.B, c.T, c.G, c.N});
  const Vec dA0 = random_vec(c.H, 332), dD0 = random_vec(c.H, 333), db0 = random_vec(c.H, 334);
  Pair dA_log(f32(), {c.H}, dA0), dD(f32(), {c.H}, dD0), ddt_bias(f32(), {c.H}, db0);
  auto backward = [&](const loom::Backend& Be, int s) {
    loom::ssm_scan_backward(Be, dx[s], ddt[s], dA_log[s], dB[s], dC[s], dD[s], ddt_bias[s], dy[s],
                            in.x[s], in.dt[s], in.A_log[s], in.Bm[s], in.Cm[s], in.D[s],
                            in.dt_bias[s], c.chunk, cs[s]);
  };
  run_both(backward);
  expect_close(dx, tol, "ssm_scan_backward dx (=)");
  expect_close(ddt, tol, "ssm_scan_backward ddt (=)");
  expect_close(dB, tol, "ssm_scan_backward dB (=)");
  expect_close(dC, tol, "ssm_scan_backward dC (=)");
  expect_close(dA_log, tol, "ssm_scan_backward dA_log (+=)");
  expect_close(dD, tol, "ssm_scan_backward dD (+=)");
  expect_close(ddt_bias, tol, "ssm_scan_backward ddt_bias (+=)");
  // Deterministic: a rerun from the same starting values gives the same bits.
  const Vec first_dB = download(dB.dev_side()), first_dA = download(dA_log.dev_side());
  upload(dA_log.dev_side(), dA0);
  upload(dD.dev_side(), dD0);
  upload(ddt_bias.dev_side(), db0);
  backward(dev(), 1);
  expect_same(download(dB.dev_side()), first_dB, "ssm_scan_backward dB");
  expect_same(download(dA_log.dev_side()), first_dA, "ssm_scan_backward dA_log");
}

void run_scans(DLDataType d) {
  // {B, T, H, P, G, N, chunk}
  const ScanCase cases[] = {
      {2, 13, 4, 5, 2, 6, 4},     // T not a multiple of the chunk, G < H, tiny P and N
      {1, 9, 3, 7, 1, 3, 16},     // one chunk longer than T, one group
      {2, 21, 4, 40, 4, 70, 8},   // G = H; P over 32, N over 64 (2 and 4 per lane)
      {1, 70, 2, 16, 1, 16, 64},  // a chunk over the backward's 32-step tile
      {2, 64, 8, 8, 2, 8, 5},     // HYBRID_MODEL's mixer (tests/support/lib.sh) on 64 tokens
  };
  for (const ScanCase& c : cases) {
    run_scan(d, c, false);
    run_scan(d, c, true);
    run_scan_backward(d, c);
  }
}

// ---- the gated RMSNorm (loom.norm-gate/1) -------------------------------------------------------
void run_gated_rmsnorm(DLDataType dt, int64_t N, int64_t C, int64_t gs) {
  CAPTURE(N);
  CAPTURE(C);
  CAPTURE(gs);
  const double tol = tol_for(dt);
  Pair inp(dt, {N, C}, random_vec(N * C, 341, -2.0, 3.0)), gate(dt, {N, C}, random_vec(N * C, 342));
  Pair w(f32(), {C}, random_vec(C, 343, 0.5, 1.5));
  Pair out(dt, {N, C}), rstd(f32(), {N * (C / gs)});
  run_both([&](const loom::Backend& B, int s) {
    loom::gated_rmsnorm_forward(B, out[s], rstd[s], inp[s], gate[s], w[s], 1e-5, gs);
  });
  expect_close(out, tol, "gated rmsnorm forward out");
  expect_close(rstd, kTolF32, "gated rmsnorm forward rstd");

  rstd.set(cpu_values(rstd));
  Pair dout(dt, {N, C}, random_vec(N * C, 344)), dinp(dt, {N, C}), dgate(dt, {N, C});
  const Vec dw0 = random_vec(C, 345);
  Pair dw(f32(), {C}, dw0);
  run_both([&](const loom::Backend& B, int s) {
    loom::gated_rmsnorm_backward(B, dinp[s], dgate[s], dw[s], dout[s], inp[s], gate[s], w[s],
                                 rstd[s], gs);
  });
  expect_close(dinp, tol, "gated rmsnorm backward dinp (=)");
  expect_close(dgate, tol, "gated rmsnorm backward dgate (=)");
  expect_close(dw, tol, "gated rmsnorm backward dweight (+=)");
  const Vec first = download(dw.dev_side());
  upload(dw.dev_side(), dw0);
  loom::gated_rmsnorm_backward(dev(), dinp[1], dgate[1], dw[1], dout[1], inp[1], gate[1], w[1],
                               rstd[1], gs);
  expect_same(download(dw.dev_side()), first, "gated rmsnorm backward dweight");
}

void run_gated_rmsnorms(DLDataType dt) {
  run_gated_rmsnorm(dt, 37, 48, 12);     // 4 groups
  run_gated_rmsnorm(dt, 37, 48, 48);     // one group
  run_gated_rmsnorm(dt, 64, 1024, 256);  // rows over the block's threads
  run_gated_rmsnorm(dt, 5, 30, 3);       // groups far under a warp
}

// ---- RoPE with loom.rope-freqs/1
// ------------------------------------------------------------------
void run_rope_freqs(DLDataType dt, int64_t B_, int64_t T, int64_t H, int64_t D, int64_t pos,
                    double scale) {
  CAPTURE(T);
  CAPTURE(D);
  CAPTURE(pos);
  CAPTURE(scale);
  // A table no theta gives: Llama 3-style, the low frequencies divided by 8.
  std::vector<double> inv(static_cast<size_t>(D / 2));
  for (int64_t i = 0; i < D / 2; ++i) {
    const double f = std::pow(500000.0, -2.0 * static_cast<double>(i) / static_cast<double>(D));
    inv[static_cast<size_t>(i)] = i >= D / 4 ? f / 8.0 : f;
  }
  const loom_rope_freqs freqs{
      {sizeof(loom_rope_freqs), LOOM_EXT_ROPE_FREQS, LOOM_EXT_REQUIRED, nullptr},
      inv.data(),
      D / 2,
      scale};
  const int64_t n = B_ * T * H * D;
  Pair x(dt, {B_, T, H, D}, random_vec(n, 351));
  run_both([&](const loom::Backend& B, int s) { loom::rope_forward(B, x[s], pos, 0.0, &freqs); });
  expect_close(x, tol_for(dt), "rope_forward with loom.rope-freqs/1");
  x.set(random_vec(n, 352));
  run_both([&](const loom::Backend& B, int s) { loom::rope_backward(B, x[s], pos, 0.0, &freqs); });
  expect_close(x, tol_for(dt), "rope_backward with loom.rope-freqs/1");
}

void run_rope_freqses(DLDataType dt) {
  run_rope_freqs(dt, 2, 7, 3, 64, 0, 1.0);
  run_rope_freqs(dt, 1, 5, 2, 6, 5, 1.2);  // D/2 = 3; YaRN-style attention factor
  run_rope_freqs(dt, 1, 4, 2, 128, 70000, 0.9);
}

}  // namespace

TEST_CASE("ssm_conv_forward, ssm_conv_backward f32") { run_convs(f32()); }
TEST_CASE("ssm_conv_forward, ssm_conv_backward [bf16]") { run_convs(bf16()); }
TEST_CASE("ssm_scan_forward, ssm_scan_backward f32") { run_scans(f32()); }
TEST_CASE("ssm_scan_forward, ssm_scan_backward [bf16]") { run_scans(bf16()); }
TEST_CASE("gated rmsnorm (loom.norm-gate/1) f32") { run_gated_rmsnorms(f32()); }
TEST_CASE("gated rmsnorm (loom.norm-gate/1) [bf16]") { run_gated_rmsnorms(bf16()); }
TEST_CASE("rope with loom.rope-freqs/1 f32") { run_rope_freqses(f32()); }
TEST_CASE("rope with loom.rope-freqs/1 [bf16]") { run_rope_freqses(bf16()); }
