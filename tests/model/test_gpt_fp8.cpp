// FP8 training's layers (issue 39; precision.fp8, loom.fp8-training/1): loom::tp::LocalLinear
// with FP8 GEMMs (loom/cpp/fp8_linear.hpp) on backend/cpu against a float64 reference that
// quantizes each operand itself, by the recipe's rules written out here: the forward's x and
// W in e4m3, the input gradient's dy in e5m2 (hybrid) with W, the weight gradient's dy^T and
// x^T with k = the tokens; tensorwise scales from each tensor's amax, blockwise ones from
// DeepSeek-V3's tiles (1x128 along k for activations and gradients, 128x128 for weights,
// powers of two), delayed ones given (each cast folding its amax into the history's slot 0
// while recording). Then model/gpt with the extension: it trains with FP8 in the layers it
// is asked to, and refuses what it does not cover by name.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "loom/cpp/fp8.hpp"
#include "loom/cpp/layers/moe/expert_gemms.hpp"
#include "loom/cpp/tensor_parallel.hpp"
#include "model_terms.hpp"
#include "model_test_util.hpp"

using namespace modeltest;

namespace {

using Vec = std::vector<double>;

Vec randoms(size_t n, uint64_t seed, double scale) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  Vec v(n);
  for (size_t i = 0; i < n; ++i) v[i] = d(rng) * scale * (i % 11 == 0 ? 20.0 : 1.0);
  return v;
}

// What a (rows, cols) matrix holds after its cast: tiles of br x bc (0: the whole extent),
// each scaled by largest / its amax (in f32; pow2: that scale's power of two) or, delayed,
// by `given`, the product rounded to f32 and cast (loom::fp8_encode, which test_fp8.cpp
// checks at every code: saturating), then decoded and multiplied by the scale's f32 inverse,
// as a backend's dequantization does.
Vec cast(const Vec& x, int64_t rows, int64_t cols, const loom::Fp8Format& f, int64_t br, int64_t bc,
         bool pow2, float given = 0) {
  br = br ? br : rows;
  bc = bc ? bc : cols;
  Vec out(x.size());
  for (int64_t r0 = 0; r0 < rows; r0 += br)
    for (int64_t c0 = 0; c0 < cols; c0 += bc) {
      const int64_t r1 = std::min(rows, r0 + br), c1 = std::min(cols, c0 + bc);
      float amax = 0;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c)
          amax = std::max(amax, std::fabs((float)x[(size_t)(r * cols + c)]));
      float s = amax > 0 ? (float)f.largest / amax : 1.0f;
      if (pow2) s = std::exp2(std::floor(std::log2(s)));
      if (given > 0) s = given;
      const float inv = 1.0f / s;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) {
          const float v = (float)x[(size_t)(r * cols + c)] * s;
          out[(size_t)(r * cols + c)] =
              (double)((float)loom::fp8_decode(f, loom::fp8_encode(f, v)) * inv);
        }
    }
  return out;
}

