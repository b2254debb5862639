// Loom SDK C++ helpers (header-only): what Megatron's masked-language datasets (BERT's, T5's)
// read: an indexed dataset of sentences (`loom preprocess --split-sentences`: each sequence a
// sentence, documents grouping them), the sample indices built from it, and the tokenizer's
// word pieces. dataset/bert and dataset/t5 share it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/cpp/dataset.hpp"
#include "loom/cpp/masked_lm.hpp"
#include "loom/cpp/megatron_indexed.hpp"
#include "loom/cpp/plugin.hpp"
#include "loom/cpp/tokenizer.hpp"
#include "loom/dataset.h"

namespace loom::masked {

// The keys every masked dataset reads: prefix, mask_prob, short_seq_prob, max_ngram and
// whole_word (their defaults are each plugin's: BERT's n-grams up to 3, T5's up to 10).
struct CorpusKeys {
  std::string prefix;
  MaskingSpec masking;
  double short_seq_prob = 0.1;
  explicit CorpusKeys(const Config& c)
      : prefix(c.get_string("prefix")),
        masking(read_masking(c)),
        short_seq_prob(c.get_float("short_seq_prob")) {}

 private:
  static MaskingSpec read_masking(const Config& c) {
    MaskingSpec m;
    m.probability = c.get_float("mask_prob");
    m.max_ngram = (int32_t)c.get_int("max_ngram");
    m.whole_word = c.get_bool("whole_word");
    return m;
  }
};

class SentenceCorpus {
 public:
  // `who` ("dataset/bert") prefixes every error; a corrupt or missing dataset is LOOM_ERR_IO.
  SentenceCorpus(std::string who, const std::string& prefix)
      : who_(std::move(who)), prefix_(megatron::prefix_of(prefix)) {
    require(!prefix_.empty(), who_ + ": [data] prefix is empty");
    try {
      reader_ = std::make_unique<megatron::Reader>(prefix_);
    } catch (const megatron::FormatError& e) {
      throw Error(LOOM_ERR_IO, who_ + ": " + e.what());
    }
    sizes_.resize((size_t)reader_->num_sequences());
    for (int64_t i = 0; i < reader_->num_sequences(); ++i) sizes_[(size_t)i] = reader_->length(i);
  }
  const std::string& prefix() const { return prefix_; }
  int64_t num_documents() const { return reader_->num_documents(); }
  // The C api's document call: document d in `buf`, handed out (valid until the next call).
  void document(int64_t d, std::vector<int32_t>& buf, const int32_t** ids, size_t* num_ids) const {
    document(d, buf);
    view_ids(buf, ids, num_ids);
  }

  void sentence(int64_t i, std::vector<int32_t>& out) const {
    try {
      reader_->read(i, out);
    } catch (const megatron::FormatError& e) {
      throw Error(LOOM_ERR_IO, who_ + ": " + e.what());
    }
  }
  // Document d: its sentences back to back.
  void document(int64_t d, std::vector<int32_t>& out) const {
    require(d >= 0 && d < num_documents(), who_ + ": document " + std::to_string(d) +
                                               " out of range [0, " +
                                               std::to_string(num_documents()) + ")");
    out.clear();
    std::vector<int32_t> s;
    for (int64_t i = reader_->document_index(d); i < reader_->document_index(d + 1); ++i) {
      sentence(i, s);
      out.insert(out.end(), s.begin(), s.end());
    }
  }
  // Sentences [begin, end) back to back.
  std::vector<int32_t> text(int64_t begin, int64_t end) const {
    std::vector<int32_t> out, s;
    for (int64_t i = begin; i < end; ++i) {
      sentence(i, s);
      out.insert(out.end(), s.begin(), s.end());
    }
    return out;
  }

  // The sample index of the split's documents (build_sentence_samples), targets up to
  // max_len tokens.
  std::vector<SentenceSample> index(const loom_sample_index_args& a, int32_t max_len,
                                    int32_t min_sentences, double short_seq_prob) const {
    require(a.doc_begin >= 0 && a.doc_begin <= a.doc_end && a.doc_end <= num_documents(),
            who_ + ": documents [" + std::to_string(a.doc_begin) + ", " +
                std::to_string(a.doc_end) + ") outside [0, " + std::to_string(num_documents()) +
                ")");
    SampleIndexSpec spec;
    for (int64_t d = a.doc_begin; d <= a.doc_end; ++d)
      spec.doc_starts.push_back(reader_->document_index(d));
    spec.num_samples = a.num_samples;
    spec.max_seq_len = max_len;
    spec.short_seq_prob = short_seq_prob;
    spec.seed = (int32_t)a.seed;
    spec.min_sentences = min_sentences;
    try {
      return build_sentence_samples(sizes_, spec);
    } catch (const std::runtime_error& e) {
      throw Error(LOOM_ERR_INVALID_ARGUMENT,
                  who_ + ": " + prefix_ + ", documents [" + std::to_string(a.doc_begin) + ", " +
                      std::to_string(a.doc_end) + "): " + e.what() +
                      " (was the data preprocessed with --split-sentences?)");
    }
  }

