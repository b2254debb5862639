// fill, copy/cast (f32 <-> f64/bf16/f16: exact values and round-to-nearest-even), add,
// axpby, sum_squares, and the embedding lookup with its finite-difference gradient.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "ops_support.hpp"

using namespace opstest;

namespace {

std::vector<uint16_t> cast_to_16(DLDataType dt, const std::vector<float>& v) {
  loom::Tensor src(B(), loom_f32(), {static_cast<int64_t>(v.size())});
  src.upload(v);
  loom::Tensor dst(B(), dt, {static_cast<int64_t>(v.size())});
  B().call(&loom_ops::copy, dst.get(), src.get());
  return dst.download<uint16_t>();
}
std::vector<float> cast_from_16(DLDataType dt, const std::vector<uint16_t>& v) {
  loom::Tensor src(B(), dt, {static_cast<int64_t>(v.size())});
  src.upload(v);
  loom::Tensor dst(B(), loom_f32(), {static_cast<int64_t>(v.size())});
  B().call(&loom_ops::copy, dst.get(), src.get());
  return dst.download<float>();
}

// Independent references for the 16-bit formats, in double.
double f16_value(uint16_t h) {
  int sign = (h >> 15) ? -1 : 1;
  int exp = (h >> 10) & 31, mant = h & 1023;
  if (exp == 31)
    return mant ? std::numeric_limits<double>::quiet_NaN()
                : sign * std::numeric_limits<double>::infinity();
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1.0 + mant / 1024.0, exp - 15);
}
// Nearest f16 to a finite float by search over all positive finite f16 values; ties go to
// the even bit pattern; beyond 65504 + half an ulp (65520) is infinity.
uint16_t f16_nearest(float f) {
  double v = std::fabs(static_cast<double>(f));
  uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (v >= 65520.0) return sign | 0x7c00;
  uint16_t lo = 0;
  for (uint16_t h = 0; h < 0x7c00; ++h)
    if (f16_value(h) <= v) lo = h;
  if (lo == 0x7bff) return sign | lo;
  double dlo = v - f16_value(lo), dhi = f16_value(lo + 1) - v;
  uint16_t pick = dlo < dhi ? lo : dhi < dlo ? lo + 1 : ((lo & 1) ? lo + 1 : lo);
  return sign | pick;
}
uint16_t bf16_nearest(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isinf(f)) return static_cast<uint16_t>(u >> 16);
  uint32_t down = u & 0xffff0000u, up = down + 0x10000u;
  double v = std::fabs(static_cast<double>(f));
  double dd = v - std::fabs(static_cast<double>(std::bit_cast<float>(down)));
  double du = std::fabs(static_cast<double>(std::bit_cast<float>(up))) - v;
  if ((up & 0x7f800000u) == 0x7f800000u) du = std::ldexp(1.0, 128) - v;  // rounds up to inf
  uint32_t pick = dd < du ? down : du < dd ? up : (((down >> 16) & 1) ? up : down);
  return static_cast<uint16_t>(pick >> 16);
}

}  // namespace

TEST_CASE("fill: every supported dtype") {
  loom::Tensor f(B(), loom_f32(), {5}), d(B(), loom_f64(), {5}), i(B(), loom_i32(), {5});
  loom::Tensor h(B(), loom_bf16(), {5});
  B().call(&loom_ops::fill, f.get(), 1.25);
  B().call(&loom_ops::fill, d.get(), -3.5);
  B().call(&loom_ops::fill, i.get(), 7.0);
  B().call(&loom_ops::fill, h.get(), 1.0);
  CHECK(f.download<float>() == std::vector<float>(5, 1.25f));
  CHECK(d.download<double>() == std::vector<double>(5, -3.5));
  CHECK(i.download<int32_t>() == std::vector<int32_t>(5, 7));
  CHECK(h.download<uint16_t>() == std::vector<uint16_t>(5, 0x3f80));
  expect_error([&] { B().call(&loom_ops::fill, i.get(), 0.5); }, LOOM_ERR_INVALID_ARGUMENT,
               "fill: value 0.5");
}

