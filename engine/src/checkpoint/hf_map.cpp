// Hugging Face interop, the mapping: config.json <-> model/gpt's [model] keys, and HF
// tensor names and layouts <-> Loom's (hf_interop.hpp): GPT-2 here, the Llama family
// (Llama, Mixtral, Qwen2/3 dense and MoE) in hf_map_llama.cpp, DeepSeek-V3 in
// hf_map_deepseek.cpp, Mamba-2 and NemotronH in hf_map_mamba.cpp.
#include <algorithm>

#include "checkpoint/hf_config.hpp"

namespace loom::engine {
namespace {

using nlohmann::json;
using namespace hf;

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

const std::initializer_list<const char*> kBenign = {
    "architectures", "model_type",   "torch_dtype",         "dtype",        "transformers_version",
    "_name_or_path", "bos_token_id", "eos_token_id",        "pad_token_id", "initializer_range",
    "use_cache",     "output_past",  "task_specific_params"};

}  // namespace

namespace hf {

void read_rope_scaling(ConfigReader& r, const json& rs, const std::vector<std::string>& kinds,
                       int64_t max_position, std::map<std::string, std::string>& keys,
                       const char* name) {
  const std::string kind = rs.value("rope_type", rs.value("type", std::string()));
  if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end())
    r.fail(name, "= " + rs.dump() + " does not map onto model/gpt (its scalings here: " +
                     (kinds.empty() ? std::string("none") : kinds[0]) +
                     (kinds.size() > 1 ? ", " + kinds[1] : std::string()) + ")");
  auto num = [&](const char* key, double dflt) {
    const auto it = rs.find(key);
    if (it == rs.end() || it->is_null()) return dflt;
    if (!it->is_number()) r.fail(name, std::string("'s ") + key + " is not a number");
    return it->get<double>();
  };
  for (const char* k : {"attention_factor", "truncate", "long_factor", "short_factor"})
    if (rs.contains(k) && !rs.at(k).is_null() &&
        !(std::string(k) == "truncate" && rs.at(k) == true))
      r.fail(name, std::string("'s ") + k + " does not map onto model/gpt");
  keys["rope_scaling"] = lit_s(kind);
  keys["rope_scaling_factor"] = lit_f(num("factor", 1.0));
  keys["rope_original_max_position"] =
      lit((int64_t)num("original_max_position_embeddings", (double)max_position));
  if (kind == "llama3") {
    keys["rope_low_freq_factor"] = lit_f(num("low_freq_factor", 1.0));
    keys["rope_high_freq_factor"] = lit_f(num("high_freq_factor", 4.0));
  } else {
    keys["yarn_beta_fast"] = lit_f(num("beta_fast", 32.0));
    keys["yarn_beta_slow"] = lit_f(num("beta_slow", 1.0));
    keys["yarn_mscale"] = lit_f(num("mscale", 1.0));
    keys["yarn_mscale_all_dim"] = lit_f(num("mscale_all_dim", 0.0));
  }
}

double rope_base(ConfigReader& r, const std::vector<std::string>& kinds, int64_t max_position,
                 std::map<std::string, std::string>& keys) {
  double theta = r.number("rope_theta", 10000.0);
  if (const json* rs = r.get("rope_scaling")) read_rope_scaling(r, *rs, kinds, max_position, keys);
  if (const json* rp = r.get("rope_parameters")) {
    if (!rp->is_object() || !rp->contains("rope_theta") || !rp->at("rope_theta").is_number())
      r.fail("rope_parameters", "= " + rp->dump() + " has no rope_theta");
    if (rp->value("rope_type", "default") != "default")
      read_rope_scaling(r, *rp, kinds, max_position, keys, "rope_parameters");
    theta = rp->at("rope_theta").get<double>();
  }
  return theta;
}

json write_rope_scaling(const ModelKeys& k) {
  const std::string kind = k.get("rope_scaling", "\"none\"");
  if (kind == "\"none\"") return nullptr;
  json rs;
  rs["rope_type"] = kind.substr(1, kind.size() - 2);
  rs["factor"] = std::stod(k.at("rope_scaling_factor"));
  rs["original_max_position_embeddings"] = k.num("rope_original_max_position");
  if (kind == "\"llama3\"") {
    rs["low_freq_factor"] = std::stod(k.at("rope_low_freq_factor"));
    rs["high_freq_factor"] = std::stod(k.at("rope_high_freq_factor"));
  } else {
    rs["beta_fast"] = std::stod(k.at("yarn_beta_fast"));
    rs["beta_slow"] = std::stod(k.at("yarn_beta_slow"));
    rs["mscale"] = std::stod(k.at("yarn_mscale"));
    rs["mscale_all_dim"] = std::stod(k.at("yarn_mscale_all_dim"));
  }
  return rs;
}

}  // namespace hf

