// The training loop: composes the recipe's plugins, trains, evaluates, checkpoints.
#pragma once

#include <string>

#include "loader/registry.hpp"
#include "recipe/recipe.hpp"

namespace loom::engine {

// Runs the validated recipe to completion, or until a signal, train.exit_interval or
// train.exit_duration_mins stops it after a step and a checkpoint. Returns the exit code (0,
// or kExitStoppedBySignal); throws UsageError (exit 2) or RunError (exit 1).
int run_training(Recipe& recipe, Registry& registry);

// What a run would refuse about its output, checkpoint.save (not writable, another run's
// checkpoints, locked by a running run) and train.metrics (not writable), with the run's
// message, or "": for `loom validate`, which writes nothing but a probe file it removes
// (train_folders.cpp).
std::string folder_refusal(const Recipe& recipe);

}  // namespace loom::engine
