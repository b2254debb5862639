// How many samples a recipe's run reads from each split, and the bounds on them: what recipe
// validation checks before any data is opened, and what the samplers then provide.
#pragma once

#include <array>
#include <cstdint>

namespace loom::engine {

// At most this many samples per split (2^36): Megatron's index costs 24 bytes a sample, so
// anything beyond is a typo, not a run, and a bound keeps every count far from int64 overflow.
constexpr int64_t kMaxSamplesPerSplit = int64_t(1) << 36;
// At most this many tokens per micro-batch (2^31-1), so offsets into its arrays fit an int32.
constexpr int64_t kMaxMicroBatchTokens = (int64_t(1) << 31) - 1;

// Megatron's samples per split: train = iters * gbs; valid = (iters // eval_interval + 1) *
// eval_iters * gbs (0 when eval_interval is 0: no evaluation); test = eval_iters * gbs.
// UsageError when one exceeds kMaxSamplesPerSplit (or overflows).
std::array<int64_t, 3> samples_wanted(int64_t iters, int64_t global_batch, int64_t eval_interval,
                                      int64_t eval_iters);

}  // namespace loom::engine
