// loom.fp8/1 on backend/cpu (fp8.h, ABI 2.32): quantize (current and delayed scaling, per
// tensor, 1x128 and 128x128 blocks, power-of-two scales, the transposed copy, the amax),
// delayed_update over many rows, and the scaled GEMM against a float64 reference over every
// transpose pair and scaling, with padded and offset operands and a bf16 C. The codes are
// checked against loom::fp8_encode, which test_fp8.cpp checks at every code point against a
// brute-force table; the scales against largest / amax computed here.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "loom/cpp/fp8_args.hpp"
#include "loom/cpp/gemm_epilogue.hpp"
#include "ops_support.hpp"

using namespace opstest;

namespace {

const loom_fp8_api& fp8() {
  const loom_fp8_api* t = loom::find_fp8(loom_backend_ref{B().api(), B().self()});
  REQUIRE(t != nullptr);
  return *t;
}

std::vector<uint8_t> codes(const loom::Tensor& t) { return t.download<uint8_t>(); }

loom::Tensor f32(const std::vector<int64_t>& shape, const Vec& v) {
  return make(loom_f32(), shape, v);
}

// Values spread over several binades (so blocks get different amaxes), with zeros.
Vec spread(size_t n, uint64_t seed, double big) {
  Vec v = random_vec(n, seed);
  for (size_t i = 0; i < n; ++i) v[i] *= (i % 7 == 0 ? big : i % 5 == 0 ? 0.0 : 1.0) * (1 + i % 3);
  return v;
}

struct Quant {
  uint32_t scaling = LOOM_FP8_SCALE_TENSOR, flags = LOOM_FP8_CURRENT;
  int32_t margin = 0;
  bool transpose = false;
};

// The reference quantization of (rows, cols) `xs`: each block's scale (largest / its amax,
// computed here), every code, and the amax over all of it.
struct Reference {
  std::vector<float> scale;
  std::vector<uint8_t> codes;
  double amax = 0;
};
Reference reference(const Vec& xs, int64_t rows, int64_t cols, const loom::Fp8Format& f,
                    const Quant& q, float delayed_scale) {
  const auto [gr, gc] = loom::fp8_scale_grid(q.scaling, rows, cols);
  const int64_t br = q.scaling == LOOM_FP8_SCALE_128X128 ? 128 : q.scaling ? 1 : rows;
  const int64_t bc = q.scaling == LOOM_FP8_SCALE_TENSOR ? cols : 128;
  Reference ref{std::vector<float>((size_t)(gr * gc), delayed_scale),
                std::vector<uint8_t>((size_t)(rows * cols)), 0};
  for (int64_t i = 0; i < gr; ++i)
    for (int64_t j = 0; j < gc; ++j) {
      double m = 0;
      for (int64_t r = i * br; r < std::min(rows, (i + 1) * br); ++r)
        for (int64_t c = j * bc; c < std::min(cols, (j + 1) * bc); ++c)
          m = std::max(m, std::fabs(xs[(size_t)(r * cols + c)]));
      ref.amax = std::max(ref.amax, m);
      if (!(q.flags & LOOM_FP8_CURRENT)) continue;
      float s = m > 0 ? static_cast<float>(f.largest) / static_cast<float>(m) : 1.0f;
      if (q.flags & LOOM_FP8_POW2) s = std::exp2(std::floor(std::log2(s)));
      ref.scale[(size_t)(i * gc + j)] = std::ldexp(s, -q.margin);
    }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float s = ref.scale[(size_t)((r / br) * gc + c / bc)];
      ref.codes[(size_t)(r * cols + c)] =
          loom::fp8_encode(f, (double)((float)xs[(size_t)(r * cols + c)] * s));
    }
  return ref;
}

void check_scales(const loom::Tensor& scale, const loom::Tensor& inv, const Reference& ref) {
  const Vec got_scale = get(scale), got_inv = get(inv);
  REQUIRE(got_scale.size() == ref.scale.size());
  for (size_t b = 0; b < ref.scale.size(); ++b) {
    REQUIRE(got_scale[b] == (double)ref.scale[b]);
    REQUIRE(got_inv[b] == (double)(1.0f / ref.scale[b]));
  }
}

