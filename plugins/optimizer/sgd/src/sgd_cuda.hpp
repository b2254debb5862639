// optimizer/sgd's CUDA kernel (sgd_cuda.cu), compiled where nvcc exists: the host-side
// launcher, callable from sgd.cpp without CUDA headers.
#pragma once

#include <cstdint>

#include "loom/cpp/clip.hpp"
#include "loom/cpp/opt_schedule.hpp"

namespace sgd_cuda {

// One SGD step on n f32 elements of device memory (buf NULL: no momentum buffer), enqueued
// on `stream` (the backend's cudaStream_t). Returns "" or the CUDA error's text. The gradient
// multiplier is resolved on the device (a non-finite clip norm: nothing changes), and so is the
// learning rate where loom.opt-schedule/1 keeps it there.
const char* step(float* p, const float* g, float* buf, int64_t n, loom::StepSchedule sch,
                 double momentum, double weight_decay, loom::StepScale sc, void* stream);

}  // namespace sgd_cuda
