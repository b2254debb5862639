// gemm (every transpose combination, batches, offsets, padded leading dimensions, f32 vs f64),
// bias_add and bias_backward (finite differences), gemm's argument errors, and gemm with
// loom.gemm-epilogue/1's four kinds (against the separate ops to the bit, and a double
// reference).
#include "gemm_args.hpp"
#include "loom/cpp/gemm_epilogue.hpp"
#include "ops_support.hpp"

using namespace opstest;

namespace {

struct GemmCase {
  int ta, tb;
  int64_t m, n, k, batch;
  int64_t pad;     // extra columns of row pitch beyond the stored width
  int64_t offset;  // elements before the first matrix
};

// Stored rows/cols of an operand and the size of a buffer holding `batch` of them.
struct Layout {
  int64_t rows, cols, ld, stride, offset, total;
};
Layout layout(int64_t rows, int64_t cols, const GemmCase& g, int64_t extra_stride) {
  Layout l{rows, cols, cols + g.pad, 0, g.offset, 0};
  l.stride = rows * l.ld + extra_stride;
  l.total = l.offset + g.batch * l.stride + 3;  // a tail that must stay untouched
  return l;
}

// Naive reference: C = alpha op(A) op(B) + beta C in double, matrix by matrix.
Vec naive_gemm(const GemmCase& g, const Layout& la, const Vec& a, const Layout& lb, const Vec& b,
               const Layout& lc, Vec c, double alpha, double beta) {
  for (int64_t i = 0; i < g.batch; ++i)
    for (int64_t r = 0; r < g.m; ++r)
      for (int64_t col = 0; col < g.n; ++col) {
        double s = 0;
        for (int64_t kk = 0; kk < g.k; ++kk) {
          double av = g.ta ? a[la.offset + i * la.stride + kk * la.ld + r]
                           : a[la.offset + i * la.stride + r * la.ld + kk];
          double bv = g.tb ? b[lb.offset + i * lb.stride + col * lb.ld + kk]
                           : b[lb.offset + i * lb.stride + kk * lb.ld + col];
          s += av * bv;
        }
        double& cv = c[lc.offset + i * lc.stride + r * lc.ld + col];
        cv = alpha * s + beta * cv;
      }
  return c;
}

// Runs one case on the backend in dtype dt; returns C's whole buffer.
Vec run_gemm(DLDataType dt, const GemmCase& g, const Layout& la, const Vec& a, const Layout& lb,
             const Vec& b, const Layout& lc, const Vec& c0, double alpha, double beta) {
  auto A = make(dt, {la.total}, a);
  auto Bm = make(dt, {lb.total}, b);
  auto C = make(dt, {lc.total}, c0);
  loom_gemm_args args{};
  args.struct_size = LOOM_GEMM_ARGS_SIZE_V2;
  args.trans_a = g.ta;
  args.trans_b = g.tb;
  args.m = g.m;
  args.n = g.n;
  args.k = g.k;
  args.alpha = alpha;
  args.beta = beta;
  args.a = A;
  args.lda = la.ld;
  args.stride_a = la.stride;
  args.offset_a = la.offset;
  args.b = Bm;
  args.ldb = lb.ld;
  args.stride_b = lb.stride;
  args.offset_b = lb.offset;
  args.c = C;
  args.ldc = lc.ld;
  args.stride_c = lc.stride;
  args.offset_c = lc.offset;
  args.batch = g.batch;
  B().call(&loom_ops::gemm, &args);
  return get(C);
}

void check_gemm_case(const GemmCase& g, uint64_t seed) {
  Layout la = layout(g.ta ? g.k : g.m, g.ta ? g.m : g.k, g, 2);
  Layout lb = layout(g.tb ? g.n : g.k, g.tb ? g.k : g.n, g, 0);
  Layout lc = layout(g.m, g.n, g, 1);
  Vec a = random_vec(la.total, seed), b = random_vec(lb.total, seed + 1);
  Vec c0 = random_vec(lc.total, seed + 2);
  const double alpha = 0.7, beta = -0.3;
  Vec want = naive_gemm(g, la, a, lb, b, lc, c0, alpha, beta);
  std::string what = "gemm ta=" + std::to_string(g.ta) + " tb=" + std::to_string(g.tb) +
                     " m,n,k=" + std::to_string(g.m) + "," + std::to_string(g.n) + "," +
                     std::to_string(g.k) + " batch=" + std::to_string(g.batch);
  // f64 matches the naive sum to rounding; padding and the tail are untouched (want keeps c0
  // there).
  check_close(run_gemm(loom_f64(), g, la, a, lb, b, lc, c0, alpha, beta), want, 1e-12, 1e-12,
              what + " f64");
  check_close(run_gemm(loom_f32(), g, la, a, lb, b, lc, c0, alpha, beta), want, 1e-5,
              1e-5 * std::sqrt(static_cast<double>(g.k)), what + " f32");
}

}  // namespace

