// model/gpt with a mixture of experts (num_experts > 0):
//  - every expert a copy of a dense model's MLP, all of them chosen (k = E, softmax after
//    the top-k: the weights sum to 1), gives the dense model's loss and the dense MLP's
//    gradient summed over the experts: the dispatch, the grouped GEMMs and the combine
//    against an independent model, Mixtral's and GELU's MLPs both;
//  - the whole objective (lm + balancing + z losses, each with its weight) against central
//    finite differences in float64 for the router, the experts and an attention weight,
//    under each router: softmax top-2, pre-softmax with the per-sequence loss, sigmoid,
//    and dropping at capacity;
//  - the loss terms are named and weighted as stage_info lists them; refusals name the key.
#include <cmath>

#include "model_terms.hpp"
#include "model_test_util.hpp"
#include "split_backward_check.hpp"

using namespace modeltest;

namespace {

Overrides moe(Overrides o, int64_t experts, int64_t k) {
  o["num_experts"] = std::to_string(experts);
  o["moe_router_topk"] = std::to_string(k);
  return o;
}

void tokens(int64_t B, int64_t T, std::vector<int32_t>& tok, std::vector<int32_t>& tgt) {
  tok.resize(B * T);
  tgt.resize(B * T);
  for (int64_t i = 0; i < B * T; ++i) {
    tok[i] = (int32_t)((7 * i + 3) % 50);
    tgt[i] = (int32_t)((5 * i + 1) % 50);
  }
}

// One training step of both models on the same tokens from zeroed gradients: the dense
// model's loss and the mixture's lm term agree; their gradients are left to compare.
void train_step_equal(Gpt& dense, Gpt& sparse, int64_t B, int64_t T) {
  std::vector<int32_t> tok, tgt;
  tokens(B, T, tok, tgt);
  dense.check(dense.api()->zero_grad(dense.self()));
  sparse.check(sparse.api()->zero_grad(sparse.self()));
  const Terms d = step(dense, tok, tgt, B, T, 1.0 / (B * T), true);
  const Terms s = step(sparse, tok, tgt, B, T, 1.0 / (B * T), true);
  CHECK(s.sum[0] == doctest::Approx(d.sum[0]).epsilon(1e-12));
}

void experts_equal_dense(const Overrides& base) {
  const int64_t B = 2, T = 8, V = 50, E = 3;
  Host h;
  Gpt dense(h, base, V, B, T, loom_f64());
  Overrides mo = moe(base, E, E);
  Gpt sparse(h, mo, V, B, T, loom_f64());
  dense.check(dense.api()->init_params(dense.self(), 5));
  sparse.check(sparse.api()->init_params(sparse.self(), 9));  // its router stays random
  for (auto& p : dense.params) {
    const std::string name = p.name;
    const std::vector<double> v = dense.value(name);
    const auto at = name.find(".mlp.");
    if (at == std::string::npos) {
      upload(h.be, const_cast<DLTensor*>(sparse.param(name).value), v);
      continue;
    }
    std::vector<double> stacked;  // every expert a copy of the dense MLP
    for (int64_t e = 0; e < E; ++e) stacked.insert(stacked.end(), v.begin(), v.end());
    const std::string ename = name.substr(0, at) + ".moe.experts." + name.substr(at + 5);
    upload(h.be, const_cast<DLTensor*>(sparse.param(ename).value), stacked);
  }
  train_step_equal(dense, sparse, B, T);
  for (auto& p : dense.params) {
    const std::string name = p.name;
    CAPTURE(name);
    const std::vector<double> gd = dense.grad(name);
    const auto at = name.find(".mlp.");
    if (at == std::string::npos) {
      const std::vector<double> gs = sparse.grad(name);
      for (size_t i = 0; i < gd.size(); ++i) CHECK(gs[i] == doctest::Approx(gd[i]).epsilon(1e-9));
      continue;
    }
    const std::vector<double> gs =
        sparse.grad(name.substr(0, at) + ".moe.experts." + name.substr(at + 5));
    REQUIRE(gs.size() == E * gd.size());
    // each expert's gradient is its weight's share; together they are the dense gradient
    for (size_t i = 0; i < gd.size(); ++i) {
      double sum = 0;
      for (int64_t e = 0; e < E; ++e) sum += gs[e * gd.size() + i];
      CHECK(sum == doctest::Approx(gd[i]).epsilon(1e-9));
    }
  }
}

// A shared expert that copies the dense MLP, beside routed experts that output nothing (their
// c_proj zero, no biases): the dense model again, the shared expert's gradients the dense MLP's.
void shared_equals_dense() {
  const int64_t B = 2, T = 8, V = 50;
  Host h;
  const Overrides base = tiny_llama();  // no biases
  Gpt dense(h, base, V, B, T, loom_f64());
  Overrides mo = moe(base, 4, 2);
  mo.emplace("moe_shared_expert_intermediate_size", base.at("ffn_hidden"));
  Gpt sparse(h, mo, V, B, T, loom_f64());
  dense.check(dense.api()->init_params(dense.self(), 5));
  sparse.check(sparse.api()->init_params(sparse.self(), 9));
  auto shared_of = [](const std::string& name) {
    const auto at = name.find(".mlp.");
    return at == std::string::npos ? name
                                   : name.substr(0, at) + ".moe.shared." + name.substr(at + 5);
  };
  for (auto& p : dense.params)
    upload(h.be, const_cast<DLTensor*>(sparse.param(shared_of(p.name)).value), dense.value(p.name));
  for (const char* zero : {"h.0.moe.experts.c_proj.weight", "h.1.moe.experts.c_proj.weight"}) {
    const auto& p = sparse.param(zero);
    upload(h.be, const_cast<DLTensor*>(p.value),
           std::vector<double>(loom_tensor_numel(p.value), 0.0));
  }
  train_step_equal(dense, sparse, B, T);
  for (auto& p : dense.params) {
    CAPTURE(p.name);
    const std::vector<double> gd = dense.grad(p.name), gs = sparse.grad(shared_of(p.name));
    for (size_t i = 0; i < gd.size(); ++i) CHECK(gs[i] == doctest::Approx(gd[i]).epsilon(1e-9));
  }
}

void check_fd(const Overrides& o, const char* what) {
  INFO(std::string(what));
  const int64_t B = 2, T = 6, V = 40;
  Host h;
  Gpt m(h, o, V, B, T, loom_f64());
  m.check(m.api()->init_params(m.self(), 3));
  std::vector<int32_t> tok, tgt;
  tokens(B, T, tok, tgt);
  for (int32_t& t : tok) t %= V;
  for (int32_t& t : tgt) t %= V;
  const double ls = 1.0 / (B * T);
  m.check(m.api()->zero_grad(m.self()));
  const Terms t = step(m, tok, tgt, B, T, ls, true);
  // the losses, then each MoE layer's share of its routed choices per expert (weight 0)
  const int64_t E = 4, K = 2, layers = 2;
  REQUIRE(t.names.size() == 3 + layers * E);
  CHECK(std::vector<std::string>(t.names.begin(), t.names.begin() + 3) ==
        std::vector<std::string>{"lm", "moe_aux", "moe_z"});
  for (int64_t l = 0; l < layers; ++l) {
    double kept = 0;
    for (int64_t e = 0; e < E; ++e) {
      const size_t i = 3 + l * E + e;
      CHECK(t.names[i] == "moe_load.h" + std::to_string(l) + ".e" + std::to_string(e));
      CHECK(t.weight[i] == 0.0);
      CHECK(t.count[i] == B * T * K);
      kept += t.sum[i];
    }
    if (o.count("moe_expert_capacity_factor"))  // capacity ceil(N k / E) per expert
      CHECK((kept < B * T * K && kept <= E * std::ceil(B * T * K / (double)E)));
    else
      CHECK(kept == B * T * K);  // dropless: every choice kept
  }
  CHECK(t.weight[1] == B * T);
  CHECK(t.sum[1] > 0);
  CHECK(t.sum[2] > 0);
  std::vector<std::string> names = {"h.0.moe.router.weight", "h.0.moe.experts.c_fc.weight",
                                    "h.0.moe.experts.c_proj.weight", "h.1.moe.router.weight",
                                    "h.1.attn.c_attn.weight"};
  if (o.count("moe_shared_expert_intermediate_size"))
    for (const char* n :
         {"h.0.moe.shared.c_fc.weight", "h.1.moe.shared.c_proj.weight", "h.1.moe.shared.c_fc.bias"})
      if (m.has_param(n)) names.push_back(n);
  if (o.count("moe_shared_expert_gate")) names.push_back("h.0.moe.shared.gate.weight");
  const FdResult r = finite_differences(
      h, m, names, [&] { return step(m, tok, tgt, B, T, ls, false).objective(ls); }, 7);
  MESSAGE(std::string(what) << ": max |fd - analytic| " << r.worst << " over gradients up to "
                            << r.scale);
  CHECK(r.scale > 1e-4);
  CHECK(r.worst <= 1e-7 * r.scale);
}

}  // namespace

