// Every loom_ops slot on the device backend against backend/cpu, part 1: GEMM, the grouped
// GEMM, bias, the elementwise ops and the embedding. The cpu runs in f32 on the same numbers
// the device holds (inputs rounded to the device dtype first); outputs start poisoned (NaN) and
// accumulated outputs start from the same random values on both sides. Bounds relative to
// the reference's largest magnitude: f32 1e-5, tf32 1e-3, bf16 1e-2 (gpu_pair.hpp).
// Shapes mix odd sizes (37, 53, 771: no multiple of 4/8/32, so vector and tile tails run) with
// GPT-2's (C = 768, 3C, 4C; N = 1024 tokens).
#include <cmath>

#include "gpu_pair.hpp"
#include "loom/cpp/gemm_epilogue.hpp"

using namespace gputest;

namespace {

// ---- gemm -------------------------------------------------------------------------------
struct GemmCase {
  const char* name;
  int ta = 0, tb = 0;
  int64_t m = 1, n = 1, k = 1;
  double alpha = 1, beta = 0;
  int64_t pad = 0;     // extra columns of row pitch on every operand
  int64_t batch = 1;   // stacked matrices, each offset_x + i * stride_x
  int64_t offset = 0;  // leading elements before the first matrix of every operand
};

// Elements a stored operand of rows x cols (pitch ld, stride) needs, offset included.
int64_t span(int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t offset,
             int64_t batch) {
  return offset + (batch - 1) * stride + (rows - 1) * ld + cols;
}

// c starts random; with beta == 0 the elements the gemm writes are poisoned (BLAS: C is not
// read), the rest (pitch padding, gaps) must come back untouched on both sides.
void run_gemm(const GemmCase& g, DLDataType ab, DLDataType cdt, double tol,
              const loom::Backend* device = nullptr) {
  const std::string name = g.name;
  CAPTURE(name);
  const int64_t ar = g.ta ? g.k : g.m, ac = g.ta ? g.m : g.k;
  const int64_t br = g.tb ? g.n : g.k, bc = g.tb ? g.k : g.n;
  const int64_t lda = ac + g.pad, ldb = bc + g.pad, ldc = g.n + g.pad;
  const int64_t sa = ar * lda + g.pad, sb = br * ldb + g.pad, sc = g.m * ldc + g.pad;
  const int64_t na = span(ar, ac, lda, sa, g.offset, g.batch);
  const int64_t nb = span(br, bc, ldb, sb, g.offset, g.batch);
  const int64_t nc = span(g.m, g.n, ldc, sc, g.offset, g.batch);
  Pair A(ab, {na}, random_vec(na, 11), device);
  Pair B(ab, {nb}, random_vec(nb, 12), device);
  Vec c0 = round_to(cdt, random_vec(nc, 13));
  if (g.beta == 0)
    for (int64_t i = 0; i < g.batch; ++i)
      for (int64_t r = 0; r < g.m; ++r)
        for (int64_t c = 0; c < g.n; ++c) c0[g.offset + i * sc + r * ldc + c] = NAN;
  Pair C(cdt, {nc}, c0, device);
  run_both(
      [&](const loom::Backend& Bk, int s) {
        loom_gemm_args a{};
        a.struct_size = LOOM_GEMM_ARGS_SIZE_V2;
        a.trans_a = g.ta, a.trans_b = g.tb;
        a.m = g.m, a.n = g.n, a.k = g.k;
        a.alpha = g.alpha, a.beta = g.beta;
        a.a = A[s], a.lda = lda, a.stride_a = sa, a.offset_a = g.offset;
        a.b = B[s], a.ldb = ldb, a.stride_b = sb, a.offset_b = g.offset;
        a.c = C[s], a.ldc = ldc, a.stride_c = sc, a.offset_c = g.offset;
        a.batch = g.batch;
        Bk.call(&loom_ops::gemm, &a);
      },
      device);
  expect_close(C, tol, std::string("gemm ") + g.name);
}

const GemmCase kGemmCases[] = {
    {"NN 37x53x29", 0, 0, 37, 53, 29},
    {"TN alpha 0.5 beta 1", 1, 0, 37, 53, 29, 0.5, 1.0},
    {"NT padded pitch", 0, 1, 41, 19, 67, 1.0, 0.0, 3},
    {"TT beta -0.5", 1, 1, 23, 31, 45, 1.0, -0.5, 1},
    {"NN batch 3 offset 5", 0, 0, 17, 29, 33, 1.0, 0.0, 2, 3, 5},
    {"NT batch 4 beta 1", 0, 1, 33, 33, 16, 0.125, 1.0, 0, 4, 0},
    {"GPT-2 qkv x W^T 257x2304x768", 0, 1, 257, 2304, 768},
    {"GPT-2 dW += dy^T x 2304x768x257", 1, 0, 2304, 768, 257, 1.0, 1.0},
    {"GPT-2 dx = dy W 257x768x3072", 0, 0, 257, 768, 3072},
    // Large enough for cuBLASLt to offer several algorithms: backend.gemm_autotune (on by
    // default) times them on the first call, and the sum must still be added once.
    {"dW += dy^T x beta 1, tuned 768x1024x2048", 1, 0, 768, 1024, 2048, 1.0, 1.0},
};

// Attention's per-head GEMMs read heads side by side in a (T, H*D) tensor (pitch H*D, head
// stride D) and P@V writes them back interleaved the same way.
void run_attention_gemms(DLDataType dt, double tol) {
  const int64_t T = 37, H = 3, D = 24;
  Pair q(dt, {T, H * D}, random_vec(T * H * D, 21));
  Pair k(dt, {T, H * D}, random_vec(T * H * D, 22));
  Pair S(dt, {H, T, T});
  run_both([&](const loom::Backend& Bk, int s) {
    loom_gemm_args a{LOOM_GEMM_ARGS_SIZE_V2,
                     0,
                     1,
                     T,
                     T,
                     D,
                     0.2,
                     0.0,
                     q[s],
                     H * D,
                     D,
                     0,
                     k[s],
                     H * D,
                     D,
                     0,
                     S[s],
                     T,
                     T * T,
                     0,
                     H,
                     nullptr};
    Bk.call(&loom_ops::gemm, &a);
  });
  expect_close(S, tol, "gemm q k^T per head");
  Pair P(dt, {H, T, T}, random_vec(H * T * T, 23, 0.0, 1.0));
  Pair v(dt, {T, H * D}, random_vec(T * H * D, 24));
  Pair y(dt, {T, H * D});
  run_both([&](const loom::Backend& Bk, int s) {
    loom_gemm_args a{LOOM_GEMM_ARGS_SIZE_V2,
                     0,
                     0,
                     T,
                     D,
                     T,
                     1.0,
                     0.0,
                     P[s],
                     T,
                     T * T,
                     0,
                     v[s],
                     H * D,
                     D,
                     0,
                     y[s],
                     H * D,
                     D,
                     0,
                     H,
                     nullptr};
    Bk.call(&loom_ops::gemm, &a);
  });
  expect_close(y, tol, "gemm P v interleaved heads");
}

// loom.gemm-epilogue/1 on the device against gemm + bias_add / bias_backward on the cpu: a
// linear layer's forward y(N,O) = x W^T + b (W rows from row0 of a (2O, I) table) and its
// weight gradient dW(O,I) += dy^T x with db(O) += colsum(dy). `act` is the activations' and
// weights' dtype; the gradients are `grad` (f32 under mixed precision, as the main grads).
void run_epilogues(DLDataType act, DLDataType grad, double tol, int64_t N, int64_t I, int64_t O) {
  const int64_t row0 = O;
  const uint32_t kinds = LOOM_EPILOGUE_BIAS | LOOM_EPILOGUE_BGRAD;
  REQUIRE((loom::gemm_epilogue_kinds(dev()) & kinds) == kinds);
  Pair x(act, {N, I}, random_vec(N * I, 51)), w(act, {2 * O, I}, random_vec(2 * O * I, 52));
  Pair b(act, {O}, random_vec(O, 53)), y(act, {N, O});
  run_both([&](const loom::Backend& Bk, int s) {
    loom_gemm_epilogue e = loom::gemm_epilogue(LOOM_EPILOGUE_BIAS, b[s], nullptr);
    loom_gemm_args a{LOOM_GEMM_ARGS_SIZE_V2,
                     0,
                     1,
                     N,
                     O,
                     I,
                     1.0,
                     0.0,
                     x[s],
                     I,
                     0,
                     0,
                     w[s],
                     I,
                     0,
                     row0 * I,
                     y[s],
                     O,
                     0,
                     0,
                     1,
                     s == 1 ? &e.base : nullptr};
    Bk.call(&loom_ops::gemm, &a);
    if (s == 0) loom::bias_add(Bk, y[s], b[s]);
  });
  expect_close(y, tol, "gemm with the bias epilogue");
  Pair dy(act, {N, O}, random_vec(N * O, 54));
  Pair dw(grad, {O, I}, random_vec(O * I, 55)), db(grad, {O}, random_vec(O, 56));
  run_both([&](const loom::Backend& Bk, int s) {
    loom_gemm_epilogue e = loom::gemm_epilogue(LOOM_EPILOGUE_BGRAD, nullptr, db[s]);
    loom_gemm_args a{LOOM_GEMM_ARGS_SIZE_V2,
                     1,
                     0,
                     O,
                     I,
                     N,
                     1.0,
                     1.0,
                     dy[s],
                     O,
                     0,
                     0,
                     x[s],
                     I,
                     0,
                     0,
                     dw[s],
                     I,
                     0,
                     0,
                     1,
                     s == 1 ? &e.base : nullptr};
    Bk.call(&loom_ops::gemm, &a);
    if (s == 0) loom::bias_backward(Bk, db[s], dy[s]);
  });
  expect_close(dw, tol, "weight gradient with the bias-gradient epilogue");
  expect_close(db, tol, "bias gradient from the epilogue");
}

// C(m,n) = op(A) op(B) (beta 0), compact rows, B's rows from offset_b, with `e` chained.
loom_gemm_args plain_gemm(int tb, int64_t m, int64_t n, int64_t k, const DLTensor* a,
                          const DLTensor* b, int64_t offset_b, DLTensor* c, const loom_ext* e) {
  return {LOOM_GEMM_ARGS_SIZE_V2,
          0,
          tb,
          m,
          n,
          k,
          1.0,
          0.0,
          a,
          k,
          0,
          0,
          b,
          tb ? k : n,
          0,
          offset_b,
          c,
          n,
          0,
          0,
          1,
          e};
}

// ABI 2.23's GELU kinds on the device against gemm, bias_add and act_forward / act_backward
// (tanh form) on the cpu: an MLP's h = x W^T + b with a = gelu(h) from one GEMM, and the
// input gradient dx(N,I) = (dy(N,O) W) * gelu'(h) from one. Shapes whose rows are not a
// multiple of 8 elements run the backend's two-pass fallback.
void run_gelu_epilogues(DLDataType act, double tol, int64_t N, int64_t I, int64_t O) {
  const uint32_t kinds = LOOM_EPILOGUE_BIAS_GELU | LOOM_EPILOGUE_DGELU;
  REQUIRE((loom::gemm_epilogue_kinds(dev()) & kinds) == kinds);
  const int64_t row0 = O;
  Pair x(act, {N, I}, random_vec(N * I, 61)), w(act, {2 * O, I}, random_vec(2 * O * I, 62));
  Pair b(act, {O}, random_vec(O, 63)), h(act, {N, O}), y(act, {N, O});
  for (bool with_bias : {true, false}) {
    CAPTURE(with_bias);
    run_both([&](const loom::Backend& Bk, int s) {
      loom_gemm_epilogue e =
          loom::gemm_epilogue(LOOM_EPILOGUE_BIAS_GELU, with_bias ? b[s] : nullptr, nullptr, h[s]);
      loom_gemm_args a =
          plain_gemm(1, N, O, I, x[s], w[s], row0 * I, s == 1 ? y[s] : h[s], &e.base);
      if (s == 1) {
        Bk.call(&loom_ops::gemm, &a);
        return;
      }
      a.ext = nullptr;
      Bk.call(&loom_ops::gemm, &a);
      if (with_bias) loom::bias_add(Bk, h[s], b[s]);
      loom::act_forward(Bk, LOOM_ACT_GELU_TANH, y[s], h[s]);
    });
    expect_close(h, tol, "the bias+GELU epilogue's aux (the GELU's input)");
    expect_close(y, tol, "gemm with the bias+GELU epilogue (tanh form)");
  }
  Pair dy(act, {N, O}, random_vec(N * O, 64)), aux(act, {N, I}, random_vec(N * I, 65, -3, 3));
  Pair da(act, {N, I}), dx(act, {N, I});
  run_both([&](const loom::Backend& Bk, int s) {
    loom_gemm_epilogue e = loom::gemm_epilogue(LOOM_EPILOGUE_DGELU, nullptr, nullptr, aux[s]);
    loom_gemm_args a =
        plain_gemm(0, N, I, O, dy[s], w[s], row0 * I, s == 1 ? dx[s] : da[s], &e.base);
    if (s == 1) {
      Bk.call(&loom_ops::gemm, &a);
      return;
    }
    a.ext = nullptr;
    Bk.call(&loom_ops::gemm, &a);
    loom::act_backward(Bk, LOOM_ACT_GELU_TANH, dx[s], aux[s], da[s]);
  });
  expect_close(dx, tol, "input gradient with the GELU-gradient epilogue");
}

}  // namespace