Vec transpose(const Vec& x, int64_t rows, int64_t cols) {
  Vec t(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[(size_t)(c * rows + r)] = x[(size_t)(r * cols + c)];
  return t;
}

// C(m, n) = A(m, k) B(n, k)^T in double.
Vec nt(const Vec& a, const Vec& b, int64_t m, int64_t n, int64_t k) {
  Vec c((size_t)(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t q = 0; q < k; ++q) s += a[(size_t)(i * k + q)] * b[(size_t)(j * k + q)];
      c[(size_t)(i * n + j)] = s;
    }
  return c;
}

double max_abs(const Vec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}
double max_diff(const Vec& a, const Vec& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

loom::Tensor upload(const loom::Backend& be, const std::vector<int64_t>& shape, const Vec& v) {
  loom::Tensor t(be, loom_f32(), shape);
  t.upload(std::vector<float>(v.begin(), v.end()));
  return t;
}
Vec download(const loom::Tensor& t) {
  const auto f = t.download<float>();
  return Vec(f.begin(), f.end());
}

// Delayed scaling's scales for x, W and dy (x's and W's saturate their largest elements: a
// stale scale does, x's largest being 20 x 32 > 448 and W's 1.0 x 512), and a history of 2
// slots whose slot 1 the casts must leave alone.
constexpr float kGiven[3] = {32.0f, 512.0f, 2097152.0f};
const Vec kHistory = {0.0, 0.5, 0.0, 0.25, 0.0, 0.125};

// The layer's input, weight and output-gradient amaxes (slot 0 of its history, which then
// holds them exactly) or nothing when `recording` is off.
void check_recorded(const loom::Tensor& history, const std::vector<Vec>& tensors, bool recording) {
  const auto h = history.download<float>();
  for (size_t r = 0; r < 3; ++r) {
    float amax = 0;
    for (double v : tensors[r]) amax = std::max(amax, std::fabs((float)v));
    CHECK(h[2 * r] == (recording ? amax : 0.0f));
    CHECK(h[2 * r + 1] == (float)kHistory[2 * r + 1]);
  }
}

void check_linear(int32_t recipe, bool hybrid) {
  CAPTURE(recipe);
  CAPTURE(hybrid);
  const bool delayed = recipe == LOOM_FP8_RECIPE_DELAYED;
  Host h;
  const loom::Backend be(h.th.host(), h.be);
  // A slice [row0, row0 + out) of a (rows, in) weight, as c_attn's q, k and v parts are; n
  // tokens: more than one 128-tile along every dimension the blocks cut.
  const int64_t n = 150, in = 260, out = 140, rows = 300, row0 = 37;
  const Vec x = randoms((size_t)(n * in), 1, 1.0), wall = randoms((size_t)(rows * in), 2, 0.05);
  const Vec bias = randoms((size_t)out, 3, 0.1), dy = randoms((size_t)(n * out), 4, 1e-3);
  const Vec w(wall.begin() + row0 * in, wall.begin() + (row0 + out) * in);
  auto X = upload(be, {n, in}, x), W = upload(be, {rows, in}, wall);
  auto Bv = upload(be, {out}, bias), DY = upload(be, {n, out}, dy);
  auto Y = upload(be, {n, out}, Vec((size_t)(n * out), 0.0));
  auto DX = upload(be, {n, in}, Vec((size_t)(n * in), 0.0));
  auto DW = upload(be, {rows, in}, Vec((size_t)(rows * in), 0.5));  // += into the slice alone
  auto DB = upload(be, {out}, Vec((size_t)out, 0.0));

  loom::tp::LocalLinear l;
  l.w = W;
  l.dw = DW;
  l.b = loom::View(Bv.get(), {out});
  l.db = loom::View(DB.get(), {out});
  l.has_bias = true;
  l.row0 = row0;
  l.out = out;
  l.in = in;
  auto f = std::make_shared<loom::tp::Fp8Linear>();
  f->recipe = recipe;
  f->hybrid = hybrid;
  auto recording = std::make_shared<bool>(true);
  auto H = upload(be, {3, 2}, kHistory), S = upload(be, {3}, Vec(kGiven, kGiven + 3));
  if (delayed) {
    auto state = std::make_shared<loom::tp::Fp8History>();
    state->history = loom::View(H.get(), {3, 2});
    state->scale = loom::View(S.get(), {3});
    state->len = 2;
    state->recording = recording;
    f->delayed = state;
  }
  l.fp8 = f;
  l.forward(be, Y, X, n);
  l.backward(be, DX, false, DY, X, n);
  if (delayed) {
    check_recorded(H, {x, w, dy}, true);
    H.upload(std::vector<float>(kHistory.begin(), kHistory.end()));
    *recording = false;  // a forward without gradients records nothing
    auto Y2 = upload(be, {n, out}, Vec((size_t)(n * out), 0.0));
    l.forward(be, Y2, X, n);
    check_recorded(H, {x, w, dy}, false);
    CHECK(Y2.download<float>() == Y.download<float>());
  }

  const bool blocks = recipe == LOOM_FP8_RECIPE_BLOCKWISE;
  const loom::Fp8Format e4 = loom::fp8_e4m3(), g = hybrid ? loom::fp8_e5m2() : loom::fp8_e4m3();
  const int64_t act = blocks ? 128 : 0;   // activations' and gradients' tiles: 1 x act
  const int64_t wblk = blocks ? 128 : 0;  // weights' blocks: wblk x wblk
  const int64_t one = blocks ? 1 : 0;
  const float gx = delayed ? kGiven[0] : 0, gw = delayed ? kGiven[1] : 0;
  const float gd = delayed ? kGiven[2] : 0;
  const Vec xq = cast(x, n, in, e4, one, act, blocks, gx),
            wq = cast(w, out, in, e4, wblk, wblk, blocks, gw);
  Vec y = nt(xq, wq, n, out, in);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < out; ++o) y[(size_t)(i * out + o)] += (float)bias[(size_t)o];
  const Vec dq = cast(dy, n, out, g, one, act, blocks, gd);
  const Vec wtq = cast(transpose(w, out, in), in, out, e4, wblk, wblk, blocks, gw);
  const Vec dx = nt(dq, wtq, n, in, out);
  const Vec dtq = cast(transpose(dy, n, out), out, n, g, one, act, blocks, gd);
  const Vec xtq = cast(transpose(x, n, in), in, n, e4, one, act, blocks, gx);
  const Vec dw = nt(dtq, xtq, out, in, n);

  // f32 sums over k of exact-ish products: 1e-5 of the largest value.
  const Vec gy = download(Y), gdx = download(DX), gdw_all = download(DW);
  const Vec gdw(gdw_all.begin() + row0 * in, gdw_all.begin() + (row0 + out) * in);
  Vec want_dw = dw;
  for (double& v : want_dw) v += 0.5;
  CHECK(max_diff(gy, y) <= 1e-5 * max_abs(y));
  CHECK(max_diff(gdx, dx) <= 1e-5 * max_abs(dx));
  CHECK(max_diff(gdw, want_dw) <= 1e-5 * max_abs(want_dw));
  for (int64_t i = 0; i < rows * in; ++i)
    if (i < row0 * in || i >= (row0 + out) * in) REQUIRE(gdw_all[(size_t)i] == (double)0.5f);
  // The FP8 result is not the exact one: quantization acted (e4m3 keeps 3 mantissa bits).
  Vec exact = nt(x, w, n, out, in);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < out; ++o) exact[(size_t)(i * out + o)] += (float)bias[(size_t)o];
  const double err = max_diff(gy, exact) / max_abs(exact);
  MESSAGE("recipe " << recipe << std::string(hybrid ? " hybrid" : " e4m3") << ": FP8 y vs exact "
                    << err << " of max");
  CHECK(err > 1e-4);
  CHECK(err < (delayed ? 0.5 : 0.1));  // (delayed: saturated on purpose)
  // The bias gradient stays the column sums of dy (not quantized).
  const Vec gdb = download(DB);
  for (int64_t o = 0; o < out; ++o) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += (float)dy[(size_t)(i * out + o)];
    REQUIRE(std::fabs(gdb[(size_t)o] - s) <= 1e-5 * std::fabs(s) + 1e-9);
  }
}

