// Loom layer library: post-training's options. Parameter-efficient finetuning's recipe keys
// (model/gpt's [model] section), LoRA as Megatron Bridge and HF PEFT name it. The adapters
// themselves: loom/cpp/lora.hpp; their parameters: ParamDeclarer (params.cpp).
#pragma once

#include <string>

#include "loom/cpp/layers/core/options.hpp"
#include "loom/cpp/plugin.hpp"

// Megatron Bridge's LoRA(dim, alpha, dropout, target_modules), HF PEFT's LoraConfig(r,
// lora_alpha, lora_dropout, target_modules).
#define LOOM_PEFT_PARAMS                                                                       \
  loom::param("peft", LOOM_PARAM_STRING, "none",                                               \
              "parameter-efficient finetuning: lora trains low-rank adapters on peft_target_"  \
              "modules and freezes every other parameter (no gradient, no optimizer state)",   \
              1, 0, "none|lora"),                                                              \
      loom::param("peft_rank", LOOM_PARAM_INT, "32",                                           \
                  "LoRA's rank (Megatron Bridge's dim, PEFT's r)", 1, 1 << 16),                \
      loom::param("peft_alpha", LOOM_PARAM_FLOAT, "32.0",                                      \
                  "LoRA's alpha: the adapters' output is scaled by alpha / rank", 0.0, 1e9),   \
      loom::param("peft_dropout", LOOM_PARAM_FLOAT, "0.0",                                     \
                  "dropout on the adapters' input; only 0 (the layer library has no dropout)", \
                  0.0, 1.0),                                                                   \
      loom::param("peft_target_modules", LOOM_PARAM_STRING,                                    \
                  "linear_qkv,linear_proj,linear_fc1,linear_fc2",                              \
                  "projections that get adapters, comma-separated: Megatron's linear_qkv, "    \
                  "linear_proj, linear_fc1, linear_fc2, HF's q_proj+k_proj+v_proj, o_proj, "   \
                  "gate_proj+up_proj, down_proj, GPT-2's c_attn, c_fc, or all-linear",         \
                  1, 0, nullptr)

namespace loom::layers {

// Reads the peft keys into o.lora (after the rest of the options: it refuses what LoRA does not
// cover yet by name).
void parse_peft(const loom::Config& cfg, const std::string& who, Options& o);

// The LoraConfig::Target bits of a comma-separated target_modules list; throws loom::Error
// naming an unknown or ambiguous module and the known names.
uint32_t lora_targets(const std::string& list, const std::string& who);

// Reads the host's loom.preference/1 (DPO) from the create args into o.dpo_beta (after the rest
// of the options: it refuses what DPO does not cover yet by name).
void parse_preference(const loom_model_create_args& args, Family family, const std::string& who,
                      Options& o);

// Reads the host's loom.fp8-training/1 (precision.fp8) from the create args into o.fp8 (after
// the rest of the options: it refuses what FP8 does not cover yet by name). core/fp8.cpp.
void parse_fp8(const loom_model_create_args& args, Family family, const std::string& who,
               Options& o);

}  // namespace loom::layers