TEST_CASE("copy: f32 <-> f64") {
  Vec v = random_vec(37, 11, -1e3, 1e3);
  auto d = make64({37}, v);
  loom::Tensor f(B(), loom_f32(), {37});
  B().call(&loom_ops::copy, f.get(), d.get());
  auto fv = f.download<float>();
  for (size_t k = 0; k < v.size(); ++k) CHECK(fv[k] == static_cast<float>(v[k]));
  loom::Tensor back(B(), loom_f64(), {37});
  B().call(&loom_ops::copy, back.get(), f.get());
  auto bv = back.download<double>();
  for (size_t k = 0; k < v.size(); ++k) CHECK(bv[k] == static_cast<double>(fv[k]));
}

TEST_CASE("copy: bf16 widening is exact and f32 -> bf16 -> f32 round-trips every bf16") {
  std::vector<uint16_t> all(65536);
  for (size_t k = 0; k < all.size(); ++k) all[k] = static_cast<uint16_t>(k);
  auto wide = cast_from_16(loom_bf16(), all);
  auto narrow = cast_to_16(loom_bf16(), wide);
  for (size_t k = 0; k < all.size(); ++k) {
    uint32_t bits = std::bit_cast<uint32_t>(wide[k]);
    bool nan = (all[k] & 0x7f80) == 0x7f80 && (all[k] & 0x7f);
    if (nan) {
      CHECK(std::isnan(wide[k]));
      CHECK(((narrow[k] & 0x7f80) == 0x7f80 && (narrow[k] & 0x7f)));
    } else {
      CHECK(bits == static_cast<uint32_t>(all[k]) << 16);
      CHECK(narrow[k] == all[k]);
    }
  }
}

TEST_CASE("copy: f32 -> bf16 rounds to nearest, ties to even") {
  std::vector<float> v = {
      1.0f + 0x1p-8f,                     // halfway between 1 and 1+2^-7: ties to even -> 1
      1.0f + 3 * 0x1p-8f,                 // halfway, odd below -> rounds up to 1+2^-6
      1.0f + 0x1p-8f + 0x1p-20f,          // just above halfway -> up
      -(1.0f + 0x1p-8f),                  // sign kept
      std::numeric_limits<float>::max(),  // rounds past the largest bf16 -> inf
      std::numeric_limits<float>::infinity(),
      -0.0f,
      std::numeric_limits<float>::denorm_min(),
      3.14159265f,
  };
  for (float x : random_vec(200, 12, -1e6, 1e6)) v.push_back(x);
  auto got = cast_to_16(loom_bf16(), v);
  CHECK(got[0] == 0x3f80);
  CHECK(got[1] == 0x3f82);
  CHECK(got[2] == 0x3f81);
  CHECK(got[3] == 0xbf80);
  CHECK(got[4] == 0x7f80);
  CHECK(got[5] == 0x7f80);
  CHECK(got[6] == 0x8000);
  for (size_t k = 0; k < v.size(); ++k)
    CHECK_MESSAGE(got[k] == bf16_nearest(v[k]), "value " << v[k]);
  auto nan = cast_to_16(loom_bf16(), {std::bit_cast<float>(0x7f800001u)});
  CHECK(((nan[0] & 0x7f80) == 0x7f80 && (nan[0] & 0x7f)));  // a NaN stays a NaN
}

TEST_CASE("copy: f16 widening matches the IEEE definition for every bit pattern") {
  std::vector<uint16_t> all(65536);
  for (size_t k = 0; k < all.size(); ++k) all[k] = static_cast<uint16_t>(k);
  auto wide = cast_from_16(loom_f16(), all);
  auto narrow = cast_to_16(loom_f16(), wide);
  for (size_t k = 0; k < all.size(); ++k) {
    double want = f16_value(all[k]);
    if (std::isnan(want)) {
      CHECK(std::isnan(wide[k]));
      continue;
    }
    CHECK(static_cast<double>(wide[k]) == want);
    CHECK(std::signbit(wide[k]) == static_cast<bool>(all[k] & 0x8000));
    CHECK(narrow[k] == all[k]);
  }
}