// Quantizes (rows, cols) `x` (stored in dtype sdt) into format dt; checks every code, scale,
// scale inverse, the amax and the transposed copy against the reference.
void check_quantize(DLDataType sdt, DLDataType dt, int64_t rows, int64_t cols, const Vec& x,
                    const Quant& q, float delayed_scale = 1.0f) {
  CAPTURE(loom::dtype_str(sdt));
  CAPTURE(loom::dtype_str(dt));
  const std::string scaling = loom::fp8_scaling_name(q.scaling);
  CAPTURE(scaling);
  CAPTURE(q.flags);
  CAPTURE(q.margin);
  CAPTURE(q.transpose);
  auto src = make_as(sdt, {rows, cols}, x);
  const Vec xs = get_as(src);  // the values as stored (bf16 rounds)
  loom::Tensor dst(B(), dt, {rows, cols}), dst_t(B(), dt, {cols, rows});
  const auto [gr, gc] = loom::fp8_scale_grid(q.scaling, rows, cols);
  const auto [tr, tc] = loom::fp8_scale_grid(q.scaling, cols, rows);
  auto scale = f32({gr, gc}, Vec((size_t)(gr * gc), delayed_scale));
  auto inv = f32({gr, gc}, Vec((size_t)(gr * gc), 0.0));
  auto scale_t = f32({tr, tc}, Vec((size_t)(tr * tc), 0.0));
  auto inv_t = f32({tr, tc}, Vec((size_t)(tr * tc), 0.0));
  auto amax = f32({1}, {0.25});  // fmax'd into: a smaller amax than the data's
  const bool own_t = q.transpose && q.scaling != LOOM_FP8_SCALE_TENSOR;
  loom_fp8_quantize_args a{};
  a.struct_size = LOOM_FP8_QUANTIZE_ARGS_SIZE_V2_32;
  a.src = src;
  a.dst = dst;
  a.dst_t = q.transpose ? dst_t.get() : nullptr;
  a.scaling = q.scaling;
  a.flags = q.flags;
  a.margin = q.margin;
  a.scale = scale;
  a.scale_inv = inv;
  a.amax = amax;
  a.scale_t = own_t ? scale_t.get() : nullptr;
  a.scale_inv_t = own_t ? inv_t.get() : nullptr;
  env().host.check(fp8().quantize(B().self(), &a));

  const loom::Fp8Format f = loom::fp8_format(dt);
  const Reference ref = reference(xs, rows, cols, f, q, delayed_scale);
  check_scales(scale, inv, ref);
  CHECK(get(amax)[0] == std::max(0.25, ref.amax));
  CHECK(codes(dst) == ref.codes);
  if (!q.transpose) return;
  // The transpose: the same codes under the tensor scaling; its own blocks otherwise.
  Vec xt(xs.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) xt[(size_t)(c * rows + r)] = xs[(size_t)(r * cols + c)];
  const Reference ref_t = reference(xt, cols, rows, f, q, delayed_scale);
  if (own_t) check_scales(scale_t, inv_t, ref_t);
  CHECK(codes(dst_t) == ref_t.codes);
}

}  // namespace

TEST_CASE("fp8 ops: backend/cpu lists loom.fp8/1 and lends every scaling") {
  CHECK(fp8().scalings == ((1u << LOOM_FP8_SCALE_TENSOR) | (1u << LOOM_FP8_SCALE_1X128) |
                           (1u << LOOM_FP8_SCALE_128X128)));
  CHECK(loom::dtype_str(loom_e4m3()) == "e4m3");
  CHECK(loom::dtype_str(loom_e5m2()) == "e5m2");
}

