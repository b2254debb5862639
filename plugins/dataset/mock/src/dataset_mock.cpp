// dataset/mock: deterministic synthetic documents with learnable structure, for smoke
// tests, benchmarks and loss-goes-down checks without any data on disk.
//
// Tokens follow a fixed sparse random Markov chain: every symbol s has kFanout successors,
// chosen by hashing (seed, s), taken with skewed probabilities (kCumulative), plus a little
// uniform noise. A model that learns the chain drops from ln(V) nats to about 1.7 nats
// (V = 256; the noise term grows slowly with V).
// Nothing is stored: document i is regenerated from (seed, i) on each call, so any
// num_documents costs O(1) memory and documents do not depend on the order they are read.
// Like data preprocessed with Megatron's --append-eod, each document ends with the
// tokenizer's end-of-document id (append_eod, default true): the engine's sampler inserts
// nothing between documents. With an explicit vocab_size and no tokenizer there is no EOD.
#include <algorithm>
#include <string>
#include <vector>

#include "loom/cpp/dataset.hpp"
#include "loom/cpp/plugin.hpp"
#include "loom/tokenizer.h"

namespace {

constexpr int kFanout = 4;
// Cumulative probabilities (out of 1024) of successors 0..3; the rest is uniform noise.
constexpr uint32_t kCumulative[kFanout] = {512, 768, 896, 960};

// splitmix64: a tiny, well-mixed generator; also used as a hash of (key, index).
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
uint64_t hash2(uint64_t a, uint64_t b) { return mix(a ^ mix(b)); }

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() { return mix(state_++); }
  uint64_t below(uint64_t n) { return next() % n; }  // n small vs 2^64: bias negligible

 private:
  uint64_t state_;
};

class MockDataset {
 public:
  MockDataset(const loom_host* host, int64_t num_documents, int64_t doc_length, int64_t num_symbols,
              int64_t skip_id, int64_t eod_id, uint64_t seed)
      : host_(host),
        num_documents_(num_documents),
        doc_length_(doc_length),
        num_symbols_(num_symbols),
        skip_id_(skip_id),
        eod_id_(eod_id),
        seed_(seed) {}
  const loom_host* host() const { return host_; }
  int64_t num_documents() const { return num_documents_; }
  // Generated data has no home on disk: nothing to cache beside.
  const char* cache_prefix() const { return nullptr; }

  void document(int64_t i, const int32_t** ids, size_t* num_ids) {
    loom::require(i >= 0 && i < num_documents_, "dataset/mock: document " + std::to_string(i) +
                                                    " out of range [0, " +
                                                    std::to_string(num_documents_) + ")");
    Rng rng(hash2(seed_, static_cast<uint64_t>(i)));
    // Lengths uniform in [L/2, L/2 + L], mean ~L, at least 1.
    const int64_t base = doc_length_ / 2;
    const int64_t len =
        std::max<int64_t>(1, base + static_cast<int64_t>(rng.below(doc_length_ + 1)));
    ids_.resize(static_cast<size_t>(len));
    uint64_t s = rng.below(num_symbols_);
    for (int64_t t = 0; t < len; ++t) {
      ids_[t] = to_id(s);
      s = successor(s, rng);
    }
    if (eod_id_ >= 0) ids_.push_back(static_cast<int32_t>(eod_id_));
    *ids = ids_.data();
    *num_ids = ids_.size();
  }

 private:
  // Next symbol of the chain after s.
  uint64_t successor(uint64_t s, Rng& rng) const {
    const uint32_t u = static_cast<uint32_t>(rng.below(1024));
    for (int j = 0; j < kFanout; ++j)
      if (u < kCumulative[j]) return hash2(seed_ ^ 0xC4A1Full, s * kFanout + j) % num_symbols_;
    return rng.below(num_symbols_);
  }
  // Symbols are 0..num_symbols-1; the tokenizer's EOD id (skip_id_) is jumped over.
  int32_t to_id(uint64_t s) const {
    const int64_t v = static_cast<int64_t>(s);
    return static_cast<int32_t>(skip_id_ >= 0 && v >= skip_id_ ? v + 1 : v);
  }

