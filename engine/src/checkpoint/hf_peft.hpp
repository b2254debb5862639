// LoRA adapters in a checkpoint (model/gpt's peft = "lora": tensors X.lora_A.weight (rank, in)
// and X.lora_B.weight (out, rank) beside the frozen X.weight): merged into the weights for
// `loom export-hf --merge-lora`, or written in Hugging Face PEFT's layout by `loom export-peft`.
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "checkpoint/safetensors.hpp"

namespace loom::engine {

class Registry;

struct LoraSettings {
  int64_t rank = 0;  // 0: no adapters
  double alpha = 0.0;
  double scale() const { return alpha / (double)rank; }
};
// From a [model] section's keys (TOML literals): peft = "lora", peft_rank, peft_alpha.
LoraSettings lora_of(const std::map<std::string, std::string>& model_keys);

// W (out, in) += scale B A for every X.weight with adapters in `model` (f32 tensors, full),
// the sums in double; the adapters are erased.
void merge_lora(StFile& model, double scale);

// `loom export-peft CHECKPOINT OUT_DIR`: adapter_config.json and adapter_model.safetensors as
// HF PEFT saves a LoraModel over the architecture export-hf writes (keys
// base_model.model.<module>.lora_A/B.weight, float32). A fused Loom projection's adapter
// becomes one per HF module: lora_A repeated, lora_B's rows cut as the weight's are. `out` as
// export-hf's (replaced whole with `overwrite`).
void export_peft(const std::filesystem::path& checkpoint, const std::filesystem::path& out,
                 Registry& registry, bool overwrite);

}  // namespace loom::engine
