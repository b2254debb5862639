// optimizer/lion's CUDA kernel (lion_cuda.cu), compiled where nvcc exists: the host-side
// launcher, callable from lion.cpp without CUDA headers.
#pragma once

#include <cstdint>

#include "loom/cpp/clip.hpp"
#include "loom/cpp/opt_schedule.hpp"

namespace lion_cuda {

// One Lion step on n f32 elements of device memory, enqueued on `stream` (a cudaStream_t:
// the backend's, from loom.device-stream/1) with no synchronisation. Returns "" or the CUDA
// error's text. The gradient multiplier is resolved on the device (a non-finite clip norm:
// nothing changes), and so is the learning rate where loom.opt-schedule/1 keeps it there.
const char* step(float* p, const float* g, float* m, int64_t n, loom::StepSchedule sch,
                 double beta1, double beta2, double decay, loom::StepScale sc, void* stream);

}  // namespace lion_cuda
