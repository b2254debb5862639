// dataset/bert: Megatron-LM's BERTMaskedWordPieceDataset over an indexed dataset of sentences
// (`loom preprocess --split-sentences`: each sequence a sentence, documents grouping them),
// as a dataset that makes its own samples (ABI 2.3).
//
// Sample i of a split, with Megatron's draws (loom/cpp/masked_lm.hpp for the index and the
// masking):
//   - its sentences and target length from the split's sample index (build_mapping with
//     seq_len - 3 for [CLS] and two [SEP], at least two sentences with the binary head);
//   - numpy RandomState(seed + i): with the binary head, segment A is the first
//     randint(1, n) sentences (1 when n = 2) and B the rest, swapped with probability 0.5
//     (sop_labels = 1); without it, all sentences are A;
//   - the longer segment loses a token from its front or back (probability 0.5 each) until
//     both fit the target length;
//   - [CLS] A [SEP] B [SEP], token types 0 up to the first [SEP] and 1 after;
//   - masked LM as Megatron's BERT: 15 % (mask_prob), whole words, n-grams up to 3,
//     80 % [MASK], 10 % a random id, 10 % unchanged;
//   - padded to seq_len: tokens [PAD], token types 0, padding_mask 0, targets -1.
// Arrays: tokens, targets (-1 except at masked positions, where they hold the original id),
// padding_mask, token_types (int32 B x T) and sop_labels (int32 B, with the binary head).
//
// Where Loom differs from Megatron: the sample index is built in memory for each run (it
// is cheap next to reading the data) instead of cached as .npy; padding is told by
// position (padding_mask), not by comparing ids with [PAD], so a [PAD] inside the text stays
// a token; [PAD] ids are kept in the padding rather than rewritten to 0.
#include <memory>
#include <string>
#include <vector>

#include "loom/cpp/dataset.hpp"
#include "loom/cpp/plugin.hpp"
#include "loom/cpp/sentence_corpus.hpp"
#include "loom/cpp/tokenizer.hpp"
#include "loom/dataset.h"

namespace {

std::string s(int64_t v) { return std::to_string(v); }

constexpr int64_t kBatchSeq[2] = {LOOM_DIM_BATCH, LOOM_DIM_SEQ};
constexpr int64_t kBatch[1] = {LOOM_DIM_BATCH};
constexpr DLDataType kI32 = {kDLInt, 32, 1};
constexpr loom_array_spec kSpecs[5] = {
    {LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_TOKENS, kI32, 2, kBatchSeq},
    {LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_TARGETS, kI32, 2, kBatchSeq},
    {LOOM_ARRAY_SPEC_SIZE_V2, "padding_mask", kI32, 2, kBatchSeq},
    {LOOM_ARRAY_SPEC_SIZE_V2, "token_types", kI32, 2, kBatchSeq},
    {LOOM_ARRAY_SPEC_SIZE_V2, "sop_labels", kI32, 1, kBatch}};

struct Options : loom::masked::CorpusKeys {
  bool binary_head;
  explicit Options(const loom::Config& c) : CorpusKeys(c), binary_head(c.get_bool("binary_head")) {}
};

class BertDataset : public loom::masked::SentenceDataset {
 public:
  BertDataset(const loom_host* host, const loom::Config& c) : BertDataset(host, Options(c)) {}
  BertDataset(const loom_host* host, Options o)
      : SentenceDataset(host, "dataset/bert", o.prefix), opt_(std::move(o)) {
    fit_masking(opt_.masking);
  }
  void build(const loom_sample_index_args& a, int64_t* index, int64_t* num_samples) {
    loom::require(a.seq_len >= 5, "dataset/bert: seq_len = " + s(a.seq_len) +
                                      " leaves no room for two segments after [CLS] and "
                                      "two [SEP]");
    indices_.build(corpus_, a, (int32_t)(a.seq_len - 3), opt_.binary_head ? 2 : 1,
                   opt_.short_seq_prob, index, num_samples);
  }

  void sample(int64_t index, int64_t i, size_t num, DLTensor* const* out);

