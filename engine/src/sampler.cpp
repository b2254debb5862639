#include "sampler.hpp"

#include <cmath>
#include <numeric>
#include <random>
#include <sstream>

#include "errors.hpp"
#include "host.hpp"
#include "log.hpp"

namespace loom::engine {

SplitRanges split_documents(int64_t n, const std::string& weights) {
  std::vector<double> w;
  std::stringstream ss(weights);
  std::string part;
  while (std::getline(ss, part, ',')) {
    try {
      size_t used = 0;
      double v = std::stod(part, &used);
      if (v < 0) throw std::invalid_argument("negative");
      w.push_back(v);
    } catch (const std::exception&) {
      throw UsageError("data.split = \"" + weights +
                       "\": expected up to three non-negative numbers like \"98,2,0\"");
    }
  }
  if (w.empty() || w.size() > 3)
    throw UsageError("data.split = \"" + weights + "\": expected one to three numbers");
  w.resize(3, 0.0);
  double total = w[0] + w[1] + w[2];
  if (total <= 0) throw UsageError("data.split = \"" + weights + "\": weights sum to zero");
  SplitRanges r{};
  double acc = 0;
  int64_t prev = 0;
  for (int k = 0; k < 3; ++k) {
    acc += w[k] / total;
    int64_t hi = k == 2 ? n : (int64_t)std::llround(acc * (double)n);
    r.begin[k] = prev;
    r.end[k] = hi;
    prev = hi;
  }
  return r;
}

Sampler::Sampler(const loom_dataset_api* api, loom_dataset* ds, int64_t doc_begin, int64_t doc_end,
                 int64_t eod_id, int64_t seq_len, uint64_t seed)
    : api_(api), ds_(ds), eod_(eod_id), seq_len_(seq_len), seed_(seed) {
  log::Progress progress("indexing documents", doc_end - doc_begin);
  for (int64_t d = doc_begin; d < doc_end; ++d) {
    const int32_t* ids = nullptr;
    size_t n = 0;
    check(api_->document(ds_, d, &ids, &n), "reading document " + std::to_string(d));
    if ((d - doc_begin) % 4096 == 0) progress.update(d - doc_begin);
    if (n == 0) continue;  // an empty document contributes nothing to the stream
    docs_.push_back(d);
    epoch_tokens_ += (int64_t)n + (eod_ >= 0 ? 1 : 0);
  }
}

const std::vector<int32_t>& Sampler::epoch(int64_t e) {
  if (e == cached_epoch_) return cache_;
  std::vector<int64_t> order = docs_;
  std::mt19937_64 rng(stream_seed(seed_, "epoch-" + std::to_string(e)));
  // Fisher-Yates with our own index draw: std::shuffle's use of the engine is
  // implementation-defined, and the order must not change with the standard library.
  for (size_t i = order.size(); i > 1; --i) {
    size_t j = (size_t)(rng() % i);
    std::swap(order[i - 1], order[j]);
  }
  cache_.clear();
  cache_.reserve((size_t)epoch_tokens_);
  for (int64_t d : order) {
    const int32_t* ids = nullptr;
    size_t n = 0;
    check(api_->document(ds_, d, &ids, &n), "reading document " + std::to_string(d));
    cache_.insert(cache_.end(), ids, ids + n);
    if (eod_ >= 0) cache_.push_back((int32_t)eod_);
  }
  cached_epoch_ = e;
  return cache_;
}

int32_t Sampler::token_at(int64_t pos) {
  const auto& s = epoch(pos / epoch_tokens_);
  return s[(size_t)(pos % epoch_tokens_)];
}

void Sampler::sample(int64_t index, int32_t* tokens, int32_t* targets) {
  if (empty()) throw RunError("the data split is empty: no tokens to sample");
  int64_t start = index * seq_len_;
  for (int64_t t = 0; t < seq_len_; ++t) {
    tokens[t] = token_at(start + t);
    targets[t] = token_at(start + t + 1);
  }
}

}  // namespace loom::engine