TEST_CASE("copy: f32 -> f16 rounds to nearest, ties to even, incl. subnormals and overflow") {
  std::vector<float> v = {
      1.0f,           -2.0f, 65504.0f, 0x1p-24f, 0x1p-14f, 0.1f,
      65520.0f,        // halfway past the max -> inf
      65519.0f,        // -> 65504
      0x1p-25f,        // halfway between 0 and 2^-24 -> 0
      3 * 0x1p-25f,    // halfway, odd below -> 2^-23
      1.0f + 0x1p-11f  // halfway between 1 and 1+2^-10 -> 1
  };
  for (float x : random_vec(150, 13, -70000, 70000)) v.push_back(x);
  for (float x : random_vec(150, 14, -1e-4, 1e-4)) v.push_back(x);  // subnormal range
  auto got = cast_to_16(loom_f16(), v);
  CHECK(got[0] == 0x3c00);
  CHECK(got[1] == 0xc000);
  CHECK(got[2] == 0x7bff);
  CHECK(got[3] == 0x0001);
  CHECK(got[4] == 0x0400);
  CHECK(got[5] == 0x2e66);
  CHECK(got[6] == 0x7c00);
  CHECK(got[7] == 0x7bff);
  CHECK(got[8] == 0x0000);
  CHECK(got[9] == 0x0002);
  CHECK(got[10] == 0x3c00);
  for (size_t k = 0; k < v.size(); ++k)
    CHECK_MESSAGE(got[k] == f16_nearest(v[k]), "value " << v[k]);
}

TEST_CASE("copy: shape and dtype errors") {
  loom::Tensor a(B(), loom_f32(), {4}), b(B(), loom_f32(), {5}), c(B(), loom_bf16(), {4});
  loom::Tensor i(B(), loom_i32(), {4});
  expect_error([&] { B().call(&loom_ops::copy, b.get(), a.get()); }, LOOM_ERR_INVALID_ARGUMENT,
               "copy: dst has 5 elements, expected 4");
  expect_error([&] { B().call(&loom_ops::copy, i.get(), c.get()); }, LOOM_ERR_UNIMPLEMENTED,
               "copy: no cast from bf16 to i32");
}

// ABI 2.21's strided copy against the element rule written here, in f32 and bf16, through
// the backend's kernel and through the SDK's row-by-row fallback for a backend without one.
TEST_CASE("copy_strided: a block between row-strided layouts, and its refusals") {
  const int64_t rows = 5, cols = 3, ld_src = 7, off_src = 2, ld_dst = 4, off_dst = 1;
  std::vector<float> sv(rows * ld_src + off_src), dv(rows * ld_dst + off_dst + 2, -1.0f);
  for (size_t i = 0; i < sv.size(); ++i) sv[i] = (float)i + 0.5f;
  for (DLDataType dt : {loom_f32(), loom_bf16()}) {
    loom::Tensor src(B(), loom_f32(), {(int64_t)sv.size()}),
        dst(B(), loom_f32(), {(int64_t)dv.size()});
    src.upload(sv);
    dst.upload(dv);
    loom::Tensor s(B(), dt, {(int64_t)sv.size()}), d(B(), dt, {(int64_t)dv.size()});
    B().call(&loom_ops::copy, s.get(), src.get());
    B().call(&loom_ops::copy, d.get(), dst.get());
    for (bool fallback : {false, true}) {
      loom_ops shorter = B().ops();  // a backend built before ABI 2.21
      shorter.struct_size = LOOM_OPS_SIZE_V2_5;
      const loom_backend_api api = [&] {
        loom_backend_api a = *B().api();
        a.ops = &shorter;
        return a;
      }();
      const loom::Backend old(B().host(), {&api, B().self()});
      loom::copy_strided(fallback ? old : B(), d.get(), ld_dst, off_dst, s.get(), ld_src, off_src,
                         rows, cols);
      B().call(&loom_ops::copy, dst.get(), d.get());
      const std::vector<float> got = dst.download<float>();
      std::vector<float> want = dv;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < cols; ++j)
          want[(size_t)(off_dst + r * ld_dst + j)] = sv[(size_t)(off_src + r * ld_src + j)];
      CHECK(got == want);  // small integers + 0.5: exact in bf16 too
    }
  }
  loom::Tensor a(B(), loom_f32(), {20}), b(B(), loom_f32(), {20}), h(B(), loom_bf16(), {20});
  auto strided = [&](DLTensor* dst, const DLTensor* src, int64_t ld, int64_t off, int64_t r,
                     int64_t c) {
    const loom_copy_strided_args x{
        LOOM_COPY_STRIDED_ARGS_SIZE_V2_21, dst, ld, off, src, ld, 0, r, c, nullptr};
    B().call(&loom_ops::copy_strided, &x);
  };
  expect_error([&] { strided(a.get(), b.get(), 5, 0, 5, 5); }, LOOM_ERR_INVALID_ARGUMENT,
               "copy_strided: a block reaches past its tensor (25 of 20 elements of dst");
  expect_error([&] { strided(a.get(), b.get(), 2, 0, 3, 3); }, LOOM_ERR_INVALID_ARGUMENT,
               "copy_strided: a stride is shorter than a row's cols");
  expect_error([&] { strided(h.get(), b.get(), 4, 0, 2, 2); }, LOOM_ERR_INVALID_ARGUMENT,
               "copy_strided: dst and src differ in dtype");
  expect_error([&] { strided(a.get(), a.get(), 4, 2, 3, 3); }, LOOM_ERR_INVALID_ARGUMENT,
               "copy_strided: the blocks overlap");
}