TEST_CASE("gemm: all transpose combinations, batches, offsets and padded rows") {
  uint64_t seed = 100;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      check_gemm_case({ta, tb, 5, 4, 3, 1, 0, 0}, seed++);
      check_gemm_case({ta, tb, 5, 4, 3, 3, 2, 7}, seed++);      // batch, padding, offsets
      check_gemm_case({ta, tb, 16, 16, 16, 8, 1, 5}, seed++);   // small batched: per-thread path
      check_gemm_case({ta, tb, 130, 70, 90, 2, 3, 1}, seed++);  // large: threaded BLAS path
    }
}

TEST_CASE("gemm: interleaved outputs, per-head slices of a (T, H*D) tensor") {
  // Q(T, H*D) @ K(T, H*D)^T per head h into O(T, H*D) head slices: matrix h of each operand
  // starts h*D elements into its row, with row pitch H*D. Outputs interleave within rows.
  const int64_t T = 6, H = 3, D = 4;
  Vec q = random_vec(T * H * D, 41), v = random_vec(T * H * D, 42), o0(T * H * D, 0.0);
  for (DLDataType dt : {loom_f64(), loom_f32()}) {
    auto Q = make(dt, {T, H * D}, q);
    auto V = make(dt, {T, H * D}, v);
    auto O = make(dt, {T, H * D}, o0);
    loom_gemm_args g{};
    g.struct_size = LOOM_GEMM_ARGS_SIZE_V2;
    g.m = T, g.n = D, g.k = D, g.alpha = 1, g.beta = 0, g.batch = H;
    g.a = Q, g.lda = H * D, g.stride_a = D;  // O_h = Q_h (T,D) @ V_h^T restricted to (D,D)
    g.b = V, g.ldb = H * D, g.stride_b = D, g.trans_b = 1;
    g.c = O, g.ldc = H * D, g.stride_c = D;
    B().call(&loom_ops::gemm, &g);
    Vec want(T * H * D, 0.0);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < D; ++j) {
          double s = 0;
          for (int64_t k = 0; k < D; ++k) s += q[t * H * D + h * D + k] * v[j * H * D + h * D + k];
          want[t * H * D + h * D + j] = s;
        }
    check_close(get(O), want, 1e-5, 1e-5, "interleaved gemm");
    g.stride_c = D - 1;  // now the slices overlap: refused
    expect_error([&] { B().call(&loom_ops::gemm, &g); }, LOOM_ERR_INVALID_ARGUMENT, "overlap");
  }
}