TEST_CASE("fp8 ops: quantize with current scaling, per tensor and per block") {
  const Vec x = spread(200 * 300, 11, 40.0);
  for (DLDataType dt : {loom_e4m3(), loom_e5m2()})
    for (DLDataType sdt : {loom_f32(), loom_bf16()}) {
      check_quantize(sdt, dt, 200, 300, x, {});
      check_quantize(sdt, dt, 200, 300, x, {LOOM_FP8_SCALE_TENSOR, LOOM_FP8_CURRENT, 2, true});
      check_quantize(sdt, dt, 200, 300, x, {LOOM_FP8_SCALE_1X128, LOOM_FP8_CURRENT, 0, false});
      check_quantize(sdt, dt, 200, 300, x, {LOOM_FP8_SCALE_1X128, LOOM_FP8_CURRENT, 1, true});
      check_quantize(sdt, dt, 200, 300, x,
                     {LOOM_FP8_SCALE_128X128, LOOM_FP8_CURRENT | LOOM_FP8_POW2, 0, true});
    }
  // An all-zero block gets scale 1 (nothing to scale): rows 0..127 of cols 256..299 here.
  Vec z = x;
  for (int64_t r = 0; r < 128; ++r)
    for (int64_t c = 256; c < 300; ++c) z[(size_t)(r * 300 + c)] = 0;
  check_quantize(loom_f32(), loom_e4m3(), 200, 300, z, {LOOM_FP8_SCALE_128X128});
}

TEST_CASE("fp8 ops: quantize with a delayed scale saturates, keeps NaN, and skips NaN in amax") {
  Vec x = spread(64 * 40, 12, 10.0);
  check_quantize(loom_f32(), loom_e4m3(), 64, 40, x, {LOOM_FP8_SCALE_TENSOR, 0, 0, true}, 3.5f);
  // A scale too large for the data: values past the largest saturate to it.
  check_quantize(loom_f32(), loom_e5m2(), 64, 40, x, {LOOM_FP8_SCALE_TENSOR, 0, 0, false}, 1e5f);
  x[5] = NAN;
  auto src = f32({64, 40}, x);
  loom::Tensor dst(B(), loom_e4m3(), {64, 40});
  auto scale = f32({1}, {1e4});
  auto amax = f32({1}, {0.0});
  loom_fp8_quantize_args a{};
  a.struct_size = LOOM_FP8_QUANTIZE_ARGS_SIZE_V2_32;
  a.src = src;
  a.dst = dst;
  a.scale = scale;
  a.amax = amax;
  env().host.check(fp8().quantize(B().self(), &a));
  const auto c = codes(dst);
  CHECK((c[5] & 0x7f) == 0x7f);  // NaN
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (i == 5) continue;
    m = std::max(m, std::fabs((double)(float)x[i]));
    const bool big = std::fabs((float)x[i] * 1e4f) >= 448;
    if (big) REQUIRE((c[i] & 0x7f) == 0x7e);  // saturated to +-448
  }
  CHECK(get(amax)[0] == m);
  CHECK(get(scale)[0] == 1e4);  // read, not written
}

TEST_CASE("fp8 ops: delayed_update equals loom::fp8_delayed_update row by row") {
  for (bool most_recent : {false, true})
    for (DLDataType dt : {loom_e4m3(), loom_e5m2()}) {
      const int64_t n = 5, len = 4;
      Vec h = random_vec((size_t)(n * len), 21, 0.0, 30.0);
      h[0] = 0;            // row 0: no amax this step
      h[(size_t)len] = 0;  // row 1: nothing in its whole window
      h[(size_t)len + 1] = h[(size_t)len + 2] = h[(size_t)len + 3] = 0;
      h[(size_t)(2 * len)] = INFINITY;  // row 2: an overflowed step keeps the scale
      Vec s = random_vec((size_t)n, 22, 0.5, 2.0);
      auto history = f32({n, len}, h);
      auto scale = f32({n}, s);
      auto inv = f32({n}, Vec((size_t)n, 0.0));
      loom_fp8_update_args a{};
      a.struct_size = LOOM_FP8_UPDATE_ARGS_SIZE_V2_32;
      a.history = history;
      a.scale = scale;
      a.scale_inv = inv;
      a.format = dt;
      a.margin = 1;
      a.flags = most_recent ? LOOM_FP8_MOST_RECENT : 0;
      env().host.check(fp8().delayed_update(B().self(), &a));
      std::vector<float> hf(h.begin(), h.end()), sf(s.begin(), s.end());
      for (int64_t i = 0; i < n; ++i)
        loom::fp8_delayed_update(loom::fp8_format(dt), hf.data() + i * len, len, most_recent, 1,
                                 sf.data() + i);
      const Vec gh = get(history), gs = get(scale), gi = get(inv);
      for (size_t i = 0; i < hf.size(); ++i) REQUIRE(gh[i] == (double)hf[i]);
      for (int64_t i = 0; i < n; ++i) {
        REQUIRE(gs[(size_t)i] == (double)sf[(size_t)i]);
        REQUIRE(gi[(size_t)i] == (double)(1.0f / sf[(size_t)i]));
      }
      // Kept: row 0 has no current amax (most_recent), row 1 no amax at all, row 2 overflowed.
      if (most_recent) CHECK(gs[0] == (double)(float)s[0]);
      CHECK(gs[1] == (double)(float)s[1]);
      CHECK(gs[2] == (double)(float)s[2]);
    }
}