TEST_CASE("add and axpby") {
  Vec a = random_vec(50, 20), b = random_vec(50, 21);
  for (auto dt : {loom_f32(), loom_f64()}) {
    auto A = make(dt, {5, 10}, a);
    auto Bv = make(dt, {50}, b);
    B().call(&loom_ops::add, A.get(), A.get(), Bv.get());  // out aliases a
    Vec want(50);
    for (int k = 0; k < 50; ++k) want[k] = a[k] + b[k];
    check_close(get(A), want, 1e-7, 1e-7, "add");

    auto Y = make(dt, {50}, b);
    B().call(&loom_ops::axpby, Y.get(), 2.0, make(dt, {50}, a).get(), -0.5);
    for (int k = 0; k < 50; ++k) want[k] = 2.0 * a[k] - 0.5 * b[k];
    check_close(get(Y), want, 1e-7, 1e-7, "axpby");

    // beta == 0: y is not read (BLAS convention), so NaN there does not survive.
    auto Z = make(dt, {50}, Vec(50, std::numeric_limits<double>::quiet_NaN()));
    B().call(&loom_ops::axpby, Z.get(), 3.0, make(dt, {50}, a).get(), 0.0);
    for (int k = 0; k < 50; ++k) want[k] = 3.0 * a[k];
    check_close(get(Z), want, 1e-7, 1e-7, "axpby beta=0");
  }
  expect_error(
      [&] {
        B().call(&loom_ops::add, make64({3}, Vec(3)).get(), make64({3}, Vec(3)).get(),
                 make64({4}, Vec(4)).get());
      },
      LOOM_ERR_INVALID_ARGUMENT, "add: b has 4 elements, expected 3");
}

TEST_CASE("sum_squares: double accumulation, chunked, f32 and f64") {
  const int64_t n = 2 * 65536 + 123;  // several chunks and a partial one
  Vec v = random_vec(n, 30, -2, 2);
  double want = 0, want32 = 0;
  for (double x : v) {
    want += x * x;
    double xf = static_cast<float>(x);
    want32 += xf * xf;
  }
  double got = 0;
  got = loom::sum_squares(B(), make64({n}, v).get());
  CHECK(got == doctest::Approx(want).epsilon(1e-13));
  got = loom::sum_squares(B(), make(loom_f32(), {n}, v).get());
  CHECK(got == doctest::Approx(want32).epsilon(1e-13));  // f32 inputs, double sums
}

