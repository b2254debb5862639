// train.cuda_graph (train_graph.hpp): the checks of a run that replays its steps, the device
// copies of the micro-batches, and the capture and launch through loom.graph/1.
#include "train/train_graph.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstring>
#include <string>

#include "base/errors.hpp"
#include "loom/cpp/graph.hpp"
#include "session/host.hpp"

namespace loom::engine {
namespace {

// What a run lacks for a replayed step ("" when nothing). Each is a host value the step's
// device work would depend on, or device work the replay would not repeat.
std::string missing(TrainRun& r, Registry& registry) {
  Recipe& rc = r.recipe;
  const std::string be = "backend/" + rc.plugin("backend"), model = "model/" + rc.plugin("model");
  if (!registry.get(LOOM_KIND_BACKEND, rc.plugin("backend")).has_capability(LOOM_EXT_GRAPH) ||
      loom::find_graph(r.be) == nullptr)
    return be + " does not list " LOOM_EXT_GRAPH ", which records and replays its work";
  if (!registry.get(LOOM_KIND_MODEL, rc.plugin("model")).has_capability(LOOM_EXT_MICROBATCH_DEVICE))
    return model + " does not list " LOOM_EXT_MICROBATCH_DEVICE
                   ", with which it reads a micro-batch's ids on the device";
  if (!r.device_sums || !r.opt_values || r.loss_terms == 0)
    return "train.grad_norm_on_device with a backend and an optimizer that list "
           "loom.sum-squares-total/1, loom.ce-loss-total/1, loom.opt-clip/1 and "
           "loom.opt-schedule/1 (the loss, the norm, the clip, the learning rate and the step "
           "count on the device)";
  if (r.loss_terms != 1)
    return "the LM loss alone: " + model + " reports " + std::to_string(r.loss_terms) +
           " loss terms (multi-token prediction, the experts' balancing losses), whose counts "
           "the host does not know before the step";
  if (r.world > 1) return "one rank (the collectives of a data- or model-parallel step)";
  if (rc.get_string("train", "objective") == "dpo") return "train.objective = \"lm\"";
  if (r.scaler.dynamic) return "a fixed loss scale (fp16's dynamic scale changes between steps)";
  if (rc.get_bool("train", "timers")) return "train.timers = false (timing marks wait)";
  if (!rc.get_string("train", "schedule_trace").empty()) return "no train.schedule_trace";
  if (rc.get_bool("data", "pack_sequences"))
    return "data.pack_sequences = false (packed documents are read on the host)";
  if (!r.feed.made.empty()) return "GPT samples (dataset/" + rc.plugin("data") + " makes its own)";
  return "";
}

// The host's check of an id array for the model (model.h, loom.microbatch-device/1).
void check_ids(const char* name, const int32_t* ids, int64_t n, int64_t vocab, int64_t micro) {
  const bool targets = std::strcmp(name, LOOM_ARRAY_TARGETS) == 0;
  if (!targets && std::strcmp(name, LOOM_ARRAY_TOKENS) != 0)
    throw RunError(std::string("train.cuda_graph: micro-batch array \"") + name +
                   "\" has no check on the host");
  for (int64_t i = 0; i < n; ++i)
    if (!((ids[i] >= 0 && ids[i] < vocab) || (targets && ids[i] == -1)))
      throw RunError(std::string("train.cuda_graph: micro-batch ") + std::to_string(micro) + ": " +
                     (targets ? "target" : "token") + " id " + std::to_string(ids[i]) +
                     " at position " + std::to_string(i) + " is outside the vocabulary [0, " +
                     std::to_string(vocab) + ")");
}

}  // namespace

std::unique_ptr<GraphStep> GraphStep::create(TrainRun& r, Registry& registry) {
  if (r.recipe.get_string("train", "cuda_graph") == "none") return nullptr;
  if (const std::string why = missing(r, registry); !why.empty())
    throw UsageError("train.cuda_graph = \"step\" needs " + why);
  auto g = std::make_unique<GraphStep>(r, loom::find_graph(r.be),
                                       r.recipe.get_int("train", "cuda_graph_warmup_steps"));
  if (r.rank == 0)
    spdlog::info(
        "train.cuda_graph = \"step\": {} eager steps, then each step is one launch of the "
        "recorded step ({}), its micro-batches on the device ({})",
        r.recipe.get_int("train", "cuda_graph_warmup_steps"), LOOM_EXT_GRAPH,
        LOOM_EXT_MICROBATCH_DEVICE);
  return g;
}

GraphStep::GraphStep(TrainRun& r, const loom_graph_api* api, int64_t warmup)
    : r_(r), api_(api), warmup_left_(warmup) {}

GraphStep::~GraphStep() { invalidate(); }

bool GraphStep::warming_up() {
  if (warmup_left_ <= 0) return false;
  --warmup_left_;
  return true;
}

void GraphStep::invalidate() {
  if (graph_ != nullptr) api_->graph_free(r_.be.self, graph_);
  graph_ = nullptr;
}

// The device copies: one tensor per array of each micro-batch, fixed for the run (the graph
// reads them where they were at capture).
void GraphStep::allocate(const loom_microbatch& mb, int64_t micro) {
  invalidate();
  inputs_.clear();
  inputs_.resize((size_t)micro);
  views_.assign((size_t)micro, {});
  exts_.assign((size_t)micro, loom_microbatch_device{});
  for (size_t i = 0; i < (size_t)micro; ++i) {
    for (size_t k = 0; k < mb.num_arrays; ++k) {
      const DLTensor& a = mb.arrays[k];
      inputs_[i].push_back(std::make_unique<ScratchTensor>(r_.be, a.dtype, a.ndim, a.shape,
                                                           "a micro-batch's device copy"));
      views_[i].push_back(*inputs_[i].back()->t);
    }
    exts_[i] = loom_microbatch_device{
        {sizeof(loom_microbatch_device), LOOM_EXT_MICROBATCH_DEVICE, LOOM_EXT_REQUIRED, nullptr},
        views_[i].data()};
  }
}

double GraphStep::upload(int64_t micro) {
  Feed& f = r_.feed;
  f.device = nullptr;
  double count = 0;
  for (int64_t i = 0; i < micro; ++i) {
    loom_microbatch mb{};
    check(Feed::get(&f, i, &mb), "reading a micro-batch");
    if ((int64_t)inputs_.size() != micro || inputs_[0].size() != mb.num_arrays) allocate(mb, micro);
    for (size_t k = 0; k < mb.num_arrays; ++k) {
      const DLTensor& a = mb.arrays[k];
      const int64_t n = loom_tensor_numel(&a);
      if (loom_tensor_numel(inputs_[(size_t)i][k]->t) != n || !loom_dtype_eq(a.dtype, loom_i32()))
        throw RunError(std::string("train.cuda_graph: micro-batch array \"") + mb.names[k] +
                       "\" changed its shape or is not int32");
      const auto* ids = static_cast<const int32_t*>(a.data);
      check_ids(mb.names[k], ids, n, r_.vocab, i);
      if (std::strcmp(mb.names[k], LOOM_ARRAY_TARGETS) == 0)
        for (int64_t j = 0; j < n; ++j) count += ids[j] != -1;
      check(r_.be.api->from_host(r_.be.self, inputs_[(size_t)i][k]->t, ids,
                                 (size_t)n * sizeof(int32_t)),
            "uploading a micro-batch");
    }
  }
  return count;
}

loom_error* GraphStep::run_body(void* user) {
  auto* g = static_cast<GraphStep*>(user);
  try {
    g->body_ran = true;
    (*g->body_)();
    return nullptr;
  } catch (const std::exception& e) {
    return host_abi::error_new(LOOM_ERR_INTERNAL, e.what());
  }
}

bool GraphStep::launch(const std::function<void()>& body) {
  body_ = &body;
  body_ran = false;
  r_.feed.device = &exts_;
  struct Reset {
    GraphStep& g;
    ~Reset() { g.r_.feed.device = nullptr, g.body_ = nullptr; }
  } reset{*this};
  const bool capture = graph_ == nullptr;
  if (capture) {
    const auto t0 = std::chrono::steady_clock::now();
    const loom_graph_capture_args a{LOOM_GRAPH_CAPTURE_ARGS_SIZE_V2_31, run_body, this, nullptr};
    check(api_->capture(r_.be.self, &a, &graph_), "train.cuda_graph: recording the step");
    if (r_.rank == 0)
      spdlog::info(
          "train.cuda_graph: the step recorded in {:.1f} ms on the host",
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  check(api_->launch(r_.be.self, graph_), "train.cuda_graph: launching the step");
  return capture;
}

}  // namespace loom::engine
