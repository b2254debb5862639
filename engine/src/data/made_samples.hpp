// Datasets that make their own samples (ABI 2.3: sample_spec, build_samples, sample), as
// Megatron's BERT and T5 datasets do: the host keeps the split, the blend, the data-parallel
// deal and the consumed count, and asks the plugin for sample i of a split as named arrays.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/gpt_dataset.hpp"
#include "loom/dataset.h"

namespace loom::engine {

class Recipe;
class Registry;

// True when the dataset's table has the three ABI 2.3 sample slots.
bool makes_samples(const loom_dataset_api* api);

// The arrays the recipe's [data] plugin fills per micro-batch, from its configuration alone;
// empty for a dataset that leaves sample-making to the host (GPT samples). Each is int32
// (B), (B, T) or (B, K) for a fixed K (a T5 decoder's length): the shapes the host's feed
// holds (UsageError otherwise).
std::vector<loom_array_spec> dataset_sample_spec(const Recipe& recipe, Registry& registry);

// One split of one such dataset: the plugin's sample index over the split's documents.
class MadeSamples {
 public:
  MadeSamples(std::shared_ptr<DocumentSource> src, int64_t doc_begin, int64_t doc_end,
              int64_t seq_len, uint32_t seed, int64_t wanted);
  int64_t size() const { return size_; }
  const DocumentSource& source() const { return *src_; }
  // Sample i into row[k] (host int32 views, one per spec entry, batch dimension dropped).
  void fill(int64_t i, DLTensor* const* row, size_t num) const;

 private:
  std::shared_ptr<DocumentSource> src_;
  int64_t index_ = 0, size_ = 0;
};

}  // namespace loom::engine
