// Signals, train.exit_interval and train.exit_duration_mins (train_stop.hpp). Once training
// starts, the handler only records the signal (and writes one line); the loop checks after
// every step, so the step in progress always completes and the checkpoint written is of a
// whole step. During set-up it exits at once.
#include "train/train_stop.hpp"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

#include "train/train_run.hpp"

namespace loom::engine {
namespace {

constexpr int kSignals[] = {SIGTERM, SIGINT, SIGUSR1, SIGUSR2};
std::atomic<int> g_signal{0};
// Before the first step there is nothing to save, and set-up may block for minutes (MPI_Init,
// index building, checkpoint loading): a signal then ends the process at once.
std::atomic<bool> g_in_setup{false};
struct sigaction g_previous[4];

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGUSR2:
      return "SIGUSR2";
    default:
      return "a signal";
  }
}

// Async-signal-safe: an atomic store and write(2). A second SIGINT (Ctrl-C twice) exits at
// once with 130, as a shell expects; the last checkpoint on disk stays as it was.
void on_signal(int sig) {
  if (g_in_setup.load()) {
    const char* name = signal_name(sig);
    static const char kSetup[] =
        " received during set-up, before the first step: nothing to save; exiting with 3\n";
    (void)!::write(2, "loom: ", 6);
    (void)!::write(2, name, std::strlen(name));
    (void)!::write(2, kSetup, sizeof kSetup - 1);
    ::_exit(kExitStoppedBySignal);
  }
  const int before = g_signal.exchange(sig);
  if (sig == SIGINT && before == SIGINT) {
    static const char kNow[] = "loom: second SIGINT: exiting now\n";
    (void)!::write(2, kNow, sizeof kNow - 1);
    ::_exit(130);
  }
  if (before != 0) return;
  const char* name = signal_name(sig);
  static const char kTail[] =
      " received: finishing this step, saving a checkpoint, then exiting with 3 (a second "
      "Ctrl-C exits at once)\n";
  (void)!::write(2, "loom: ", 6);
  (void)!::write(2, name, std::strlen(name));
  (void)!::write(2, kTail, sizeof kTail - 1);
}

}  // namespace

RunStopper::RunStopper(bool handle_signals, double exit_duration_mins, int64_t exit_interval)
    : signals_(handle_signals), duration_s_(exit_duration_mins * 60.0), interval_(exit_interval) {
  if (!signals_) return;
  g_signal = 0;
  g_in_setup = true;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking reads and collectives carry on; the loop checks
  for (size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &sa, &g_previous[i]);
}

void RunStopper::training_starts() const { g_in_setup = false; }

RunStopper::~RunStopper() {
  g_in_setup = false;
  if (!signals_) return;
  for (size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &g_previous[i], nullptr);
}

std::optional<StopReason> RunStopper::after_step(TrainRun& r, int64_t iter) const {
  if (signals_ || duration_s_ > 0) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const int sig = g_signal.load();
    double flags[2] = {sig != 0 ? 1.0 : 0.0, duration_s_ > 0 && elapsed >= duration_s_ ? 1.0 : 0.0};
    sum_over(r.be, r.comm, nullptr, flags, 2);
    if (flags[0] > 0)
      return StopReason{sig ? signal_name(sig) : "a signal another rank received",
                        kExitStoppedBySignal};
    if (flags[1] > 0)
      return StopReason{"train.exit_duration_mins = " + std::to_string(duration_s_ / 60.0), 0};
  }
  if (interval_ > 0 && iter % interval_ == 0)
    return StopReason{"train.exit_interval = " + std::to_string(interval_), 0};
  return std::nullopt;
}

}  // namespace loom::engine
