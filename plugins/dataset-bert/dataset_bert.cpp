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
#include "loom/cpp/masked_lm.hpp"
#include "loom/cpp/megatron_indexed.hpp"
#include "loom/cpp/plugin.hpp"
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

struct Options {
  std::string prefix;
  loom::masked::MaskingSpec masking;
  double short_seq_prob = 0.1;
  bool binary_head = true;
};

// The tokenizer's special ids and word pieces, through ABI 2.3's token_to_id/id_to_token.
struct Vocabulary {
  int32_t cls = -1, sep = -1, mask = -1, pad = -1;
  int64_t size = 0;
  std::vector<char> continues;  // id -> its entry starts with "##"

  static Vocabulary from_host(const loom_host* host) {
    const loom_tokenizer_ref tok = loom::host_tokenizer(host, "dataset/bert");
    Vocabulary v;
    v.cls = loom::token_id(tok, "[CLS]", "dataset/bert");
    v.sep = loom::token_id(tok, "[SEP]", "dataset/bert");
    v.mask = loom::token_id(tok, "[MASK]", "dataset/bert");
    v.pad = loom::token_id(tok, "[PAD]", "dataset/bert");
    v.size = tok.api->vocab_size(tok.self);
    v.continues.resize((size_t)v.size);
    for (int64_t i = 0; i < v.size; ++i) {
      const char* t = nullptr;
      size_t len = 0;
      loom::check(host, tok.api->id_to_token(tok.self, (int32_t)i, &t, &len));
      v.continues[(size_t)i] = len >= 2 && t[0] == '#' && t[1] == '#';
    }
    return v;
  }
};

class BertDataset {
 public:
  BertDataset(const loom_host* host, Options o) : host_(host), opt_(std::move(o)) {
    try {
      reader_ = std::make_unique<loom::megatron::Reader>(opt_.prefix);
    } catch (const loom::megatron::FormatError& e) {
      throw loom::Error(LOOM_ERR_IO, std::string("dataset/bert: ") + e.what());
    }
    vocab_ = Vocabulary::from_host(host);
    opt_.masking.mask_id = vocab_.mask;
    opt_.masking.vocab = vocab_.size;
    kinds_.cls = vocab_.cls;
    kinds_.sep = vocab_.sep;
    kinds_.continues_word = [this](int32_t t) {
      return t >= 0 && t < vocab_.size && vocab_.continues[(size_t)t];
    };
    sizes_.resize((size_t)reader_->num_sequences());
    for (int64_t i = 0; i < reader_->num_sequences(); ++i) sizes_[(size_t)i] = reader_->length(i);
  }
  const loom_host* host() const { return host_; }
  const char* cache_prefix() const { return opt_.prefix.c_str(); }
  int64_t num_documents() const { return reader_->num_documents(); }

  // Document d: its sentences back to back (the host reads the lengths of documents).
  void document(int64_t d, const int32_t** ids, size_t* num_ids) {
    loom::require(
        d >= 0 && d < num_documents(),
        "dataset/bert: document " + s(d) + " out of range [0, " + s(num_documents()) + ")");
    doc_.clear();
    for (int64_t i = reader_->document_index(d); i < reader_->document_index(d + 1); ++i) {
      sentence(i, sent_);
      doc_.insert(doc_.end(), sent_.begin(), sent_.end());
    }
    static const int32_t kNone = 0;
    *ids = doc_.empty() ? &kNone : doc_.data();
    *num_ids = doc_.size();
  }

  void build(const loom_sample_index_args& a, int64_t* index, int64_t* num_samples) {
    loom::require(a.doc_begin >= 0 && a.doc_begin <= a.doc_end && a.doc_end <= num_documents(),
                  "dataset/bert: documents [" + s(a.doc_begin) + ", " + s(a.doc_end) +
                      ") outside [0, " + s(num_documents()) + ")");
    loom::require(a.seq_len >= 5, "dataset/bert: seq_len = " + s(a.seq_len) +
                                      " leaves no room for two segments after [CLS] and "
                                      "two [SEP]");
    loom::masked::SampleIndexSpec spec;
    for (int64_t d = a.doc_begin; d <= a.doc_end; ++d)
      spec.doc_starts.push_back(reader_->document_index(d));
    spec.num_samples = a.num_samples;
    spec.max_seq_len = (int32_t)(a.seq_len - 3);
    spec.short_seq_prob = opt_.short_seq_prob;
    spec.seed = (int32_t)a.seed;
    spec.min_sentences = opt_.binary_head ? 2 : 1;
    Index ix;
    try {
      ix.samples = loom::masked::build_sentence_samples(sizes_, spec);
    } catch (const std::runtime_error& e) {
      throw loom::Error(LOOM_ERR_INVALID_ARGUMENT,
                        "dataset/bert: " + opt_.prefix + ", documents [" + s(a.doc_begin) + ", " +
                            s(a.doc_end) + "): " + e.what() +
                            " (was the data preprocessed with --split-sentences?)");
    }
    ix.seq_len = a.seq_len;
    ix.seed = a.seed;
    indices_.push_back(std::move(ix));
    *index = (int64_t)indices_.size() - 1;
    *num_samples = (int64_t)indices_.back().samples.size();
  }

