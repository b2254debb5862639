// Hugging Face interop, the Llama family's mapping (hf_config.hpp): LlamaForCausalLM,
// MixtralForCausalLM, Qwen2ForCausalLM (biases on q, k, v), Qwen3ForCausalLM (QK-norm, a head
// size of its own), Qwen2MoeForCausalLM (a gated shared expert) and Qwen3MoeForCausalLM. All
// use rotate-half RoPE as Loom does, so no q/k rows are permuted; q, k, v stack into c_attn
// and gate, up into c_fc.
#include <algorithm>

#include "checkpoint/hf_config.hpp"

namespace loom::engine::hf {
namespace {

// What a member of the family has beyond Dims.
struct Shape {
  Dims d{};
  int64_t D = 0;  // head size
  bool tied = false, qkv_bias = false, qk_norm = false;
  // A mixture of experts in every layer: E experts of Fe columns, a shared expert of S
  // columns (0: none), gated or not. Mixtral names them block_sparse_moe.{gate,
  // experts.e.w1/w3/w2}; Qwen mlp.{gate, experts.e.gate_proj/up_proj/down_proj,
  // shared_expert.*, shared_expert_gate}.
  int64_t E = 0, Fe = 0, S = 0;
  bool shared_gate = false, mixtral_names = false;
  std::vector<uint8_t> moe_layers;  // (L) 1: a mixture, 0: the dense MLP (Qwen's mlp_only_layers)
  bool is_moe(int64_t l) const { return E > 0 && moe_layers[(size_t)l]; }
};

const std::map<std::string, std::string> kArchitectures = {
    {"llama", "LlamaForCausalLM"},        {"mixtral", "MixtralForCausalLM"},
    {"qwen2", "Qwen2ForCausalLM"},        {"qwen3", "Qwen3ForCausalLM"},
    {"qwen2_moe", "Qwen2MoeForCausalLM"}, {"qwen3_moe", "Qwen3MoeForCausalLM"}};

// Layer `l`'s mixture: the router, the experts stacked (E, 2Fe, C) and (E, C, Fe), and the
// shared expert with its gate.
void moe_rules(HfArch& a, const Shape& s, const std::string& h, const std::string& m) {
  const int64_t C = s.d.C, E = s.E, F = s.Fe;
  const std::string x = m + (s.mixtral_names ? "block_sparse_moe." : "mlp.");
  rule(a, h + "moe.router.weight", {x + "gate.weight"}, {{E, C}});
  if (s.mixtral_names)
    expert_rules(a, h + "moe.", x, E, F, C, {"w1", "w3", "w2"});
  else
    expert_rules(a, h + "moe.", x, E, F, C);
  if (s.S == 0) return;
  swiglu_rules(a, h + "moe.shared.", x + "shared_expert.", s.S, C);
  if (s.shared_gate)
    rule(a, h + "moe.shared.gate.weight", {x + "shared_expert_gate.weight"}, {{1, C}});
}

HfArch build(const Shape& s, const std::string& name) {
  HfArch a;
  a.name = name;
  const Dims& d = s.d;
  a.vocab = d.V;
  const int64_t q = d.H * s.D, kv = d.KV * s.D;
  a.rules.push_back({"wte", {"model.embed_tokens.weight"}, {{d.V, d.C}}, false, true});
  for (int64_t l = 0; l < d.L; ++l) {
    const std::string h = "h." + std::to_string(l) + ".", m = "model.layers." + std::to_string(l);
    const std::string at = m + ".self_attn.";
    rule(a, h + "ln_1.weight", {m + ".input_layernorm.weight"}, {{d.C}});
    rule(a, h + "attn.c_attn.weight",
         {at + "q_proj.weight", at + "k_proj.weight", at + "v_proj.weight"},
         {{q, d.C}, {kv, d.C}, {kv, d.C}});
    if (s.qkv_bias)
      rule(a, h + "attn.c_attn.bias", {at + "q_proj.bias", at + "k_proj.bias", at + "v_proj.bias"},
           {{q}, {kv}, {kv}});
    rule(a, h + "attn.c_proj.weight", {at + "o_proj.weight"}, {{d.C, q}});
    if (s.qk_norm) {
      rule(a, h + "attn.q_norm.weight", {at + "q_norm.weight"}, {{s.D}});
      rule(a, h + "attn.k_norm.weight", {at + "k_norm.weight"}, {{s.D}});
    }
    rule(a, h + "ln_2.weight", {m + ".post_attention_layernorm.weight"}, {{d.C}});
    if (s.is_moe(l)) {
      moe_rules(a, s, h, m + ".");
      continue;
    }
    swiglu_rules(a, h + "mlp.", m + ".mlp.", d.F, d.C);
  }
  head_rules(a, "model.norm.weight", s.tied, d.V, d.C);
  a.ignored_suffixes = {".rotary_emb.inv_freq"};  // a buffer older versions stored
  return a;
}

// Qwen's attention options: full attention in every layer.
void qwen_attention(ConfigReader& r, int64_t L) {
  r.require("use_sliding_window", {false}, "model/gpt maps full attention in every layer");
  if (const json* t = r.get("layer_types"))
    if (!t->is_array() || (int64_t)t->size() != L ||
        std::any_of(t->begin(), t->end(), [](const json& v) { return v != "full_attention"; }))
      r.fail("layer_types", "= " + t->dump() + " is not \"full_attention\" in every layer");
  // the window's size and its first layer, used only with use_sliding_window
  r.benign({"sliding_window", "max_window_layers"});
}

// The experts' keys of Mixtral or Qwen's MoE; the [model] keys they map to go into `keys`.
void read_experts(ConfigReader& r, const std::string& mt, Shape& s,
                  std::map<std::string, std::string>& keys) {
  const bool mixtral = mt == "mixtral";
  s.mixtral_names = mixtral;
  s.moe_layers.assign((size_t)s.d.L, 1);
  if (mixtral) {
    s.E = r.integer("num_local_experts");
  } else if (r.get("num_experts") == nullptr && r.get("num_local_experts") != nullptr) {
    s.E = r.integer("num_local_experts");  // transformers 5's name for Qwen3-MoE's num_experts
  } else {
    s.E = r.integer("num_experts");
    if (const json* alias = r.get("num_local_experts"); alias && *alias != s.E)
      r.fail("num_local_experts",
             "= " + alias->dump() + " disagrees with num_experts = " + std::to_string(s.E));
  }
  const int64_t K = r.integer("num_experts_per_tok");
  if (K < 1 || K > s.E) r.fail("num_experts_per_tok", "must be in [1, the experts]");
  const double aux = r.number("router_aux_loss_coef", 0.0);
  r.benign({"output_router_logits"});  // whether HF's forward returns the router logits
  // HF's routing: softmax over all experts, top-k, renormalised (Mixtral always, Qwen with
  // norm_topk_prob: Loom's softmax after the top-k) or not (Loom's pre-softmax)
  bool renormalise = true;
  if (mixtral) {
    s.Fe = s.d.F;
    r.require("router_jitter_noise", {0, 0.0}, "model/gpt's router adds no noise");
    r.require("sliding_window", {}, "model/gpt maps full attention (attention_window = 0)");
  } else {
    s.Fe = r.integer("moe_intermediate_size");
    renormalise = r.flag("norm_topk_prob", false);
    // Qwen's sparse layers: every decoder_sparse_step-th counting from 1, less mlp_only_layers
    const int64_t step = r.integer("decoder_sparse_step", 1);
    if (step < 1) r.fail("decoder_sparse_step", "must be at least 1");
    for (int64_t l = 0; l < s.d.L; ++l) s.moe_layers[(size_t)l] = (l + 1) % step == 0;
    if (const json* only = r.get("mlp_only_layers")) {
      if (!only->is_array()) r.fail("mlp_only_layers", "is not a list of layer numbers");
      for (const json& l : *only) {
        if (!l.is_number_integer() || l.get<int64_t>() < 0 || l.get<int64_t>() >= s.d.L)
          r.fail("mlp_only_layers",
                 "= " + only->dump() + " names a layer outside [0, " + std::to_string(s.d.L) + ")");
        s.moe_layers[(size_t)l.get<int64_t>()] = 0;
      }
    }
    if (std::find(s.moe_layers.begin(), s.moe_layers.end(), 1) == s.moe_layers.end())
      r.fail("decoder_sparse_step", "and mlp_only_layers leave no layer with experts");
    const std::string pattern = loom::layer_pattern_text(s.moe_layers);
    if (pattern != "1") keys.insert({"moe_layer_freq", lit_s(pattern)});
    if (mt == "qwen2_moe") {
      s.S = r.integer("shared_expert_intermediate_size");
      s.shared_gate = true;
      r.require("qkv_bias", {true}, "Qwen2-MoE's q, k, v projections have biases");
    }
  }
  keys.insert({{"num_experts", lit(s.E)},
               {"moe_router_topk", lit(K)},
               {"moe_ffn_hidden_size", lit(s.Fe)},
               {"moe_aux_loss_coeff", lit_f(aux)},
               {"moe_router_pre_softmax", lit(!renormalise)}});
  if (s.S > 0)
    keys.insert({{"moe_shared_expert_intermediate_size", lit(s.S)},
                 {"moe_shared_expert_gate", lit(s.shared_gate)}});
}

}  // namespace

void swiglu_rules(HfArch& a, const std::string& loom, const std::string& hf, int64_t F, int64_t C,
                  const std::vector<std::string>& n) {
  rule(a, loom + "c_fc.weight", {hf + n[0] + ".weight", hf + n[1] + ".weight"}, {{F, C}, {F, C}});
  rule(a, loom + "c_proj.weight", {hf + n[2] + ".weight"}, {{C, F}});
}

void expert_rules(HfArch& a, const std::string& loom, const std::string& hf, int64_t E, int64_t F,
                  int64_t C, const std::vector<std::string>& n) {
  HfRule fc{loom + "experts.c_fc.weight", {}, {}, false, false, {E, 2 * F, C}};
  HfRule proj{loom + "experts.c_proj.weight", {}, {}, false, false, {E, C, F}};
  for (int64_t e = 0; e < E; ++e) {
    const std::string p = hf + "experts." + std::to_string(e) + ".";
    fc.hf.insert(fc.hf.end(), {p + n[0] + ".weight", p + n[1] + ".weight"});
    fc.shapes.insert(fc.shapes.end(), {{F, C}, {F, C}});
    proj.hf.push_back(p + n[2] + ".weight");
    proj.shapes.push_back({C, F});
  }
  a.rules.push_back(std::move(fc));
  a.rules.push_back(std::move(proj));
}

const std::vector<std::string> kLlamaFamily = {"llama", "mixtral",   "qwen2",
                                               "qwen3", "qwen2_moe", "qwen3_moe"};

HfArch llama_family_from_config(ConfigReader& r, const std::string& mt) {
  const bool qwen2 = mt == "qwen2" || mt == "qwen2_moe", qwen3 = mt == "qwen3" || mt == "qwen3_moe";
  Shape s;
  Dims& d = s.d;
  d.V = r.integer("vocab_size"), d.C = r.integer("hidden_size");
  d.F = r.integer("intermediate_size"), d.L = r.integer("num_hidden_layers");
  d.H = r.integer("num_attention_heads"), d.KV = r.integer("num_key_value_heads", d.H);
  d.P = r.integer("max_position_embeddings");
  const bool even = d.H > 0 && d.C % d.H == 0;
  if (!even && !r.get("head_dim")) r.fail("hidden_size", "is not a multiple of the heads");
  s.D = r.integer("head_dim", even ? d.C / d.H : -1);
  r.require("hidden_act", {"silu"}, "model/gpt's swiglu gates with SiLU");
  if (mt == "llama") {
    r.require("attention_bias", {false}, "Llama's linears have no bias in model/gpt");
    r.require("mlp_bias", {false}, "Llama's linears have no bias in model/gpt");
    r.benign({"pretraining_tp"});  // how Meta's code sliced its matmuls, not the function
  }
  if (qwen3)
    r.require("attention_bias", {false},
              "Qwen3's attention_bias adds o_proj's bias too; model/gpt's add_qkv_bias biases "
              "q, k and v only");
  if (qwen2 || qwen3) qwen_attention(r, d.L);
  s.qkv_bias = qwen2, s.qk_norm = qwen3;
  std::map<std::string, std::string> scaling;
  const double theta = rope_base(r, {"llama3"}, d.P, scaling);  // Llama 3.1's scaling
  const double eps = r.number("rms_norm_eps", 1e-6);
  s.tied = r.flag("tie_word_embeddings", false);
  r.benign({"attention_dropout"});
  std::map<std::string, std::string> keys = {
      {"n_layer", lit(d.L)},           {"n_head", lit(d.H)},
      {"n_kv_head", lit(d.KV)},        {"n_embd", lit(d.C)},
      {"ffn_hidden", lit(d.F)},        {"norm", lit_s("rmsnorm")},
      {"activation", lit_s("swiglu")}, {"position", lit_s("rope")},
      {"rope_theta", lit_f(theta)},    {"bias", lit(false)},
      {"tie_embeddings", lit(s.tied)}, {"norm_eps", lit_f(eps)},
      {"max_seq_len", lit(d.P)}};
  keys.insert(scaling.begin(), scaling.end());
  if (!even || s.D != d.C / d.H) keys["kv_channels"] = lit(s.D);
  if (s.qk_norm) keys["qk_layernorm"] = lit(true);
  if (s.qkv_bias) keys["add_qkv_bias"] = lit(true);
  if (mt == "mixtral" || mt == "qwen2_moe" || mt == "qwen3_moe") read_experts(r, mt, s, keys);
  r.refuse_unread();
  HfArch a = build(s, mt);
  a.model_keys = std::move(keys);
  return a;
}

std::pair<HfArch, json> llama_family_from_model(const ModelKeys& k, const Dims& dims, json c) {
  Shape s;
  s.d = dims;
  const int64_t E = k.num("num_experts", 0);
  const bool qk = k.flag("qk_layernorm"), qkvb = k.flag("add_qkv_bias");
  const std::string mt = E == 0 ? (qk     ? "qwen3"
                                   : qkvb ? "qwen2"
                                          : "llama")
                                : (qk     ? "qwen3_moe"
                                   : qkvb ? "qwen2_moe"
                                          : "mixtral");
  const std::string arch = kArchitectures.at(mt);
  k.need("norm", "\"rmsnorm\"", arch), k.need("activation", "\"swiglu\"", arch);
  k.need("bias", "false", arch);
  if (qk) k.need("add_qkv_bias", "false", arch, "false");  // Qwen3 has no q/k/v-only bias
  const int64_t kvc = k.num("kv_channels", 0);
  s.D = kvc > 0 ? kvc : dims.C / dims.H;
  s.tied = k.at("tie_embeddings") == "true";
  s.qkv_bias = qkvb, s.qk_norm = qk;
  c["architectures"] = {arch}, c["model_type"] = mt;
  c["hidden_size"] = dims.C, c["intermediate_size"] = dims.F, c["num_hidden_layers"] = dims.L;
  c["num_attention_heads"] = dims.H, c["num_key_value_heads"] = dims.KV;
  c["max_position_embeddings"] = dims.P, c["hidden_act"] = "silu";
  c["rms_norm_eps"] = std::stod(k.at("norm_eps"));
  c["tie_word_embeddings"] = s.tied;
  if (!qkvb || s.D != dims.C / dims.H) c["head_dim"] = s.D;  // Qwen2's older configs lack it
  if (mt == "llama") c["attention_bias"] = false, c["mlp_bias"] = false;
  if (qk) c["attention_bias"] = false;
  if (qk || qkvb) c["use_sliding_window"] = false;
  const json scaling = write_rope_scaling(k);
  if (c.contains("rope_parameters")) {  // transformers 5: the scaling's keys beside the base
    json rp = scaling.is_null() ? json{{"rope_type", "default"}} : scaling;
    rp["rope_theta"] = std::stod(k.at("rope_theta"));
    c["rope_parameters"] = rp;
  } else {
    c["rope_theta"] = std::stod(k.at("rope_theta"));
    c["rope_scaling"] = scaling;
  }
  if (E == 0) return {build(s, mt), c};
  // softmax-routed and dropless, as the three architectures have it; a mixture in every layer
  // (Mixtral), or dense layers among them (Qwen's mlp_only_layers)
  k.need("moe_router_score_function", "\"softmax\"", arch);
  s.moe_layers = k.moe_layers(dims.L);
  std::vector<int64_t> dense;
  for (int64_t l = 0; l < dims.L; ++l)
    if (!s.moe_layers[(size_t)l]) dense.push_back(l);
  if (mt == "mixtral" && !dense.empty())
    throw RunError("export-hf: model.moe_layer_freq = " + k.get("moe_layer_freq", "1") +
                   " leaves dense layers, which " + arch + " does not have");
  k.need("moe_expert_capacity_factor", lit_f(0.0), arch);
  s.E = E, s.mixtral_names = mt == "mixtral";
  s.Fe = k.num("moe_ffn_hidden_size") > 0 ? k.num("moe_ffn_hidden_size") : dims.F;
  s.S = k.num("moe_shared_expert_intermediate_size", 0);
  s.shared_gate = k.flag("moe_shared_expert_gate");
  if (mt == "qwen2_moe") {  // its shared expert is always there, and gated
    if (s.S == 0)
      throw RunError(
          "export-hf: model.moe_shared_expert_intermediate_size = 0 does not map "
          "onto " +
          arch + " (which always has a gated shared expert)");
    k.need("moe_shared_expert_gate", "true", arch, "false");
  } else {
    k.need("moe_shared_expert_intermediate_size", "0", arch, "0");
  }
  const bool renormalise = !k.flag("moe_router_pre_softmax");
  c["num_experts_per_tok"] = k.num("moe_router_topk");
  c["router_aux_loss_coef"] = std::stod(k.at("moe_aux_loss_coeff"));
  c["output_router_logits"] = false;
  if (mt == "mixtral") {
    if (!renormalise) k.need("moe_router_pre_softmax", "false", arch);
    c["intermediate_size"] = s.Fe;
    c["num_local_experts"] = E, c["router_jitter_noise"] = 0.0, c["sliding_window"] = nullptr;
    return {build(s, mt), c};
  }
  c["num_experts"] = E, c["moe_intermediate_size"] = s.Fe, c["norm_topk_prob"] = renormalise;
  c["decoder_sparse_step"] = 1, c["mlp_only_layers"] = dense;
  if (s.S > 0) c["shared_expert_intermediate_size"] = s.S;
  return {build(s, mt), c};
}

}  // namespace loom::engine::hf