TEST_CASE("gemm epilogues: bias+GELU and the GELU gradient (ABI 2.23) f32 and bf16") {
  run_gelu_epilogues(f32(), kTolF32, 37, 29, 53);  // two passes (rows of 53)
  run_gelu_epilogues(bf16(), kTolBf16, 37, 29, 53);
  if (!model_shapes()) return;
  run_gelu_epilogues(f32(), kTolF32, 1024, 768, 3072);    // GPT-2's c_fc, fused
  run_gelu_epilogues(bf16(), kTolBf16, 1024, 3072, 768);  // GPT-2's c_proj backward shape
  run_gelu_epilogues(bf16(), kTolBf16, 1024, 768, 3072);
}

TEST_CASE("gemm epilogues (loom.gemm-epilogue/1) f32 and bf16") {
  run_epilogues(f32(), f32(), kTolF32, 37, 29, 53);
  run_epilogues(bf16(), f32(), kTolBf16, 37, 29, 53);
  if (!model_shapes()) return;
  run_epilogues(f32(), f32(), kTolF32, 1024, 768, 2304);    // GPT-2's qkv, fused
  run_epilogues(bf16(), f32(), kTolBf16, 1024, 768, 3072);  // GPT-2's c_fc
}

TEST_CASE("gemm f32") {
  for (const GemmCase& g : kGemmCases) run_gemm(g, f32(), f32(), kTolF32);
  run_attention_gemms(f32(), kTolF32);
}

