// Hugging Face interop, the mapping: config.json <-> model/gpt's [model] keys, and HF
// tensor names and layouts <-> Loom's (hf_interop.hpp). GPT-2 and Llama use the same
// rotate-half RoPE as Loom, so no q/k rows are permuted.
#include <set>

#include "base/errors.hpp"
#include "checkpoint/hf_interop.hpp"
#include "recipe/recipe.hpp"

namespace loom::engine {
namespace {

using nlohmann::json;

// Reads a config.json, remembering what it read: a key left unread at the end is refused,
// unless it is one of `benign` (ids, dtype, dropout, init: nothing that changes the model's
// function).
class ConfigReader {
 public:
  ConfigReader(const json& c, std::string where) : c_(c), where_(std::move(where)) {}

  const json* get(const std::string& k) {
    seen_.insert(k);
    auto it = c_.find(k);
    return it == c_.end() || it->is_null() ? nullptr : &*it;
  }
  int64_t integer(const std::string& k, int64_t dflt = -1) {
    const json* v = get(k);
    if (!v) {
      if (dflt < 0) fail(k, "is missing");
      return dflt;
    }
    if (!v->is_number_integer()) fail(k, "is not an integer");
    return v->get<int64_t>();
  }
  double number(const std::string& k, double dflt) {
    const json* v = get(k);
    if (!v) return dflt;
    if (!v->is_number()) fail(k, "is not a number");
    return v->get<double>();
  }
  bool flag(const std::string& k, bool dflt) {
    const json* v = get(k);
    if (!v) return dflt;
    if (!v->is_boolean()) fail(k, "is not true or false");
    return v->get<bool>();
  }
  // The key must be absent, null or equal to one of `ok`.
  void require(const std::string& k, std::vector<json> ok, const std::string& why) {
    const json* v = get(k);
    if (!v) return;
    for (const json& o : ok)
      if (*v == o) return;
    fail(k, "= " + v->dump() + " does not map onto model/gpt (" + why + ")");
  }
  void benign(std::initializer_list<const char*> keys) {
    for (const char* k : keys) seen_.insert(k);
  }
  void refuse_unread() {
    for (auto& [k, v] : c_.items())
      if (!seen_.count(k))
        fail(k, "= " + v.dump() +
                    " is not a key Loom knows how to map; refusing rather than "
                    "dropping it");
  }
  [[noreturn]] void fail(const std::string& k, const std::string& what) {
    throw UsageError(where_ + ": \"" + k + "\" " + what);  // the user's file to fix
  }

