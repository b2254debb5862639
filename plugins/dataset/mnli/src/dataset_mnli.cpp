// dataset/mnli: sentence-pair classification examples for finetuning BERT (model/bert-
// classifier), read from a tab-separated file as Megatron's tasks/glue/mnli.py reads GLUE's
// MNLI: a header line, then per example the premise in column 9, the hypothesis in column
// 10 and the label in the last column (contradiction 0, entailment 1, neutral 2). A file of
// three columns (premise, hypothesis, label) is read the same way. A test file (10 columns,
// no label) is refused: it cannot train or score.
//
// Each text is cleaned as Megatron's clean_text (newlines to spaces, runs of whitespace to
// one space, " . " to ". "), tokenised with the run's tokenizer, and laid out as Megatron's
// build_tokens_types_paddings_from_ids: [CLS] A [SEP] B, cut to seq_len - 1 tokens when
// longer, then [SEP]; token types 0 up to the first [SEP], 1 after; padding [PAD].
//
// A dataset that makes its own samples (ABI 2.3): documents are the examples, so data.split
// or separate files per split (data.train_blend / data.valid_blend) choose them; sample i
// is example order[i % n] of its split, the order shuffled each epoch e by numpy's
// RandomState(seed + e). (Megatron shuffles with PyTorch's sampler, which Loom does not
// reproduce.)
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/cpp/dataset.hpp"
#include "loom/cpp/numpy_random.hpp"
#include "loom/cpp/plugin.hpp"
#include "loom/cpp/plugin_files.hpp"
#include "loom/cpp/tokenizer.hpp"
#include "loom/dataset.h"