TEST_CASE("gemm: k = 0 scales C by beta, m = 0 is a no-op") {
  GemmCase g{0, 0, 3, 2, 0, 1, 0, 0};
  Layout la{3, 0, 1, 3, 0, 3}, lb{0, 2, 2, 0, 0, 2}, lc{3, 2, 2, 6, 0, 6};
  Vec c0 = random_vec(6, 7);
  Vec got = run_gemm(loom_f64(), g, la, Vec(3, 1.0), lb, Vec(2, 1.0), lc, c0, 1.0, 0.5);
  Vec want = c0;
  for (auto& x : want) x *= 0.5;
  check_close(got, want, 1e-15, 0, "gemm k=0");
}

TEST_CASE("gemm: argument errors name the problem") {
  auto A = make64({6}, Vec(6, 1.0));
  auto Bm = make64({6}, Vec(6, 1.0));
  auto C = make64({4}, Vec(4, 0.0));
  auto F = make(loom_f32(), {4}, Vec(4, 0.0));
  loom_gemm_args g{};
  g.struct_size = LOOM_GEMM_ARGS_SIZE_V2;
  g.m = 2;
  g.n = 2;
  g.k = 3;
  g.alpha = 1;
  g.a = A;
  g.lda = 3;
  g.b = Bm;
  g.ldb = 2;
  g.c = C;
  g.ldc = 2;
  g.batch = 1;
  B().call(&loom_ops::gemm, &g);  // the valid baseline
  auto call = [&](loom_gemm_args x) { return [x] { B().call(&loom_ops::gemm, &x); }; };

  loom_gemm_args bad = g;
  bad.lda = 2;
  expect_error(call(bad), LOOM_ERR_INVALID_ARGUMENT, "gemm: lda = 2 is less than the 3 columns");
  bad = g;
  bad.offset_b = 1;
  expect_error(call(bad), LOOM_ERR_INVALID_ARGUMENT, "gemm: b needs 7 elements");
  bad = g;
  bad.c = F;
  expect_error(call(bad), LOOM_ERR_INVALID_ARGUMENT, "gemm: a is f64, expected f32");
  bad = g;
  bad.struct_size = 8;
  expect_error(call(bad), LOOM_ERR_INVALID_ARGUMENT, "struct_size");
  bad = g;
  bad.batch = 0;
  expect_error(call(bad), LOOM_ERR_INVALID_ARGUMENT, "batch = 0");
  bad = g;
  bad.a = nullptr;
  expect_error(call(bad), LOOM_ERR_INVALID_ARGUMENT, "gemm: a is NULL");
}

TEST_CASE("bias_add forward and bias_backward against finite differences") {
  const int64_t N = 4, C = 9;
  Vec out0 = random_vec(N * C, 1), bias = random_vec(C, 2), R = random_vec(N * C, 3);
  auto O = make64({N, C}, out0);
  auto Bt = make64({C}, bias);
  loom::bias_add(B(), O.get(), Bt.get());
  Vec want = out0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) want[n * C + c] += bias[c];
  check_close(get(O), want, 1e-15, 1e-15, "bias_add");

  auto L = [&] {
    auto o = make64({N, C}, out0);
    auto b = make64({C}, bias);
    loom::bias_add(B(), o.get(), b.get());
    return dot(get(o), R);
  };
  Vec fd = fd_grad(bias, L);
  // dbias accumulates: start from a nonzero value and subtract it.
  Vec db0 = random_vec(C, 4);
  auto dB = make64({C}, db0);
  auto dO = make64({N, C}, R);
  loom::bias_backward(B(), dB.get(), dO.get());
  Vec got = get(dB);
  for (int64_t c = 0; c < C; ++c) got[c] -= db0[c];
  check_close(got, fd, kFdRtol, kFdAtol, "bias_backward vs FD");

  expect_error([&] { loom::bias_add(B(), O.get(), make64({C - 1}, Vec(C - 1)).get()); },
               LOOM_ERR_INVALID_ARGUMENT, "bias_add: bias has 8 elements, expected 9");
}

