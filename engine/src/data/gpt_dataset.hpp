// Megatron-LM's GPT dataset over one loom dataset (MEGATRON_FORMATS.md section 2): the
// split of its documents (Megatron's "sequences"), and the document, sample and shuffle
// index arrays that fix which L+1 tokens sample i holds, cached as .npy files beside the
// data.
//
// Where the formats page is silent we follow Megatron-LM's GPTDataset and say so here:
// - the separate last epoch: with E > 1, P = (T-1) // L samples per epoch and
//   F = S_wanted - ((E-1)*T - 1) // L samples from the last epoch, the last epoch is
//   shuffled alone when F < int(0.8 * P) (double product, truncated);
// - the shuffle index groups are [0, ((E-1)*T - 1) // L) and the rest of [0, S);
// - the document index holds document ids as int32 (at most 2^31-1 documents); a
//   document with no tokens stays in it and contributes nothing;
// - every split of every dataset uses its own RandomState(train.seed).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/dataset.h"

namespace loom::engine {

// Document ranges [begin, end) of train/valid/test for weights like "969,30,1": padded to
// three, normalised, cumulative bounds round(c * N) with round-half-to-even.
struct SplitRanges {
  int64_t begin[3], end[3];
};
SplitRanges split_documents(int64_t num_documents, const std::string& weights);

// One dataset instance and what is read from it once: every document's length.
struct DocumentSource {
  const loom_dataset_api* api = nullptr;
  loom_dataset* ds = nullptr;
  std::string name;          // for logs and `loom data samples`: the prefix, or kind/name
  std::string cache_prefix;  // "" = no cache on disk
  std::vector<int32_t> sizes;
  std::string sizes_digest;  // hex sha256 of the sizes: the dataset's identity in cache keys
  // Reads every document's length (the ABI has no length-only call).
  static std::shared_ptr<DocumentSource> read(const loom_dataset_api* api, loom_dataset* ds,
                                              std::string name);
};

struct GptIndexSpec {
  int64_t doc_begin = 0, doc_end = 0;  // the split's documents
  int64_t seq_len = 0;                 // L
  uint32_t seed = 1234;                // RandomState seed
  int64_t num_samples = 0;             // samples wanted
  // data.pad_sequences: one document a sample from its first token, cut at L+1 tokens and
  // padded (the split's non-empty documents, shuffled over as many epochs as the samples
  // need); never cached, and none of Megatron's GPT arithmetic applies.
  bool pad = false;
  // With pad: the split's documents once each, in order (DPO's reference pass), not shuffled.
  bool in_order = false;
};

struct GptIndices {
  std::vector<int32_t> doc_idx;      // (E * n,) document ids
  std::vector<int64_t> sample_idx;   // (S + 1, 2) row-major: (position in doc_idx, offset)
  std::vector<int64_t> shuffle_idx;  // (S,)
  int64_t num_epochs = 0;
  bool separate_last_epoch = false;
};

// Builds the three arrays in memory (pure). Throws RunError for an empty split.
GptIndices build_gpt_indices(const std::vector<int32_t>& sizes, const GptIndexSpec& spec);

// Lowercase hex SHA-256 of n bytes (OpenSSL): cache keys, the recipe every rank must share.
std::string sha256_hex(const void* data, size_t n);

// The cache key of (source, spec, algorithm version): 32 hex characters.
std::string gpt_index_hash(const DocumentSource& src, const GptIndexSpec& spec);

// How load_or_build_gpt_indices got its arrays.
enum class IndexOrigin { kMemory, kBuilt, kLoaded };

// Reads the arrays from "<cache_prefix>.<hash>.{doc,sample,shuffle}_idx.npy" when all three
// are present and valid (header, size and value ranges); otherwise builds them and, when
// `use_cache` and the source has a cache prefix, writes them atomically (tmp + rename). A
// cache that cannot be written is a warning, not an error.
GptIndices load_or_build_gpt_indices(const DocumentSource& src, const GptIndexSpec& spec,
                                     bool use_cache, IndexOrigin* origin = nullptr);

// Writes / reads a 1-D or 2-D little-endian int32/int64 array as .npy (format 1.0).
void write_npy(const std::string& path, const void* data, char type, int itemsize,
               const std::vector<int64_t>& shape);
// Fills `out` (out_bytes) when the file is exactly such an array; false otherwise.
bool read_npy(const std::string& path, char type, int itemsize, const std::vector<int64_t>& shape,
              void* out, size_t out_bytes);

// One split of one dataset: sample i -> its L+1 tokens.
class GptDataset {
 public:
  GptDataset(std::shared_ptr<DocumentSource> src, const GptIndexSpec& spec, bool use_cache);
  // `src` sampled by the index of `same`, whose source's documents have src's lengths (a
  // chat dataset's loss mask beside its tokens): nothing is built or cached again.
  GptDataset(std::shared_ptr<DocumentSource> src, const GptDataset& same)
      : src_(std::move(src)), spec_(same.spec_), idx_(same.idx_) {}
  int64_t size() const { return (int64_t)idx_.shuffle_idx.size(); }
  const GptIndices& indices() const { return idx_; }
  const DocumentSource& source() const { return *src_; }
  int64_t seq_len() const { return spec_.seq_len; }
  // The L+1 tokens of sample i (tokens = text[:-1], labels = text[1:]); returns how many are
  // the data's: L+1, or fewer for a padded sample (the rest are 0, not to be trained on).
  int64_t text(int64_t i, int32_t* out) const;
  // The document padded sample i holds (GptIndexSpec::pad): a preference pair's identity.
  int32_t document(int64_t i) const;

 private:
  void check_sample(int64_t i) const;  // RunError naming a sample out of range
  std::shared_ptr<DocumentSource> src_;
  GptIndexSpec spec_;
  GptIndices idx_;
};

}  // namespace loom::engine