 private:
  const json& c_;
  std::string where_;
  std::set<std::string> seen_;
};

std::string lit(int64_t v) { return std::to_string(v); }
std::string lit(bool v) { return v ? "true" : "false"; }
std::string lit_f(double v) {
  Value x;
  x.type = LOOM_PARAM_FLOAT;
  x.f = v;
  return toml_literal(x);
}
std::string lit_s(const std::string& v) { return "\"" + v + "\""; }

// The shared part of both mappings; `gpt2` picks names and layouts.
struct Dims {
  int64_t L, C, H, KV, F, V, P;
};

HfArch gpt2_arch(const Dims& d) {
  HfArch a;
  a.name = "gpt2";
  a.vocab = d.V;
  const std::string t = "transformer.";
  auto add = [&](std::string loom, std::string hf, std::vector<int64_t> shape, bool tr = false) {
    a.rules.push_back({std::move(loom), {t + hf}, {std::move(shape)}, tr, false});
  };
  a.rules.push_back({"wte", {t + "wte.weight"}, {{d.V, d.C}}, false, true});
  add("wpe", "wpe.weight", {d.P, d.C});
  for (int64_t l = 0; l < d.L; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    for (const char* n : {"ln_1", "ln_2"}) {
      add(h + n + ".weight", h + n + ".weight", {d.C});
      add(h + n + ".bias", h + n + ".bias", {d.C});
    }
    add(h + "attn.c_attn.weight", h + "attn.c_attn.weight", {d.C, 3 * d.C}, true);
    add(h + "attn.c_attn.bias", h + "attn.c_attn.bias", {3 * d.C});
    add(h + "attn.c_proj.weight", h + "attn.c_proj.weight", {d.C, d.C}, true);
    add(h + "attn.c_proj.bias", h + "attn.c_proj.bias", {d.C});
    add(h + "mlp.c_fc.weight", h + "mlp.c_fc.weight", {d.C, d.F}, true);
    add(h + "mlp.c_fc.bias", h + "mlp.c_fc.bias", {d.F});
    add(h + "mlp.c_proj.weight", h + "mlp.c_proj.weight", {d.F, d.C}, true);
    add(h + "mlp.c_proj.bias", h + "mlp.c_proj.bias", {d.C});
  }
  add("ln_f.weight", "ln_f.weight", {d.C});
  add("ln_f.bias", "ln_f.bias", {d.C});
  // The causal-mask buffers older transformers versions stored with the weights.
  a.ignored_suffixes = {".attn.bias", ".attn.masked_bias"};
  a.tied_head = "lm_head.weight";
  return a;
}

HfArch llama_arch(const Dims& d, bool tied) {
  HfArch a;
  a.name = "llama";
  a.vocab = d.V;
  const int64_t D = d.C / d.H;
  a.rules.push_back({"wte", {"model.embed_tokens.weight"}, {{d.V, d.C}}, false, true});
  for (int64_t l = 0; l < d.L; ++l) {
    const std::string h = "h." + std::to_string(l) + ".", m = "model.layers." + std::to_string(l);
    a.rules.push_back({h + "ln_1.weight", {m + ".input_layernorm.weight"}, {{d.C}}});
    a.rules.push_back({h + "attn.c_attn.weight",
                       {m + ".self_attn.q_proj.weight", m + ".self_attn.k_proj.weight",
                        m + ".self_attn.v_proj.weight"},
                       {{d.H * D, d.C}, {d.KV * D, d.C}, {d.KV * D, d.C}}});
    a.rules.push_back({h + "attn.c_proj.weight", {m + ".self_attn.o_proj.weight"}, {{d.C, d.C}}});
    a.rules.push_back({h + "ln_2.weight", {m + ".post_attention_layernorm.weight"}, {{d.C}}});
    a.rules.push_back({h + "mlp.c_fc.weight",
                       {m + ".mlp.gate_proj.weight", m + ".mlp.up_proj.weight"},
                       {{d.F, d.C}, {d.F, d.C}}});
    a.rules.push_back({h + "mlp.c_proj.weight", {m + ".mlp.down_proj.weight"}, {{d.C, d.F}}});
  }
  a.rules.push_back({"ln_f.weight", {"model.norm.weight"}, {{d.C}}});
  if (tied)
    a.tied_head = "lm_head.weight";
  else
    a.rules.push_back({"lm_head.weight", {"lm_head.weight"}, {{d.V, d.C}}, false, true});
  a.ignored_suffixes = {".rotary_emb.inv_freq"};  // a buffer older versions stored
  return a;
}

// Mixtral: Llama's attention and norms, and per layer a router and E SwiGLU experts. Loom's
// experts.c_fc (E, 2F, C) is each expert's w1 (gate) then w3 (up) rows; experts.c_proj
// (E, C, F) each expert's w2.
HfArch mixtral_arch(const Dims& d, bool tied, int64_t E) {
  HfArch a = llama_arch(d, tied);
  a.name = "mixtral";
  std::vector<HfRule> rules;
  for (HfRule& r : a.rules) {
    const size_t mlp = r.loom.find(".mlp.");
    if (mlp == std::string::npos) {
      rules.push_back(std::move(r));
      continue;
    }
    if (r.loom.find("c_fc") == std::string::npos) continue;  // one rule set per layer
    const std::string h = r.loom.substr(0, mlp);             // "h.3"
    const std::string m = "model.layers." + h.substr(2) + ".block_sparse_moe.";
    rules.push_back({h + ".moe.router.weight", {m + "gate.weight"}, {{E, d.C}}});
    HfRule fc{h + ".moe.experts.c_fc.weight", {}, {}, false, false, {E, 2 * d.F, d.C}};
    HfRule proj{h + ".moe.experts.c_proj.weight", {}, {}, false, false, {E, d.C, d.F}};
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = m + "experts." + std::to_string(e) + ".";
      fc.hf.insert(fc.hf.end(), {x + "w1.weight", x + "w3.weight"});
      fc.shapes.insert(fc.shapes.end(), {{d.F, d.C}, {d.F, d.C}});
      proj.hf.push_back(x + "w2.weight");
      proj.shapes.push_back({d.C, d.F});
    }
    rules.push_back(std::move(fc));
    rules.push_back(std::move(proj));
  }
  a.rules = std::move(rules);
  return a;
}

const std::initializer_list<const char*> kBenign = {
    "architectures", "model_type",   "torch_dtype",         "dtype",        "transformers_version",
    "_name_or_path", "bos_token_id", "eos_token_id",        "pad_token_id", "initializer_range",
    "use_cache",     "output_past",  "task_specific_params"};

}  // namespace

