// Parameter residency (ABI 2.13): a fully sharded strategy (parallel.data = "fsdp") keeps each
// rank's shards; the model allocates a unit's values or gradients only around the forward or
// backward that needs them and calls back here, and the host passes the call on to the
// strategy. The whole model stays resident (held) from set-up until the run lets go, and is
// held again while a checkpoint reads every value.
#include <spdlog/spdlog.h>

#include "base/errors.hpp"
#include "loom/cpp/tensor.hpp"
#include "session/step_timer.hpp"
#include "train/train_run.hpp"

namespace loom::engine {

loom_error* TrainRun::on_unit_needed(void* user, int32_t unit, int32_t fill) {
  const TrainRun& r = *static_cast<const ReadyChunk*>(user)->run;
  if (r.timer) r.timer->set_unit(unit);
  // Asked only for the step profile's per-layer times: no strategy to tell.
  if (r.residency == LOOM_RESIDENCY_NONE) return nullptr;
  const auto [papi, par] = r.grad_strategy;
  if (papi == nullptr || papi->unit_needed == nullptr)
    return make_error(LOOM_ERR_INTERNAL,
                      "the model asked for a unit's values before the "
                      "strategy that holds them exists");
  return papi->unit_needed(par, unit, fill);
}

loom_error* TrainRun::on_unit_grads(void* user, int32_t unit) {
  const auto [papi, par] = static_cast<const ReadyChunk*>(user)->run->grad_strategy;
  if (papi == nullptr || papi->unit_grads == nullptr)
    return make_error(LOOM_ERR_INTERNAL,
                      "the model handed over a unit's gradients before the "
                      "strategy that shards them exists");
  return papi->unit_grads(par, unit);
}

// hold = false lets go of the values (ZeRO-3) and the gradients the model was created with.
// The values may have been loaded since the strategy took its shards: with the parameters
// sharded, this rank's elements go back into the shards first (only then: a save's hold
// changes nothing, and the strategy may be reading the shards for its next gather).
void TrainRun::hold_params(bool hold) {
  if (residency == LOOM_RESIDENCY_NONE || held == hold) return;
  if (!hold && loaded && residency == LOOM_RESIDENCY_PARAMS && sharded)
    for (size_t i = 0; i < params.size(); ++i) {
      const int64_t n = loom_tensor_numel(shards[i].param);
      if (n == 0) continue;
      DLTensor own = *values[i];
      own.ndim = 1;
      own.shape = const_cast<int64_t*>(&shards[i].param->shape[0]);
      own.strides = nullptr;
      own.byte_offset += (uint64_t)shards[i].offset * loom_dtype_bytes(own.dtype);
      check(be.api->ops->copy(be.self, shards[i].param, &own), "refreshing a parameter shard");
    }
  for (loom_model* m : chunks)
    check(mapi->hold_params(m, hold ? 1 : 0), hold ? "gathering the parameters" : "releasing them");
  held = hold;
  if (!hold) loaded = false;
}

}  // namespace loom::engine
