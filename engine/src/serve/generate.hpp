// Text generation from a checkpoint: greedy, temperature, top-k and top-p sampling with the
// model's KV cache.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "loader/registry.hpp"

namespace loom::engine {

struct GenerateOptions {
  std::filesystem::path checkpoint;  // a checkpoint directory (or its parent with `latest`)
  std::string prompt;
  int64_t max_new_tokens = 100;
  double temperature = 1.0;  // 0 = greedy
  int64_t top_k = 0;         // 0 = off
  double top_p = 1.0;        // 1 = off
  uint64_t seed = 1234;
  std::filesystem::path logits_out;    // "" = none; else every prompt position's logits
  bool overwrite = false;              // an existing logits_out may be replaced
  std::vector<std::string> overrides;  // --set section.key=value applied to the saved recipe
};

// Prints the prompt followed by the generated text to stdout.
void generate(const GenerateOptions& opts, Registry& registry);

}  // namespace loom::engine