// A mixture of experts' GEMMs (layers/moe/expert_gemms.hpp) in FP8: 4 local experts' rows
// grouped by expert (one expert gets none), W (4, out, in); each expert's x rows, W_e and dy
// rows cast with their own scales (delayed: expert e's history and scales, given as
// kGiven x (e + 1)), against the float64 reference of each expert's linear layer.
void check_experts(int32_t recipe) {
  CAPTURE(recipe);
  const bool delayed = recipe == LOOM_FP8_RECIPE_DELAYED,
             blocks = recipe == LOOM_FP8_RECIPE_BLOCKWISE;
  Host h;
  loom::layers::Ctx c;
  c.be = loom::Backend(h.th.host(), h.be);
  c.dtype = loom_f32();
  const loom::Backend& be = c.be;
  const std::vector<int64_t> counts = {70, 0, 150, 33};
  const int64_t E = 4, R = 253, in = 130, out = 140;
  const Vec x = randoms((size_t)(R * in), 11, 1.0), w = randoms((size_t)(E * out * in), 12, 0.05);
  const Vec dy = randoms((size_t)(R * out), 13, 1e-3);
  auto X = upload(be, {R, in}, x), W = upload(be, {E, out, in}, w), DY = upload(be, {R, out}, dy);
  auto Y = upload(be, {R, out}, Vec((size_t)(R * out), 0.0));
  auto DX = upload(be, {R, in}, Vec((size_t)(R * in), 0.0));
  auto DW = upload(be, {E, out, in}, Vec((size_t)(E * out * in), 0.5));
  Vec given(E * 3);
  for (int64_t e = 0; e < E; ++e)
    for (int64_t r = 0; r < 3; ++r) given[(size_t)(e * 3 + r)] = kGiven[r] * (double)(e + 1);
  auto H = upload(be, {E, 3, 1}, Vec((size_t)(E * 3), 0.0)), S = upload(be, {E, 3}, given);
  loom::layers::Param p;
  p.name = "h.0.moe.experts.c_fc.weight";
  p.shape = {E, out, in};
  p.value = loom::View(W.get(), p.shape);
  p.grad = loom::View(DW.get(), p.shape);
  auto recording = std::make_shared<bool>(true);
  for (int64_t e = 0; e < E; ++e) {
    auto f = std::make_shared<loom::tp::Fp8Linear>();
    f->recipe = recipe;
    if (delayed) {
      auto state = std::make_shared<loom::tp::Fp8History>();
      state->history = loom::View(H.get(), {3, 1}, e * 3);
      state->scale = loom::View(S.get(), {3}, e * 3);
      state->recording = recording;
      f->delayed = state;
    }
    p.fp8_experts.push_back(f);
  }
  loom::layers::expert_linear_forward(c, counts, p, X, Y);
  loom::layers::expert_linear_backward_data(c, counts, p, DY, DX);
  loom::layers::expert_linear_backward_weight(c, counts, p, DY, X, 0.5);

  const loom::Fp8Format e4 = loom::fp8_e4m3(), e5 = loom::fp8_e5m2();
  const int64_t act = blocks ? 128 : 0, wblk = blocks ? 128 : 0, one = blocks ? 1 : 0;
  const Vec gy = download(Y), gdx = download(DX), gdw = download(DW), gh = download(H);
  int64_t r0 = 0;
  for (int64_t e = 0; e < E; ++e) {
    CAPTURE(e);
    const int64_t n = counts[(size_t)e];
    const float gx = delayed ? (float)given[(size_t)(e * 3)] : 0,
                gw = delayed ? (float)given[(size_t)(e * 3 + 1)] : 0,
                gd = delayed ? (float)given[(size_t)(e * 3 + 2)] : 0;
    const Vec we(w.begin() + e * out * in, w.begin() + (e + 1) * out * in);
    const Vec xe(x.begin() + r0 * in, x.begin() + (r0 + n) * in);
    const Vec de(dy.begin() + r0 * out, dy.begin() + (r0 + n) * out);
    const Vec gye(gy.begin() + r0 * out, gy.begin() + (r0 + n) * out);
    const Vec gdxe(gdx.begin() + r0 * in, gdx.begin() + (r0 + n) * in);
    Vec gdwe(gdw.begin() + e * out * in, gdw.begin() + (e + 1) * out * in);
    for (double& v : gdwe) v -= 0.5;
    if (n == 0) {  // no rows: nothing cast, nothing recorded, its gradient untouched
      CHECK(max_abs(gdwe) == 0.0);
      for (int64_t r = 0; r < 3; ++r) CHECK(gh[(size_t)(e * 3 + r)] == 0.0);
      continue;
    }
    const Vec xq = cast(xe, n, in, e4, one, act, blocks, gx),
              wq = cast(we, out, in, e4, wblk, wblk, blocks, gw);
    const Vec y = nt(xq, wq, n, out, in);
    const Vec dq = cast(de, n, out, e5, one, act, blocks, gd);
    const Vec wtq = cast(transpose(we, out, in), in, out, e4, wblk, wblk, blocks, gw);
    const Vec dx = nt(dq, wtq, n, in, out);
    const Vec dtq = cast(transpose(de, n, out), out, n, e5, one, act, blocks, gd);
    const Vec xtq = cast(transpose(xe, n, in), in, n, e4, one, act, blocks, gx);
    Vec dw = nt(dtq, xtq, out, in, n);
    for (double& v : dw) v *= 0.5;
    CHECK(max_diff(gye, y) <= 1e-5 * max_abs(y));
    CHECK(max_diff(gdxe, dx) <= 1e-5 * max_abs(dx));
    CHECK(max_diff(gdwe, dw) <= 1e-5 * max_abs(dw) + 1e-7);  // (0.5 + dw - 0.5 in f32)
    if (delayed) {  // each expert's amaxes in its own history: its rows, its W_e
      const std::vector<const Vec*> tensors = {&xe, &we, &de};
      for (size_t r = 0; r < 3; ++r) {
        float amax = 0;
        for (double v : *tensors[r]) amax = std::max(amax, std::fabs((float)v));
        CHECK(gh[(size_t)e * 3 + r] == amax);
      }
    }
    r0 += n;
  }
}

