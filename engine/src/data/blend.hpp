// Megatron's deterministic dataset blending (MEGATRON_FORMATS.md section 2): no RNG, the
// blend's sample s comes from the dataset whose share is furthest behind its weight.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::engine {

struct BlendEntry {
  double weight;       // as written; normalised by the users of the blend
  std::string prefix;  // the dataset plugin's prefix/path
};

// Parses "w1 p1 w2 p2 ..." (Megatron's --data-path; whitespace-separated). A single bare
// path means weight 1. `key` names the recipe key in errors. Throws UsageError.
std::vector<BlendEntry> parse_blend(const std::string& text, const std::string& key);

// Weights divided by their sum (summed left to right).
std::vector<double> normalise(const std::vector<double>& weights);

// Samples dataset k must provide for a blend of `size` samples: ceil(ceil(size * w_k) * 1.005).
std::vector<int64_t> blend_dataset_sizes(const std::vector<double>& normalised, int64_t size);

// The blend's order: sample s is sample `sample[s]` of dataset `dataset[s]`. For s = 0 ...
// size-1 the dataset k maximising w_k * max(s, 1) - count_k (ties: lowest k) is taken.
struct BlendIndex {
  std::vector<int16_t> dataset;
  std::vector<int64_t> sample;
};
BlendIndex build_blend_index(const std::vector<double>& normalised, int64_t size);

}  // namespace loom::engine