  void sample(int64_t index, int64_t i, size_t num, DLTensor* const* out);

 private:
  struct Index {
    std::vector<loom::masked::SentenceSample> samples;
    int64_t seq_len = 0;
    uint32_t seed = 0;
  };
  void sentence(int64_t i, std::vector<int32_t>& out) const {
    try {
      reader_->read(i, out);
    } catch (const loom::megatron::FormatError& e) {
      throw loom::Error(LOOM_ERR_IO, std::string("dataset/bert: ") + e.what());
    }
  }

  const loom_host* host_;
  Options opt_;
  std::unique_ptr<loom::megatron::Reader> reader_;
  Vocabulary vocab_;
  loom::masked::TokenKinds kinds_;
  std::vector<int32_t> sizes_, doc_, sent_;
  std::vector<Index> indices_;
};

void BertDataset::sample(int64_t index, int64_t i, size_t num, DLTensor* const* out) {
  loom::require(index >= 0 && index < (int64_t)indices_.size(),
                "dataset/bert: no sample index " + s(index));
  const Index& ix = indices_[(size_t)index];
  loom::require(i >= 0 && i < (int64_t)ix.samples.size(),
                "dataset/bert: sample " + s(i) + " outside [0, " + s(ix.samples.size()) + ")");
  const int64_t T = ix.seq_len;
  loom::check_sample_arrays("dataset/bert", kSpecs, opt_.binary_head ? 5 : 4, num, out, T);
  const loom::masked::SentenceSample& smp = ix.samples[(size_t)i];
  loom::RandomState rng((uint32_t)(((uint64_t)ix.seed + (uint64_t)i) % 4294967296ull));

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
    sentence(smp.begin + k, sent_);
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

  auto* tokens = static_cast<int32_t*>(out[0]->data);
  auto* targets = static_cast<int32_t*>(out[1]->data);
  auto* padding = static_cast<int32_t*>(out[2]->data);
  auto* tt = static_cast<int32_t*>(out[3]->data);
  const int64_t len = (int64_t)m.tokens.size();
  loom::require(len <= T, "dataset/bert: a sample of " + s(len) + " tokens exceeds seq_len");
  for (int64_t t = 0; t < T; ++t) {
    tokens[t] = t < len ? m.tokens[(size_t)t] : vocab_.pad;
    targets[t] = -1;
    padding[t] = t < len ? 1 : 0;
    tt[t] = t < len ? types[(size_t)t] : 0;
  }
  for (size_t k = 0; k < m.positions.size(); ++k) targets[m.positions[k]] = m.labels[k];
  if (opt_.binary_head) *static_cast<int32_t*>(out[4]->data) = swapped ? 1 : 0;
}

Options read_options(const loom_host* host, const loom_config* cfg) {
  loom::Config c(host, cfg);
  Options o;
  o.prefix = loom::megatron::prefix_of(c.get_string("prefix"));
  loom::require(!o.prefix.empty(), "dataset/bert: [data] prefix is empty");
  o.masking.probability = c.get_float("mask_prob");
  o.masking.max_ngram = (int32_t)c.get_int("max_ngram");
  o.masking.whole_word = c.get_bool("whole_word");
  o.short_seq_prob = c.get_float("short_seq_prob");
  o.binary_head = c.get_bool("binary_head");
  return o;
}

loom_error* create(const loom_host* host, const loom_config* cfg, loom_dataset** out) {
  return loom::guard(host, [&] {
    *out = reinterpret_cast<loom_dataset*>(new BertDataset(host, read_options(host, cfg)));
  });
}
loom_error* sample_spec(const loom_host* host, const loom_config* cfg, size_t* num,
                        const loom_array_spec** specs) {
  return loom::guard(host, [&] {
    loom::require(num != nullptr && specs != nullptr, "sample_spec outputs are NULL");
    *num = loom::Config(host, cfg).get_bool("binary_head") ? 5 : 4;
    *specs = kSpecs;
  });
}
const loom_dataset_api kApi = loom::SampleDatasetTable<BertDataset>::api(create, sample_spec);

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

const loom_plugin_descriptor kDescriptor = {
    LOOM_PLUGIN_DESCRIPTOR_SIZE_V2,
    LOOM_ABI_MAJOR,
    LOOM_ABI_MINOR,
    LOOM_KIND_DATASET,
    "bert",
    "0.1.0",
    "Loom",
    "Apache-2.0",
    "Megatron-LM's BERT dataset: sentence pairs with the sentence-order label and masked-LM "
    "targets, over an indexed dataset of sentences",
    kParams,
    sizeof(kParams) / sizeof(kParams[0]),
    &kApi,
    nullptr,   // capabilities
    nullptr};  // ext

}  // namespace

LOOM_PLUGIN_ENTRY(kDescriptor)
