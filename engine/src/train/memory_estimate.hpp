// `loom validate --memory`: per-rank memory of a run before it runs (memory_estimate.cpp).
#pragma once

#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

#include "loader/registry.hpp"
#include "recipe/recipe.hpp"
#include "train/train_run.hpp"

namespace loom::engine {

// What one rank role holds, in bytes: the training state (StateBytes), the gradient plugin's
// buffers, and the peak through one step; the rest of the peak is the model's activations and
// scratch.
struct MemoryRole {
  int rank = 0;
  std::vector<int32_t> stages;  // the stages its chunks hold (the schedule's placement)
  int32_t total_stages = 1;
  StateBytes state;
  double grad_buffers = 0;  // the gradient plugin's backend allocations
  double peak = 0;
};

// One role per pipeline stage (its first rank: tensor, context and data rank 0), for the
// recipe at `path` with `sets` (`recipe`: the same, validated) laid out over `world` ranks.
std::vector<MemoryRole> estimate_memory(const std::filesystem::path& path,
                                        const std::vector<std::string>& sets, const Recipe& recipe,
                                        int world, Registry& registry);
// The model's parameter names in model order (embedding, layers, head: the order the model
// plugin lists them), for the recipe at `path` as one rank, from a set-up on backend/meta
// (nothing allocated nor initialised).
std::vector<std::string> model_param_names(const std::filesystem::path& path, Registry& registry);
void print_memory(const std::vector<MemoryRole>& roles, std::ostream& out);
// One line: the recipe's backend's memory (loom_backend_info.mem_total, ABI 2.11) against the
// largest peak, or why it is unknown (a backend that cannot start here, or reports none).
std::string device_memory(Recipe& recipe, Registry& registry, const std::vector<MemoryRole>& roles);

}  // namespace loom::engine
