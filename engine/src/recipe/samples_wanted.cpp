// samples_wanted (samples_wanted.hpp): the samples each split must provide, with overflow checks.
// A file of its own because recipe validation needs it without the samplers (and the fuzz
// harness of the recipe loader links it alone).
#include "recipe/samples_wanted.hpp"

#include <string>

#include "base/errors.hpp"

namespace loom::engine {

namespace {

// a x b, or -1 when it overflows or exceeds kMaxSamplesPerSplit.
int64_t bounded_product(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out) || out > kMaxSamplesPerSplit) return -1;
  return out;
}

std::string too_many(const std::string& what, const std::string& product) {
  return what + " = " + product + " samples, more than the 2^36 (" +
         std::to_string(kMaxSamplesPerSplit) +
         ") a split may hold: its sample index alone would take over 1.5 TiB; lower them";
}

}  // namespace

std::array<int64_t, 3> samples_wanted(int64_t iters, int64_t gbs, int64_t eval_interval,
                                      int64_t eval_iters) {
  const std::string batch = std::to_string(gbs);
  const int64_t train = bounded_product(iters, gbs);
  if (train < 0)
    throw UsageError(too_many("train.iters x global batch", std::to_string(iters) + " x " + batch));
  int64_t valid = 0;
  if (eval_interval > 0) {
    const int64_t evals = iters / eval_interval + 1;
    const int64_t batches = bounded_product(evals, eval_iters);
    valid = batches < 0 ? -1 : bounded_product(batches, gbs);
    if (valid < 0)
      throw UsageError(too_many(
          "validation: (train.iters / train.eval_interval + 1) x train.eval_iters x global batch",
          std::to_string(evals) + " x " + std::to_string(eval_iters) + " x " + batch));
  }
  const int64_t test = bounded_product(eval_iters, gbs);
  if (test < 0)
    throw UsageError(too_many("test: train.eval_iters x global batch",
                              std::to_string(eval_iters) + " x " + batch));
  return {train, valid, test};
}

}  // namespace loom::engine