TEST_CASE("bias_backward: f32 matches f64 over many rows") {
  const int64_t N = 300, C = 200;  // crosses the parallel threshold and column blocks
  Vec d = random_vec(N * C, 5);
  auto d64 = make64({N, C}, d);
  auto d32 = make(loom_f32(), {N, C}, d);
  auto b64 = make64({C}, Vec(C, 0.0));
  auto b32 = make(loom_f32(), {C}, Vec(C, 0.0));
  loom::bias_backward(B(), b64.get(), d64.get());
  loom::bias_backward(B(), b32.get(), d32.get());
  check_close(get(b32), get(b64), 1e-5, 1e-5, "bias_backward f32 vs f64");
}

namespace {

// A linear layer's GEMMs in row-major, as the layer library calls them: y(N,O) = x(N,I) W^T
// with W rows [row0, row0 + O) of a (2O, I) table, and dW(O,I) += dy(N,O)^T x(N,I).
struct LinearShapes {
  int64_t N = 13, I = 7, O = 11, row0 = 11;
};
// C(m,n) = op(A) op(B) + beta C with compact rows, B's rows from offset_b.
loom_gemm_args args_of(int ta, int tb, int64_t m, int64_t n, int64_t k, const DLTensor* a,
                       const DLTensor* b, int64_t offb, DLTensor* c, double beta) {
  loom_gemm_args g = loomtest::gemm_args(ta, tb, m, n, k, beta, a, b, c);
  g.offset_b = offb;
  return g;
}
loom_gemm_args forward_args(const LinearShapes& s, const DLTensor* x, const DLTensor* w,
                            DLTensor* y) {
  return args_of(0, 1, s.N, s.O, s.I, x, w, s.row0 * s.I, y, 0.0);
}
loom_gemm_args wgrad_args(const LinearShapes& s, const DLTensor* dy, const DLTensor* x,
                          DLTensor* dw) {
  return args_of(1, 0, s.O, s.I, s.N, dy, x, 0, dw, 1.0);
}

}  // namespace

constexpr uint32_t kAllEpilogues =
    LOOM_EPILOGUE_BIAS | LOOM_EPILOGUE_BGRAD | LOOM_EPILOGUE_BIAS_GELU | LOOM_EPILOGUE_DGELU;

TEST_CASE("gemm epilogues: bias and bias gradient equal the separate ops to the bit") {
  REQUIRE(loom::gemm_epilogue_kinds(B()) == kAllEpilogues);
  const LinearShapes s;
  const Vec x = random_vec(s.N * s.I, 31), w = random_vec(2 * s.O * s.I, 32);
  const Vec bias = random_vec(s.O, 33), dy = random_vec(s.N * s.O, 34);
  const Vec dw0 = random_vec(s.O * s.I, 35), db0 = random_vec(s.O, 36);
  for (DLDataType dt : {loom_f64(), loom_f32()}) {
    CAPTURE(dt.bits);
    auto X = make(dt, {s.N, s.I}, x), W = make(dt, {2 * s.O, s.I}, w), Bs = make(dt, {s.O}, bias);
    // y = x W^T + b: fused, then gemm and bias_add
    auto Yf = make(dt, {s.N, s.O}, Vec(s.N * s.O, NAN)), Yp = make(dt, {s.N, s.O}, Vec(s.N * s.O));
    loom_gemm_epilogue e = loom::gemm_epilogue(LOOM_EPILOGUE_BIAS, Bs.get(), nullptr);
    loom_gemm_args g = forward_args(s, X.get(), W.get(), Yf.get());
    g.ext = &e.base;
    B().call(&loom_ops::gemm, &g);
    g = forward_args(s, X.get(), W.get(), Yp.get());
    B().call(&loom_ops::gemm, &g);
    loom::bias_add(B(), Yp.get(), Bs.get());
    CHECK(get(Yf) == get(Yp));
    Vec want(s.N * s.O);  // the double reference
    for (int64_t n = 0; n < s.N; ++n)
      for (int64_t o = 0; o < s.O; ++o) {
        double acc = bias[o];
        for (int64_t i = 0; i < s.I; ++i) acc += x[n * s.I + i] * w[(s.row0 + o) * s.I + i];
        want[n * s.O + o] = acc;
      }
    check_close(get(Yf), want, 1e-6, 1e-6, "gemm + bias epilogue vs double");

    // dW += dy^T x and db += colsum(dy): fused, then gemm and bias_backward
    auto DY = make(dt, {s.N, s.O}, dy);
    auto DWf = make(dt, {s.O, s.I}, dw0), DWp = make(dt, {s.O, s.I}, dw0);
    auto DBf = make(dt, {s.O}, db0), DBp = make(dt, {s.O}, db0);
    e = loom::gemm_epilogue(LOOM_EPILOGUE_BGRAD, nullptr, DBf.get());
    g = wgrad_args(s, DY.get(), X.get(), DWf.get());
    g.ext = &e.base;
    B().call(&loom_ops::gemm, &g);
    g = wgrad_args(s, DY.get(), X.get(), DWp.get());
    B().call(&loom_ops::gemm, &g);
    loom::bias_backward(B(), DBp.get(), DY.get());
    CHECK(get(DWf) == get(DWp));
    CHECK(get(DBf) == get(DBp));
    Vec dbw = db0;
    for (int64_t n = 0; n < s.N; ++n)
      for (int64_t o = 0; o < s.O; ++o) dbw[o] += dy[n * s.O + o];
    check_close(get(DBf), dbw, 1e-6, 1e-6, "bias-gradient epilogue vs double");
  }
}

