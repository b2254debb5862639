// Loom SDK: clipping by the global gradient norm, one formula for the host (train's update)
// and for optimizer kernels on either device (loom.opt-clip/1, optimizer.h), so that the
// clip decided on a GPU is the host's to the bit: every step is in double, in the same order.
// Header-only and free of the C++ library, so that nvcc compiles it into device code too.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define LOOM_HOST_DEVICE __host__ __device__
#else
#define LOOM_HOST_DEVICE
#endif

namespace loom {

// The global norm of the unscaled gradients from the squared norm of the scaled ones.
LOOM_HOST_DEVICE inline double grad_norm(double squares, double loss_scale) {
  return std::sqrt(squares) / loss_scale;
}

// What every gradient is multiplied by before the update: 1 / loss_scale, times
// max_norm / (norm + 1e-6) when max_norm > 0 and the norm exceeds it (Megatron's clip_grad,
// torch.nn.utils.clip_grad_norm_'s epsilon).
LOOM_HOST_DEVICE inline double clip_scale(double norm, double loss_scale, double max_norm) {
  double scale = 1.0 / loss_scale;
  if (max_norm > 0 && norm > max_norm) scale *= max_norm / (norm + 1e-6);
  return scale;
}

// One optimizer step's gradient multiplier: grad_scale as the host passed it, or, with
// loom.opt-clip/1, grad_scale times the clip decided from `squares` (k doubles in the
// device's memory, summed in index order). Passed by value into CUDA kernels.
struct StepScale {
  double grad_scale = 1.0;
  const double* squares = nullptr;  // NULL: no loom.opt-clip/1
  int64_t count = 0;
  double loss_scale = 1.0, max_norm = 0.0;

  // *gs = the multiplier; false when the norm is not finite (the step must change nothing).
  LOOM_HOST_DEVICE bool resolve(double* gs) const {
    if (squares == nullptr) {
      *gs = grad_scale;
      return true;
    }
    double sum = 0.0;
    for (int64_t i = 0; i < count; ++i) sum += squares[i];
    const double norm = grad_norm(sum, loss_scale);
    if (!std::isfinite(norm)) return false;
    *gs = grad_scale * clip_scale(norm, loss_scale, max_norm);
    return true;
  }
};

}  // namespace loom
