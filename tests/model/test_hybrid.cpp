// model/gpt's hybrid Mamba/attention stacks (hybrid_override_pattern, issue 37): the layers'
// parameters and their init, the whole objective's gradient against central finite
// differences in float64 (every Mamba-2 parameter, the norms, the attention and MLP layers
// beside them), the scan's chunk length leaving the numbers unchanged, generation from the
// recurrent state against the training forward, a split backward, training, and refusals.
#include <cmath>
#include <map>

#include "decode_check.hpp"
#include "model_terms.hpp"
#include "model_test_util.hpp"
#include "split_backward_check.hpp"

using namespace modeltest;

namespace {

// Nemotron-H's shape in miniature: Mamba, attention, MLP, Mamba. 8 heads of 4 channels (an
// expansion of 2 over n_embd 16) in 2 groups, a state of 5, 4 taps, chunks of 3.
Overrides tiny_hybrid(const char* pattern = "M*-M") {
  return {{"n_layer", std::to_string(std::string(pattern).size())},
          {"hybrid_override_pattern", pattern},
          {"n_head", "2"},
          {"n_embd", "16"},
          {"ffn_hidden", "24"},
          {"norm", "rmsnorm"},
          {"activation", "swiglu"},
          {"position", "none"},
          {"bias", "false"},
          {"tie_embeddings", "false"},
          {"mamba_head_dim", "4"},
          {"mamba_num_groups", "2"},
          {"mamba_state_dim", "5"},
          {"mamba_chunk_size", "3"}};
}

// o[key] = value (erase and emplace: GCC 12's -Wrestrict misfires on a std::string assigned
// in place)
void set(Overrides& o, const std::string& key, const std::string& value) {
  o.erase(key);
  o.emplace(key, value);
}

// The objective sum over tokens of the loss, scaled by 1/(B T), and its gradient.
double objective(Gpt& m, const std::vector<int32_t>& tok, const std::vector<int32_t>& tgt,
                 int64_t B, int64_t T, bool grad) {
  if (grad) m.check(m.api()->zero_grad(m.self()));
  return m.run(tok, tgt, B, T, 1.0 / (double)(B * T), grad).first / (double)(B * T);
}

}  // namespace

TEST_CASE("model/gpt hybrid: layer kinds, Mamba-2 parameter shapes and their init") {
  Host h;
  Gpt m(h, tiny_hybrid(), 50, 2, 8);
  m.check(m.api()->init_params(m.self(), 7));
  CHECK(!m.has_param("wpe"));  // position = "none"
  // Mamba: in_proj rows z (32) | x (32) | B (2 x 5) | C (2 x 5) | dt (8 heads)
  CHECK(m.param("h.0.mixer.in_proj.weight").value->shape[0] == 32 + 32 + 10 + 10 + 8);
  CHECK(m.param("h.0.mixer.in_proj.weight").tp_split_dim == 0);
  CHECK(m.param("h.0.mixer.conv1d.weight").value->shape[0] == 52);
  CHECK(m.param("h.0.mixer.conv1d.weight").value->shape[1] == 4);
  CHECK(m.param("h.0.mixer.out_proj.weight").tp_split_dim == 1);
  CHECK(m.param("h.0.mixer.A_log").weight_decay == 0);
  CHECK(m.param("h.0.mixer.conv1d.weight").weight_decay == 1);
  CHECK(m.has_param("h.0.norm.weight"));
  CHECK(m.has_param("h.1.attn.c_attn.weight"));
  CHECK(!m.has_param("h.1.mlp.c_fc.weight"));
  CHECK(m.has_param("h.2.mlp.c_fc.weight"));
  CHECK(!m.has_param("h.2.attn.c_attn.weight"));
  CHECK(m.has_param("h.3.mixer.D"));
  // Mamba-2's init: A = -exp(A_log) with A_log = log(U[1, 16]); softplus(dt_bias) in
  // [1e-3, 1e-1]; D ones; the convolution uniform within 1/sqrt(K)
  for (double a : m.value("h.0.mixer.A_log")) CHECK((a >= 0.0 && a < std::log(16.0)));
  for (double d : m.value("h.0.mixer.dt_bias")) {
    const double dt = std::log1p(std::exp(d));
    CHECK((dt > 0.99e-3 && dt < 1.01e-1));
  }
  for (double d : m.value("h.3.mixer.D")) CHECK(d == 1.0);
  double widest = 0;
  for (double w : m.value("h.0.mixer.conv1d.weight")) widest = std::max(widest, std::fabs(w));
  CHECK((widest > 0.3 && widest <= 0.5));
  CHECK(m.api()->flops_per_token(m.self()) > 0);
}

TEST_CASE("model/gpt hybrid: the objective's gradient equals finite differences (f64)") {
  const int64_t B = 2, T = 8, V = 40;
  Host h;
  Gpt m(h, tiny_hybrid(), V, B, T, loom_f64());
  m.check(m.api()->init_params(m.self(), 3));
  std::vector<int32_t> tok, tgt;
  pattern(B, T, 7, tok, tgt);
  objective(m, tok, tgt, B, T, true);
  const FdResult r = finite_differences(
      h, m,
      {"h.0.mixer.in_proj.weight", "h.0.mixer.conv1d.weight", "h.0.mixer.conv1d.bias",
       "h.0.mixer.dt_bias", "h.0.mixer.A_log", "h.0.mixer.D", "h.0.mixer.norm.weight",
       "h.0.mixer.out_proj.weight", "h.0.norm.weight", "h.1.attn.c_attn.weight",
       "h.2.mlp.c_fc.weight", "h.3.mixer.A_log", "h.3.mixer.conv1d.weight", "wte"},
      [&] { return objective(m, tok, tgt, B, T, false); });
  MESSAGE("hybrid: max |fd - analytic| " << r.worst << " over gradients up to " << r.scale);
  CHECK(r.scale > 1e-4);
  CHECK(r.worst <= 1e-7 * r.scale);
}

