// Checkpoints: a directory per iteration, written atomically.
//
//   <save>/iter_0000010/manifest.json      iteration, data position, layout, file sha256s
//   <save>/iter_0000010/recipe.toml        the resolved recipe (generation rebuilds from it)
//   <save>/iter_0000010/model.safetensors  parameters by name
//   <save>/iter_0000010/optimizer.safetensors
//   <save>/latest_checkpointed_iteration.txt   "10" (Megatron's tracker file)
//
// A save writes everything into a temporary sibling folder, fsyncs it, renames it into
// place and only then rewrites the tracker (write + rename), so a crash at any point
// leaves the previous checkpoint and tracker intact.
#pragma once

#include <filesystem>
#include <string>

#include "safetensors.hpp"

namespace loom::engine {

struct Checkpoint {
  int64_t iteration = 0;         // iterations completed
  int64_t consumed_samples = 0;  // training samples consumed (the data loader's position)
  uint64_t seed = 0;
  std::string recipe_toml;
  StFile model, optimizer;
};

void save_checkpoint(const std::filesystem::path& save_dir, const Checkpoint& ckpt);

// `dir` is a checkpoint folder (with manifest.json) or a save folder with the tracker file.
// Verifies sizes and sha256s; throws RunError on anything missing, truncated or corrupt.
Checkpoint load_checkpoint(const std::filesystem::path& dir);

// The folder load_checkpoint would read, or "" when `dir` holds no checkpoint.
std::filesystem::path resolve_checkpoint(const std::filesystem::path& dir);

}  // namespace loom::engine
