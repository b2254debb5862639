// One training run's state, and the pieces of the loop around it, one file each:
//   train_setup.cpp       TrainRun's constructor: the recipe's settings, the plugins, the
//                         model chunks and their parameters, f32 main parameters, the
//                         (sharded) optimizer, the schedule, the memory report
//   train_checkpoint.cpp  TrainRun::resume and TrainRun::save
//   train_metrics.cpp     Metrics: the metrics file and the log lines
//   train.cpp             run_training: train_step, evaluate and the loop
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/errors.hpp"
#include "base/folder_lock.hpp"
#include "base/test_hooks.hpp"
#include "checkpoint/checkpoint.hpp"
#include "checkpoint/checkpoint_shards.hpp"
#include "data/feed.hpp"
#include "data/preference_data.hpp"
#include "data/sampler.hpp"
#include "loader/registry.hpp"
#include "loom/cpp/model_step.hpp"
#include "recipe/recipe.hpp"
#include "session/config_check.hpp"
#include "session/host.hpp"
#include "train/lr_schedule.hpp"
#include "train/precision.hpp"
#include "train/schedule_trace.hpp"
#include "train/train_guard.hpp"

namespace loom::engine {

// Sums `n` host doubles over the ranks of `group` (NULL: the world; a no-op on one rank),
// through a tensor of backend `be` (blocks: the sums are in `values` on return).
// A tensor of backend `be` (zero-filled), freed with the object: the engine's scratch for
// staging checkpoint data and cross-rank sums. `what` names the work in an allocation error.
struct ScratchTensor {
  const loom_backend_ref& be;
  DLTensor* t = nullptr;
  ScratchTensor(const loom_backend_ref& b, DLDataType dtype, int ndim, const int64_t* shape,
                const char* what)
      : be(b) {
    check(be.api->alloc_tensor(be.self, dtype, ndim, shape, &t), what);
  }
  ~ScratchTensor() { be.api->free_tensor(be.self, t); }
  ScratchTensor(const ScratchTensor&) = delete;
  ScratchTensor& operator=(const ScratchTensor&) = delete;
};

void sum_over(const loom_backend_ref& be, const loom_comm_ref& comm, loom_comm_group* group,
              double* values, int64_t n);
// The same for f64 tensor t of the backend, in place, enqueued on the backend's stream (no
// host copy); nothing when the group is one rank.
void sum_over(const loom_backend_ref& be, const loom_comm_ref& comm, loom_comm_group* group,
              DLTensor* t);

// The saved recipe of checkpoint `dir` for a run that only reads its weights (`loom eval`,
// tensor-parallel `loom serve`): one rank unless `overrides` give a layout, then the
// weights through checkpoint.finetune (any saved layout), no saves, logs or data of its own
// (dataset/mock, never read), one iteration; `extra` last.
Recipe inference_recipe(const std::filesystem::path& dir, const std::vector<std::string>& overrides,
                        const std::vector<std::string>& extra, Registry& registry);

// One named loss term summed over a step's (or an evaluation's) micro-batches.
struct LossTerm {
  std::string name;
  double sum = 0, count = 0, weight = 0;
  double mean() const { return sum / std::max(count, 1.0); }
};

// What one iteration did, for the log and the metrics file.
struct StepStats {
  // terms after the main one (name, mean); weight 0: a statistic, not part of the objective
  std::vector<std::pair<std::string, double>> extra_losses, stats;
  double loss = 0, lr = 0, grad_norm = 0, loss_scale = 1;
  double seconds = 0, tokens_per_s = 0, mfu = 0;
  double comm_wait_s = 0;  // of `seconds`, blocked in comm calls (known with comm.timeout_s > 0)
  bool stepped = true;
};

class TensorBoardWriter;
class GraphStep;

// The bytes a rank's training state holds on the backend: parameter values (and the model's
// buffers), gradients, f32 main parameters (mixed precision), optimizer state.
struct StateBytes {
  double values = 0, grads = 0, main = 0, optimizer = 0;
};

struct TrainRun {
  // Composes the run (COLLECTIVE over the world: every rank builds its part of the layout).
  // walk_through: set up for `loom validate --memory` on backend/meta, whose parameters need
  // no initialisation (drawing a large model's values on the host would cost minutes).
  TrainRun(Recipe& recipe, Registry& registry, bool walk_through = false);
  ~TrainRun();  // train_setup.cpp, where GraphStep is complete
  TrainRun(const TrainRun&) = delete;
  TrainRun& operator=(const TrainRun&) = delete;