TEST_CASE("gemm tf32") {
  // The tf32 instance rounds f32 operands to 10 mantissa bits on tensor cores.
  run_gemm({"tf32 NN 64x96x768", 0, 0, 64, 96, 768}, f32(), f32(), kTolTf32, &dev_tf32());
  run_gemm(kGemmCases[6], f32(), f32(), kTolTf32, &dev_tf32());
  run_gemm(kGemmCases[7], f32(), f32(), kTolTf32, &dev_tf32());
}

TEST_CASE("gemm [bf16]") {
  for (const GemmCase& g : kGemmCases) {
    // A weight gradient accumulates into an f32 main grad (beta = 1): C f32, A and B bf16.
    const bool main_grad = g.beta == 1.0;
    run_gemm(g, bf16(), main_grad ? f32() : bf16(), kTolBf16);
  }
  run_attention_gemms(bf16(), kTolBf16);
}

// ---- grouped_gemm (ABI 2.5) -----------------------------------------------------------------
namespace {
// A mixture of experts' three GEMMs over uneven groups, one of them empty (backend.h):
// forward Y_g = X_g W_g^T, dX_g = dY_g W_g, dW_g += dY_g^T X_g. backend/cuda runs each group
// through its cuBLASLt gemm (the SDK's loop, loom/cpp/ops_plugin.hpp); the cpu through
// OpenBLAS. With bf16 activations the weight gradient accumulates into f32 (`wgrad`).
void run_grouped_gemm(DLDataType dt, DLDataType wgrad) {
  const std::vector<int64_t> sizes{37, 0, 5, 90};
  const int64_t E = 4, C = 48, F = 72, N = 132;
  Pair X(dt, {N, C}, random_vec(N * C, 41)), W(dt, {E, F, C}, random_vec(E * F * C, 42));
  Pair dY(dt, {N, F}, random_vec(N * F, 43));
  Pair Y(dt, {N, F}), dX(dt, {N, C});
  Pair dW(wgrad, {E, F, C}, random_vec(E * F * C, 44));
  auto grouped = [&](const loom::Backend& B, int ta, int tb, int64_t m, int64_t n, int64_t k,
                     double beta, const DLTensor* a, const DLTensor* b, DLTensor* c) {
    loom_grouped_gemm_args g{};
    g.struct_size = LOOM_GROUPED_GEMM_ARGS_SIZE_V2_5;
    g.trans_a = ta, g.trans_b = tb;
    g.m = m, g.n = n, g.k = k;
    g.num_groups = E, g.sizes = sizes.data();
    g.alpha = 1.0, g.beta = beta;
    g.a = a, g.b = b, g.c = c;
    B.call(&loom_ops::grouped_gemm, &g);
  };
  run_both([&](const loom::Backend& B, int s) {
    grouped(B, 0, 1, LOOM_GROUP_SIZE, F, C, 0.0, X[s], W[s], Y[s]);
  });
  expect_close(Y, tol_for(dt), "grouped_gemm forward");
  run_both([&](const loom::Backend& B, int s) {
    grouped(B, 0, 0, LOOM_GROUP_SIZE, C, F, 0.0, dY[s], W[s], dX[s]);
  });
  expect_close(dX, tol_for(dt), "grouped_gemm dX");
  run_both([&](const loom::Backend& B, int s) {
    grouped(B, 1, 0, F, C, LOOM_GROUP_SIZE, 1.0, dY[s], X[s], dW[s]);
  });
  expect_close(dW, tol_for(dt), "grouped_gemm dW (+=)");
}
}  // namespace