void resolve_model_defaults(std::map<std::string, std::string>& k) {
  if (k.count("n_kv_head") && k["n_kv_head"] == "0" && k.count("n_head"))
    k["n_kv_head"] = k["n_head"];
  if (k.count("ffn_hidden") && k["ffn_hidden"] == "0" && k.count("n_embd")) {
    const int64_t C = std::stoll(k["n_embd"]);
    const bool gated = k.count("activation") && k["activation"] == "\"swiglu\"";
    k["ffn_hidden"] = std::to_string(gated ? (8 * C / 3 + 255) / 256 * 256 : 4 * C);
  }
}

HfArch hf_arch_from_config(const json& config, const std::string& where) {
  ConfigReader r(config, where);
  r.benign(kBenign);
  const json* type = r.get("model_type");
  const std::string mt = type && type->is_string() ? type->get<std::string>() : "";
  HfArch a;
  if (mt == "gpt2") {
    Dims d{};
    d.V = r.integer("vocab_size"), d.P = r.integer("n_positions"), d.C = r.integer("n_embd");
    d.L = r.integer("n_layer"), d.H = r.integer("n_head"), d.KV = d.H;
    d.F = r.integer("n_inner", 4 * d.C);
    r.require("n_ctx", {d.P}, "it must equal n_positions");
    r.require("activation_function", {"gelu_new", "gelu_pytorch_tanh"},
              "model/gpt's gelu is the tanh approximation");
    r.require("tie_word_embeddings", {true}, "GPT-2's head is the embedding");
    r.require("scale_attn_weights", {true}, "attention is scaled by 1/sqrt(head dim)");
    r.require("scale_attn_by_inverse_layer_idx", {false}, "no per-layer attention scaling");
    r.require("add_cross_attention", {false}, "a decoder without cross-attention");
    const double eps = r.number("layer_norm_epsilon", 1e-5);
    // Dropout is a training-time choice of HF's (Loom trains without it); summary_* belong
    // to GPT2DoubleHeadsModel's head, which GPT2LMHeadModel does not have.
    r.benign({"attn_pdrop", "embd_pdrop", "resid_pdrop", "reorder_and_upcast_attn",
              "summary_activation", "summary_first_dropout", "summary_proj_to_labels",
              "summary_type", "summary_use_proj"});
    r.refuse_unread();
    a = gpt2_arch(d);
    a.model_keys = {
        {"n_layer", lit(d.L)},         {"n_head", lit(d.H)},           {"n_kv_head", lit(d.H)},
        {"n_embd", lit(d.C)},          {"ffn_hidden", lit(d.F)},       {"norm", lit_s("layernorm")},
        {"activation", lit_s("gelu")}, {"position", lit_s("learned")}, {"bias", lit(true)},
        {"tie_embeddings", lit(true)}, {"norm_eps", lit_f(eps)},       {"max_seq_len", lit(d.P)}};
  } else if (mt == "llama" || mt == "mixtral") {
    const bool moe = mt == "mixtral";
    Dims d{};
    d.V = r.integer("vocab_size"), d.C = r.integer("hidden_size");
    d.F = r.integer("intermediate_size"), d.L = r.integer("num_hidden_layers");
    d.H = r.integer("num_attention_heads"), d.KV = r.integer("num_key_value_heads", d.H);
    d.P = r.integer("max_position_embeddings");
    if (d.H <= 0 || d.C % d.H != 0) r.fail("hidden_size", "is not a multiple of the heads");
    r.require("head_dim", {d.C / d.H}, "model/gpt's head dim is hidden_size / heads");
    r.require("hidden_act", {"silu"}, "model/gpt's swiglu gates with SiLU");
    r.require("attention_bias", {false}, "Llama's linears have no bias in model/gpt");
    r.require("mlp_bias", {false}, "Llama's linears have no bias in model/gpt");
    r.require("rope_scaling", {}, "model/gpt's RoPE has no scaling (Llama-3.1's llama3 type)");
    double theta = r.number("rope_theta", 10000.0);
    if (const json* rp = r.get("rope_parameters")) {  // transformers 5 keeps theta here
      if (rp->value("rope_type", "default") != "default" || !rp->contains("rope_theta"))
        r.fail("rope_parameters", "= " + rp->dump() + " is not plain RoPE with a rope_theta");
      theta = rp->at("rope_theta").get<double>();
    }
    const double eps = r.number("rms_norm_eps", 1e-6);
    const bool tied = r.flag("tie_word_embeddings", false);
    // pretraining_tp only changes how Meta's code sliced its matmuls, not the function.
    r.benign({"attention_dropout", "pretraining_tp"});
    int64_t E = 0, K = 0;
    double aux = 0.0;
    if (moe) {
      E = r.integer("num_local_experts"), K = r.integer("num_experts_per_tok");
      if (K < 1 || K > E) r.fail("num_experts_per_tok", "must be in [1, num_local_experts]");
      aux = r.number("router_aux_loss_coef", 0.0);
      r.require("router_jitter_noise", {0, 0.0}, "model/gpt's router adds no noise");
      r.require("sliding_window", {}, "model/gpt maps full attention (attention_window = 0)");
      r.benign({"output_router_logits"});  // whether HF's forward returns the router logits
    }
    r.refuse_unread();
    a = moe ? mixtral_arch(d, tied, E) : llama_arch(d, tied);
    a.model_keys = {{"n_layer", lit(d.L)},           {"n_head", lit(d.H)},
                    {"n_kv_head", lit(d.KV)},        {"n_embd", lit(d.C)},
                    {"ffn_hidden", lit(d.F)},        {"norm", lit_s("rmsnorm")},
                    {"activation", lit_s("swiglu")}, {"position", lit_s("rope")},
                    {"rope_theta", lit_f(theta)},    {"bias", lit(false)},
                    {"tie_embeddings", lit(tied)},   {"norm_eps", lit_f(eps)},
                    {"max_seq_len", lit(d.P)}};
    if (moe)  // HF's Mixtral: softmax over the experts, top-k, weights renormalised (Loom's
              // default softmax after the top-k), the Switch balancing loss
      a.model_keys.insert({{"num_experts", lit(E)},
                           {"moe_router_topk", lit(K)},
                           {"moe_ffn_hidden_size", lit(d.F)},
                           {"moe_aux_loss_coeff", lit_f(aux)}});
  } else {
    r.fail("model_type", "= " + (type ? type->dump() : std::string("(missing)")) +
                             ": only \"gpt2\" (GPT2LMHeadModel), \"llama\" (LlamaForCausalLM) "
                             "and \"mixtral\" (MixtralForCausalLM) are mapped");
  }
  return a;
}