  // From checkpoint.load when it holds a checkpoint: parameters, optimizer state, the loss
  // scaler and the data position. Each rank reads its own files, or (another layout) every
  // file, cutting its part out of the full tensors. Otherwise from checkpoint.finetune.
  void resume();
  // checkpoint.save and train.metrics made ready before the first step (train_folders.cpp,
  // COLLECTIVE over the world): stale partial saves removed, writability checked, another
  // run's checkpoints not overwritten, the folder locked against a second run (save_lock).
  // Each refusal is exit 2 on every rank.
  void prepare_save_dir();
  // checkpoint.finetune: pretrained weights only (train_finetune.cpp).
  void finetune(const std::filesystem::path& dir);
  // A checkpoint of the current state under checkpoint.save (COLLECTIVE over the world).
  // background (checkpoint.async): the state is copied to host memory and a thread writes the
  // files while the loop goes on; finish_save puts the checkpoint in place once every rank's
  // files are durable. At most one save is in flight: a save first finishes the last one.
  void save(int64_t iteration, bool background = false);
  // A background save (COLLECTIVE over the world, every rank at the same iteration): wait:
  // finish it now; else finish it only if every rank's writer is done (a sum over the ranks).
  void finish_save(bool wait);
  // Runs `micro` micro-batches of mbs x seq_len from get(user, i, ...) through the pipeline
  // schedule (COLLECTIVE over the world); the schedule's loss terms are in a.losses.
  // device_losses: loom.device-losses/1 on the args, over device_sums' loss part (a training
  // step whose losses are read after its update).
  loom_schedule_args run_schedule(int64_t micro, bool forward_only, double loss_scale,
                                  loom_error* (*get)(void*, int64_t, loom_microbatch*), void* user,
                                  bool device_losses = false);

  Recipe& recipe;

  // The recipe's [train] settings.
  uint64_t seed = 0;
  int64_t iters = 0, seq_len = 0, mbs = 0, log_interval = 0, eval_interval = 0, eval_iters = 0;
  double grad_clip = 0;
  DLDataType compute{};
  LossScaler scaler;
  LrSchedule lr;
  // The resilience tests' failure injection, read once here; null in a normal run.
  std::unique_ptr<const TestHooks> hooks = TestHooks::from_env();

  // Plugins and layout. Members are destroyed in reverse order: everything below the session
  // (samplers, main parameters) goes before the plugin instances it refers to.
  Session session;
  loom_comm_ref comm{};
  int world = 1, rank = 0;
  loom_parallel_layout layout{};
  int64_t dp = 1, gbs = 0, num_micro = 1;
  int64_t vocab = 0;                  // the tokenizer's (the model pads its embedding beyond it)
  loom_backend_ref be{};              // the timed table under train.timers
  StepTimer* timer = nullptr;         // train.timers (the session's)
  double optimizer_floor_bytes = -1;  // the optimizer step's bytes, for its floor (train.cpp)
  loom_backend_info info{};
  std::array<std::unique_ptr<Sampler>, 3> samplers;
  Sampler* train_samples = nullptr;
  Sampler* valid_samples = nullptr;  // NULL: the recipe's split has no validation part

  // The model: the chunks of this pipeline rank, at the stages the schedule places them.
  const loom_model_api* mapi = nullptr;
  std::vector<loom_model*> chunks;
  ChunkPlacement place;
  // train.schedule_trace: the step it traces gets its table on the schedule's args.
  std::unique_ptr<ScheduleTrace> trace;
  bool tracing = false;
  // The model's split backward (loom.split-backward/1), handed to the schedule; model NULL:
  // the model has none.
  loom_schedule_split split{};
  double flops_per_token = 0;
  std::vector<loom_model_param> params;
  // The model's buffers (loom_model_param.buffer, ABI 2.9): saved and loaded with the
  // parameters, never stepped nor reduced.
  std::vector<loom_model_param> buffers;
  std::vector<DLTensor*> grads, values;
  int64_t local_params = 0;  // trained parameters' elements on this rank
  // Parameter-efficient finetuning (loom_model_param.frozen, adapter; ABI 2.25): the frozen
  // base's elements (among the buffers) and the adapters' names (checkpoint.finetune's source
  // lacks them).
  int64_t frozen_params = 0;
  std::set<std::string> adapters;
  int64_t model_params() const { return local_params + frozen_params; }
  double grad_plugin_bytes = 0;  // the gradient plugin's own backend allocations
  // Gradient readiness (ABI 2.12): each backward pass, the model chunks announce the
  // parameters whose gradients they completed (loom_model_create_args.grad_ready); a gradient
  // that the step's last pass announced is final, and runs of final ones go to the strategy's
  // grad_ready, which may start reducing them while the backward pass goes on.
  struct ReadyChunk {
    TrainRun* run;
    size_t chunk;
  };
  std::vector<ReadyChunk> ready_chunks;       // the callbacks' user data, one per chunk
  std::vector<std::vector<int64_t>> grad_of;  // per chunk: get_param index -> grads index, or -1
  std::vector<int64_t> ready_count;           // this step: the passes that announced each gradient
  bool forward_ready = false;                 // inside a training step's micro-batches
  std::string ready_error;                    // the strategy's grad_ready error, raised after them
  static void on_grad_ready(void* user, int64_t first, int64_t count);
  bool walk_through = false;
  // Parameter residency (ABI 2.13: parallel.data = "fsdp", or overlap_param_gather). The
  // model asks the strategy to fill or complete a unit's values and to take its gradients
  // through these (user: the chunk's ReadyChunk); the whole model is held resident from
  // set-up until the run lets go (hold_params(false)), and again while a checkpoint is
  // written (train_residency.cpp). `loaded`: the values were written since the strategy
  // took its shards (at create or from a checkpoint), so the next release refreshes them.
  int32_t residency = LOOM_RESIDENCY_NONE;
  bool held = true, loaded = true;
  static loom_error* on_unit_needed(void* user, int32_t unit, int32_t fill);
  static loom_error* on_unit_grads(void* user, int32_t unit);
  void hold_params(bool hold);