TEST_CASE("model/gpt MoE: experts that copy the dense MLP give the dense model (GELU, SwiGLU)") {
  experts_equal_dense(tiny_gpt2());
  experts_equal_dense(tiny_llama());
}

TEST_CASE("model/gpt MoE: a shared expert copying the dense MLP gives the dense model") {
  shared_equals_dense();
}

TEST_CASE("model/gpt MoE: the objective's gradient equals finite differences (f64)") {
  Overrides o = moe(tiny_gpt2(), 4, 2);
  o["moe_aux_loss_coeff"] = "0.1";
  o["moe_z_loss_coeff"] = "0.01";
  check_fd(o, "softmax top-2 (Mixtral), GELU experts");
  Overrides p = moe(tiny_llama(), 4, 2);
  p["moe_aux_loss_coeff"] = "0.1";
  p["moe_z_loss_coeff"] = "0.01";
  p["moe_router_pre_softmax"] = "true";
  p["moe_router_load_balancing_type"] = "seq_aux_loss";
  check_fd(p, "pre-softmax, per-sequence balancing, SwiGLU experts");
  Overrides s = o;
  s["moe_router_score_function"] = "sigmoid";
  check_fd(s, "sigmoid scores");
  Overrides c = o;
  c["moe_expert_capacity_factor"] = "1.0";
  check_fd(c, "capacity 1.0, dropping the least likely");
  Overrides sh = o;
  sh.emplace("moe_shared_expert_intermediate_size", "20");
  check_fd(sh, "with a shared expert (GELU, biases)");
  Overrides qw = sh;  // Qwen2-MoE's: the shared expert scaled by sigmoid(x . gate)
  qw.emplace("moe_shared_expert_gate", "true");
  check_fd(qw, "with a gated shared expert (Qwen2-MoE's)");
}

