// model/gpt under mixed precision: create_args.dtype bf16 or f16 gives parameter values and
// activations in that dtype and parameter gradients in f32 (Megatron's main_grad). A tiny
// GPT-2 and a tiny Llama are run in bf16/f16 and in f32 from the same seed; the f32 model
// (tested against PyTorch in test_gpt_reference.cpp) is the reference.
#include <cmath>
#include <string>

#include "model_test_util.hpp"

using namespace modeltest;

namespace {

std::string name_of(DLDataType dt) { return dt.code == kDLBfloat ? "bf16" : "f16"; }

void batch(int64_t B, int64_t T, int64_t V, uint32_t seed, std::vector<int32_t>& tokens,
           std::vector<int32_t>& targets) {
  tokens.resize(B * T);
  targets.resize(B * T);
  uint32_t x = seed;
  for (int64_t i = 0; i < B * T; ++i) {
    x = x * 1664525u + 1013904223u;
    tokens[i] = (int32_t)((x >> 8) % V);
    targets[i] = (int32_t)((x >> 20) % V);
  }
  targets[3] = -1;  // an ignored position
}

// max |a - b| / max |b|, the per-tensor error measure below (0 when b is all zero and a too).
double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double e = 0;
  for (size_t i = 0; i < a.size(); ++i) e = std::max(e, std::fabs(a[i] - b[i]));
  const double s = max_abs(b);
  return s > 0 ? e / s : e;
}

// The same model in f32 and in `dt` from seed 5, one forward and backward each: the losses and
// every parameter's gradient compared.
//
// Tolerances. The loss sums f32 token losses of logits that went through a few bf16
// roundings (2^-9 relative each), which mostly cancel over tokens: measured ~1e-5 relative,
// so 2e-3 holds with a wide margin while a wrong loss scale or dtype is off by far more.
// Gradients pass back through bf16 activations and weights in every layer, and a tensor's
// small entries carry the rounding of its large ones: 5e-2 of the tensor's max |gradient|
// (measured up to 1.3e-2 in bf16, 2e-3 in f16) — a gradient in the wrong dtype, unscaled,
// or missing a term is off by O(1).
void compare_with_f32(const Overrides& o, DLDataType dt) {
  CAPTURE(name_of(dt));
  Host h;
  const int64_t V = 64, B = 2, T = 8;
  Gpt ref(h, o, V, B, T, loom_f32()), mp(h, o, V, B, T, dt);
  ref.check(ref.api()->init_params(ref.self(), 5));
  mp.check(mp.api()->init_params(mp.self(), 5));
  REQUIRE(ref.params.size() == mp.params.size());
  for (auto& p : mp.params) {
    CAPTURE(p.name);
    CHECK(loom_dtype_eq(p.value->dtype, dt));
    CHECK(loom_dtype_eq(p.grad->dtype, loom_f32()));  // the main grad
    // values: the f32 init rounded once (half an ulp: 2^-9 in bf16)
    CHECK(rel_err(mp.value(p.name), ref.value(p.name)) <= 4e-3);
  }
  std::vector<int32_t> tok, tgt;
  batch(B, T, V, 11, tok, tgt);
  ref.check(ref.api()->zero_grad(ref.self()));
  mp.check(mp.api()->zero_grad(mp.self()));
  auto [l32, n32] = ref.run(tok, tgt, B, T, 1.0 / 15, true);
  auto [lmp, nmp] = mp.run(tok, tgt, B, T, 1.0 / 15, true);
  CHECK(n32 == 15);
  CHECK(nmp == 15);
  CHECK(std::fabs(lmp - l32) <= 2e-3 * std::fabs(l32));
  for (auto& p : ref.params) {
    CAPTURE(p.name);
    const auto g32 = ref.grad(p.name), gmp = mp.grad(p.name);
    REQUIRE(max_abs(g32) > 0);  // every parameter gets a gradient in this model
    CHECK(rel_err(gmp, g32) <= 5e-2);
  }
}

}  // namespace

TEST_CASE("model/gpt mixed precision: GPT-2 in bf16 and f16 against f32 from the same init") {
  for (DLDataType dt : {loom_bf16(), loom_f16()}) compare_with_f32(tiny_gpt2(), dt);
}

