// Loom SDK C++ helpers for grad plugins: which buckets a step's grad_ready (grad.h, ABI 2.12)
// has completed. Each gradient belongs to one bucket; a gradient announced twice in a step
// counts once; a bucket is complete when its last gradient is announced. grad/ddp and
// grad/distributed-optimizer start a bucket's reduction there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "loom/cpp/plugin.hpp"

namespace loom {

class BucketReadiness {
 public:
  // bucket_of[i]: the bucket of gradient i (buckets numbered from 0).
  void plan(std::vector<size_t> bucket_of) {
    bucket_of_ = std::move(bucket_of);
    size_.clear();
    for (size_t b : bucket_of_) {
      if (b >= size_.size()) size_.resize(b + 1, 0);
      ++size_[b];
    }
    reset();
  }
  // A new step: nothing is final.
  void reset() {
    final_.assign(bucket_of_.size(), 0);
    pending_ = size_;
  }
  // A range outside the gradients is an error naming `who` ("grad/ddp: ").
  void check(int64_t first, int64_t count, const std::string& who) const {
    require(first >= 0 && count >= 0 && (size_t)(first + count) <= bucket_of_.size(),
            who + "grad_ready of gradients [" + std::to_string(first) + ", " +
                std::to_string(first + count) + "), of " + std::to_string(bucket_of_.size()));
  }
  // Gradients [first, first + count) are final: calls completes(i) for each gradient i that
  // was the last of its bucket.
  template <class Fn>
  void ready(int64_t first, int64_t count, const std::string& who, Fn&& completes) {
    check(first, count, who);
    for (int64_t i = first; i < first + count; ++i) {
      if (final_[(size_t)i]) continue;  // announced twice: counted once
      final_[(size_t)i] = 1;
      if (--pending_[bucket_of_[(size_t)i]] == 0) completes((size_t)i);
    }
  }
  size_t bucket_of(size_t i) const { return bucket_of_[i]; }

 private:
  std::vector<size_t> bucket_of_, size_, pending_;
  std::vector<char> final_;
};

}  // namespace loom