TEST_CASE("grouped_gemm f32") { run_grouped_gemm(f32(), f32()); }
TEST_CASE("grouped_gemm [bf16]") { run_grouped_gemm(bf16(), f32()); }

// ---- bias ---------------------------------------------------------------------------------
namespace {
void run_bias(DLDataType dt, DLDataType grad_dt, int64_t N, int64_t C) {
  CAPTURE(N);
  CAPTURE(C);
  Pair out(dt, {N, C}, random_vec(N * C, 31));
  Pair bias(dt, {C}, random_vec(C, 32));
  run_both([&](const loom::Backend& B, int s) { loom::bias_add(B, out[s], bias[s]); });
  expect_close(out, tol_for(dt), "bias_add");

  const Vec db0 = random_vec(C, 33);
  Pair dbias(grad_dt, {C}, db0);
  Pair dout(dt, {N, C}, random_vec(N * C, 34));
  run_both([&](const loom::Backend& B, int s) { loom::bias_backward(B, dbias[s], dout[s]); });
  expect_close(dbias, tol_for(dt), "bias_backward (+=)");
  // The same call again from the same start gives the same bits (no order-dependent atomics).
  const Vec first = download(dbias.dev_side());
  upload(dbias.dev_side(), round_to(grad_dt, db0));
  loom::bias_backward(dev(), dbias[1], dout[1]);
  expect_same(download(dbias.dev_side()), first, "bias_backward");
}
}  // namespace

