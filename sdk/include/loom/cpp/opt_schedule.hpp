// Loom SDK: an optimizer step's learning rate and count as the step's args give them, or as
// loom.opt-schedule/1 keeps them in the device's memory (optimizer.h), read where the update
// runs: one enqueued update (a captured CUDA graph) then serves every step. Header-only and
// free of the C++ library, as clip.hpp, so that nvcc compiles it into device code too; passed
// by value into CUDA kernels.
#pragma once

#include "loom/cpp/clip.hpp"  // LOOM_HOST_DEVICE

namespace loom {

struct StepSchedule {
  double lr = 0.0, step = 1.0;     // the args' values
  const double* values = nullptr;  // loom.opt-schedule/1's (lr, step); NULL: the args'

  LOOM_HOST_DEVICE double learning_rate() const { return values ? values[0] : lr; }
  LOOM_HOST_DEVICE double count() const { return values ? values[1] : step; }
};

}  // namespace loom