void resolve_model_defaults(std::map<std::string, std::string>& k) {
  // moe_layer_freq is text since it took Megatron's patterns; an integer is its digits
  if (auto it = k.find("moe_layer_freq");
      it != k.end() && it->second.size() > 2 && it->second.front() == '"' &&
      it->second.find_first_not_of("0123456789", 1) == it->second.size() - 1)
    it->second = it->second.substr(1, it->second.size() - 2);
  if (k.count("n_kv_head") && k["n_kv_head"] == "0" && k.count("n_head"))
    k["n_kv_head"] = k["n_head"];
  if (k.count("ffn_hidden") && k["ffn_hidden"] == "0" && k.count("n_embd")) {
    const int64_t C = std::stoll(k["n_embd"]);
    const bool gated = k.count("activation") && k["activation"] == "\"swiglu\"";
    k["ffn_hidden"] = std::to_string(gated ? (8 * C / 3 + 255) / 256 * 256 : 4 * C);
  }
}

HfArch hf_arch_from_config(const json& config, const StFile& shapes, const std::string& where) {
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
  } else if (std::find(kLlamaFamily.begin(), kLlamaFamily.end(), mt) != kLlamaFamily.end()) {
    a = llama_family_from_config(r, mt);
  } else if (mt == "deepseek_v3") {
    a = deepseek_from_config(r, shapes);
  } else if (mt == "mamba2") {
    a = mamba2_from_config(r);
  } else if (mt == "nemotron_h") {
    a = nemotron_h_from_config(r, shapes);
  } else {
    std::string known = "\"gpt2\", \"deepseek_v3\", \"mamba2\", \"nemotron_h\"";
    for (const std::string& f : kLlamaFamily) known += ", \"" + f + "\"";
    r.fail("model_type", "= " + (type ? type->dump() : std::string("(missing)")) +
                             " is not mapped; the mapped ones are " + known);
  }
  return a;
}

std::pair<HfArch, json> hf_arch_from_model(std::map<std::string, std::string> k, int64_t vocab,
                                           const json& base, const std::string& torch_dtype) {
  resolve_model_defaults(k);
  const ModelKeys keys(k);
  const bool llama = keys.at("position") == "\"rope\"";
  const int64_t E = keys.num("num_experts", 0);
  const std::string arch = E > 0 || llama ? "the Llama family" : "GPT2LMHeadModel";
  Dims d{};
  d.L = keys.num("n_layer"), d.H = keys.num("n_head"), d.C = keys.num("n_embd"), d.V = vocab;
  d.KV = keys.num("n_kv_head"), d.P = keys.num("max_seq_len"), d.F = keys.num("ffn_hidden");
  keys.need("attention_window", "0", arch);
  if (E > 0) keys.need("position", "\"rope\"", arch);  // the experts are Llama-shaped
  json c = base.is_object() ? base : json::object();
  c["torch_dtype"] = torch_dtype;
  c["vocab_size"] = d.V;
  if (keys.get("hybrid_override_pattern", "\"\"") != "\"\"") return mamba2_from_model(keys, d, c);
  if (keys.flag("multi_latent_attention")) return deepseek_from_model(keys, d, c);
  if (llama) return llama_family_from_model(keys, d, c);
  auto need = [&](const char* key, const std::string& want, const std::string& a) {
    keys.need(key, want, a);
  };
  for (const char* q : {"qk_layernorm", "add_qkv_bias"}) keys.need(q, "false", arch, "false");
  keys.need("kv_channels", "0", arch, "0");
  need("norm", "\"layernorm\"", arch), need("activation", "\"gelu\"", arch);
  need("position", "\"learned\"", arch), need("bias", "true", arch);
  need("tie_embeddings", "true", arch);
  if (d.KV != d.H)
    throw RunError("export-hf: model.n_kv_head = " + std::to_string(d.KV) +
                   " does not map onto GPT2LMHeadModel (multi-head attention only)");
  c["architectures"] = {arch}, c["model_type"] = "gpt2";
  c["n_embd"] = d.C, c["n_layer"] = d.L, c["n_head"] = d.H, c["n_positions"] = d.P;
  c["n_inner"] = d.F, c["activation_function"] = "gelu_new";
  c["layer_norm_epsilon"] = std::stod(keys.at("norm_eps"));
  c["tie_word_embeddings"] = true;
  if (!base.is_object())  // Loom trains without dropout
    c["attn_pdrop"] = 0.0, c["embd_pdrop"] = 0.0, c["resid_pdrop"] = 0.0;
  return {gpt2_arch(d), c};
}

}  // namespace loom::engine
