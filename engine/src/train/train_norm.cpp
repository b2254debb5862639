// The global gradient norm on the host or on the device (train_norm.hpp).
#include "train/train_norm.hpp"

#include <spdlog/spdlog.h>

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

void* start_device_norm(TrainRun& r) {
  DLTensor* squares = r.norm_squares->t;
  // loom.sum-squares-total/1: the backend sums the per-tensor squares in index order from 0,
  // as the host's loop above does.
  auto total = [&](const std::vector<const DLTensor*>& grads, int64_t i) {
    View element(squares, {1}, i);
    const loom_sum_squares_total ext{
        {sizeof(loom_sum_squares_total), LOOM_EXT_SUM_SQUARES_TOTAL, LOOM_EXT_REQUIRED, nullptr},
        element.get()};
    const loom_sum_squares_args a{LOOM_SUM_SQUARES_ARGS_SIZE_V2, grads.data(), grads.size(),
                                  nullptr, &ext.base};
    check(r.be.api->ops->sum_squares(r.be.self, &a), "gradient norm");
  };
  total(r.norm_grads, 0);
  total(r.expert_norm_grads, 1);
  reduce_norms(
      r, [&](loom_comm_group* g) { sum_over(r.be, r.comm, g, squares); },
      [&](int i, loom_comm_group* g) {
        View element(squares, {1}, i);
        sum_over(r.be, r.comm, g, element.get());
      });
  void* read = nullptr;
  check(r.norm_reads->read_start(r.be.self, squares, &read), "reading the gradient norm");
  return read;
}

double finish_device_norm(TrainRun& r, void* read) {
  double sq[2] = {0, 0};
  check(r.norm_reads->read_finish(r.be.self, read, sq, sizeof sq), "reading the gradient norm");
  return sq[0] + sq[1];
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
  const int64_t shape[1] = {2};
  norm_squares = std::make_unique<ScratchTensor>(be, loom_f64(), 1, shape, "the gradient norm");
  norm_reads = ds;
  if (rank == 0)
    spdlog::info(
        "train.grad_norm_on_device: the gradient norm and the clip stay on the device; the "
        "host reads the norm after each update is enqueued");
}

}  // namespace loom::engine