TEST_CASE("gemm epilogues: what cannot run is refused, naming why") {
  const LinearShapes s;
  auto X = make64({s.N, s.I}, random_vec(s.N * s.I, 41));
  auto W = make64({2 * s.O, s.I}, random_vec(2 * s.O * s.I, 42));
  auto Bs = make64({s.O}, random_vec(s.O, 43));
  auto Y = make64({s.N, s.O + 1}, Vec(s.N * (s.O + 1)));
  auto DB = make64({s.O}, Vec(s.O));
  const auto refused = [&](loom_gemm_args g, loom_gemm_epilogue e, const char* why) {
    g.ext = &e.base;
    expect_error([&] { B().call(&loom_ops::gemm, &g); }, LOOM_ERR_INVALID_ARGUMENT, why);
  };
  const loom_gemm_epilogue bias = loom::gemm_epilogue(LOOM_EPILOGUE_BIAS, Bs.get(), nullptr);
  const loom_gemm_args fwd = forward_args(s, X.get(), W.get(), Y.get());
  loom_gemm_args g = fwd;
  g.ldc = s.O + 1;  // rows of C not compact
  refused(g, bias, "needs C's rows compact (ldc = n = 11, not 12)");
  loom_gemm_epilogue e = bias;
  e.kind = 16;
  refused(fwd, e, "epilogue kind 16 is not one this backend implements");
  e.kind = LOOM_EPILOGUE_BIAS | LOOM_EPILOGUE_BIAS_GELU;  // one kind per GEMM
  refused(fwd, e, "epilogue kind 5 is not one this backend implements");
  e = bias;
  e.base.struct_size = sizeof(loom_ext);
  refused(fwd, e, "smaller than its version 1");
  e = bias;
  auto B5 = make64({5}, Vec(5));
  e.bias = B5.get();
  refused(fwd, e, "needs bias of n = 11 elements");
  g = fwd;
  g.batch = 2;
  refused(g, bias, "an epilogue takes batch = 1, not 2");
  // the bias gradient of a forward-shaped product (A not stored (k, m))
  refused(fwd, loom::gemm_epilogue(LOOM_EPILOGUE_BGRAD, nullptr, DB.get()),
          "needs dbias of m = 13 elements");
  auto DB13 = make64({s.N}, Vec(s.N));
  refused(fwd, loom::gemm_epilogue(LOOM_EPILOGUE_BGRAD, nullptr, DB13.get()),
          "needs A stored (k, m) compact: trans_a = 1 and lda = m");
  // another required extension beside it is unknown to the backend
  const loom_ext other{sizeof(loom_ext), "vendor.unknown/1", LOOM_EXT_REQUIRED, nullptr};
  e = bias;
  e.base.next = &other;
  refused(fwd, e, "unknown required extension vendor.unknown/1");
}