// An E layer is a mixture of experts (Nemotron-H's MoE variants): its terms are the model's,
// and the whole objective (LM, balancing and z losses) follows finite differences.
TEST_CASE("model/gpt hybrid: an E layer's experts by finite differences (f64)") {
  const int64_t B = 2, T = 8, V = 40;
  Host h;
  Overrides o = tiny_hybrid("M*EM");
  o.emplace("num_experts", "4");
  o.emplace("moe_router_topk", "2");
  o.emplace("moe_ffn_hidden_size", "12");
  o.emplace("moe_aux_loss_coeff", "0.1");
  o.emplace("moe_z_loss_coeff", "0.01");
  Gpt m(h, o, V, B, T, loom_f64());
  m.check(m.api()->init_params(m.self(), 6));
  CHECK(m.has_param("h.2.moe.router.weight"));
  CHECK(!m.has_param("h.2.mlp.c_fc.weight"));
  std::vector<int32_t> tok, tgt;
  pattern(B, T, 7, tok, tgt);
  const double ls = 1.0 / (double)(B * T);
  m.check(m.api()->zero_grad(m.self()));
  const Terms t = step(m, tok, tgt, B, T, ls, true);
  REQUIRE(t.names.size() >= 3);
  CHECK(t.names[1] == "moe_aux");
  CHECK(t.sum[1] > 0);
  const FdResult r = finite_differences(
      h, m,
      {"h.2.moe.router.weight", "h.2.moe.experts.c_fc.weight", "h.2.moe.experts.c_proj.weight",
       "h.2.norm.weight", "h.0.mixer.in_proj.weight", "h.3.mixer.out_proj.weight"},
      [&] { return step(m, tok, tgt, B, T, ls, false).objective(ls); });
  MESSAGE("hybrid with experts: max |fd - analytic| " << r.worst << " over gradients up to "
                                                      << r.scale);
  CHECK(r.scale > 1e-4);
  CHECK(r.worst <= 1e-7 * r.scale);
}

TEST_CASE("model/gpt hybrid: the scan's chunk length changes no number (f64)") {
  const int64_t B = 2, T = 8, V = 40;
  Host h;
  std::vector<int32_t> tok, tgt;
  pattern(B, T, 7, tok, tgt);
  std::map<std::string, std::vector<double>> first;
  double first_loss = 0;
  for (const char* chunk : {"1", "3", "8", "128"}) {
    INFO("chunk " << chunk);
    Overrides o = tiny_hybrid("MM");
    set(o, "mamba_chunk_size", chunk);
    Gpt m(h, o, V, B, T, loom_f64());
    m.check(m.api()->init_params(m.self(), 5));
    const double loss = objective(m, tok, tgt, B, T, true);
    if (first.empty()) {
      first_loss = loss;
      for (auto& p : m.params) first[p.name] = m.grad(p.name);
      continue;
    }
    CHECK(loss == doctest::Approx(first_loss).epsilon(1e-13));
    for (auto& p : m.params) {
      const std::vector<double> g = m.grad(p.name), g0 = first[p.name];
      for (size_t i = 0; i < g.size(); ++i)
        REQUIRE(g[i] == doctest::Approx(g0[i]).epsilon(1e-11).scale(1e-9));
    }
  }
}

TEST_CASE("model/gpt hybrid: decoding from the recurrent state equals the forward") {
  check_decode(tiny_hybrid());
  check_decode(tiny_hybrid(), loom_f64());
  check_decode_slots(tiny_hybrid());  // rows reused by new sequences start from zero state
}

TEST_CASE("model/gpt hybrid: a split backward gives the whole backward's gradients bitwise") {
  check_split_backward(tiny_hybrid(), "h.0.mixer.in_proj.weight");
}

TEST_CASE("model/gpt hybrid + optimizer/adamw: a tiny hybrid learns a repeating pattern") {
  Host h;
  const int64_t B = 4, T = 16, V = 64;
  Gpt m(h, tiny_hybrid(), V, B, T);
  m.check(m.api()->init_params(m.self(), 11));
  Optimizer optim(h, "adamw", {}, m);
  std::vector<int32_t> tok, tgt;
  pattern(B, T, 7, tok, tgt);
  double first = 0, loss = 0;
  for (int s = 1; s <= 40; ++s) {
    loss = objective(m, tok, tgt, B, T, true);
    if (s == 1) first = loss;
    optim.step(1e-2, s);
  }
  MESSAGE("hybrid adamw: loss " << first << " -> " << loss);
  CHECK(first == doctest::Approx(std::log(64.0)).epsilon(0.05));
  CHECK(loss < 0.2 * first);
}

TEST_CASE("model/gpt hybrid: a bad pattern is refused naming the key") {
  Host h;
  Overrides o = tiny_hybrid();
  set(o, "n_layer", "3");
  expect_refused(h, o, "hybrid_override_pattern \"M*-M\" has 4 layers; n_layer = 3");
  expect_refused(h, tiny_hybrid("M*x"), "layer 2 is 'x'");
  expect_refused(h, tiny_hybrid("M*E"), "has E layers; num_experts is 0");
  o = tiny_hybrid();
  set(o, "mamba_num_groups", "3");
  expect_refused(h, o, "mamba_num_heads = 8 must be a positive multiple of mamba_num_groups = 3");
}