  // Gradient strategy, optimizer and schedule.
  std::pair<const loom_grad_api*, loom_grad*> grad_strategy{nullptr, nullptr};
  bool sharded = false;  // the optimizer steps this rank's shards (ZeRO-1)
  std::vector<loom_param_shard> shards;
  std::unique_ptr<MainParams> main;                // f32 main parameters (or the values)
  std::vector<const DLTensor*> norm_grads;         // gradients of the norm, each counted once
  std::vector<const DLTensor*> expert_norm_grads;  // expert parameters' (expert parallelism)
  std::vector<std::string> norm_names, expert_norm_names;  // their parameters' names
  // train.grad_norm_on_device, where the backend and the optimizer list what it needs
  // (loom.sum-squares-total/1, loom.opt-clip/1, ABI 2.27 read_start): the norm's squares
  // (dense, expert) stay on the device for the update's clip (train_norm.cpp), read through
  // the backend's stream table. Both NULL: the host reads the norm first. Where the backend
  // also lists loom.ce-loss-total/1 (ABI 2.28), the loss terms' sums follow the squares
  // (loom.device-losses/1: the model sums its cross-entropy there, loss_terms of them) and
  // are read with them, after the update: one read per step.
  std::unique_ptr<ScratchTensor> device_sums;  // (2 + loss_terms) f64
  // And where the optimizer lists loom.opt-schedule/1 (ABI 2.30): the step's learning rate and
  // count, written before each update and read by it on the device (train.cpp's
  // launch_update), so that the enqueued update holds no host value (a captured step's need).
  std::unique_ptr<ScratchTensor> opt_values;  // (2) f64
  // train.cuda_graph = "step": the recorded step and its micro-batches' device copies
  // (train_graph.hpp); null for "none". Set by run_training before the first step.
  std::unique_ptr<GraphStep> graph;
  int64_t loss_terms = 0;
  const loom_device_stream* norm_reads = nullptr;
  std::vector<LossTerm> pending_losses;  // this rank's host sums while the rest is read
  void prepare_device_clip(Registry& registry);
  int64_t skipped_bad = 0;  // steps train.nan_check = "skip" dropped
  LossSpikes spikes;
  std::pair<const loom_optimizer_api*, loom_optimizer*> optimizer{nullptr, nullptr};
  std::pair<const loom_schedule_api*, loom_schedule*> schedule{nullptr, nullptr};
  loom_comm_group* norm_group = nullptr;    // where the squared gradient norm is summed
  loom_comm_group* expert_group = nullptr;  // the experts' part of it (the world)
  loom_comm_group* data_group = nullptr;    // where losses are summed

  // Checkpoint files of this rank, and who writes what.
  std::string model_file, opt_file;
  bool writes_model = true, writes_opt = true;

  // Progress.
  int64_t start_iter = 0, consumed = 0;
  int64_t opt_steps = 0;
  // Where the weights came from when imported from Hugging Face (hf_origin), kept in every
  // save for export-hf.
  std::map<std::string, std::string>
      hf_meta;  // steps the optimizer took: iterations less fp16's skipped ones
  // LoRA from checkpoint.finetune's Loom checkpoint: that folder (absolute), which holds the
  // frozen weights; saves then hold the adapters alone and name it (loom.peft_base,
  // checkpoint_shards.hpp). "": the frozen weights are saved with the adapters (a run from
  // scratch or from a Hugging Face directory).
  std::string peft_base;
  // DPO (train.objective = "dpo", train_preference.cpp): the preference pairs, and the
  // reference log-probabilities of every pair document's chosen (2d) and rejected (2d+1)
  // conversation, computed before the first step (compute_reference, COLLECTIVE over the
  // world) or read back from beside the checkpoints (`resumed_from`: the folder resume loaded).
  // `start_model`: the folder checkpoint.finetune loaded (absolute), "" = the initialisation;
  // with the pairs and train.seq_len, what a reference file is keyed by (reference_key).
  std::unique_ptr<PairData> pairs;
  std::vector<double> reference;
  std::string resumed_from, start_model;
  void prepare_reference();
  void compute_reference();
  std::string reference_key() const;
  void write_reference(const std::filesystem::path& path) const;  // world rank 0 writes
  Feed feed;

