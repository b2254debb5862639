// `loom data samples`: the first samples of a split in training order, to check what a
// recipe will train on (and compare with Megatron-LM's order).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "loader/registry.hpp"
#include "recipe/recipe.hpp"

namespace loom::engine {

// Prints "# ..." header lines, then one line per sample first <= i < first + count, tab-
// separated:
//   i  dataset-index  dataset-name  sample-index-in-that-dataset  first 8 token ids
// With `targets` (GPT samples), the last two columns are the whole sample's seq_len tokens
// and the seq_len targets training reads: -1 where the loss ignores them (a chat dataset's
// loss mask, packed sequences' document ends).
// `split` is train, valid or test. Throws UsageError for a split without samples.
void print_samples(Recipe& recipe, Registry& registry, const std::string& split, int64_t first,
                   int64_t count, std::ostream& out, bool targets = false);

}  // namespace loom::engine