loom_fp8_training fp8_ext(int32_t recipe, int32_t start = 0, int32_t end = 0) {
  loom_fp8_training e{};
  e.base = {sizeof e, LOOM_EXT_FP8_TRAINING, LOOM_EXT_REQUIRED, nullptr};
  e.recipe = recipe;
  e.hybrid = 1;
  e.amax_history_len = 1;
  e.layers_at_start_bf16 = start;
  e.layers_at_end_bf16 = end;
  return e;
}

// The objective of one forward+backward of a tiny GPT-2 with `ext` on its create args.
double objective(const Overrides& o, const loom_ext* ext) {
  const int64_t B = 2, T = 16, V = 64;
  Host h;
  Gpt m(h, o, V, B, T, loom_f32(), nullptr, ext);
  m.check(m.api()->init_params(m.self(), 5));
  std::vector<int32_t> tok(B * T), tgt(B * T);
  for (int64_t i = 0; i < B * T; ++i) {
    tok[i] = (int32_t)((i * 7 + 3) % V);
    tgt[i] = (int32_t)((i * 11 + 5) % V);
  }
  const double ls = 1.0 / (double)(B * T);
  m.check(m.api()->zero_grad(m.self()));
  return step(m, tok, tgt, B, T, ls, true).objective(ls);
}