namespace {

struct Operand {
  loom::Tensor codes, scale_inv;
  int64_t rows, cols, ld, offset;
  Vec values;  // (rows, cols): code value times its scale inverse, in double
};

// A stored (rows, cols) FP8 matrix with row pitch cols + pad and `offset` leading elements:
// the data quantized by quantize (current scaling), its codes laid out at that pitch on the
// host and uploaded; `values` what the codes mean (decoded times their scale inverse).
Operand operand(DLDataType dt, int64_t rows, int64_t cols, uint32_t scaling, int64_t pad,
                int64_t offset, uint64_t seed) {
  const Vec x = spread((size_t)(rows * cols), seed, 8.0);
  auto src = f32({rows, cols}, x);
  loom::Tensor q(B(), dt, {rows, cols});
  const auto [gr, gc] = loom::fp8_scale_grid(scaling, rows, cols);
  Operand o{loom::Tensor(),
            f32({gr, gc}, Vec((size_t)(gr * gc), 0.0)),
            rows,
            cols,
            cols + pad,
            offset,
            {}};
  auto scale = f32({gr, gc}, Vec((size_t)(gr * gc), 0.0));
  loom_fp8_quantize_args a{};
  a.struct_size = LOOM_FP8_QUANTIZE_ARGS_SIZE_V2_32;
  a.src = src;
  a.dst = q;
  a.scaling = scaling;
  a.flags = LOOM_FP8_CURRENT;
  a.scale = scale;
  a.scale_inv = o.scale_inv;
  env().host.check(fp8().quantize(B().self(), &a));
  const auto c = codes(q);
  const Vec inv = get(o.scale_inv);
  std::vector<uint8_t> stored((size_t)(offset + rows * o.ld + 5), 0x11);
  o.values.resize((size_t)(rows * cols));
  const int64_t br = scaling == LOOM_FP8_SCALE_128X128 ? 128 : scaling ? 1 : rows;
  const int64_t bc = scaling == LOOM_FP8_SCALE_TENSOR ? cols : 128;
  const loom::Fp8Format f = loom::fp8_format(dt);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols; ++k) {
      const uint8_t code = c[(size_t)(r * cols + k)];
      stored[(size_t)(offset + r * o.ld + k)] = code;
      o.values[(size_t)(r * cols + k)] =
          loom::fp8_decode(f, code) * inv[(size_t)((r / br) * gc + k / bc)];
    }
  o.codes = loom::Tensor(B(), dt, {(int64_t)stored.size()});
  o.codes.upload(stored);
  return o;
}

