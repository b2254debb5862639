// model/gpt's multi-token prediction (mtp_num_layers, issue 37): the term "mtp" named,
// counted and weighted as Megatron scales it; the whole objective's gradient against central
// finite differences in float64 (the depths' projections, norms and layers, the shared
// embedding and head, the main layers beneath); a split backward; refusals. The counts pin
// the shifts: depth k at position i reads targets[i + k - 1] and predicts targets[i + k].
#include <algorithm>
#include <cmath>

#include "loom/cpp/layers/moe/moe_router.hpp"
#include "model_terms.hpp"
#include "model_test_util.hpp"
#include "packed_check.hpp"
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

// The same with 4 experts, top-2, in every layer: the depths are MoE layers too.
Overrides tiny_moe_mtp(const char* depths = "2") {
  Overrides o = tiny_mtp(depths);
  o.emplace("num_experts", "4");
  o.emplace("moe_router_topk", "2");
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

// DeepSeek-V3's depth is a MoE layer: the depth takes the last layer's kind (Megatron's MTP
// block spec is the decoder's last layer spec), its router's balancing and z losses join the
// layers', and its expert loads follow theirs as "moe_load.mtpK.eE".
TEST_CASE("model/gpt MTP: on a mixture of experts the depths are MoE layers (f64)") {
  const int64_t B = 2, T = 8, V = 40, E = 4, K = 2;
  Overrides o = tiny_moe_mtp();
  o.emplace("moe_aux_loss_coeff", "0.01");
  o.emplace("moe_z_loss_coeff", "0.001");
  Host h;
  Gpt m(h, o, V, B, T, loom_f64());
  m.check(m.api()->init_params(m.self(), 4));
  CHECK(m.has_param("mtp.1.layer.moe.experts.c_fc.weight"));
  CHECK(!m.has_param("mtp.1.layer.mlp.c_fc.weight"));
  std::vector<int32_t> tok, tgt;
  sequence(B, T, V, tok, tgt);
  const double ls = 1.0 / (double)(B * T);
  m.check(m.api()->zero_grad(m.self()));
  const Terms t = step(m, tok, tgt, B, T, ls, true);
  // lm, moe_aux, moe_z, two layers' and two depths' loads, mtp
  REQUIRE(t.names.size() == 3 + 4 * E + 1);
  CHECK(t.names[3 + 2 * E] == "moe_load.mtp0.e0");
  CHECK(t.names[3 + 4 * E - 1] == "moe_load.mtp1.e3");
  CHECK(t.names.back() == "mtp");
  for (int64_t d = 0; d < 2; ++d) {  // dropless: each depth keeps every token's k choices
    double kept = 0;
    for (int64_t e = 0; e < E; ++e) kept += t.sum[(size_t)(3 + (2 + d) * E + e)];
    CHECK(kept == (double)(B * T * K));
  }
  const FdResult r = finite_differences(
      h, m,
      {"mtp.0.layer.moe.router.weight", "mtp.1.layer.moe.router.weight",
       "mtp.0.layer.moe.experts.c_fc.weight", "mtp.1.layer.moe.experts.c_proj.weight",
       "mtp.0.eh_proj.weight", "h.1.moe.router.weight", "wte"},
      [&] { return step(m, tok, tgt, B, T, ls, false).objective(ls); }, 7);
  MESSAGE("MTP on MoE: max |fd - analytic| " << r.worst << " over gradients up to " << r.scale);
  CHECK(r.scale > 1e-4);
  CHECK(r.worst <= 1e-7 * r.scale);
  // the same model without the depths, every weight copied: the same lm term and layer
  // loads, and balancing and z losses smaller by the depths' (positive) shares
  Overrides no_mtp = o;
  no_mtp.erase("mtp_num_layers");
  Gpt plain(h, no_mtp, V, B, T, loom_f64());
  for (const loom_model_param& q : plain.params)
    upload(h.be, const_cast<DLTensor*>(q.value), m.value(q.name));
  const Terms p = step(plain, tok, tgt, B, T, ls, false);
  REQUIRE(p.names.size() == 3 + 2 * E);
  CHECK(p.sum[0] == t.sum[0]);
  for (size_t i = 3; i < p.names.size(); ++i) CHECK(p.sum[i] == t.sum[i]);
  CHECK(t.sum[1] > p.sum[1]);
  CHECK(t.sum[2] > p.sum[2]);
  // a dense last layer (moe_layer_freq) gives dense depths
  Overrides dense_last = o;
  dense_last.emplace("moe_layer_freq", "[1,0]");
  Gpt d(h, dense_last, V, B, T, loom_f64());
  CHECK(d.has_param("mtp.0.layer.mlp.c_fc.weight"));
  CHECK(d.has_param("h.0.moe.router.weight"));
}

// Aux-loss-free balancing: the depth's expert bias moves by Megatron's rule towards its own
// loads (the step's "moe_load.mtp0.*" counts), as the layers' biases do towards theirs.
TEST_CASE("model/gpt MTP: a MoE depth's expert bias follows the depth's loads") {
  const int64_t B = 2, T = 8, V = 40, E = 4;
  Overrides o = tiny_moe_mtp("1");
  o.emplace("moe_router_score_function", "sigmoid");
  o.emplace("moe_router_enable_expert_bias", "true");
  o.emplace("moe_router_bias_update_rate", "0.01");
  Host h;
  Gpt m(h, o, V, B, T, loom_f64());
  m.check(m.api()->init_params(m.self(), 4));
  std::vector<int32_t> tok, tgt;
  sequence(B, T, V, tok, tgt);
  m.check(m.api()->zero_grad(m.self()));
  const Terms t = step(m, tok, tgt, B, T, 1.0 / (double)(B * T), true);
  m.check(m.api()->finish_grads(m.self()));
  for (const char* who : {"h1", "mtp0"}) {
    const std::string first = std::string("moe_load.") + who + ".e0";
    size_t at = 0;
    while (at < t.names.size() && t.names[at] != first) ++at;
    REQUIRE(at + E <= t.names.size());
    std::vector<int64_t> load;
    for (int64_t e = 0; e < E; ++e) load.push_back((int64_t)t.sum[at + (size_t)e]);
    std::vector<double> expect((size_t)E, 0.0);
    loom::layers::update_expert_bias(load, 0.01, expect.data());
    const std::string bias = std::string(who) == "h1" ? "h.1.moe.router.expert_bias"
                                                      : "mtp.0.layer.moe.router.expert_bias";
    CAPTURE(bias);
    const std::vector<double> got = m.value(bias);
    CHECK(got == expect);
    CHECK(*std::max_element(got.begin(), got.end()) > 0.0);  // the loads were uneven
  }
}

TEST_CASE("model/gpt MTP: a split backward gives the whole backward's gradients bitwise") {
  check_split_backward(tiny_mtp(), "mtp.0.layer.mlp.c_fc.weight");
  check_split_backward(tiny_moe_mtp(), "mtp.0.layer.moe.experts.c_fc.weight");
}

// Packed documents (data.pack_sequences): each depth reads and predicts within its own
// document, so the loss and every gradient (the depths' among them) are those of the
// documents run one by one, as Megatron rolls the labels within each packed sequence.
TEST_CASE("model/gpt MTP: packed documents predict within their own (f64)") {
  packed_equals_separate(tiny_mtp());
}

TEST_CASE("model/gpt MTP: what it does not run with is refused by name") {
  Host h;
  Overrides learned = tiny_gpt2();
  learned.emplace("mtp_num_layers", "1");
  expect_refused(h, learned, "mtp_num_layers = 1 embeds the tokens ahead without positions");
}