namespace {
// Mixed dtypes (bf16 staged through f32), an empty tensor, sizes across chunk boundaries.
std::vector<loom::Tensor> many_tensors() {
  std::vector<loom::Tensor> ts;
  ts.push_back(make(loom_f32(), {70000}, random_vec(70000, 31)));
  ts.push_back(make64({5}, random_vec(5, 32)));
  ts.push_back(make(loom_f32(), {0}, Vec{}));
  ts.emplace_back(B(), loom_bf16(), std::vector<int64_t>{3, 300});  // a cast of random f32
  B().call(&loom_ops::copy, ts.back().get(),
           static_cast<const DLTensor*>(make(loom_f32(), {3, 300}, random_vec(900, 33)).get()));
  ts.push_back(make(loom_f32(), {2 * 65536 + 7}, random_vec(2 * 65536 + 7, 34)));
  return ts;
}

// sum_squares over xs with loom.sum-squares-total/1 into total, `other` chained after it.
void sum_into(const std::vector<const DLTensor*>& xs, double* out, DLTensor* total,
              const loom_ext* other = nullptr) {
  const loom_sum_squares_total ext{
      {sizeof(loom_sum_squares_total), LOOM_EXT_SUM_SQUARES_TOTAL, LOOM_EXT_REQUIRED, other},
      total};
  const loom_sum_squares_args a{LOOM_SUM_SQUARES_ARGS_SIZE_V2, xs.data(), xs.size(), out,
                                &ext.base};
  B().call(&loom_ops::sum_squares, &a);
}
}  // namespace

TEST_CASE("sum_squares of many tensors in one call: each as alone, to the bit") {
  std::vector<loom::Tensor> ts = many_tensors();
  std::vector<const DLTensor*> xs;
  for (const auto& t : ts) xs.push_back(t.get());
  std::vector<double> out(xs.size(), -1.0);
  const loom_sum_squares_args a{LOOM_SUM_SQUARES_ARGS_SIZE_V2, xs.data(), xs.size(), out.data(),
                                nullptr};
  B().call(&loom_ops::sum_squares, &a);
  for (size_t i = 0; i < xs.size(); ++i) {
    CAPTURE(i);
    CHECK(out[i] == loom::sum_squares(B(), xs[i]));
    if (i == 3) continue;  // bf16: checked against itself alone above
    double want = 0;       // and against a plain double loop over the stored values
    for (double v : get(ts[i])) want += v * v;
    CHECK(out[i] == doctest::Approx(want).epsilon(1e-13));
  }
  CHECK(out[2] == 0.0);
  const loom_sum_squares_args none{LOOM_SUM_SQUARES_ARGS_SIZE_V2, nullptr, 0, nullptr, nullptr};
  B().call(&loom_ops::sum_squares, &none);  // nothing to do is not an error
}

TEST_CASE("sum_squares with loom.sum-squares-total/1: the host's loop over out, to the bit") {
  CHECK(loomtest::lists_capability("backend", "cpu", LOOM_EXT_SUM_SQUARES_TOTAL));
  std::vector<loom::Tensor> ts = many_tensors();
  std::vector<const DLTensor*> xs;
  for (const auto& t : ts) xs.push_back(t.get());
  std::vector<double> out(xs.size());
  const loom_sum_squares_args a{LOOM_SUM_SQUARES_ARGS_SIZE_V2, xs.data(), xs.size(), out.data(),
                                nullptr};
  B().call(&loom_ops::sum_squares, &a);
  double want = 0;  // train's own loop (train_norm.cpp) over the per-tensor sums
  for (double v : out) want += v;
  loom::Tensor total = make64({1}, Vec{-1.0});
  std::vector<double> untouched(xs.size(), -3.0);
  sum_into(xs, untouched.data(), total.get());
  CHECK(get(total)[0] == want);                              // bitwise
  CHECK(untouched == std::vector<double>(xs.size(), -3.0));  // nothing written to the host
  sum_into({}, nullptr, total.get());
  CHECK(get(total)[0] == 0.0);  // no tensors: 0, not the last value
  // A view of one element of a longer tensor, as train keeps the dense and expert sums.
  loom::Tensor both = make64({2}, Vec{5.0, 6.0});
  loom::View second(both.get(), {1}, 1);
  sum_into({xs[1]}, nullptr, second.get());
  CHECK(get(both)[0] == 5.0);
  CHECK(get(both)[1] == out[1]);

  expect_error([&] { sum_into(xs, nullptr, make(loom_f32(), {1}, Vec{0}).get()); },
               LOOM_ERR_INVALID_ARGUMENT,
               "sum_squares: loom.sum-squares-total/1's total must be a (1) f64 tensor");
  const loom_ext unknown{sizeof(loom_ext), "loom.no-such-thing/1", LOOM_EXT_REQUIRED, nullptr};
  expect_error([&] { sum_into(xs, nullptr, total.get(), &unknown); }, LOOM_ERR_INVALID_ARGUMENT,
               "sum_squares: unknown required extension loom.no-such-thing/1");
}