 private:
  Options opt_;
  std::vector<int32_t> sent_;
};

void BertDataset::sample(int64_t index, int64_t i, size_t num, DLTensor* const* out) {
  const loom::masked::SentenceIndices::Pick ix = indices_.pick(index, i);
  const int64_t T = ix.seq_len;
  loom::check_sample_arrays("dataset/bert", kSpecs, opt_.binary_head ? 5 : 4, num, out, T);
  const loom::masked::SentenceSample& smp = ix.sample;
  loom::RandomState rng(ix.rng_seed);

  // segments A and B
  const int64_t n = smp.end - smp.begin;
  int64_t pivot = n;
  bool swapped = false;
  if (opt_.binary_head) {
    loom::require(n > 1, "dataset/bert: a sample with the binary head needs two sentences");
    pivot = n >= 3 ? rng.randint(1, n) : 1;
    swapped = rng.random_sample() < 0.5;
  }
  std::vector<int32_t> a, b;
  for (int64_t k = 0; k < n; ++k) {
    corpus_.sentence(smp.begin + k, sent_);
    (k < pivot ? a : b).insert((k < pivot ? a : b).end(), sent_.begin(), sent_.end());
  }
  if (swapped) std::swap(a, b);
  while ((int64_t)(a.size() + b.size()) > smp.target_len) {
    std::vector<int32_t>& cut = a.size() > b.size() ? a : b;
    if (rng.random_sample() < 0.5)
      cut.erase(cut.begin());
    else
      cut.pop_back();
  }
  std::vector<int32_t> ids{vocab_.cls}, types{0};
  ids.insert(ids.end(), a.begin(), a.end());
  ids.push_back(vocab_.sep);
  types.resize(ids.size(), 0);
  if (!b.empty()) {
    ids.insert(ids.end(), b.begin(), b.end());
    ids.push_back(vocab_.sep);
    types.resize(ids.size(), 1);
  }
  const loom::masked::Masked m =
      loom::masked::mask_tokens(ids, smp.target_len, opt_.masking, kinds_, rng);

  const int64_t len = (int64_t)m.tokens.size();
  loom::require(len <= T, "dataset/bert: a sample of " + s(len) + " tokens exceeds seq_len");
  loom::fill_padded(out[0], m.tokens, T, vocab_.pad);
  loom::fill_padded(out[1], {}, T, -1);
  auto* targets = static_cast<int32_t*>(out[1]->data);
  for (size_t k = 0; k < m.positions.size(); ++k) targets[m.positions[k]] = m.labels[k];
  loom::fill_padding_mask(out[2], m.tokens.size(), T);
  loom::fill_padded(out[3], types, T, 0);  // as long as the tokens
  if (opt_.binary_head) *static_cast<int32_t*>(out[4]->data) = swapped ? 1 : 0;
}

loom_error* sample_spec(const loom_host* host, const loom_config* cfg, size_t* num,
                        const loom_array_spec** specs) {
  return loom::guard(host, [&] {
    loom::require(num != nullptr && specs != nullptr, "sample_spec outputs are NULL");
    *num = loom::Config(host, cfg).get_bool("binary_head") ? 5 : 4;
    *specs = kSpecs;
  });
}
const loom_dataset_api kApi =
    loom::SampleDatasetTable<BertDataset>::api(loom::create_dataset<BertDataset>, sample_spec);

const loom_param_spec kParams[] = {
    loom::param("prefix", LOOM_PARAM_STRING, nullptr,
                "path prefix of <prefix>.bin and <prefix>.idx, written by `loom preprocess "
                "--split-sentences` (sentences grouped in documents)"),
    loom::param("mask_prob", LOOM_PARAM_FLOAT, "0.15",
                "share of tokens predicted (Megatron's --mask-prob)", 0.0, 1.0),
    loom::param("short_seq_prob", LOOM_PARAM_FLOAT, "0.1",
                "probability of a shorter target length (Megatron's --short-seq-prob)", 0.0, 1.0),
    loom::param("max_ngram", LOOM_PARAM_INT, "3",
                "longest masked n-gram, in words (Megatron's BERT: 3)", 1, 64),
    loom::param("whole_word", LOOM_PARAM_BOOL, "true",
                "mask whole words: a word's \"##\" pieces with it (Megatron's BERT: true)"),
    loom::param("binary_head", LOOM_PARAM_BOOL, "true",
                "two segments and the sentence-order label sop_labels (false: one segment, as "
                "--bert-no-binary-head); must match model.binary_head"),
};

}  // namespace

LOOM_PLUGIN(.description =
                "Megatron-LM's BERT dataset: sentence pairs with the sentence-order label and "
                "masked-LM targets, over an indexed dataset of sentences",
            .params = kParams, .api = &kApi)
