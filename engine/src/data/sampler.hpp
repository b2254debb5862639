// The run's samplers: for each split (train, valid, test) the samples in training order,
// each sample i = seq_len + 1 tokens of Megatron-LM's GPT dataset (gpt_dataset.hpp), or the
// named arrays of a dataset that makes its own samples (made_samples.hpp: BERT's), from one
// dataset or a deterministic blend of several (blend.hpp).
//
// The recipe's [data] section says where samples come from:
// - neither `blend` nor `*_blend`: the one [data] dataset, its documents split by `split`;
// - `blend = "w1 p1 w2 p2 ..."`: one instance of the [data] plugin per path (its `prefix`
//   or `path` key replaced), each split by `split`, blended per split;
// - `train_blend`, `valid_blend`, `test_blend`: separate datasets per split, used whole.
// Samples are read by index, so the loader's whole state is the count consumed: resuming
// needs nothing else. Samples wanted per split follow Megatron (samples_wanted below).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/blend.hpp"
#include "data/gpt_dataset.hpp"
#include "data/made_samples.hpp"
#include "recipe/samples_wanted.hpp"

namespace loom::engine {

class Recipe;
class Session;

enum Split { kTrain = 0, kValid = 1, kTest = 2 };
const char* split_name(int split);  // "train", "valid", "test"

class Sampler {
 public:
  explicit Sampler(std::shared_ptr<GptDataset> dataset);
  explicit Sampler(std::shared_ptr<MadeSamples> dataset);
  // A blend of `size` samples over `parts` (GPT samples, or samples made by the datasets)
  // with (unnormalised) `weights`.
  Sampler(std::vector<std::shared_ptr<GptDataset>> parts, const std::vector<double>& weights,
          int64_t size);
  Sampler(std::vector<std::shared_ptr<MadeSamples>> parts, const std::vector<double>& weights,
          int64_t size);
  // Preference pairs (DPO, data/preference_data.hpp): sample 2k is pair k's chosen sequence
  // and 2k+1 its rejected one, pair k being padded sample k of `chosen`, whose index
  // `rejected` and the masks (either may be null) share; size() counts sequences, and an index
  // past it wraps round (the reference pass fills its last micro-batches so).
  static std::unique_ptr<Sampler> pairs(std::shared_ptr<GptDataset> chosen,
                                        std::shared_ptr<GptDataset> rejected,
                                        std::shared_ptr<GptDataset> chosen_mask,
                                        std::shared_ptr<GptDataset> rejected_mask);
  bool paired() const { return paired_; }
  // Where paired sample i's reference log-probability is kept in a table of two per pair
  // document (DPO's): 2d + 0 for its document d's chosen row, 2d + 1 for the rejected one.
  int64_t pair_slot(int64_t i) const;
  int64_t size() const;
  // True when the datasets make their own samples (fill), false for GPT samples (text).
  bool made() const { return !made_.empty(); }
  size_t num_datasets() const { return made() ? made_.size() : parts_.size(); }
  const GptDataset& dataset(size_t k) const { return *parts_[k]; }
  const DocumentSource& source(size_t k) const {
    return made() ? made_[k]->source() : parts_[k]->source();
  }
  int64_t dataset_size(size_t k) const { return made() ? made_[k]->size() : parts_[k]->size(); }
  // Where sample i comes from: dataset k and its sample index there.
  struct Origin {
    size_t dataset;
    int64_t index;
  };
  Origin origin(int64_t i) const;
  // The seq_len + 1 tokens of sample i (GPT samples); returns how many are the data's (fewer
  // for a padded sample, data.pad_sequences).
  int64_t text(int64_t i, int32_t* out) const;
  // Fills tokens/targets (seq_len each) with sample i: text[:-1] and text[1:], the targets
  // whose token the loss mask says is not trained -1 (ignored by the loss).
  void sample(int64_t i, int32_t* tokens, int32_t* targets);
  // Loss masks (loom preprocess --chat-format): masks[k], when not null, is dataset k's mask
  // as GPT samples of the same index (its documents have the tokens' lengths), 0 = ignored.
  void set_masks(std::vector<std::shared_ptr<GptDataset>> masks) { masks_ = std::move(masks); }
  bool masked() const { return !masks_.empty(); }
  // Sample i as the datasets' arrays, one row each (made samples).
  void fill(int64_t i, DLTensor* const* row, size_t num) const;

 private:
  void check_blend() const;
  std::vector<std::shared_ptr<GptDataset>> parts_, masks_;
  std::vector<std::shared_ptr<MadeSamples>> made_;
  BlendIndex blend_;  // empty for one dataset
  bool paired_ = false;
  std::vector<int32_t> buf_, mask_buf_;
};

// Builds the samplers [data] describes for the splits with wanted[k] > 0 (nullptr for a
// split without samples wanted or without documents). `seq_len` is train.seq_len.
std::array<std::unique_ptr<Sampler>, 3> build_samplers(const Recipe& recipe, Session& session,
                                                       const std::array<int64_t, 3>& wanted,
                                                       int64_t seq_len);

}  // namespace loom::engine
