// DPO's data (train.objective = "dpo"): the preference pairs `loom preprocess --chat-format F
// --preference-pairs` writes, <p>_chosen_document and <p>_rejected_document (document i of
// one paired with document i of the other) and their loss masks <p>_chosen_loss_mask_document
// and <p>_rejected_loss_mask_document. data.prefix names the chosen half; the rest is found
// beside it. Each conversation is one padded row (data.pad_sequences' samples, implied): the
// pairs are shuffled and split by data.split as documents, and sample 2k / 2k+1 of a split is
// pair k's chosen / rejected row (Sampler::pairs), so that an even micro-batch holds whole pairs.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "data/sampler.hpp"

namespace loom::engine {

class Recipe;
class Session;

class PairData {
 public:
  // Reads the four datasets' document lengths and checks that they pair up; UsageError for a
  // recipe that cannot name pairs (a blend, packing, a prefix without _chosen_document).
  PairData(const Recipe& recipe, Session& session);
  // The samplers of the splits with wanted[k] > 0 sequences (2 per pair), as build_samplers.
  std::array<std::unique_ptr<Sampler>, 3> samplers(const std::array<int64_t, 3>& wanted,
                                                   int64_t seq_len) const;
  // Every pair once, in document order (pair k = document k; indices past the end wrap):
  // what the reference pass reads.
  std::unique_ptr<Sampler> in_order(int64_t seq_len) const;
  int64_t documents() const { return (int64_t)chosen_->sizes.size(); }
  // The pairs' identity (the documents' lengths, both halves): the reference file's key.
  std::string identity() const;
  // <p> of <p>_chosen_document: where files about the pairs go (`loom eval --logprobs`).
  const std::string& stem() const { return stem_; }

 private:
  std::shared_ptr<GptDataset> part(const std::shared_ptr<DocumentSource>& src, int64_t begin,
                                   int64_t end, int64_t samples, bool in_order,
                                   int64_t seq_len) const;
  std::unique_ptr<Sampler> pairs_of(std::shared_ptr<GptDataset> chosen) const;
  const Recipe& recipe_;
  std::shared_ptr<DocumentSource> chosen_, rejected_, chosen_mask_, rejected_mask_;
  std::string stem_;
};

}  // namespace loom::engine
