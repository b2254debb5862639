// Loom SDK C++ helper: one micro-batch through a model that is a single pipeline stage
// (stage 0 of 1): forward, then backward unless `backward` is false. What a schedule does at
// pipeline = 1, for tests, benchmarks and tools that drive a model directly. The caller
// still calls finish_grads once per step when the model uses tensor or sequence parallelism.
#pragma once

#include "loom/model.h"

namespace loom {

inline loom_error* model_step(const loom_model_api* api, loom_model* m, const loom_microbatch* mb,
                              bool backward, double* loss_sum, int64_t* tokens) {
  DLTensor* out = nullptr;
  if (loom_error* e =
          api->stage_forward(m, 0, mb, nullptr, backward ? 0 : 1, &out, loss_sum, tokens))
    return e;
  if (!backward) return nullptr;
  DLTensor* dinput = nullptr;
  return api->stage_backward(m, 0, nullptr, &dinput);
}

}  // namespace loom