namespace {

std::string s(int64_t v) { return std::to_string(v); }

constexpr int64_t kBatchSeq[2] = {LOOM_DIM_BATCH, LOOM_DIM_SEQ};
constexpr int64_t kBatch[1] = {LOOM_DIM_BATCH};
constexpr DLDataType kI32 = {kDLInt, 32, 1};
constexpr loom_array_spec kSpecs[4] = {
    {LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_TOKENS, kI32, 2, kBatchSeq},
    {LOOM_ARRAY_SPEC_SIZE_V2, "padding_mask", kI32, 2, kBatchSeq},
    {LOOM_ARRAY_SPEC_SIZE_V2, "token_types", kI32, 2, kBatchSeq},
    {LOOM_ARRAY_SPEC_SIZE_V2, "labels", kI32, 1, kBatch}};

const std::map<std::string, int32_t> kLabels = {
    {"contradiction", 0}, {"entailment", 1}, {"neutral", 2}};

// Megatron's clean_text.
std::string clean_text(const std::string& in) {
  std::string out;
  bool space = false;
  for (char c : in) {
    const bool ws = c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
    if (ws) {
      space = true;
      continue;
    }
    if (space) out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  if (space) out.push_back(' ');
  for (int k = 0; k < 3; ++k)
    for (size_t at = out.find(" . "); at != std::string::npos; at = out.find(" . ", at))
      out.replace(at, 3, ". ");
  return out;
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out(1);
  for (char c : line) {
    if (c == '\t')
      out.emplace_back();
    else
      out.back().push_back(c);
  }
  return out;
}

std::string strip(const std::string& t) {
  const size_t b = t.find_first_not_of(" \t\r\n"), e = t.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : t.substr(b, e - b + 1);
}

struct Example {
  std::vector<int32_t> a, b;
  int32_t label = 0;
};

class MnliDataset {
 public:
  MnliDataset(const loom_host* host, const loom::Config& c)
      : host_(host), path_(c.get_string("path")) {
    loom::require(!path_.empty(), "dataset/mnli: [data] path is empty");
    tok_ = loom::host_tokenizer(host, "dataset/mnli");
    cls_ = loom::token_id(tok_, "[CLS]", "dataset/mnli");
    sep_ = loom::token_id(tok_, "[SEP]", "dataset/mnli");
    pad_ = loom::token_id(tok_, "[PAD]", "dataset/mnli");
    read();
  }
  const loom_host* host() const { return host_; }
  int64_t num_documents() const { return (int64_t)examples_.size(); }
  const char* cache_prefix() const { return nullptr; }  // nothing cached

  void document(int64_t i, const int32_t** ids, size_t* num) {
    loom::require(
        i >= 0 && i < num_documents(),
        "dataset/mnli: example " + s(i) + " out of range [0, " + s(num_documents()) + ")");
    doc_ = examples_[(size_t)i].a;
    doc_.insert(doc_.end(), examples_[(size_t)i].b.begin(), examples_[(size_t)i].b.end());
    loom::view_ids(doc_, ids, num);
  }

  void build(const loom_sample_index_args& a, int64_t* index, int64_t* num_samples) {
    loom::require(a.doc_begin >= 0 && a.doc_begin < a.doc_end && a.doc_end <= num_documents(),
                  "dataset/mnli: examples [" + s(a.doc_begin) + ", " + s(a.doc_end) +
                      ") outside [0, " + s(num_documents()) + ") or empty");
    loom::require(a.seq_len >= 3, "dataset/mnli: seq_len must hold [CLS], [SEP] and a token");
    Index ix;
    ix.seq_len = a.seq_len;
    const int64_t n = a.doc_end - a.doc_begin;
    // ceil(num_samples / n) without the overflow of num_samples + n - 1
    const int64_t epochs = std::max<int64_t>(1, a.num_samples / n + (a.num_samples % n != 0));
    for (int64_t e = 0; e < epochs; ++e) {
      std::vector<int64_t> order((size_t)n);
      for (int64_t k = 0; k < n; ++k) order[(size_t)k] = a.doc_begin + k;
      loom::RandomState rng((uint32_t)(((uint64_t)a.seed + (uint64_t)e) % 4294967296ull));
      rng.shuffle(order);
      ix.order.insert(ix.order.end(), order.begin(), order.end());
    }
    indices_.push_back(std::move(ix));
    *index = (int64_t)indices_.size() - 1;
    *num_samples = (int64_t)indices_.back().order.size();
  }

  void sample(int64_t index, int64_t i, size_t num, DLTensor* const* out) const;

 private:
  struct Index {
    std::vector<int64_t> order;
    int64_t seq_len = 0;
  };
  void read();

  const loom_host* host_;
  std::string path_;
  loom_tokenizer_ref tok_{};
  int32_t cls_ = -1, sep_ = -1, pad_ = -1;
  std::vector<Example> examples_;
  std::vector<int32_t> doc_;
  std::vector<Index> indices_;
};

void MnliDataset::read() {
  loom::require_regular_file(path_, "dataset/mnli: ");
  std::ifstream in(path_, std::ios::binary);
  if (!in) throw loom::Error(LOOM_ERR_IO, "dataset/mnli: cannot open " + path_);
  std::string line;
  size_t columns = 0;
  for (int64_t lineno = 1; std::getline(in, line); ++lineno) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::vector<std::string> row = split_tabs(line);
    const std::string where = path_ + ":" + s(lineno) + ": ";
    if (lineno == 1) {  // the header
      columns = row.size();
      loom::require(columns != 10,
                    where +
                        "10 columns: a test file without labels, which cannot be trained "
                        "on or scored");
      loom::require(columns == 3 || columns > 10,
                    where + s(columns) +
                        " columns; expected GLUE's MNLI (sentence1 in column 9, sentence2 in "
                        "10, the label last) or premise, hypothesis, label");
      continue;
    }
    if (strip(line).empty()) continue;
    loom::require(row.size() == columns,
                  where + s(row.size()) + " columns where the header has " + s(columns));
    const std::string a = clean_text(strip(row[columns == 3 ? 0 : 8]));
    const std::string b = clean_text(strip(row[columns == 3 ? 1 : 9]));
    const std::string label = strip(row.back());
    auto it = kLabels.find(label);
    loom::require(it != kLabels.end(),
                  where + "label '" + label + "' is none of contradiction, entailment, neutral");
    loom::require(!a.empty() && !b.empty(), where + "an empty premise or hypothesis");
    Example ex;
    ex.a = loom::encode(host_, tok_, a);
    ex.b = loom::encode(host_, tok_, b);
    ex.label = it->second;
    examples_.push_back(std::move(ex));
  }
  loom::require(!examples_.empty(), "dataset/mnli: " + path_ + " holds no example");
}

void MnliDataset::sample(int64_t index, int64_t i, size_t num, DLTensor* const* out) const {
  loom::require(index >= 0 && index < (int64_t)indices_.size(),
                "dataset/mnli: no sample index " + s(index));
  const Index& ix = indices_[(size_t)index];
  loom::require(i >= 0 && i < (int64_t)ix.order.size(),
                "dataset/mnli: sample " + s(i) + " outside [0, " + s(ix.order.size()) + ")");
  const int64_t T = ix.seq_len;
  loom::check_sample_arrays("dataset/mnli", kSpecs, 4, num, out, T);
  const Example& ex = examples_[(size_t)ix.order[(size_t)i]];
  std::vector<int32_t> ids{cls_}, types{0};
  ids.insert(ids.end(), ex.a.begin(), ex.a.end());
  ids.push_back(sep_);
  types.resize(ids.size(), 0);
  ids.insert(ids.end(), ex.b.begin(), ex.b.end());
  types.resize(ids.size(), 1);
  if ((int64_t)ids.size() >= T) {  // Megatron's cap: T - 1 tokens, then the last [SEP]
    ids.resize((size_t)T - 1);
    types.resize((size_t)T - 1);
  }
  ids.push_back(sep_);
  types.push_back(1);
  loom::fill_padded(out[0], ids, T, pad_);
  loom::fill_padding_mask(out[1], ids.size(), T);
  loom::fill_padded(out[2], types, T, 0);  // as long as the ids
  *static_cast<int32_t*>(out[3]->data) = ex.label;
}

loom_error* sample_spec(const loom_host* host, const loom_config*, size_t* num,
                        const loom_array_spec** specs) {
  return loom::guard(host, [&] {
    loom::require(num != nullptr && specs != nullptr, "sample_spec outputs are NULL");
    *num = 4;
    *specs = kSpecs;
  });
}
const loom_dataset_api kApi =
    loom::SampleDatasetTable<MnliDataset>::api(loom::create_dataset<MnliDataset>, sample_spec);

const loom_param_spec kParams[] = {
    loom::param("path", LOOM_PARAM_STRING, nullptr,
                "a tab-separated file: GLUE's MNLI (train.tsv, dev_matched.tsv) or premise, "
                "hypothesis, label with a header line"),
};

}  // namespace

LOOM_PLUGIN(
        .description =
            "MNLI sentence pairs for finetuning BERT: [CLS] premise [SEP] hypothesis [SEP] with "
            "the label (contradiction, entailment, neutral), as Megatron's GLUE task reads them",
        .params = kParams, .api = &kApi)