  const loom_host* host_;
  int64_t num_documents_, doc_length_, num_symbols_, skip_id_;
  int64_t eod_id_;  // appended to every document; -1 = none
  uint64_t seed_;
  std::vector<int32_t> ids_;
};

loom_error* create(const loom_host* host, const loom_config* cfg, loom_dataset** out) {
  return loom::guard(host, [&] {
    loom::Config c(host, cfg);
    const int64_t num_documents = c.get_int("num_documents");
    const int64_t doc_length = c.get_int("doc_length");
    int64_t vocab = c.get_int("vocab_size");
    int64_t seed = c.get_int("seed");
    loom::require(num_documents >= 1, "dataset/mock: num_documents must be >= 1");
    loom::require(doc_length >= 1, "dataset/mock: doc_length must be >= 1");
    loom::require(vocab >= 0 && vocab <= INT32_MAX,
                  "dataset/mock: vocab_size must be in [0, 2^31)");
    const bool append_eod = c.get_bool("append_eod");
    int64_t skip = -1, eod_id = -1;
    if (vocab > 0 && append_eod) {
      // The EOD comes from the tokenizer when there is one; none otherwise.
      loom_tokenizer_ref tok{nullptr, nullptr};
      if (loom_error* err = host->get_tokenizer(host->ctx, &tok))
        host->error_free(err);
      else
        eod_id = tok.api->eod_id(tok.self);
    }
    if (vocab == 0) {
      loom_tokenizer_ref tok{nullptr, nullptr};
      loom_error* err = host->get_tokenizer(host->ctx, &tok);
      if (err) {
        const std::string why = host->error_message(err);
        host->error_free(err);
        throw loom::Error(LOOM_ERR_INVALID_ARGUMENT,
                          "dataset/mock: vocab_size = 0 takes the tokenizer's vocabulary, "
                          "but there is none (" +
                              why + "); set [data] vocab_size or select a [tokenizer]");
      }
      vocab = tok.api->vocab_size(tok.self);
      const int64_t eod = tok.api->eod_id(tok.self);
      if (append_eod) eod_id = eod;
      if (eod >= 0 && eod < vocab) {
        skip = eod;
        vocab -= 1;
      }
      loom::require(vocab >= 1 && vocab <= INT32_MAX,
                    "dataset/mock: the tokenizer's vocabulary (" + std::to_string(vocab) +
                        " ids besides end-of-document) is unusable");
    }
    const uint64_t s =
        seed != 0 ? static_cast<uint64_t>(seed) : host->rng_seed(host->ctx, "mock-data");
    *out = reinterpret_cast<loom_dataset*>(
        new MockDataset(host, num_documents, doc_length, vocab, skip, eod_id, s));
  });
}
const loom_dataset_api kApi = loom::DocumentDatasetTable<MockDataset>::api(create);

const loom_param_spec kParams[] = {
    loom::param("num_documents", LOOM_PARAM_INT, "1000", "number of synthetic documents", 1, 1e15),
    loom::param("doc_length", LOOM_PARAM_INT, "512",
                "mean document length in tokens (lengths are uniform in [L/2, 3L/2])", 1, 1e9),
    loom::param("vocab_size", LOOM_PARAM_INT, "0",
                "ids are drawn from [0, vocab_size); 0 = the tokenizer's ids minus its EOD", 0,
                2147483647.0),
    loom::param("seed", LOOM_PARAM_INT, "0",
                "generator seed; 0 = derived from train.seed (stream \"mock-data\")"),
    loom::param("append_eod", LOOM_PARAM_BOOL, "true",
                "end each document with the tokenizer's end-of-document id (as Megatron's "
                "--append-eod); none without a tokenizer"),
};

}  // namespace

LOOM_PLUGIN(.description =
                "deterministic synthetic documents from a fixed random Markov chain (learnable)",
            .params = kParams, .api = &kApi)