  // checkpoint.async's save in flight: its files, written by `writer`.
  struct AsyncSave {
    Checkpoint ck;
    std::filesystem::path dir;
    std::thread writer;
    std::atomic<bool> done{false};
    std::string error;                   // the writer's, read after the join
    double snapshot_s = 0, write_s = 0;  // the loop's pause; the writer's time
    ~AsyncSave() {
      if (writer.joinable()) writer.join();
    }
  };
  // World rank 0's lock on checkpoint.save, held until the run (its last save) is over.
  std::unique_ptr<FolderLock> save_lock;
  std::unique_ptr<AsyncSave> pending_save;  // last: its thread stops before anything else goes

 private:
  Collective save_collective();
  bool same_layout(const std::map<std::string, int64_t>& saved) const;
  bool same_shards(const Checkpoint& ck) const;
  void load_own_files(const Checkpoint& ck, bool with_optimizer);
  void check_full(const FullCheckpoint& full, const std::string& where, bool with_optimizer,
                  const std::vector<std::string>& unused) const;
  // `fresh(name)`: that parameter keeps its initialisation (checkpoint.finetune_fresh).
  void load_full(const FullCheckpoint& full, const std::string& where, bool with_optimizer,
                 const std::function<bool(const std::string&)>& fresh = {});
  void sync_tied();
  // Buffer b (a frozen weight too) cut for this rank from the full tensors of `full`.
  void upload_buffer(const StFile& full, const loom_model_param& b, const std::string& where);
  // The frozen weights from the base that checkpoint `folder` names (loom.peft_base).
  void load_frozen_base(const std::filesystem::path& folder);
  ParamFilter own_params() const;
  void create_model(int64_t vocab);
  void create_optimizer();
  void report_memory() const;

 public:
  StateBytes state_bytes() const;  // now, on this rank's backend
};

// One step's forward and backward of every micro-batch and the model's finish_grads, without
// the reduction or the optimizer's step: what `loom validate --memory` walks through on
// backend/meta (train.cpp).
void dry_step(TrainRun& r);

// The metrics file (JSON lines, world rank 0) and the log lines of a run.
class Metrics {
 public:
  explicit Metrics(const TrainRun& run);
  ~Metrics();
  void step(int64_t iter, const StepStats& s, int64_t mem_peak);
  // terms[0] is the loss; the others are logged beside it as eval_<name>.
  void eval(int64_t iter, const std::vector<LossTerm>& terms);
  void log_stats(int64_t iter, const std::vector<std::pair<std::string, double>>& stats,
                 const std::string& prefix) const;

 private:
  // Each rank's mean busy time per step (step time less the time blocked in comm calls, so
  // that a straggler stands out rather than the ranks that wait for it) since the last log
  // line, over the ranks.
  struct RankTimes {
    double min = 0, max = 0;
    int slowest = 0;
  };
  RankTimes rank_times(double mean_s) const;

  const TrainRun& run_;
  double interval_s_ = 0;  // this rank's busy step seconds since the last log line
  int64_t interval_n_ = 0;
  std::ofstream file_;
  std::unique_ptr<TensorBoardWriter> tb_;  // train.tensorboard, world rank 0
  double started_ = 0;                     // steady-clock seconds at construction
};

// One line of a metrics file as Metrics writes it: a step's ("loss", "grad_norm", "lr",
// "loss_<term>", statistics) or an evaluation's ("eval_loss", "eval_<term>"), numbers only.
struct MetricsLine {
  int64_t iter = 0;
  bool eval = false;
  std::map<std::string, double> values;
};
// The lines of a metrics file, in order. Throws RunError naming the file and line when one
// is not a JSON object with "iter".
std::vector<MetricsLine> read_metrics(const std::filesystem::path& path);
// Whether a metrics value is a term of the objective, which every layout must reproduce:
// the loss, an extra loss "loss_<term>" (not the loss scale), an evaluation's. Statistics
// ("moe_load.h3.e0", "eval_moe_load...": grouped by their dots), throughput, time and memory
// are not.
bool is_loss_metric(const std::string& key);

}  // namespace loom::engine
