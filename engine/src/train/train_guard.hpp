// Bad numbers (issue 17): a loss or gradient norm that is not finite, and loss spikes.
// Megatron's --check-for-nan-in-loss-and-grad and its rerun state machine are the model:
// train.nan_check chooses what a step does about it (train_guard.cpp).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>

namespace loom::engine {

struct TrainRun;
struct StepStats;

// Whether a step's loss and gradient norm are finite (an fp16 overflow of the gradients is
// the dynamic loss scaler's, and counts as fine here).
bool numbers_ok(const TrainRun& r, const StepStats& s);
// train.nan_check for iteration `it` (0-based) whose numbers are not: "skip" returns s with
// stepped = false; "rerun" runs the step again on the same batch (`rerun`) and returns that
// when finite (a transient fault), else stops; "stop" saves the last good state
// (checkpoint.save) and throws RunError naming the iteration, the rank and the first
// parameter whose gradient is not finite.
StepStats on_bad_numbers(TrainRun& r, const StepStats& s, int64_t it,
                         const std::function<StepStats()>& rerun);

// train.loss_spike_factor: a loss above factor x the median of the last 100 steps' is logged
// with the samples of its batch, which `loom data samples --first` prints.
class LossSpikes {
 public:
  void add(const TrainRun& r, int64_t iter, double loss, int64_t first_sample);

 private:
  std::deque<double> last_;
};

}  // namespace loom::engine