TEST_CASE("bias_add, bias_backward f32") {
  run_bias(f32(), f32(), 37, 771);
  run_bias(f32(), f32(), 1024, 768);
}
TEST_CASE("bias_add, bias_backward [bf16]") {
  // bf16 activations, f32 dbias (the main grad)
  run_bias(bf16(), f32(), 37, 771);
  run_bias(bf16(), f32(), 1024, 768);
}

// ---- fill, copy ---------------------------------------------------------------------------
TEST_CASE("fill") {
  for (DLDataType dt : {f32(), bf16(), f16()}) {
    const std::string dtype = dtype_name(dt);
    CAPTURE(dtype);
    Pair t(dt, {1001});
    run_both([&](const loom::Backend& B, int s) { B.call(&loom_ops::fill, t[s], -0.3); });
    expect_close(t, tol_for(dt), "fill");
    CHECK(download(t.dev_side())[1000] == round_to(dt, -0.3));
  }
  SUBCASE("i32") {
    Pair t = Pair::ids({77}, std::vector<int32_t>(77, 5));
    run_both([&](const loom::Backend& B, int s) { B.call(&loom_ops::fill, t[s], 7.0); });
    CHECK(download(t.dev_side()) == Vec(77, 7.0));
  }
  SUBCASE("f64, exactly: the host's sums kept on the device (ABI 2.28)") {
    loom::Tensor t(dev(), loom_f64(), {5});
    dev().call(&loom_ops::fill, t.get(), 0.1);
    CHECK(t.download<double>() == std::vector<double>(5, 0.1));
    dev().call(&loom_ops::fill, t.get(), std::nan(""));
    for (double v : t.download<double>()) CHECK(std::isnan(v));
  }
  SUBCASE("a view: byte_offset honoured, the rest untouched") {
    Pair t(f32(), {10, 13}, random_vec(130, 41));
    run_both([&](const loom::Backend& B, int s) {
      loom::View rows(t[s], {3, 13}, 4 * 13);  // rows 4..6
      B.call(&loom_ops::fill, rows.get(), 2.5);
    });
    expect_close(t, 0.0, "fill of rows 4..6");
  }
}