std::pair<HfArch, json> hf_arch_from_model(std::map<std::string, std::string> k, int64_t vocab,
                                           const json& base, const std::string& torch_dtype) {
  resolve_model_defaults(k);
  auto at = [&](const char* key) {
    auto it = k.find(key);
    if (it == k.end()) throw RunError(std::string("export-hf: the recipe has no model.") + key);
    return it->second;
  };
  auto num = [&](const char* key) { return std::stoll(at(key)); };
  auto need = [&](const char* key, const std::string& want, const std::string& arch) {
    if (at(key) != want)
      throw RunError(std::string("export-hf: model.") + key + " = " + at(key) +
                     " does not map onto " + arch + " (which needs " + want + ")");
  };
  const bool llama = at("position") == "\"rope\"";
  const int64_t E = k.count("num_experts") ? std::stoll(k["num_experts"]) : 0;
  const std::string arch = E > 0   ? "MixtralForCausalLM"
                           : llama ? "LlamaForCausalLM"
                                   : "GPT2LMHeadModel";
  Dims d{};
  d.L = num("n_layer"), d.H = num("n_head"), d.C = num("n_embd"), d.V = vocab;
  d.KV = num("n_kv_head"), d.P = num("max_seq_len"), d.F = num("ffn_hidden");
  need("attention_window", "0", arch);
  if (E > 0) need("position", "\"rope\"", arch);  // Mixtral is Llama-shaped
  json c = base.is_object() ? base : json::object();
  c["torch_dtype"] = torch_dtype;
  c["vocab_size"] = d.V;
  if (llama) {
    need("norm", "\"rmsnorm\"", arch), need("activation", "\"swiglu\"", arch);
    need("bias", "false", arch);
    const bool tied = at("tie_embeddings") == "true";
    c["architectures"] = {arch}, c["model_type"] = E > 0 ? "mixtral" : "llama";
    if (E > 0) {  // every layer a mixture: Mixtral's shape of it
      need("moe_layer_freq", "1", arch), need("moe_shared_expert_intermediate_size", "0", arch);
      need("moe_router_score_function", "\"softmax\"", arch);
      need("moe_router_pre_softmax", "false", arch);
      need("moe_expert_capacity_factor", lit_f(0.0), arch);
      d.F = num("moe_ffn_hidden_size") > 0 ? num("moe_ffn_hidden_size") : d.F;
      c["num_local_experts"] = E, c["num_experts_per_tok"] = num("moe_router_topk");
      c["router_aux_loss_coef"] = std::stod(at("moe_aux_loss_coeff"));
      c["router_jitter_noise"] = 0.0, c["output_router_logits"] = false;
      c["sliding_window"] = nullptr;
    }
    c["hidden_size"] = d.C, c["intermediate_size"] = d.F, c["num_hidden_layers"] = d.L;
    c["num_attention_heads"] = d.H, c["num_key_value_heads"] = d.KV;
    c["max_position_embeddings"] = d.P, c["hidden_act"] = "silu";
    c["rms_norm_eps"] = std::stod(at("norm_eps"));
    c["tie_word_embeddings"] = tied, c["attention_bias"] = false, c["mlp_bias"] = false;
    if (c.contains("rope_parameters"))
      c["rope_parameters"]["rope_theta"] = std::stod(at("rope_theta"));
    else
      c["rope_theta"] = std::stod(at("rope_theta"));
    return {E > 0 ? mixtral_arch(d, tied, E) : llama_arch(d, tied), c};
  }
  need("norm", "\"layernorm\"", arch), need("activation", "\"gelu\"", arch);
  need("position", "\"learned\"", arch), need("bias", "true", arch);
  need("tie_embeddings", "true", arch);
  if (d.KV != d.H)
    throw RunError("export-hf: model.n_kv_head = " + std::to_string(d.KV) +
                   " does not map onto GPT2LMHeadModel (multi-head attention only)");
  c["architectures"] = {arch}, c["model_type"] = "gpt2";
  c["n_embd"] = d.C, c["n_layer"] = d.L, c["n_head"] = d.H, c["n_positions"] = d.P;
  c["n_inner"] = d.F, c["activation_function"] = "gelu_new";
  c["layer_norm_epsilon"] = std::stod(at("norm_eps"));
  c["tie_word_embeddings"] = true;
  if (!base.is_object())  // Loom trains without dropout
    c["attn_pdrop"] = 0.0, c["embd_pdrop"] = 0.0, c["resid_pdrop"] = 0.0;
  return {gpt2_arch(d), c};
}

}  // namespace loom::engine
