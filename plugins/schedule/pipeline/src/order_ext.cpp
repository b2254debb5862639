// loom.schedule-order/1 (schedule.h): this schedule's placement of the model chunks and every
// rank's order, as schedule_order.hpp computes them, for the host's chunk creation, `loom
// validate` and `loom schedule show`.
#include <vector>

#include "kind.hpp"
#include "loom/cpp/plugin.hpp"

namespace loom::pipeline {
namespace {

// What the last call returned; the ABI says it is valid until the next call. (A plain
// static, not thread-local: LeakSanitizer's exit-time scan faulted on a dlclosed plugin's
// thread-local storage.)
struct Answer {
  std::vector<int32_t> stages;
  std::vector<std::vector<loom_schedule_step>> steps;
  std::vector<size_t> num_steps;
  std::vector<const loom_schedule_step*> step_ptrs;
};
Answer answer;

loom_error* order(const loom_host* host, loom_schedule_order_args* a) {
  return loom::guard(host, [&] {
    loom::require(a != nullptr && a->struct_size >= LOOM_SCHEDULE_ORDER_ARGS_SIZE_V2_19,
                  prefix() + "order: args NULL or smaller than ABI 2.19's");
    loom::require_known_exts(a->ext, {}, prefix() + "order");
    const int P = a->pipeline, V = a->virtual_stages;
    const int64_t M = a->num_microbatches;
    // placement alone (M = 0) is refused only for what does not depend on M
    const std::string why = order_refusal(kKind, P, V, M == 0 ? 2 * int64_t(P) : M);
    if (!why.empty()) throw loom::Error(LOOM_ERR_INVALID_ARGUMENT, prefix() + why);
    const int C = chunks_per_rank(kKind, V);
    answer = Answer{};
    for (int r = 0; r < P; ++r)
      for (int32_t c = 0; c < C; ++c)
        answer.stages.push_back(static_cast<int32_t>(stage_of(kKind, P, r, c)));
    if (M > 0)
      for (const std::vector<Step>& rank : orders(kKind, P, V, M, false)) {
        std::vector<loom_schedule_step> s;
        for (const Step& x : rank) s.push_back(to_abi(x));
        answer.steps.push_back(std::move(s));
      }
    for (const auto& s : answer.steps) {
      answer.num_steps.push_back(s.size());
      answer.step_ptrs.push_back(s.data());
    }
    a->chunks = C;
    a->stages = answer.stages.data();
    a->num_steps = M > 0 ? answer.num_steps.data() : nullptr;
    a->steps = M > 0 ? answer.step_ptrs.data() : nullptr;
  });
}

}  // namespace

extern const loom_schedule_order_ext kOrderExt = {
    {sizeof(loom_schedule_order_ext), LOOM_EXT_SCHEDULE_ORDER, 0, nullptr}, order};

}  // namespace loom::pipeline