 private:
  std::string who_, prefix_;
  std::unique_ptr<megatron::Reader> reader_;
  std::vector<int32_t> sizes_;
};

// The sample indices a masked dataset built, one per build_samples call (a split each), and
// the look-up `sample` makes in them, with the errors every masked dataset gives.
class SentenceIndices {
 public:
  struct Index {
    std::vector<SentenceSample> samples;
    int64_t seq_len = 0;
    uint32_t seed = 0;
  };
  // Sample i of an index: its sentences, the split's seq_len, and numpy RandomState(seed + i),
  // the draws Megatron makes for it.
  struct Pick {
    const SentenceSample& sample;
    int64_t seq_len;
    uint32_t rng_seed;
  };

  explicit SentenceIndices(std::string who) : who_(std::move(who)) {}

  // build_samples: the split's index of `corpus`, targets up to max_len tokens.
  void build(const SentenceCorpus& corpus, const loom_sample_index_args& a, int32_t max_len,
             int32_t min_sentences, double short_seq_prob, int64_t* index, int64_t* num_samples) {
    Index ix;
    ix.samples = corpus.index(a, max_len, min_sentences, short_seq_prob);
    ix.seq_len = a.seq_len;
    ix.seed = a.seed;
    indices_.push_back(std::move(ix));
    *index = (int64_t)indices_.size() - 1;
    *num_samples = (int64_t)indices_.back().samples.size();
  }

  Pick pick(int64_t index, int64_t i) const {
    require(index >= 0 && index < (int64_t)indices_.size(),
            who_ + ": no sample index " + std::to_string(index));
    const Index& ix = indices_[(size_t)index];
    require(i >= 0 && i < (int64_t)ix.samples.size(), who_ + ": sample " + std::to_string(i) +
                                                          " outside [0, " +
                                                          std::to_string(ix.samples.size()) + ")");
    return {ix.samples[(size_t)i], ix.seq_len,
            (uint32_t)(((uint64_t)ix.seed + (uint64_t)i) % 4294967296ull)};
  }

 private:
  std::string who_;
  std::vector<Index> indices_;
};

// The run's tokenizer as masking sees it: the special ids and which entries continue a word
// ("##" pieces), through ABI 2.3's token_to_id/id_to_token.
struct WordPieces {
  int32_t cls = -1, sep = -1, mask = -1, pad = -1;
  int64_t size = 0;
  std::vector<char> continues;

  static WordPieces from_host(const loom_host* host, const std::string& who) {
    const loom_tokenizer_ref tok = host_tokenizer(host, who);
    WordPieces v;
    v.cls = token_id(tok, "[CLS]", who);
    v.sep = token_id(tok, "[SEP]", who);
    v.mask = token_id(tok, "[MASK]", who);
    v.pad = token_id(tok, "[PAD]", who);
    v.size = tok.api->vocab_size(tok.self);
    v.continues.resize((size_t)v.size);
    for (int64_t i = 0; i < v.size; ++i) {
      const char* t = nullptr;
      size_t len = 0;
      check(host, tok.api->id_to_token(tok.self, (int32_t)i, &t, &len));
      v.continues[(size_t)i] = len >= 2 && t[0] == '#' && t[1] == '#';
    }
    return v;
  }
  TokenKinds kinds() const {
    TokenKinds k;
    k.cls = cls;
    k.sep = sep;
    const std::vector<char>* c = &continues;
    k.continues_word = [c](int32_t t) { return t >= 0 && (size_t)t < c->size() && (*c)[t]; };
    return k;
  }
};

// What a dataset over a sentence corpus answers the same way, whatever samples it makes:
// host(), num_documents(), document() and cache_prefix() (the corpus's), with the run's word
// pieces for masking and the sample indices its build_samples makes. dataset/bert and
// dataset/t5 derive from it and add build and sample. Not copyable: kinds_ points into vocab_.
class SentenceDataset {
 public:
  SentenceDataset(const loom_host* host, const std::string& who, const std::string& prefix)
      : host_(host),
        corpus_(who, prefix),
        vocab_(WordPieces::from_host(host, who)),
        kinds_(vocab_.kinds()),
        indices_(who) {}
  SentenceDataset(const SentenceDataset&) = delete;
  SentenceDataset& operator=(const SentenceDataset&) = delete;

  const loom_host* host() const { return host_; }
  const char* cache_prefix() const { return corpus_.prefix().c_str(); }
  int64_t num_documents() const { return corpus_.num_documents(); }
  // Document d: its sentences back to back (the host reads the lengths of documents).
  void document(int64_t d, const int32_t** ids, size_t* num_ids) {
    corpus_.document(d, doc_, ids, num_ids);
  }

 protected:
  // Masking draws from the tokenizer's vocabulary and writes its [MASK].
  void fit_masking(MaskingSpec& m) const {
    m.mask_id = vocab_.mask;
    m.vocab = vocab_.size;
  }

  const loom_host* host_;
  SentenceCorpus corpus_;
  WordPieces vocab_;
  TokenKinds kinds_;
  SentenceIndices indices_;

 private:
  std::vector<int32_t> doc_;
};

}  // namespace loom::masked