namespace {
// GPT-2's GELU (tanh form) and its derivative, in double.
double gelu_tanh(double x) {
  const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1 + std::tanh(u));
}
double gelu_tanh_grad(double x) {
  const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  const double t = std::tanh(u);
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
}
}  // namespace

TEST_CASE("gemm epilogues: bias+GELU and the GELU gradient equal the separate ops to the bit") {
  const LinearShapes s;
  const Vec x = random_vec(s.N * s.I, 51), w = random_vec(2 * s.O * s.I, 52);
  const Vec bias = random_vec(s.O, 53), dy = random_vec(s.N * s.O, 54);
  const Vec aux_in = random_vec(s.N * s.I, 55);
  for (DLDataType dt : {loom_f64(), loom_f32()}) {
    for (bool with_bias : {true, false}) {
      CAPTURE(dt.bits);
      CAPTURE(with_bias);
      auto X = make(dt, {s.N, s.I}, x), W = make(dt, {2 * s.O, s.I}, w);
      auto Bs = make(dt, {s.O}, bias);
      // aux = x W^T (+ b), y = gelu(aux): fused, then gemm, bias_add and act_forward
      const Vec nan(s.N * s.O, NAN);
      auto Yf = make(dt, {s.N, s.O}, nan), Af = make(dt, {s.N, s.O}, nan);
      auto Yp = make(dt, {s.N, s.O}, Vec(s.N * s.O)), Hp = make(dt, {s.N, s.O}, Vec(s.N * s.O));
      loom_gemm_epilogue e = loom::gemm_epilogue(LOOM_EPILOGUE_BIAS_GELU,
                                                 with_bias ? Bs.get() : nullptr, nullptr, Af.get());
      loom_gemm_args g = forward_args(s, X.get(), W.get(), Yf.get());
      g.ext = &e.base;
      B().call(&loom_ops::gemm, &g);
      g = forward_args(s, X.get(), W.get(), Hp.get());
      B().call(&loom_ops::gemm, &g);
      if (with_bias) loom::bias_add(B(), Hp.get(), Bs.get());
      loom::act_forward(B(), LOOM_ACT_GELU_TANH, Yp.get(), Hp.get());
      CHECK(get(Af) == get(Hp));
      CHECK(get(Yf) == get(Yp));
      Vec want_h(s.N * s.O), want_y(s.N * s.O);
      for (int64_t n = 0; n < s.N; ++n)
        for (int64_t o = 0; o < s.O; ++o) {
          double acc = with_bias ? bias[o] : 0.0;
          for (int64_t i = 0; i < s.I; ++i) acc += x[n * s.I + i] * w[(s.row0 + o) * s.I + i];
          want_h[n * s.O + o] = acc;
          want_y[n * s.O + o] = gelu_tanh(acc);
        }
      check_close(get(Af), want_h, 1e-6, 1e-6, "bias+GELU epilogue's aux vs double");
      check_close(get(Yf), want_y, 1e-6, 1e-6, "bias+GELU epilogue vs double");
    }
    // dx(N,I) = (dy(N,O) W) * gelu'(aux): fused, then gemm and act_backward
    auto DY = make(dt, {s.N, s.O}, dy), W = make(dt, {2 * s.O, s.I}, w);
    auto AUX = make(dt, {s.N, s.I}, aux_in);
    auto DXf = make(dt, {s.N, s.I}, Vec(s.N * s.I, NAN));
    auto DA = make(dt, {s.N, s.I}, Vec(s.N * s.I)), DXp = make(dt, {s.N, s.I}, Vec(s.N * s.I));
    loom_gemm_epilogue e = loom::gemm_epilogue(LOOM_EPILOGUE_DGELU, nullptr, nullptr, AUX.get());
    loom_gemm_args g = args_of(0, 0, s.N, s.I, s.O, DY.get(), W.get(), s.row0 * s.I, DXf.get(), 0);
    g.ext = &e.base;
    B().call(&loom_ops::gemm, &g);
    g = args_of(0, 0, s.N, s.I, s.O, DY.get(), W.get(), s.row0 * s.I, DA.get(), 0);
    B().call(&loom_ops::gemm, &g);
    loom::act_backward(B(), LOOM_ACT_GELU_TANH, DXp.get(), AUX.get(), DA.get());
    CHECK(get(DXf) == get(DXp));
    Vec want(s.N * s.I);
    for (int64_t n = 0; n < s.N; ++n)
      for (int64_t i = 0; i < s.I; ++i) {
        double acc = 0;
        for (int64_t o = 0; o < s.O; ++o) acc += dy[n * s.O + o] * w[(s.row0 + o) * s.I + i];
        want[n * s.I + i] = acc * gelu_tanh_grad(aux_in[n * s.I + i]);
      }
    check_close(get(DXf), want, 1e-6, 1e-6, "GELU-gradient epilogue vs double");
  }
}

