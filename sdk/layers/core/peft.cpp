// Loom layer library, post-training's options: parameter-efficient finetuning's keys (peft,
// peft_rank, peft_alpha, peft_dropout and peft_target_modules into Options::lora) and the
// host's preference objective (loom.preference/1 on the create args into Options::dpo_beta).
#include "loom/cpp/layers/core/peft.hpp"

#include <cmath>
#include <map>
#include <set>
#include <vector>

namespace loom::layers {

namespace {

using T = LoraConfig::Target;

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    std::string w = list.substr(at, comma - at);
    w.erase(0, w.find_first_not_of(" \t"));
    w.erase(w.find_last_not_of(" \t") + 1);
    if (!w.empty()) out.push_back(w);
    at = comma + 1;
  }
  return out;
}

}  // namespace

// HF's separate q/k/v and gate/up projections are one fused projection here, with one adapter
// (Megatron Bridge's linear_qkv and linear_fc1): naming some of a fused projection's parts and
// not the others is refused rather than widened silently.
uint32_t lora_targets(const std::string& list, const std::string& who) {
  static const std::map<std::string, uint32_t> kWhole = {
      {"linear_qkv", T::kQkv},
      {"c_attn", T::kQkv},
      {"linear_proj", T::kProj},
      {"o_proj", T::kProj},
      {"linear_fc1", T::kFc1},
      {"c_fc", T::kFc1},
      {"linear_fc2", T::kFc2},
      {"down_proj", T::kFc2},
      {"all-linear", T::kQkv | T::kProj | T::kFc1 | T::kFc2}};
  static const std::map<std::string, std::pair<uint32_t, std::string>> kParts = {
      {"q_proj", {T::kQkv, "q_proj,k_proj,v_proj"}},
      {"k_proj", {T::kQkv, "q_proj,k_proj,v_proj"}},
      {"v_proj", {T::kQkv, "q_proj,k_proj,v_proj"}},
      {"gate_proj", {T::kFc1, "gate_proj,up_proj"}},
      {"up_proj", {T::kFc1, "gate_proj,up_proj"}}};
  const std::string known =
      "linear_qkv, linear_proj, linear_fc1, linear_fc2, q_proj+k_proj+v_proj, o_proj, "
      "gate_proj+up_proj, down_proj, c_attn, c_fc, all-linear";
  const std::vector<std::string> words = split_list(list);
  const std::set<std::string> named(words.begin(), words.end());
  uint32_t bits = 0;
  for (const std::string& w : words) {
    if (auto it = kWhole.find(w); it != kWhole.end()) {
      bits |= it->second;
      continue;
    }
    auto part = kParts.find(w);
    loom::require(w != "c_proj", who +
                                     ": peft_target_modules: c_proj is GPT-2's name of both "
                                     "the attention's and the MLP's output; name linear_proj "
                                     "or linear_fc2 (or both)");
    loom::require(part != kParts.end(),
                  who + ": peft_target_modules: unknown module '" + w + "'; known: " + known);
    for (const std::string& sibling : split_list(part->second.second))
      loom::require(named.count(sibling) > 0,
                    who + ": peft_target_modules names " + w + " without " + sibling +
                        ": Loom fuses " + part->second.second +
                        " into one projection with one adapter (exported to PEFT as one per "
                        "part); name all of them");
    bits |= part->second.first;
  }
  loom::require(bits != 0, who + ": peft_target_modules is empty; known: " + known);
  return bits;
}

void parse_peft(const loom::Config& cfg, const std::string& who, Options& o) {
  if (cfg.get_string("peft") != "lora") return;
  loom::require(cfg.get_float("peft_dropout") == 0.0,
                who +
                    ": peft_dropout > 0: the layer library has no dropout yet; LoRA trains "
                    "with peft_dropout = 0");
  o.lora.rank = cfg.get_int("peft_rank");
  o.lora.alpha = cfg.get_float("peft_alpha");
  o.lora.targets = lora_targets(cfg.get_string("peft_target_modules"), who);
  // What the adapters do not reach yet, by name rather than frozen untrained
  const char* other = o.num_experts > 0   ? "a mixture of experts (num_experts)"
                      : !o.hybrid.empty() ? "a hybrid stack (hybrid_override_pattern)"
                      : o.mla             ? "multi-head latent attention"
                      : o.mtp_layers > 0  ? "multi-token prediction (mtp_num_layers)"
                                          : nullptr;
  loom::require(other == nullptr,
                who +
                    ": peft = \"lora\" covers dense attention and MLP "
                    "projections; not " +
                    std::string(other ? other : "") + " yet",
                LOOM_ERR_UNIMPLEMENTED);
}

// DPO replaces the LM loss on the last stage; what adds loss terms of its own beside it, or
// has no LM loss to replace, is refused by name (the host asked for it: LOOM_EXT_REQUIRED).
void parse_preference(const loom_model_create_args& args, Family family, const std::string& who,
                      Options& o) {
  if (args.struct_size < LOOM_MODEL_CREATE_ARGS_SIZE_V2_18) return;
  const loom_ext* e = loom_ext_find(args.ext, LOOM_EXT_PREFERENCE);
  if (!e) return;
  loom::require(e->struct_size >= LOOM_PREFERENCE_OBJECTIVE_SIZE_V1,
                who + ": " LOOM_EXT_PREFERENCE " on the create args is smaller than its v1");
  const double beta = reinterpret_cast<const loom_preference_objective*>(e)->beta;
  loom::require(
      beta > 0 && std::isfinite(beta),
      who + ": DPO's beta must be a positive number (train.dpo_beta); got " + std::to_string(beta));
  const char* other = family != Family::kGpt ? "this model family (only GPT-style decoders)"
                      : o.num_experts > 0    ? "a mixture of experts' balancing terms"
                      : o.mtp_layers > 0     ? "multi-token prediction (mtp_num_layers)"
                                             : nullptr;
  loom::require(other == nullptr,
                who + ": train.objective = \"dpo\" is not implemented with " +
                    std::string(other ? other : ""),
                LOOM_ERR_UNIMPLEMENTED);
  loom::require(args.micro_batch % 2 == 0,
                who +
                    ": train.objective = \"dpo\" puts a pair's chosen and rejected rows in "
                    "one micro-batch: train.micro_batch_size must be even (got " +
                    std::to_string(args.micro_batch) + ")");
  o.dpo_beta = beta;
}

}  // namespace loom::layers
