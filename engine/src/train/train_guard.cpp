// Bad numbers: train.nan_check and train.loss_spike_factor (train_guard.hpp).
#include "train/train_guard.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/errors.hpp"
#include "train/train_run.hpp"

namespace loom::engine {
namespace {

// This rank's first gradient (in the norm's order) whose squares do not sum to a finite
// number, or "" when all do.
std::string first_nonfinite(TrainRun& r) {
  for (int kind = 0; kind < 2; ++kind) {
    const auto& grads = kind == 0 ? r.norm_grads : r.expert_norm_grads;
    const auto& names = kind == 0 ? r.norm_names : r.expert_norm_names;
    if (grads.empty()) continue;
    std::vector<double> per(grads.size());
    const loom_sum_squares_args a{LOOM_SUM_SQUARES_ARGS_SIZE_V2, grads.data(), grads.size(),
                                  per.data(), nullptr};
    check(r.be.api->ops->sum_squares(r.be.self, &a), "finding the non-finite gradient");
    for (size_t i = 0; i < per.size(); ++i)
      if (!std::isfinite(per[i])) return names[i];
  }
  return "";
}

// Saves the state before iteration it + 1 (its gradients are discarded; nothing was updated)
// and throws the error every rank reports. COLLECTIVE over the world.
[[noreturn]] void stop(TrainRun& r, const StepStats& s, int64_t it, const std::string& how) {
  const std::string mine = first_nonfinite(r);
  std::vector<double> bad((size_t)r.world, 0.0);  // which ranks hold a non-finite gradient
  bad[(size_t)r.rank] = mine.empty() ? 0.0 : 1.0;
  sum_over(r.be, r.comm, nullptr, bad.data(), (int64_t)bad.size());
  const auto first = std::find_if(bad.begin(), bad.end(), [](double b) { return b > 0; });
  std::string where = "no gradient is non-finite on any rank (the loss is)";
  if (first != bad.end()) {
    const int at = (int)(first - bad.begin());
    where = at == r.rank ? "first non-finite gradient: " + mine + " on rank " + std::to_string(at)
                         : "first non-finite gradient on rank " + std::to_string(at) +
                               " (its error names the tensor)";
  }
  r.consumed -= r.gbs;  // the batch of iteration it + 1 was not trained on
  const std::string save = r.recipe.get_string("checkpoint", "save");
  std::string saved = "nothing saved (checkpoint.save is empty)";
  if (!save.empty() && it > 0) {
    r.save(it);
    saved = "the last good state (iteration " + std::to_string(it) + ") is saved under " + save;
  }
  char nums[160];
  std::snprintf(nums, sizeof nums, "loss %g, gradient norm %g", s.loss, s.grad_norm);
  throw RunError("iteration " + std::to_string(it + 1) + ": " + nums + " is not finite" + how +
                 "; " + where + "; " + saved +
                 " (train.nan_check = \"skip\" drops such steps, \"rerun\" retries them once)");
}

}  // namespace

bool numbers_ok(const TrainRun& r, const StepStats& s) {
  return std::isfinite(s.loss) && (std::isfinite(s.grad_norm) || r.scaler.dynamic);
}

StepStats on_bad_numbers(TrainRun& r, const StepStats& s, int64_t it,
                         const std::function<StepStats()>& rerun) {
  const std::string mode = r.recipe.get_string("train", "nan_check");
  if (mode == "skip") {
    StepStats skipped = s;
    skipped.stepped = false;
    ++r.skipped_bad;
    if (r.rank == 0)
      spdlog::warn(
          "iteration {}: loss {:g}, gradient norm {:g}: not finite; update skipped "
          "(train.nan_check = \"skip\"; {} skipped so far)",
          it + 1, s.loss, s.grad_norm, r.skipped_bad);
    return skipped;
  }
  if (mode == "rerun") {
    r.consumed -= r.gbs;  // the same batch again
    StepStats again = rerun();
    if (numbers_ok(r, again)) {
      if (r.rank == 0)
        spdlog::warn(
            "iteration {}: loss {:g}, gradient norm {:g}: not finite; the rerun of the same "
            "batch gives loss {:g}, gradient norm {:g}: a transient fault (hardware, a race), "
            "not the data or the model; continuing with the rerun",
            it + 1, s.loss, s.grad_norm, again.loss, again.grad_norm);
      return again;
    }
    stop(r, again, it,
         " on the first try and again on the rerun of the same batch, so it is "
         "deterministic (the data or the model, not a transient fault)");
  }
  stop(r, s, it, "");
}

void LossSpikes::add(const TrainRun& r, int64_t iter, double loss, int64_t first_sample) {
  const double factor = r.recipe.get_float("train", "loss_spike_factor");
  if (factor <= 0 || !std::isfinite(loss)) return;
  if (last_.size() >= 10) {
    std::vector<double> sorted(last_.begin(), last_.end());
    std::nth_element(sorted.begin(), sorted.begin() + (long)sorted.size() / 2, sorted.end());
    const double median = sorted[sorted.size() / 2];
    if (loss > factor * median && r.rank == 0)
      spdlog::warn(
          "iteration {}: loss {:.4f} is {:.2f} x the median {:.4f} of the last {} steps "
          "(train.loss_spike_factor = {:g}); its batch is train samples [{}, {}): "
          "loom data samples RECIPE --first {} --count {}",
          iter, loss, loss / median, median, last_.size(), factor, first_sample,
          first_sample + r.gbs, first_sample, r.gbs);
  }
  last_.push_back(loss);
  if (last_.size() > 100) last_.pop_front();
}

}  // namespace loom::engine