TEST_CASE("embedding forward (= and +=) and backward against finite differences") {
  const int64_t V = 6, C = 5, N = 7;
  std::vector<int32_t> ids = {3, 0, 5, 3, 3, 1, 0};  // repeats: the backward must sum them
  Vec table = random_vec(V * C, 40), R = random_vec(N * C, 41), base = random_vec(N * C, 42);
  auto I = make_i32({N}, ids);
  auto T = make64({V, C}, table);
  auto O = make64({N, C}, base);
  loom::embedding_forward(B(), O.get(), I.get(), T.get(), 0);
  Vec want(N * C);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) want[n * C + c] = table[ids[n] * C + c];
  check_close(get(O), want, 0, 0, "embedding_forward =");
  loom::embedding_forward(B(), O.get(), I.get(), T.get(), 1);
  for (auto& x : want) x *= 2;
  check_close(get(O), want, 0, 0, "embedding_forward +=");

  auto L = [&] {
    auto o = make64({N, C}, Vec(N * C, 0.0));
    loom::embedding_forward(B(), o.get(), I.get(), make64({V, C}, table).get(), 0);
    return dot(get(o), R);
  };
  Vec fd = fd_grad(table, L);
  Vec dt0 = random_vec(V * C, 43);
  auto dT = make64({V, C}, dt0);
  loom::embedding_backward(B(), dT.get(), I.get(), make64({N, C}, R).get());
  Vec got = get(dT);
  for (size_t k = 0; k < got.size(); ++k) got[k] -= dt0[k];
  check_close(got, fd, kFdRtol, kFdAtol, "embedding_backward vs FD");

  auto bad = make_i32({N}, {3, 0, 6, 3, 3, 1, 0});
  expect_error([&] { loom::embedding_forward(B(), O.get(), bad.get(), T.get(), 0); },
               LOOM_ERR_INVALID_ARGUMENT, "embedding_forward: ids[2] = 6 is outside [0, 6)");
  auto f32ids = make(loom_f32(), {N}, Vec(N, 0.0));
  expect_error(
      [&] {
        loom::embedding_backward(B(), dT.get(), f32ids.get(), make64({N, C}, R).get());
      },
      LOOM_ERR_INVALID_ARGUMENT, "embedding_backward: ids is f32, expected i32");
}

TEST_CASE("embedding: f32 matches f64 on a larger table (parallel paths)") {
  const int64_t V = 50, C = 300, N = 200;
  std::vector<int32_t> ids(N);
  for (int64_t n = 0; n < N; ++n) ids[n] = static_cast<int32_t>((n * 7) % V);
  auto I = make_i32({N}, ids);
  Vec d = random_vec(N * C, 44);
  auto d64 = make64({V, C}, Vec(V * C, 0.0));
  auto d32 = make(loom_f32(), {V, C}, Vec(V * C, 0.0));
  loom::embedding_backward(B(), d64.get(), I.get(), make64({N, C}, d).get());
  loom::embedding_backward(B(), d32.get(), I.get(), make(loom_f32(), {N, C}, d).get());
  check_close(get(d32), get(d64), 1e-5, 1e-6, "embedding_backward f32 vs f64");
}
