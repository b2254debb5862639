// optimizer/adamw's CUDA kernel (adamw_cuda.cu), compiled where nvcc exists: the host-side
// launcher, callable from adamw.cpp without CUDA headers.
#pragma once

#include <cstdint>

#include "loom/cpp/clip.hpp"
#include "loom/cpp/opt_schedule.hpp"

namespace adamw_cuda {

// One AdamW step on n f32 elements of device memory (adamw.cpp's formula, its step-wide
// constants from adamw_math.hpp: here from the args' lr and step, or in each thread from the
// values loom.opt-schedule/1 keeps on the device), enqueued on `stream` (the backend's
// cudaStream_t) with no synchronisation; the gradient multiplier is resolved on the device (a
// non-finite clip norm: nothing changes). Returns "" or the CUDA error's text.
const char* step(float* p, const float* g, float* m, float* v, int64_t n, loom::StepScale sc,
                 loom::StepSchedule sch, double beta1, double beta2, double weight_decay,
                 double eps, void* stream);

}  // namespace adamw_cuda