void check_gemm_fp8(int ta, int tb, int64_t m, int64_t n, int64_t k, uint32_t sa, uint32_t sb,
                    DLDataType cdt, DLDataType adt, DLDataType bdt) {
  CAPTURE(ta);
  CAPTURE(tb);
  const std::string scaling_a = loom::fp8_scaling_name(sa);
  CAPTURE(scaling_a);
  const std::string scaling_b = loom::fp8_scaling_name(sb);
  CAPTURE(scaling_b);
  CAPTURE(loom::dtype_str(cdt));
  CAPTURE(loom::dtype_str(adt));
  Operand A = operand(adt, ta ? k : m, ta ? m : k, sa, 3, 2, 31);
  Operand Bm = operand(bdt, tb ? n : k, tb ? k : n, sb, 0, 5, 32);
  const int64_t ldc = n + 2;
  const Vec c0 = random_vec((size_t)(m * ldc), 33);
  auto C = make_as(cdt, {m, ldc}, c0);
  const Vec c0s = get_as(C);
  const double alpha = 0.75, beta = 0.5;
  loom_gemm_fp8 x = loom::gemm_fp8(A.scale_inv, sa, Bm.scale_inv, sb);
  loom::gemm_scaled(B(), ta, tb, m, n, k, alpha, A.codes, A.ld, A.offset, Bm.codes, Bm.ld,
                    Bm.offset, C, ldc, 0, beta, &x.base);
  const Vec got = get_as(C);
  Vec want = c0s;
  double mx = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double av = ta ? A.values[(size_t)(kk * m + i)] : A.values[(size_t)(i * k + kk)];
        const double bv = tb ? Bm.values[(size_t)(j * k + kk)] : Bm.values[(size_t)(kk * n + j)];
        s += av * bv;
      }
      double& w = want[(size_t)(i * ldc + j)];
      w = alpha * s + beta * w;
      mx = std::max(mx, std::fabs(w));
    }
  // f32 dequantized operands (one rounding each) and an f32 sum over k; a 16-bit C rounds once
  // more (2^-8 for bf16, 2^-11 for f16). The columns past n are left as they were.
  const double tol = loom_dtype_eq(cdt, loom_bf16())  ? 1.0 / 256
                     : loom_dtype_eq(cdt, loom_f16()) ? 1.0 / 2048
                                                      : 1e-5;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t e = (size_t)(i * ldc + j);
      if (j >= n) {
        REQUIRE(got[e] == c0s[e]);
        continue;
      }
      REQUIRE_MESSAGE(std::fabs(got[e] - want[e]) <= tol * mx,
                      "C(" << i << "," << j << ") " << got[e] << " vs " << want[e]);
    }
}

}  // namespace

TEST_CASE("fp8 ops: the scaled GEMM against float64, every transpose pair and scaling") {
  const uint32_t T = LOOM_FP8_SCALE_TENSOR, V = LOOM_FP8_SCALE_1X128, K = LOOM_FP8_SCALE_128X128;
  for (int ta : {0, 1})
    for (int tb : {0, 1}) {
      check_gemm_fp8(ta, tb, 37, 29, 300, T, T, loom_f32(), loom_e4m3(), loom_e4m3());
      check_gemm_fp8(ta, tb, 130, 29, 260, V, K, loom_f32(), loom_e4m3(), loom_e4m3());
    }
  // The backward's pairs: e5m2 gradients with e4m3 weights and activations; bf16 outputs.
  check_gemm_fp8(0, 0, 33, 150, 140, T, T, loom_bf16(), loom_e5m2(), loom_e4m3());
  check_gemm_fp8(1, 0, 140, 33, 150, T, K, loom_f32(), loom_e4m3(), loom_e5m2());
  check_gemm_fp8(0, 1, 20, 20, 129, K, V, loom_f16(), loom_e4m3(), loom_e4m3());
}

