// Learning-rate schedules: linear warmup, then constant, linear, cosine or WSD decay.
#pragma once

#include <cstdint>
#include <string>

namespace loom::engine {

struct LrSchedule {
  std::string kind = "cosine";  // constant | linear | cosine | wsd
  double max = 3e-4, min = 0;
  int64_t warmup = 0;
  int64_t decay_iters = 0;          // iteration at which decay reaches `min`
  double wsd_decay_fraction = 0.1;  // WSD: last fraction of decay_iters decays linearly

  // Learning rate of 0-based iteration `it`.
  double at(int64_t it) const;
};

}  // namespace loom::engine
