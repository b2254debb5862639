// gemm (every transpose combination, batches, offsets, padded leading dimensions, f32 vs f64),
// bias_add and bias_backward (finite differences), and gemm's argument errors.
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