TEST_CASE("model/gpt MoE: every moe_layer_freq-th layer has experts; refusals name the key") {
  Host h;
  Overrides o = moe(tiny_gpt2(), 4, 2);
  o["n_layer"] = "3";
  o["moe_layer_freq"] = "2";
  Gpt m(h, o, 50, 2, 8);
  CHECK(m.param("h.0.moe.router.weight").value->shape[0] == 4);
  CHECK(m.param("h.1.mlp.c_fc.weight").value->shape[1] == 16);
  CHECK(m.param("h.2.moe.experts.c_fc.weight").value->shape[0] == 4);
  CHECK(m.param("h.0.moe.experts.c_fc.weight").tp_split_dim == -1);
  // Megatron's list form: DeepSeek-V3's first layers dense
  o["moe_layer_freq"] = "[0]*2+[1]";
  Gpt first_dense(h, o, 50, 2, 8);
  CHECK(first_dense.has_param("h.0.mlp.c_fc.weight"));
  CHECK(first_dense.has_param("h.1.mlp.c_fc.weight"));
  CHECK(first_dense.has_param("h.2.moe.router.weight"));
  CHECK(!first_dense.has_param("h.0.moe.router.weight"));
  // FLOPs: the router and the top-k experts a token visits, in place of one dense MLP
  Gpt dense(h, tiny_gpt2(), 50, 2, 8);
  Gpt all(h, moe(tiny_gpt2(), 4, 2), 50, 2, 8);
  const double C = 16, F = 64, mlp = 2 * C * F;  // GELU MLP: c_fc + c_proj
  CHECK(all.api()->flops_per_token(all.self()) ==
        doctest::Approx(dense.api()->flops_per_token(dense.self()) +
                        2 * 6.0 * ((2 - 1) * mlp + C * 4)));
  expect_refused(h, moe(tiny_gpt2(), 2, 3), "moe_router_topk = 3 exceeds num_experts = 2");
  Overrides bad_pattern = moe(tiny_gpt2(), 4, 2);
  bad_pattern["moe_layer_freq"] = "[0]*3+[1]";  // 4 layers' worth, n_layer = 2
  expect_refused(h, bad_pattern, "moe_layer_freq \"[0]*3+[1]\" gives 4 layers");
  Overrides bad_groups = moe(tiny_gpt2(), 4, 2);
  bad_groups["moe_router_num_groups"] = "3";
  bad_groups["moe_router_group_topk"] = "1";
  expect_refused(h, bad_groups, "moe_router_num_groups = 3 must divide num_experts = 4");
  expect_refused(h, moe(tiny_gpt2(), 4, 2), "a mixture of experts runs in fp32", loom_bf16());
  Overrides gate_alone = moe(tiny_gpt2(), 4, 2);
  gate_alone["moe_shared_expert_gate"] = "true";
  expect_refused(h, gate_alone, "moe_shared_expert_gate gates the shared expert");
}

// loom.split-backward/1 through the experts: the grouped GEMMs' weight gradients, the experts'
// biases, the shared expert's and the router's wait for W, with copies of what they read,
// and come out bitwise what the whole backward gives (GPT-2's GELU experts with biases, and
// Llama's SwiGLU experts without).
TEST_CASE("model/gpt MoE: a split backward gives the whole backward's gradients bitwise") {
  for (Overrides o : {moe(tiny_gpt2(), 4, 2), moe(tiny_llama(), 4, 2)}) {
    o["moe_shared_expert_intermediate_size"] = "16";
    o["moe_aux_loss_coeff"] = "0.01";
    o["moe_z_loss_coeff"] = "0.001";
    check_split_backward(o, "h.0.moe.experts.c_fc.weight");
    check_split_backward(o, "h.1.moe.router.weight");
    o["moe_shared_expert_gate"] = "true";
    check_split_backward(o, "h.0.moe.shared.gate.weight");
  }
}