TEST_CASE("copy and casts") {
  // Random values plus the edges of each format: ties (to even), f16 overflow to infinity,
  // f16 subnormals, signed zero.
  Vec vals = random_vec(997, 51, -100.0, 100.0);
  for (double x : {0.0, -0.0, 1e-6, -3e-5, 6e-8, 65504.0, 65520.0, -70000.0, 1e30, -1e-30,
                   1.00390625, 1.01171875, 3.0517578125e-05})
    vals.push_back(x);
  const int64_t n = static_cast<int64_t>(vals.size());
  struct Cast {
    DLDataType from, to;
  };
  for (Cast c : {Cast{f32(), f32()}, Cast{f32(), bf16()}, Cast{bf16(), f32()}, Cast{f32(), f16()},
                 Cast{f16(), f32()}, Cast{bf16(), bf16()}}) {
    const std::string cast = dtype_name(c.from) + " -> " + dtype_name(c.to);
    CAPTURE(cast);
    // The expected bits: the source's stored values, rounded to nearest-even into `to`.
    const Vec src_vals = round_to(c.from, vals);
    loom::Tensor src(dev(), c.from, {n}), dst(dev(), c.to, {n});
    upload(src, src_vals);
    poison(dst);
    dev().call(&loom_ops::copy, dst.get(), src.get());
    const Vec got = download(dst), want = round_to(c.to, src_vals);
    for (int64_t i = 0; i < n; ++i)
      if (!(got[i] == want[i] && std::signbit(got[i]) == std::signbit(want[i]))) {
        FAIL_CHECK("element " << i << ": " << src_vals[i] << " became " << got[i] << ", expected "
                              << want[i]);
        break;
      }
  }
  SUBCASE("i32") {
    std::vector<int32_t> ids = random_ids(333, 52, -5, 1 << 30);
    Pair a = Pair::ids({333}, ids), b = Pair::ids({333}, std::vector<int32_t>(333, 0));
    run_both([&](const loom::Backend& B, int s) { B.call(&loom_ops::copy, b[s], a[s]); });
    CHECK(download(b.dev_side()) == Vec(ids.begin(), ids.end()));
  }
  SUBCASE("between views of one buffer") {
    Pair t(f32(), {12, 7}, random_vec(84, 53));
    run_both([&](const loom::Backend& B, int s) {
      loom::View from(t[s], {3, 7}, 0), to(t[s], {3, 7}, 8 * 7);
      B.call(&loom_ops::copy, to.get(), static_cast<const DLTensor*>(from.get()));
    });
    expect_close(t, 0.0, "copy rows 0..2 to rows 8..10");
  }
}