TEST_CASE("fp8 ops: refusals name what is wrong and leave the outputs alone") {
  const Operand A = operand(loom_e4m3(), 8, 16, LOOM_FP8_SCALE_TENSOR, 0, 0, 41);
  const Operand Bm = operand(loom_e5m2(), 16, 8, LOOM_FP8_SCALE_TENSOR, 0, 0, 42);
  auto C = f32({8, 8}, Vec(64, 7.0));
  auto C64 = make64({8, 8}, Vec(64, 7.0));
  loom_gemm_fp8 x =
      loom::gemm_fp8(A.scale_inv, LOOM_FP8_SCALE_TENSOR, Bm.scale_inv, LOOM_FP8_SCALE_TENSOR);
  auto gemm = [&](auto&& edit) {
    loom_gemm_args g{};
    g.struct_size = LOOM_GEMM_ARGS_SIZE_V2;
    g.m = g.n = 8;
    g.k = 16;
    g.alpha = 1;
    g.a = A.codes;
    g.lda = 16;
    g.b = Bm.codes;
    g.ldb = 8;
    g.c = C;
    g.ldc = 8;
    g.batch = 1;
    loom_gemm_fp8 e = x;
    g.ext = &e.base;
    edit(g, e);
    B().call(&loom_ops::gemm, &g);
  };
  gemm([](loom_gemm_args&, loom_gemm_fp8&) {});  // the valid call runs
  const Vec after_valid = get(C);
  auto refused = [&](const char* needle, auto&& edit) {
    expect_error([&] { gemm(edit); }, LOOM_ERR_INVALID_ARGUMENT, needle);
  };
  refused("both e5m2", [&](loom_gemm_args& g, loom_gemm_fp8&) { g.a = Bm.codes; });
  refused("batch = 1", [](loom_gemm_args& g, loom_gemm_fp8&) { g.batch = 2; });
  refused("writes f32, bf16 or f16", [&](loom_gemm_args& g, loom_gemm_fp8&) { g.c = C64; });
  refused("a_scale_inv has 1 elements; the 1x128",
          [](loom_gemm_args&, loom_gemm_fp8& e) { e.a_scaling = LOOM_FP8_SCALE_1X128; });
  refused("takes e4m3 or e5m2", [&](loom_gemm_args& g, loom_gemm_fp8&) { g.b = C; });
  loom_gemm_epilogue epi = loom::gemm_epilogue(LOOM_EPILOGUE_BIAS, C, nullptr);
  refused("not taken beside loom.fp8/1",
          [&](loom_gemm_args&, loom_gemm_fp8& e) { e.base.next = &epi.base; });
  CHECK(get(C) == after_valid);  // untouched by the refusals

  auto src = f32({4, 200}, random_vec(800, 43));
  auto src64 = make64({4, 200}, random_vec(800, 43));
  loom::Tensor dst(B(), loom_e4m3(), {4, 200}), dst_t(B(), loom_e4m3(), {200, 4});
  auto one = f32({1}, {2.0});
  auto grid = f32({4, 2}, Vec(8, 2.0));
  auto quantize = [&](const char* needle, auto&& edit) {
    loom_fp8_quantize_args a{};
    a.struct_size = LOOM_FP8_QUANTIZE_ARGS_SIZE_V2_32;
    a.src = src;
    a.dst = dst;
    a.scale = one;
    edit(a);
    loom_error* err = fp8().quantize(B().self(), &a);
    REQUIRE(err != nullptr);
    expect_error([&] { loom::check(B().host(), err); }, LOOM_ERR_INVALID_ARGUMENT, needle);
  };
  quantize("takes f32, bf16 or f16", [&](loom_fp8_quantize_args& a) { a.src = src64; });
  quantize("takes LOOM_FP8_CURRENT", [&](loom_fp8_quantize_args& a) {
    a.scaling = LOOM_FP8_SCALE_1X128;
    a.scale = grid;
  });
  quantize("LOOM_FP8_POW2 takes", [](loom_fp8_quantize_args& a) { a.flags = LOOM_FP8_POW2; });
  quantize("dst_t's own grid", [&](loom_fp8_quantize_args& a) {
    a.scaling = LOOM_FP8_SCALE_1X128;
    a.flags = LOOM_FP8_CURRENT;
    a.scale = grid;
    a.dst_t = dst_t;
    a.scale_t = grid;  // (4, 2) is src's grid; dst_t's is (200, 1)
  });
  quantize("scale_t and scale_inv_t belong to dst_t",
           [&](loom_fp8_quantize_args& a) { a.scale_t = grid; });
  quantize("scale has 1 elements", [](loom_fp8_quantize_args& a) {
    a.scaling = LOOM_FP8_SCALE_128X128;
    a.flags = LOOM_FP8_CURRENT;
  });
  quantize("margin must be >= 0", [](loom_fp8_quantize_args& a) { a.margin = -1; });
  CHECK(get(one)[0] == 2.0);
}
