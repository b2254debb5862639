// The global gradient norm on the host or on the device (train_norm.hpp).
#include "train/train_norm.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/errors.hpp"
#include "loom/cpp/tensor.hpp"

namespace loom::engine {
namespace {

// Where the two sums are reduced: with expert parallelism the dense one over the norm group
// and the expert one over the expert group, else both over the norm group at once.
template <class Whole, class Each>
void reduce_norms(TrainRun& r, Whole&& whole, Each&& each) {
  if (r.layout.expert > 1 && r.norm_group) {  // experts: each counted once in the world
    each(0, r.norm_group);
    each(1, r.expert_group);
  } else {
    whole(r.norm_group);
  }
}

// The model's loss terms: stage_info's list, the same on every stage.
size_t loss_term_count(TrainRun& r) {
  loom_stage_info info{};
  info.struct_size = LOOM_STAGE_INFO_SIZE_V2;
  info.batch = r.mbs;
  info.seq_len = r.seq_len;
  check(r.mapi->stage_info(r.chunks.front(), &info), "stage_info");
  return info.num_losses;
}

}  // namespace

double squared_grad_norm(TrainRun& r) {
  // One backend call (one device read) per kind of tensor; summed here in a fixed order.
  auto sum_squares = [&](const std::vector<const DLTensor*>& grads) {
    std::vector<double> per(grads.size());
    const loom_sum_squares_args a{LOOM_SUM_SQUARES_ARGS_SIZE_V2, grads.data(), grads.size(),
                                  per.data(), nullptr};
    if (!grads.empty()) check(r.be.api->ops->sum_squares(r.be.self, &a), "gradient norm");
    double sq = 0;
    for (double s : per) sq += s;
    return sq;
  };
  double sq[2] = {sum_squares(r.norm_grads), sum_squares(r.expert_norm_grads)};
  reduce_norms(
      r, [&](loom_comm_group* g) { sum_over(r.be, r.comm, g, sq, 2); },
      [&](int i, loom_comm_group* g) { sum_over(r.be, r.comm, g, &sq[i], 1); });
  return sq[0] + sq[1];
}

void sum_device_norm(TrainRun& r, bool poison) {
  View squares(r.device_sums->t, {2});
  // loom.sum-squares-total/1: the backend sums the per-tensor squares in index order from 0,
  // as the host's loop above does.
  auto total = [&](const std::vector<const DLTensor*>& grads, int64_t i) {
    View element(squares.get(), {1}, i);
    const loom_sum_squares_total ext{
        {sizeof(loom_sum_squares_total), LOOM_EXT_SUM_SQUARES_TOTAL, LOOM_EXT_REQUIRED, nullptr},
        element.get()};
    const loom_sum_squares_args a{LOOM_SUM_SQUARES_ARGS_SIZE_V2, grads.data(), grads.size(),
                                  nullptr, &ext.base};
    check(r.be.api->ops->sum_squares(r.be.self, &a), "gradient norm");
  };
  total(r.norm_grads, 0);
  total(r.expert_norm_grads, 1);
  if (poison) check(r.be.api->ops->fill(r.be.self, squares.get(), std::nan("")), "gradient norm");
  reduce_norms(
      r, [&](loom_comm_group* g) { sum_over(r.be, r.comm, g, squares.get()); },
      [&](int i, loom_comm_group* g) {
        View element(squares.get(), {1}, i);
        sum_over(r.be, r.comm, g, element.get());
      });
}

void* start_device_read(TrainRun& r) {
  void* read = nullptr;
  check(r.norm_reads->read_start(r.be.self, r.device_sums->t, &read), "reading the gradient norm");
  return read;
}

void* start_device_norm(TrainRun& r, bool poison) {
  sum_device_norm(r, poison);
  return start_device_read(r);
}

double finish_device_norm(TrainRun& r, void* read, double* losses) {
  std::vector<double> sums((size_t)(2 + r.loss_terms));
  check(r.norm_reads->read_finish(r.be.self, read, sums.data(), sums.size() * sizeof(double)),
        "reading the gradient norm");
  if (losses) std::copy(sums.begin() + 2, sums.end(), losses);
  return sums[0] + sums[1];
}

void TrainRun::prepare_device_clip(Registry& registry) {
  if (!recipe.get_bool("train", "grad_norm_on_device")) return;
  const PluginInfo& be_info = registry.get(LOOM_KIND_BACKEND, recipe.plugin("backend"));
  const PluginInfo& opt_info = registry.get(LOOM_KIND_OPTIMIZER, recipe.plugin("optimizer"));
  const loom_device_stream* ds = loom::find_device_stream(be);
  std::string lacking;
  if (!be_info.has_capability(LOOM_EXT_SUM_SQUARES_TOTAL))
    lacking = "backend/" + recipe.plugin("backend") + " does not list " LOOM_EXT_SUM_SQUARES_TOTAL;
  else if (ds == nullptr || ds->base.struct_size < LOOM_DEVICE_STREAM_SIZE_V2_27)
    lacking = "backend/" + recipe.plugin("backend") + "'s loom.device-stream/1 has no reads";
  else if (!opt_info.has_capability(LOOM_EXT_OPT_CLIP))
    lacking = "optimizer/" + recipe.plugin("optimizer") + " does not list " LOOM_EXT_OPT_CLIP;
  if (!lacking.empty()) {
    if (rank == 0)
      spdlog::info("train.grad_norm_on_device: {}; the host reads the norm before each update",
                   lacking);
    return;
  }
  // The loss terms beside the norm where the backend sums a cross-entropy on the device.
  if (be_info.has_capability(LOOM_EXT_CE_LOSS_TOTAL)) loss_terms = (int64_t)loss_term_count(*this);
  const int64_t shape[1] = {2 + loss_terms};
  device_sums = std::make_unique<ScratchTensor>(be, loom_f64(), 1, shape, "the gradient norm");
  norm_reads = ds;
  const int64_t two[1] = {2};
  if (opt_info.has_capability(LOOM_EXT_OPT_SCHEDULE))
    opt_values = std::make_unique<ScratchTensor>(be, loom_f64(), 1, two, "the learning rate");
  if (rank == 0)
    spdlog::info(
        "train.grad_norm_on_device: the gradient norm and the clip{} stay on the device; the "
        "host reads the norm{} after each update is enqueued",
        opt_values ? ", the learning rate and the step count (" LOOM_EXT_OPT_SCHEDULE ")" : "",
        loss_terms > 0 ? " and the losses (" LOOM_EXT_DEVICE_LOSSES ")" : "");
}

}  // namespace loom::engine