// ABI 2.21's strided copy: a block of each head's slice between two layouts (MLA's use), in
// f32 and bf16; the untouched elements keep their values on both sides.
TEST_CASE("copy_strided f32 and [bf16]") {
  for (DLDataType dt : {f32(), bf16()}) {
    CAPTURE(dt.bits);
    Pair src(dt, {48, 12}, random_vec(48 * 12, 54)), dst(dt, {48, 8}, random_vec(48 * 8, 55));
    run_both([&](const loom::Backend& B, int s) {
      loom::copy_strided(B, dst[s], 8, 3, src[s], 12, 4, 47, 5);
    });
    expect_close(dst, 0.0, "copy_strided: 47 rows of 5 from stride 12 to stride 8");
  }
}

// ---- add, axpby, sum_squares -----------------------------------------------------------------
namespace {
void run_elementwise(DLDataType dt) {
  const double tol = tol_for(dt);
  const int64_t n = 100003;
  Pair a(dt, {n}, random_vec(n, 61)), b(dt, {n}, random_vec(n, 62)), out(dt, {n});
  run_both([&](const loom::Backend& B, int s) { B.call(&loom_ops::add, out[s], a[s], b[s]); });
  expect_close(out, tol, "add");
  run_both([&](const loom::Backend& B, int s) { B.call(&loom_ops::add, a[s], a[s], b[s]); });
  expect_close(a, tol, "add, out aliasing a");

  Pair y(dt, {n}, random_vec(n, 63)), x(dt, {n}, random_vec(n, 64));
  run_both([&](const loom::Backend& B, int s) {
    B.call(&loom_ops::axpby, y[s], 0.75, static_cast<const DLTensor*>(x[s]), -1.25);
  });
  expect_close(y, tol, "axpby");
  y.poison_both();  // beta == 0: y is not read (BLAS convention, as backend/cpu)
  run_both([&](const loom::Backend& B, int s) {
    B.call(&loom_ops::axpby, y[s], -2.0, static_cast<const DLTensor*>(x[s]), 0.0);
  });
  expect_close(y, tol, "axpby beta 0 over NaN");

  for (int64_t len : {int64_t{1}, int64_t{37}, int64_t{1000003}}) {
    Pair v(dt, {len}, random_vec(len, 65 + len, -2.0, 2.0));
    double got[2] = {0, 0};
    run_both([&](const loom::Backend& B, int s) {
      got[s] = loom::sum_squares(B, static_cast<const DLTensor*>(v[s]));
    });
    // Inputs are exact in f32 on both sides, squares and sums in double: f32-tight for bf16 too.
    CHECK_MESSAGE(std::fabs(got[1] - got[0]) <= kTolF32 * got[0],
                  "sum_squares of " << len << ": " << got[1] << " vs " << got[0]);
  }
}
}  // namespace

TEST_CASE("add, axpby, sum_squares f32") { run_elementwise(f32()); }
TEST_CASE("add, axpby, sum_squares [bf16]") { run_elementwise(bf16()); }

