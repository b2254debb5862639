// The training loop: composes the recipe's plugins, trains, evaluates, checkpoints.
#pragma once

#include "recipe.hpp"
#include "registry.hpp"

namespace loom::engine {

// Runs the validated recipe to completion. Throws UsageError (exit 2) or RunError (exit 1).
void run_training(Recipe& recipe, Registry& registry);

}  // namespace loom::engine
