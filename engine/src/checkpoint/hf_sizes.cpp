// Hugging Face interop, the sizes: config.json's dimensions checked against the tensors the
// files hold (their headers' shapes) before the mapping is built or any tensor is read, so
// that a config saying n_layer = 1000000000 (or a negative or fractional size) is refused
// by name instead of making the mapping, and the memory, grow without bound.
#include <algorithm>
#include <string>

#include "checkpoint/hf_config.hpp"

namespace loom::engine {
namespace {

using nlohmann::json;

class SizeCheck {
 public:
  SizeCheck(const json& config, const StFile& shapes, std::string where)
      : c_(config), shapes_(shapes), where_(std::move(where)) {}

  // The key's value when it is a positive integer, -1 when absent or null; else refused.
  int64_t positive(const std::string& k) const {
    auto it = c_.find(k);
    if (it == c_.end() || it->is_null()) return -1;
    if (!it->is_number_integer() || it->get<int64_t>() < 1 ||
        (it->is_number_unsigned() && it->get<uint64_t>() > (uint64_t)INT64_MAX))
      throw UsageError(where_ + ": \"" + k + "\" = " + it->dump() +
                       " is not a positive integer (a size)");
    return it->get<int64_t>();
  }
  // Dimension `dim` of tensor `name` (given without GPT-2's "transformer.") must be the
  // key's value; a tensor the files lack is left to the mapping, which names it.
  void agree(const std::string& k, const std::string& name, size_t dim) const {
    const int64_t v = positive(k);
    const StTensor* t = find(name);
    if (v < 0 || !t || t->shape.size() <= dim || t->shape[dim] == v) return;
    throw UsageError(where_ + ": \"" + k + "\" = " + std::to_string(v) + " disagrees with tensor " +
                     name + " of shape " + shape_str(t->shape) + " (its dimension " +
                     std::to_string(dim) + " is " + std::to_string(t->shape[dim]) + ")");
  }
  // The key counts blocks `prefix`0., `prefix`1., ...: it may not exceed the blocks the
  // files hold (more blocks than it says are refused by the mapping, as tensors with no place).
  void count(const std::string& k, const std::string& prefix) const {
    const int64_t v = positive(k);
    int64_t have = 0;
    while (have < v && holds(prefix + std::to_string(have) + ".")) ++have;
    if (v > have)
      throw UsageError(where_ + ": \"" + k + "\" = " + std::to_string(v) +
                       " disagrees with the tensors: there is no tensor " + prefix +
                       std::to_string(have) + ".* (the files hold " + std::to_string(have) + ")");
  }

 private:
  static std::string bare(const std::string& n) {
    return n.rfind("transformer.", 0) == 0 ? n.substr(12) : n;
  }
  const StTensor* find(const std::string& name) const {
    for (const auto& [n, t] : shapes_)
      if (bare(n) == name) return &t;
    return nullptr;
  }
  bool holds(const std::string& prefix) const {
    for (const auto& [n, t] : shapes_)
      if (bare(n).rfind(prefix, 0) == 0) return true;
    return false;
  }
  const json& c_;
  const StFile& shapes_;
  std::string where_;
};

}  // namespace

void check_hf_sizes(const json& config, const StFile& shapes, const std::string& where) {
  if (!config.is_object()) throw UsageError(where + ": not a JSON object");
  const SizeCheck s(config, shapes, where);
  const json type = config.value("model_type", json());
  if (type == "gpt2") {
    s.agree("vocab_size", "wte.weight", 0);
    s.agree("n_embd", "wte.weight", 1);
    s.agree("n_positions", "wpe.weight", 0);
    s.agree("n_inner", "h.0.mlp.c_fc.weight", 1);
    s.count("n_layer", "h.");
    for (const char* k : {"n_head", "n_ctx"}) s.positive(k);
  } else if (type.is_string() && std::find(hf::kLlamaFamily.begin(), hf::kLlamaFamily.end(),
                                           type.get<std::string>()) != hf::kLlamaFamily.end()) {
    s.agree("vocab_size", "model.embed_tokens.weight", 0);
    s.agree("hidden_size", "model.embed_tokens.weight", 1);
    s.count("num_hidden_layers", "model.layers.");
    s.agree("intermediate_size", "model.layers.0.mlp.gate_proj.weight", 0);
    // Mixtral's key counts its block_sparse_moe experts; transformers 5 saves Qwen3-MoE's
    // num_experts under the same name (its attribute_map), counting the mlp.experts blocks.
    s.count("num_local_experts", type == "mixtral" ? "model.layers.0.block_sparse_moe.experts."
                                                   : "model.layers.0.mlp.experts.");
    s.count("num_experts", "model.layers.0.mlp.experts.");  // Qwen's MoE
    s.agree("head_dim", "model.layers.0.self_attn.q_norm.weight", 0);
    s.agree("moe_intermediate_size", "model.layers.0.mlp.experts.0.gate_proj.weight", 0);
    s.agree("shared_expert_intermediate_size", "model.layers.0.mlp.shared_expert.gate_proj.weight",
            0);
    for (const char* k : {"intermediate_size", "num_attention_heads", "num_key_value_heads",
                          "max_position_embeddings", "num_experts_per_tok", "head_dim"})
      s.positive(k);
  } else if (type == "deepseek_v3") {
    s.agree("vocab_size", "model.embed_tokens.weight", 0);
    s.agree("hidden_size", "model.embed_tokens.weight", 1);
    s.count("num_hidden_layers", "model.layers.");
    for (const char* k :
         {"intermediate_size", "moe_intermediate_size", "num_attention_heads", "q_lora_rank",
          "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "n_routed_experts",
          "num_experts_per_tok", "max_position_embeddings"})
      s.positive(k);
    const json first = config.value("first_k_dense_replace", json(0));
    const std::string moe =
        "model.layers." + (first.is_number_integer() ? std::to_string(first.get<int64_t>()) : "0") +
        ".mlp.experts.";
    s.count("n_routed_experts", moe);
  } else if (type == "mamba2") {
    s.agree("vocab_size", "backbone.embeddings.weight", 0);
    s.agree("hidden_size", "backbone.embeddings.weight", 1);
    s.count("num_hidden_layers", "backbone.layers.");
    s.agree("num_heads", "backbone.layers.0.mixer.A_log", 0);
    for (const char* k : {"num_heads", "head_dim", "state_size", "n_groups", "conv_kernel"})
      s.positive(k);
  }  // another model_type: the mapping refuses it by name
}

}  // namespace loom::engine