TEST_CASE("model/gpt mixed precision: Llama (RMSNorm, SwiGLU, RoPE, GQA) in bf16 and f16") {
  for (DLDataType dt : {loom_bf16(), loom_f16()}) compare_with_f32(tiny_llama(), dt);
}

TEST_CASE("model/gpt mixed precision: gradients accumulate in f32 across micro-batches") {
  // g(mb1) + g(mb2) accumulated in the f32 main grad equals the two computed apart and
  // summed in double to f32 rounding (1e-6); a 16-bit accumulator would round the sum to
  // 2^-9 relative and fail.
  Host h;
  const int64_t V = 64, B = 2, T = 8;
  Gpt m(h, tiny_llama(), V, B, T, loom_bf16());
  m.check(m.api()->init_params(m.self(), 3));
  std::vector<int32_t> tok1, tgt1, tok2, tgt2;
  batch(B, T, V, 21, tok1, tgt1);
  batch(B, T, V, 22, tok2, tgt2);
  auto grads = [&] {
    std::vector<std::vector<double>> g;
    for (auto& p : m.params) g.push_back(m.grad(p.name));
    return g;
  };
  m.check(m.api()->zero_grad(m.self()));
  m.run(tok1, tgt1, B, T, 0.5, true);
  const auto g1 = grads();
  m.check(m.api()->zero_grad(m.self()));
  m.run(tok2, tgt2, B, T, 0.5, true);
  const auto g2 = grads();
  m.check(m.api()->zero_grad(m.self()));
  m.run(tok1, tgt1, B, T, 0.5, true);
  m.run(tok2, tgt2, B, T, 0.5, true);
  const auto g12 = grads();
  for (size_t i = 0; i < g12.size(); ++i) {
    CAPTURE(m.params[i].name);
    std::vector<double> sum(g1[i].size());
    for (size_t j = 0; j < sum.size(); ++j) sum[j] = g1[i][j] + g2[i][j];
    CHECK(rel_err(g12[i], sum) <= 1e-6);
  }
}

TEST_CASE("model/gpt mixed precision: bf16 decode writes f32 logits close to the f32 model's") {
  Host h;
  const int64_t V = 64, B = 2, T = 6;
  Gpt ref(h, tiny_gpt2(), V, B, T, loom_f32()), mp(h, tiny_gpt2(), V, B, T, loom_bf16());
  ref.check(ref.api()->init_params(ref.self(), 9));
  mp.check(mp.api()->init_params(mp.self(), 9));
  std::vector<int32_t> tok(B * T);
  for (int64_t i = 0; i < B * T; ++i) tok[i] = (int32_t)((7 * i + 3) % V);
  std::vector<float> l32(B * V), lmp(B * V);
  ref.check(ref.decode_ext()->kv_reset(ref.self(), B, T));
  mp.check(mp.decode_ext()->kv_reset(mp.self(), B, T));
  ref.check(ref.decode_ext()->decode(ref.self(), tok.data(), T, l32.data()));
  mp.check(mp.decode_ext()->decode(mp.self(), tok.data(), T, lmp.data()));
  std::vector<double> a(lmp.begin(), lmp.end()), b(l32.begin(), l32.end());
  // logits are a bf16 tensor cast to f32: the f32 model's within bf16 rounding of each layer
  CHECK(rel_err(a, b) <= 5e-2);
  // one more token through the cache
  std::vector<int32_t> next = {1, 2};
  std::vector<float> n32(B * V), nmp(B * V);
  ref.check(ref.decode_ext()->kv_reset(ref.self(), B, T + 1));
  mp.check(mp.decode_ext()->kv_reset(mp.self(), B, T + 1));
  ref.check(ref.decode_ext()->decode(ref.self(), tok.data(), T, l32.data()));
  mp.check(mp.decode_ext()->decode(mp.self(), tok.data(), T, lmp.data()));
  ref.check(ref.decode_ext()->decode(ref.self(), next.data(), 1, n32.data()));
  mp.check(mp.decode_ext()->decode(mp.self(), next.data(), 1, nmp.data()));
  CHECK(rel_err(std::vector<double>(nmp.begin(), nmp.end()),
                std::vector<double>(n32.begin(), n32.end())) <= 5e-2);
}
