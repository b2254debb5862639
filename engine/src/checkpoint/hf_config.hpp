// Hugging Face interop, what the mappings share (hf_map.cpp: GPT-2 and the dispatch;
// hf_map_llama.cpp: the Llama family): config.json read key by key, TOML literals of the
// [model] keys, and the [model] keys read back for an export.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/errors.hpp"
#include "checkpoint/hf_interop.hpp"
#include "loom/cpp/layer_pattern.hpp"
#include "recipe/recipe.hpp"

namespace loom::engine::hf {

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

inline std::string lit(int64_t v) { return std::to_string(v); }
inline std::string lit(bool v) { return v ? "true" : "false"; }
inline std::string lit_f(double v) {
  Value x;
  x.type = LOOM_PARAM_FLOAT;
  x.f = v;
  return toml_literal(x);
}
inline std::string lit_s(const std::string& v) { return "\"" + v + "\""; }

// The shared part of the mappings: layers, width, heads, key/value heads, MLP hidden size,
// vocabulary, positions.
struct Dims {
  int64_t L, C, H, KV, F, V, P;
};

// A Loom [model] section's resolved keys (TOML literals), read for export-hf: a key the
// recipe lacks is an error, unless read with a default (keys newer than the checkpoint).
class ModelKeys {
 public:
  explicit ModelKeys(std::map<std::string, std::string> k) : k_(std::move(k)) {}
  const std::string& at(const std::string& key) const {
    auto it = k_.find(key);
    if (it == k_.end()) throw RunError("export-hf: the recipe has no model." + key);
    return it->second;
  }
  std::string get(const std::string& key, const std::string& dflt) const {
    auto it = k_.find(key);
    return it == k_.end() ? dflt : it->second;
  }
  int64_t num(const std::string& key) const { return std::stoll(at(key)); }
  int64_t num(const std::string& key, int64_t dflt) const {
    return std::stoll(get(key, std::to_string(dflt)));
  }
  bool flag(const std::string& key) const { return get(key, "false") == "true"; }
  // moe_layer_freq's pattern over n_layer layers (its text, or its integer; default 1).
  std::vector<uint8_t> moe_layers(int64_t n_layer) const {
    std::string freq = get("moe_layer_freq", "1");
    if (freq.size() >= 2 && freq.front() == '"') freq = freq.substr(1, freq.size() - 2);
    try {
      return loom::layer_pattern(freq, n_layer, "export-hf: model.moe_layer_freq");
    } catch (const loom::Error& e) {
      throw RunError(e.what());
    }
  }
  // The key must read `want` (its default `dflt` when absent) for `arch`.
  void need(const std::string& key, const std::string& want, const std::string& arch,
            const std::string& dflt = "") const {
    const std::string v = dflt.empty() ? at(key) : get(key, dflt);
    if (v != want)
      throw RunError("export-hf: model." + key + " = " + v + " does not map onto " + arch +
                     " (which needs " + want + ")");
  }

 private:
  std::map<std::string, std::string> k_;
};

// HF's rope_scaling (or transformers 5's rope_parameters beyond "default") onto model/gpt's
// rope_scaling keys, into `keys`: a "type"/"rope_type" in `kinds` ("llama3", "yarn"), with its
// numbers; another is refused by name. `max_position`: original_max_position_embeddings'
// default (the config's max_position_embeddings).
void read_rope_scaling(ConfigReader& r, const json& rs, const std::vector<std::string>& kinds,
                       int64_t max_position, std::map<std::string, std::string>& keys,
                       const char* name = "rope_scaling");
// RoPE's base: rope_theta, or transformers 5's rope_parameters (its rope_theta beside the
// scaling's keys, which rope_scaling held before); a scaling in `kinds` from either into
// `keys`, as read_rope_scaling reads it.
double rope_base(ConfigReader& r, const std::vector<std::string>& kinds, int64_t max_position,
                 std::map<std::string, std::string>& keys);
// The rope_scaling dict of the [model] keys (null without a scaling).
json write_rope_scaling(const ModelKeys& k);

// One Loom tensor from HF tensors stacked along dimension 0 (shaped `loom_shape` when given).
inline void rule(HfArch& a, std::string loom, std::vector<std::string> hf,
                 std::vector<std::vector<int64_t>> shapes, std::vector<int64_t> loom_shape = {}) {
  a.rules.push_back(
      {std::move(loom), std::move(hf), std::move(shapes), false, false, std::move(loom_shape)});
}

// The final norm (`ln_f.weight` from HF's `norm`, (C)) and the LM head: HF's tied lm_head,
// or its own (V, C) rows of the vocabulary.
inline void head_rules(HfArch& a, const std::string& norm, bool tied, int64_t V, int64_t C) {
  rule(a, "ln_f.weight", {norm}, {{C}});
  if (tied)
    a.tied_head = "lm_head.weight";
  else
    a.rules.push_back({"lm_head.weight", {"lm_head.weight"}, {{V, C}}, false, true});
}

// A SwiGLU MLP of F columns: `loom` + "c_fc.weight" (2F, C) from `hf` + gate and up, and
// `loom` + "c_proj.weight" (C, F) from `hf` + down (names: {gate, up, down} + ".weight").
void swiglu_rules(HfArch& a, const std::string& loom, const std::string& hf, int64_t F, int64_t C,
                  const std::vector<std::string>& names = {"gate_proj", "up_proj", "down_proj"});
// E experts' SwiGLU MLPs stacked: `loom` + "experts.c_fc.weight" (E, 2F, C) and
// "experts.c_proj.weight" (E, C, F) from `hf` + "experts.e." + each name.
void expert_rules(HfArch& a, const std::string& loom, const std::string& hf, int64_t E, int64_t F,
                  int64_t C,
                  const std::vector<std::string>& names = {"gate_proj", "up_proj", "down_proj"});

// hf_map_llama.cpp: Llama, Mixtral, Qwen2, Qwen3, Qwen2-MoE and Qwen3-MoE (model_type one of
// kLlamaFamily). From a config.json (read through `r`), and back for an export: `c` the base
// config to fill.
extern const std::vector<std::string> kLlamaFamily;
HfArch llama_family_from_config(ConfigReader& r, const std::string& model_type);
std::pair<HfArch, json> llama_family_from_model(const ModelKeys& k, const Dims& d, json c);

// hf_map_deepseek.cpp: DeepseekV3ForCausalLM (model_type "deepseek_v3"), whose multi-head
// latent attention maps onto model/gpt's multi_latent_attention; its multi-token prediction
// module (num_nextn_predict_layers) onto mtp_num_layers when `shapes` holds its tensors.
HfArch deepseek_from_config(ConfigReader& r, const StFile& shapes);
std::pair<HfArch, json> deepseek_from_model(const ModelKeys& k, const Dims& d, json c);

// hf_map_mamba.cpp: Mamba2ForCausalLM (model_type "mamba2") onto a hybrid stack of Mamba-2
// mixers only; NemotronHForCausalLM ("nemotron_h": Mamba-2, attention and squared-ReLU MLP
// layers) onto the hybrid stack its pattern names (its base model's tensors under backbone.
// or, in `shapes`, model.). The export maps a stack of M layers onto Mamba2ForCausalLM, any
// other (no E) onto NemotronH.
HfArch mamba2_from_config(ConfigReader& r);
HfArch nemotron_h_from_config(ConfigReader& r, const StFile& shapes);
std::pair<HfArch, json> mamba2_from_model(const ModelKeys& k, const Dims& d, json c);

}  // namespace loom::engine::hf
