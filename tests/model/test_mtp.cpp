// model/gpt's multi-token prediction (mtp_num_layers, issue 37): the term "mtp" named,
// counted and weighted as Megatron scales it; the whole objective's gradient against central
// finite differences in float64 (the depths' projections, norms and layers, the shared
// embedding and head, the main layers beneath); a split backward; refusals. The counts pin
// the shifts: depth k at position i reads targets[i + k - 1] and predicts targets[i + k].
#include <cmath>

#include "model_terms.hpp"
#include "model_test_util.hpp"
#include "split_backward_check.hpp"

using namespace modeltest;

namespace {

// A Llama-style tiny model (RoPE, untied) with two depths of multi-token prediction.
Overrides tiny_mtp(const char* depths = "2") {
  Overrides o = tiny_llama();
  o.emplace("mtp_num_layers", depths);
  o.emplace("mtp_loss_scaling_factor", "0.3");
  return o;
}

void sequence(int64_t B, int64_t T, int64_t V, std::vector<int32_t>& tok,
              std::vector<int32_t>& tgt) {
  tok.resize(B * T);
  tgt.resize(B * T);
  for (int64_t i = 0; i < B * T; ++i) {
    tok[i] = (int32_t)((i * 7 + 3) % V);
    tgt[i] = (int32_t)((i * 11 + 5) % V);
  }
}

}  // namespace

TEST_CASE("model/gpt MTP: the term, its count and weight, and its parameters") {
  const int64_t B = 2, T = 8, V = 40;
  Host h;
  Gpt m(h, tiny_mtp(), V, B, T, loom_f64());
  m.check(m.api()->init_params(m.self(), 3));
  CHECK(m.param("mtp.0.eh_proj.weight").value->shape[1] == 32);  // [en | hn] of width 16
  CHECK(m.has_param("mtp.1.layer.attn.c_attn.weight"));
  CHECK(m.has_param("mtp.1.final_norm.weight"));
  std::vector<int32_t> tok, tgt;
  sequence(B, T, V, tok, tgt);
  tgt[3] = -1;  // an ignored target: depth 1 at position 2 reads no token, predicts nothing
  const Terms t = step(m, tok, tgt, B, T, 1.0, false);
  REQUIRE(t.names == std::vector<std::string>{"lm", "mtp"});
  // depth 1 predicts targets[i+1] from i < T-1, depth 2 targets[i+2] from i < T-2, per row;
  // the ignored target removes the predictions that read it or aim at it
  CHECK(t.count[1] == (double)(B * (T - 1) + B * (T - 2) - 4));
  CHECK(t.weight[1] == doctest::Approx(0.3 / 2));
  CHECK(t.sum[1] / t.count[1] == doctest::Approx(std::log((double)V)).epsilon(0.1));
  // FLOPs: two more layers and heads than the model without
  Gpt plain(h, tiny_llama(), V, B, T, loom_f64());
  CHECK(m.api()->flops_per_token(m.self()) > plain.api()->flops_per_token(plain.self()));
}

TEST_CASE("model/gpt MTP: the objective's gradient equals finite differences (f64)") {
  const int64_t B = 2, T = 8, V = 40;
  Host h;
  Gpt m(h, tiny_mtp(), V, B, T, loom_f64());
  m.check(m.api()->init_params(m.self(), 4));
  std::vector<int32_t> tok, tgt;
  sequence(B, T, V, tok, tgt);
  const double ls = 1.0 / (double)(B * T);
  m.check(m.api()->zero_grad(m.self()));
  step(m, tok, tgt, B, T, ls, true);
  const FdResult r = finite_differences(
      h, m,
      {"mtp.0.eh_proj.weight", "mtp.1.eh_proj.weight", "mtp.0.enorm.weight", "mtp.1.hnorm.weight",
       "mtp.0.final_norm.weight", "mtp.1.layer.attn.c_attn.weight", "mtp.0.layer.mlp.c_fc.weight",
       "mtp.1.layer.ln_2.weight", "wte", "lm_head.weight", "h.1.mlp.c_proj.weight", "ln_f.weight"},
      [&] { return step(m, tok, tgt, B, T, ls, false).objective(ls); });
  MESSAGE("MTP: max |fd - analytic| " << r.worst << " over gradients up to " << r.scale);
  CHECK(r.scale > 1e-4);
  CHECK(r.worst <= 1e-7 * r.scale);
}

TEST_CASE("model/gpt MTP: a split backward gives the whole backward's gradients bitwise") {
  check_split_backward(tiny_mtp(), "mtp.0.layer.mlp.c_fc.weight");
}

TEST_CASE("model/gpt MTP: what it does not run with is refused by name") {
  Host h;
  Overrides learned = tiny_gpt2();
  learned.emplace("mtp_num_layers", "1");
  expect_refused(h, learned, "mtp_num_layers = 1 embeds the tokens ahead without positions");
}
