// Splits a dataset's documents into train/valid/test and serves fixed-length samples.
//
// Documents of a split, each followed by the end-of-document token, form one token stream
// per epoch in an order shuffled by (seed, split, epoch). Sample i is the seq_len + 1 tokens
// starting at stream position i * seq_len (inputs and next-token targets overlap by one,
// as in Megatron's GPT dataset). Samples are read in order, so the loader's whole state is
// the count of samples consumed: resuming needs nothing else.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/dataset.h"

namespace loom::engine {

// Document index ranges [begin, end) of each split from weights like "98,2,0".
struct SplitRanges {
  int64_t begin[3], end[3];
};
SplitRanges split_documents(int64_t num_documents, const std::string& weights);

class Sampler {
 public:
  Sampler(const loom_dataset_api* api, loom_dataset* ds, int64_t doc_begin, int64_t doc_end,
          int64_t eod_id, int64_t seq_len, uint64_t seed);
  int64_t tokens_per_epoch() const { return epoch_tokens_; }
  bool empty() const { return epoch_tokens_ <= 0; }
  // Fills tokens/targets (seq_len each) with sample `index`.
  void sample(int64_t index, int32_t* tokens, int32_t* targets);

 private:
  const std::vector<int32_t>& epoch(int64_t e);
  int32_t token_at(int64_t pos);

  const loom_dataset_api* api_;
  loom_dataset* ds_;
  std::vector<int64_t> docs_;  // document ids of the split
  int64_t eod_, seq_len_;
  uint64_t seed_;
  int64_t epoch_tokens_ = 0;
  int64_t cached_epoch_ = -1;
  std::vector<int32_t> cache_;  // the stream of cached_epoch_
};

}  // namespace loom::engine
