// The named batch (ABI 2): a model reads only arrays the run's data provides.
#pragma once

#include <string>

#include "loom/loom.h"

namespace loom::engine {

class Recipe;
class Registry;

// Refuses (UsageError), naming the model, the array and what is provided, a model whose
// batch spec asks for an array the data does not provide with that dtype and shape.
void check_batch_spec(const loom_array_spec* wants, size_t num_wants,
                      const loom_array_spec* provides, size_t num_provides,
                      const std::string& model);

// The recipe's model plugin's batch_spec (asked with its [model] section, no instance)
// against the arrays GPT samples provide, and its attention_requires against the attention
// plugin's capabilities. Returns `recipe`, so that set-up can chain it.
Recipe& check_model_batch(Recipe& recipe, Registry& registry);

}  // namespace loom::engine
