// Failure injection for the resilience tests, read from the environment once, when a run is
// set up. A normal run has no hooks (TrainRun::hooks is null): the loop reads no environment
// variable and pays one pointer test per hook.
//   LOOM_TEST_NAN_AT = "N"          poisons iteration N's gradients on the first attempt (a
//                    "N:always"     transient fault), or on every attempt (a deterministic one)
//   LOOM_TEST_STALL_AT = "N:R:S"    world rank R sleeps S seconds before iteration N (a
//                                   straggler or a hung rank); N = 0 sleeps in set-up, once the
//                                   comm is made (a signal before the first step)
//   LOOM_TEST_SLOW_SAVE_AT = "N:S"  the background writer of iteration N's checkpoint sleeps S
//                                   seconds before it writes (a slow file system, for a kill
//                                   mid-save)
#pragma once

#include <cstdint>
#include <memory>

namespace loom::engine {

struct TestHooks {
  // The hooks the environment sets, or null when it sets none (malformed values are none).
  static std::unique_ptr<const TestHooks> from_env();

  // Whether attempt `attempt` of 0-based iteration `it` gets poisoned gradients.
  bool nan(int64_t it, int attempt) const;
  // Sleeps when world rank `rank` is the stalled one and `it` (0-based; -1 = set-up) its
  // iteration.
  void stall(int rank, int64_t it) const;
  // Sleeps when `iteration` (1-based, the checkpoint's) is the slow save's.
  void slow_save(int64_t iteration) const;

  int64_t nan_at = 0;  // 1-based; 0 = none
  bool nan_always = false;
  int64_t stall_at = -1;  // 1-based; 0 = set-up; -1 = none
  int stall_rank = 0;
  double stall_s = 0;
  int64_t slow_save_at = -1;  // 1-based; -1 = none
  double slow_save_s = 0;
};

}  // namespace loom::engine
