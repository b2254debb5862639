#include "train/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

namespace loom::engine {

double LrSchedule::at(int64_t it) const {
  // Warmup reaches max at the end of iteration warmup-1, never starting at zero: a first
  // step with lr = 0 would be wasted.
  if (it < warmup) return max * (double)(it + 1) / (double)warmup;
  if (kind == "constant") return max;
  int64_t span = std::max<int64_t>(1, decay_iters - warmup);
  double progress = std::clamp((double)(it - warmup) / (double)span, 0.0, 1.0);
  if (kind == "linear") return max - (max - min) * progress;
  if (kind == "cosine") return min + 0.5 * (max - min) * (1.0 + std::cos(M_PI * progress));
  // wsd: warmup, stable at max, then linear decay over the last fraction of decay_iters.
  double decay_start = (double)decay_iters * (1.0 - wsd_decay_fraction);
  if ((double)it < decay_start) return max;
  double len = std::max(1.0, (double)decay_iters - decay_start);
  double p = std::clamp(((double)it - decay_start) / len, 0.0, 1.0);
  return max - (max - min) * p;
}

}  // namespace loom::engine