TEST_CASE("gemm epilogues: the GELU kinds' refusals name why") {
  const LinearShapes s;
  auto X = make64({s.N, s.I}, random_vec(s.N * s.I, 61));
  auto W = make64({2 * s.O, s.I}, random_vec(2 * s.O * s.I, 62));
  auto Y = make64({s.N, s.O}, Vec(s.N * s.O)), AUX = make64({s.N, s.O}, Vec(s.N * s.O));
  auto SHORT = make64({s.N, s.O - 1}, Vec(s.N * (s.O - 1)));
  auto AUX32 = make(loom_f32(), {s.N, s.O}, Vec(s.N * s.O));
  const loom_gemm_args fwd = forward_args(s, X.get(), W.get(), Y.get());
  const auto refused = [&](loom_gemm_args g, loom_gemm_epilogue e, const char* why) {
    g.ext = &e.base;
    expect_error([&] { B().call(&loom_ops::gemm, &g); }, LOOM_ERR_INVALID_ARGUMENT, why);
  };
  const loom_gemm_epilogue gelu =
      loom::gemm_epilogue(LOOM_EPILOGUE_BIAS_GELU, nullptr, nullptr, AUX.get());
  loom_gemm_epilogue e = gelu;
  e.aux = nullptr;
  refused(fwd, e, "the bias+GELU epilogue needs aux (ABI 2.23's field)");
  e = gelu;
  e.base.struct_size = LOOM_GEMM_EPILOGUE_SIZE_V1;  // a caller built before 2.23
  refused(fwd, e, "needs aux (ABI 2.23's field)");
  e = gelu;
  e.aux = SHORT.get();
  refused(fwd, e, "needs aux of m x n = 143 elements of C's dtype");
  e.aux = AUX32.get();
  refused(fwd, e, "needs aux of m x n = 143 elements of C's dtype");
  loom_gemm_args g = fwd;
  g.beta = 1.0;
  refused(g, gelu, "the bias+GELU epilogue needs beta = 0");
  auto WIDE = make64({s.N, s.O + 1}, Vec(s.N * (s.O + 1)));
  g = forward_args(s, X.get(), W.get(), WIDE.get());
  g.ldc = s.O + 1;
  e = loom::gemm_epilogue(LOOM_EPILOGUE_DGELU, nullptr, nullptr, AUX.get());
  refused(g, e, "the GELU-gradient epilogue needs C's rows compact");
}