std::string refusal(const Overrides& o, const loom_ext* ext) {
  try {
    objective(o, ext);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("fp8 linear: tensorwise, hybrid and e4m3, against the float64 reference") {
  check_linear(LOOM_FP8_RECIPE_TENSORWISE, true);
  check_linear(LOOM_FP8_RECIPE_TENSORWISE, false);
}

TEST_CASE("fp8 linear: blockwise (1x128 activations and gradients, 128x128 weights)") {
  check_linear(LOOM_FP8_RECIPE_BLOCKWISE, true);
}

TEST_CASE("fp8 linear: delayed scaling casts with the history's scales and records the amaxes") {
  check_linear(LOOM_FP8_RECIPE_DELAYED, true);
  check_linear(LOOM_FP8_RECIPE_DELAYED, false);
}

TEST_CASE("fp8 experts: each expert's rows and weight cast with their own scales") {
  check_experts(LOOM_FP8_RECIPE_TENSORWISE);
  check_experts(LOOM_FP8_RECIPE_BLOCKWISE);
  check_experts(LOOM_FP8_RECIPE_DELAYED);
}

TEST_CASE("model/gpt with loom.fp8-training/1: FP8 in the layers asked for, near the f32 loss") {
  Overrides o = tiny_gpt2();
  o.erase("n_embd");
  o.erase("n_layer");
  o.emplace("n_embd", "32");
  o.emplace("n_layer", "3");
  const double plain = objective(o, nullptr);
  for (int32_t recipe :
       {LOOM_FP8_RECIPE_TENSORWISE, LOOM_FP8_RECIPE_DELAYED, LOOM_FP8_RECIPE_BLOCKWISE}) {
    const loom_fp8_training all = fp8_ext(recipe), middle = fp8_ext(recipe, 1, 1);
    const double a = objective(o, &all.base), m = objective(o, &middle.base);
    MESSAGE("recipe " << recipe << ": objective " << std::setprecision(9) << a << " (all layers), "
                      << m << " (the middle one), " << plain << " without FP8");
    CHECK(a != plain);
    CHECK(m != plain);
    CHECK(m != a);  // the first and last layers kept in f32 change the numbers
    CHECK(std::fabs(a - plain) <= 0.02 * std::fabs(plain));
  }
}

TEST_CASE("model/gpt with loom.fp8-training/1: a mixture of experts, its shared expert too") {
  Overrides o = tiny_gpt2();
  o.emplace("num_experts", "4");
  o.emplace("moe_shared_expert_intermediate_size", "48");
  const double plain = objective(o, nullptr);
  for (int32_t recipe :
       {LOOM_FP8_RECIPE_TENSORWISE, LOOM_FP8_RECIPE_DELAYED, LOOM_FP8_RECIPE_BLOCKWISE}) {
    const loom_fp8_training all = fp8_ext(recipe);
    const double a = objective(o, &all.base);
    MESSAGE("recipe " << recipe << ": MoE objective " << std::setprecision(9) << a << ", " << plain
                      << " without FP8");
    CHECK(a != plain);
    CHECK(std::fabs(a - plain) <= 0.02 * std::fabs(plain));
  }
}

TEST_CASE("model/gpt with loom.fp8-training/1: refusals name what is not covered") {
  loom_fp8_training delayed = fp8_ext(LOOM_FP8_RECIPE_DELAYED);
  delayed.amax_history_len = 0;
  CHECK(refusal(tiny_gpt2(), &delayed.base).find("fp8_amax_history_len must be >= 1") !=
        std::string::npos);
  const loom_fp8_training none_left = fp8_ext(LOOM_FP8_RECIPE_TENSORWISE, 1, 1);
  CHECK(refusal(tiny_gpt2(), &none_left.base).find("none left in FP8") != std::string::npos);
}
