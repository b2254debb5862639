// optimizer/adamw's step-wide constants, one formula for the host kernel (adamw.cpp), for the
// CUDA launcher given the args' lr and step, and for each CUDA thread reading them from the
// device (loom.opt-schedule/1): all in double, in the same order, so that the host's are the
// args' to the bit. Free of the C++ library (nvcc compiles it into device code).
#pragma once

#include <cmath>

#include "loom/cpp/opt_schedule.hpp"

namespace adamw_math {

struct Constants {
  double decay;         // 1 - lr * weight_decay: the decoupled decay's factor
  double step_size;     // lr / (1 - beta1^step): the first moment's bias correction
  double inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^step): the second moment's
};

LOOM_HOST_DEVICE inline Constants constants(const loom::StepSchedule& sch, double beta1,
                                            double beta2, double weight_decay) {
  const double lr = sch.learning_rate(), step = sch.count();
  const double bc1 = 1.0 - std::pow(beta1, step);
  const double bc2 = 1.0 - std::pow(beta2, step);
  return {1.0 - lr * weight_decay, lr / bc1, 1.0 / std::sqrt(bc2)};
}

}  // namespace adamw_math
