// Stopping a training run early and cleanly (Megatron's --exit-signal-handler, --exit-interval,
// --exit-duration-in-mins): the step in progress finishes, a checkpoint is saved, and the run
// exits with a code that says why.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace loom::engine {

struct TrainRun;

// Exit code of a run stopped by a signal (SIGTERM, SIGINT, SIGUSR1, SIGUSR2): after its
// checkpoint was saved, or during set-up, before the first step, with nothing to save. Either
// way, resume it with checkpoint.load = "auto". Distinct from 0 (done), 1 (failed) and 2
// (usage), so that a requeue script can tell.
inline constexpr int kExitStoppedBySignal = 3;

struct StopReason {
  std::string why;  // "SIGTERM", "train.exit_interval = 4", ...
  int exit_code = 0;
};

// Installs the signal handlers for the run's lifetime (train.exit_signal_handler) and keeps
// the clock of train.exit_duration_mins. Made first, so that set-up is covered.
class RunStopper {
 public:
  explicit RunStopper(bool handle_signals, double exit_duration_mins, int64_t exit_interval);
  ~RunStopper();
  // Set-up is over: from now on a signal finishes the step in progress and saves. Until
  // then a signal exits the process at once with kExitStoppedBySignal.
  void training_starts() const;
  RunStopper(const RunStopper&) = delete;
  RunStopper& operator=(const RunStopper&) = delete;

  // After iteration `iter` (1-based): whether every rank stops now. A signal or the clock on
  // any rank stops all of them at the same iteration (COLLECTIVE over the world when either
  // can fire: one small sum).
  std::optional<StopReason> after_step(TrainRun& r, int64_t iter) const;

 private:
  bool signals_ = false;
  double duration_s_ = 0;
  int64_t interval_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace loom::engine
