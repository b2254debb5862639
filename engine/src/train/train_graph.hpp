// train.cuda_graph = "step" (Megatron's --cuda-graph-impl full_iteration): a training step's
// device work, zero_grad through the optimizer's update, recorded once by the backend
// (loom.graph/1) and replayed with one launch per step. What changes from step to step goes
// through device tensors the host writes before each launch: the micro-batches' arrays
// (loom.microbatch-device/1, the model reads them there), the learning rate and the step
// count (loom.opt-schedule/1); the loss and the gradient norm come back through the read of
// train.grad_norm_on_device after the launch. train.cpp's graph_step is the host's side.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "loader/registry.hpp"
#include "train/train_run.hpp"

namespace loom::engine {

class GraphStep {
 public:
  // Null for train.cuda_graph = "none"; otherwise the graph's state, or a UsageError (exit 2)
  // naming what the run lacks for a replayed step. COLLECTIVE over the world (each rank
  // decides alike).
  static std::unique_ptr<GraphStep> create(TrainRun& r, Registry& registry);
  GraphStep(TrainRun& r, const loom_graph_api* api, int64_t warmup);
  ~GraphStep();
  GraphStep(const GraphStep&) = delete;
  GraphStep& operator=(const GraphStep&) = delete;

  // Whether this step runs eagerly, as a warm-up (counted down).
  bool warming_up();
  // The step's micro-batches [0, micro) from r.feed (its sampler and first sample set) into
  // the device copies the model reads, after checking their ids (model.h: the host checks
  // them for the model, which a replay does not call). Returns the targets that count (not
  // -1): the LM term's count, which the model reports only when its code runs.
  double upload(int64_t micro);
  // Records `body` (the step's device work) when there is no graph, then launches the graph.
  // The feed hands the model the device copies while the body runs. Returns whether it
  // captured.
  bool launch(const std::function<void()>& body);
  // The next launch records the step again: after eager device work between steps (an
  // evaluation, a save, train.nan_check's rerun), which may have moved what the graph uses.
  void invalidate();

  // The loss terms the schedule reported the last time the body ran (at capture on a backend
  // with graphs, at every launch on one without), and whether it ran in the last launch.
  std::vector<LossTerm> reported;
  bool body_ran = false;

 private:
  static loom_error* run_body(void* user);
  void allocate(const loom_microbatch& mb, int64_t micro);

  TrainRun& r_;
  const loom_graph_api* api_;
  void* graph_ = nullptr;
  int64_t warmup_left_;
  // Per micro-batch: each array's device copy, the DLTensors the extension lists, the extension.
  std::vector<std::vector<std::unique_ptr<ScratchTensor>>> inputs_;
  std::vector<std::vector<DLTensor>> views_;
  std::vector<loom_microbatch_device> exts_;
  const std::function<void()>* body_ = nullptr;
};

}  // namespace loom::engine