// ABI 2.27 on the device: loom.sum-squares-total/1 adds the per-tensor sums of the plain call
// in index order (the host's loop, to the bit) without a host read, and read_start's copy
// holds the values at that point of the stream, not what is queued after it.
TEST_CASE("sum_squares into a device total; read_start/read_finish") {
  const loom::Backend& D = dev();
  std::vector<Pair> xs;
  for (int64_t len : {int64_t{70000}, int64_t{5}, int64_t{0}, int64_t{300003}})
    xs.emplace_back(len % 2 ? bf16() : f32(), Shape{len}, random_vec(len, 71 + len));
  std::vector<const DLTensor*> ptrs;
  for (const Pair& x : xs) ptrs.push_back(x[1]);
  std::vector<double> out(ptrs.size());
  const loom_sum_squares_args plain{LOOM_SUM_SQUARES_ARGS_SIZE_V2, ptrs.data(), ptrs.size(),
                                    out.data(), nullptr};
  D.call(&loom_ops::sum_squares, &plain);
  double want = 0;
  for (double v : out) want += v;
  loom::Tensor total(D, loom_f64(), {1});
  const loom_sum_squares_total ext{
      {sizeof(loom_sum_squares_total), LOOM_EXT_SUM_SQUARES_TOTAL, LOOM_EXT_REQUIRED, nullptr},
      total.get()};
  const loom_sum_squares_args into{LOOM_SUM_SQUARES_ARGS_SIZE_V2, ptrs.data(), ptrs.size(), nullptr,
                                   &ext.base};
  D.call(&loom_ops::sum_squares, &into);
  const loom_device_stream& ds = D.device_stream("test");
  REQUIRE(ds.base.struct_size >= LOOM_DEVICE_STREAM_SIZE_V2_27);
  void* read = nullptr;
  loom::check(D.host(), ds.read_start(D.self(), total.get(), &read));
  D.call(&loom_ops::fill, total.get(), -1.0);  // queued after the read: not in it
  double got = 0;
  loom::check(D.host(), ds.read_finish(D.self(), read, &got, sizeof got));
  CHECK(got == want);
  CHECK(total.download<double>()[0] == -1.0);
}

// ---- embedding ------------------------------------------------------------------------------
namespace {
void run_embedding(DLDataType dt, int64_t N, int64_t V, int64_t C, int32_t id_hi) {
  CAPTURE(N);
  CAPTURE(V);
  CAPTURE(C);
  std::vector<int32_t> ids = random_ids(N, 71, 0, id_hi);  // id_hi << V: many repeats
  ids[0] = 0, ids[N - 1] = static_cast<int32_t>(V - 1);    // both ends of the table
  Pair id = Pair::ids({N}, ids);
  Pair table(dt, {V, C}, random_vec(V * C, 72));
  Pair out(dt, {N, C});
  run_both([&](const loom::Backend& B, int s) {
    loom::embedding_forward(B, out[s], id[s], table[s], 0);
  });
  expect_close(out, tol_for(dt), "embedding_forward (=)");
  out.set(random_vec(N * C, 73));
  run_both([&](const loom::Backend& B, int s) {
    loom::embedding_forward(B, out[s], id[s], table[s], 1);
  });
  expect_close(out, tol_for(dt), "embedding_forward (+=)");

  // dtable is the f32 main grad whatever the activations' dtype.
  const Vec dt0 = random_vec(V * C, 74);
  Pair dtable(f32(), {V, C}, dt0);
  Pair dout(dt, {N, C}, random_vec(N * C, 75));
  run_both([&](const loom::Backend& B, int s) {
    loom::embedding_backward(B, dtable[s], id[s], dout[s]);
  });
  expect_close(dtable, tol_for(dt), "embedding_backward (+=)");
  const Vec first = download(dtable.dev_side());
  upload(dtable.dev_side(), dt0);
  loom::embedding_backward(dev(), dtable[1], id[1], dout[1]);
  expect_same(download(dtable.dev_side()), first, "embedding_backward");
}
}  // namespace

TEST_CASE("embedding_forward, embedding_backward f32") {
  run_embedding(f32(), 333, 1001, 771, 40);
  if (model_shapes()) run_embedding(f32(), 1024, 8192, 768, 8191);
}
TEST_CASE("embedding_forward, embedding_backward [bf16]") {
  run_embedding(bf16(), 333, 1001, 771, 40);
  if (model_shapes()) run_embedding(bf16(), 1024, 8192, 768, 8191);
}
