// A training run's set-up (TrainRun's constructor, train_run.hpp): the recipe's settings,
// the plugins and process groups, the samplers, the model chunks and their parameters, f32
// main parameters, the (sharded) optimizer and the pipeline schedule.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "base/errors.hpp"
#include "loom/cpp/comm.hpp"
#include "loom/cpp/tensor.hpp"
#include "recipe/parallel_layout.hpp"
#include "session/config_check.hpp"
#include "session/step_timer.hpp"
#include "train/batch_check.hpp"
#include "train/launch.hpp"
#include "train/train_graph.hpp"
#include "train/train_run.hpp"

namespace loom::engine {
namespace {

// The groups a parameter names must be ones this host implements: a gradient averaged over
// another group, or a tie it does not re-synchronise, would train a different model.
void check_param_groups(const loom_model_param& p, const std::string& model) {
  const std::string who = "model/" + model + ": parameter " + p.name;
  if (p.reduce_group == LOOM_GROUP_EXPERT_DATA) {
    if (p.value->ndim < 1)
      throw UsageError(who + " is an expert parameter (reduce group expert data) of no dimension");
  } else if (p.reduce_group != LOOM_GROUP_DATA_CONTEXT) {
    throw UsageError(who + " asks for reduce group " + std::to_string(p.reduce_group) +
                     "; this host averages gradients over data x context or, for expert "
                     "parameters, over the expert-data group");
  }
  if (p.tie_group != nullptr && std::string(p.tie_group) != "embedding")
    throw UsageError(who + " is in tie group '" + p.tie_group +
                     "'; the host knows only 'embedding'");
}

// Refused before any plugin is created: what this engine cannot train yet.
Recipe& refuse_unsupported(Recipe& recipe) {
  const std::string cp = recipe.get_string("parallel", "cp_comm_type");
  if (cp != "p2p" && cp != "a2a")
    throw UsageError("parallel.cp_comm_type = \"" + cp + "\": expected \"p2p\" or \"a2a\"");
  return recipe;
}

}  // namespace

namespace {
bool one_rank(const loom_comm_ref& comm, loom_comm_group* group) {
  return comm.api->world_size(comm.self) == 1 ||
         (group && comm.api->group_size(comm.self, group) == 1);
}
}  // namespace

void sum_over(const loom_backend_ref& be, const loom_comm_ref& comm, loom_comm_group* group,
              DLTensor* t) {
  if (one_rank(comm, group)) return;
  const loom_device_stream* ds = loom::find_device_stream(be);
  check(loom::comm_all_reduce(comm, group, t, LOOM_REDUCE_SUM, ds ? ds->stream : nullptr),
        "summing over ranks");
}

void sum_over(const loom_backend_ref& be, const loom_comm_ref& comm, loom_comm_group* group,
              double* values, int64_t n) {
  if (one_rank(comm, group)) return;
  // Through a tensor of the backend's, enqueued on its stream: each comm reduces the memory
  // of the backends it pairs with (comm/nccl device memory only, comm/mpi host memory).
  const int64_t shape[1] = {n};
  const size_t bytes = static_cast<size_t>(n) * sizeof(double);
  ScratchTensor scratch(be, loom_f64(), 1, shape, "summing over ranks");
  check(be.api->from_host(be.self, scratch.t, values, bytes), "summing over ranks");
  sum_over(be, comm, group, scratch.t);
  check(be.api->to_host(be.self, scratch.t, values, bytes), "summing over ranks");
}

TrainRun::~TrainRun() = default;

namespace {
// precision.fp8's line: what runs in FP8 and through what.
void log_fp8(const Recipe& recipe) {
  if (fp8_recipe(recipe) == 0) return;
  spdlog::info(
      "precision.fp8 = {}: the transformer layers' linear GEMMs in FP8 ({}) through "
      "backend/{}'s " LOOM_EXT_FP8 "; the rest in {}",
      recipe.get_string("precision", "fp8"),
      recipe.get_string("precision", "fp8_format") == "hybrid" ? "e4m3 forward, e5m2 gradients"
                                                               : "e4m3 throughout",
      recipe.plugin("backend"), recipe.get_string("precision", "dtype"));
}
}  // namespace

TrainRun::TrainRun(Recipe& r, Registry& registry, bool walk)
    : recipe(r),
      seed((uint64_t)r.get_int("train", "seed")),
      iters(r.get_int("train", "iters")),
      seq_len(r.get_int("train", "seq_len")),
      mbs(r.get_int("train", "micro_batch_size")),
      log_interval(r.get_int("train", "log_interval")),
      eval_interval(r.get_int("train", "eval_interval")),
      eval_iters(r.get_int("train", "eval_iters")),
      grad_clip(r.get_float("train", "grad_clip")),
      compute(compute_dtype(r.get_string("precision", "dtype"))),
      scaler(LossScaler::from_recipe(r)),
      session(refuse_unsupported(check_model_batch(r, registry)), registry) {
  walk_through = walk;
  lr.kind = recipe.get_string("lr", "schedule");
  lr.max = recipe.get_float("lr", "max");
  lr.min = recipe.get_float("lr", "min");
  lr.warmup = recipe.get_int("lr", "warmup_iters");
  lr.decay_iters = recipe.get_int("lr", "decay_iters");
  if (lr.decay_iters == 0) lr.decay_iters = iters;
  lr.wsd_decay_fraction = recipe.get_float("lr", "wsd_decay_fraction");

  comm = session.comm();
  world = comm.api->world_size(comm.self);
  rank = comm.api->world_rank(comm.self);
  // First of all that is communicated: ranks started with other recipes (other model sizes)
  // would meet in collectives of mismatched sizes. (backend/meta's walk-through has no data.)
  if (!walk_through) agree_on_recipe(recipe, session.backend(), comm);
  layout = session.layout();          // checks the layout, makes the groups
  if (hooks) hooks->stall(rank, -1);  // tests only: a slow set-up
  // What `loom validate` checks too: every plugin's configuration at this rank's place.
  check_plugin_configs(recipe, registry, layout);
  dp = layout.data;
  gbs = recipe.get_int("train", "global_batch_size");
  if (gbs == 0) gbs = mbs * dp;
  num_micro = microbatches_per_step(recipe, (int)dp);
  place = chunk_placement(recipe, registry, layout, num_micro);  // the schedule's
  if (const auto* x = reinterpret_cast<const loom_split_backward_ext*>(
          loom_ext_find(registry.get(LOOM_KIND_MODEL, recipe.plugin("model")).desc->ext,
                        LOOM_EXT_SPLIT_BACKWARD));
      x && x->base.struct_size >= LOOM_SPLIT_BACKWARD_EXT_SIZE_V1 && x->weight_backward) {
    split.base = {sizeof(loom_schedule_split), LOOM_EXT_SPLIT_BACKWARD, 0, nullptr};
    split.model = x;
  }
  if (const std::string path = recipe.get_string("train", "schedule_trace"); !path.empty()) {
    ScheduleTrace::Where w;
    w.schedule = recipe.get_string("parallel", "schedule");
    w.pipeline = layout.pipeline;
    w.pipeline_rank = layout.pipeline_rank;
    w.virtual_stages = layout.virtual_stages;
    w.microbatches = num_micro;
    w.stages = place.stages;
    w.writes = layout.tensor_rank == 0 && layout.context_rank == 0 && layout.data_rank == 0;
    trace = std::make_unique<ScheduleTrace>(path, recipe.get_int("train", "schedule_trace_iter"),
                                            std::move(w));
  }
  if (rank == 0) {
    std::string text = describe_layout(recipe, world);
    if (world > 1) spdlog::info("{}", text.substr(0, text.find('\n')));
  }

  be = session.backend();
  // train.timers: the timed table from here on, before the model and optimizer are made.
  if (recipe.get_bool("train", "timers")) {
    timer = &session.start_timer(compute);
    be = session.backend();
  }
  loom_tokenizer_ref tok = session.tokenizer();
  vocab = tok.api->vocab_size(tok.self);
  // Megatron's GPT dataset: samples wanted per split decide epochs and index arrays. The
  // loop reads train samples from `consumed` on, and evaluation k (0, 1, ...) reads valid
  // samples [k, k+1) x eval_iters x global batch, so both resume from the iteration alone.
  std::array<int64_t, 3> wanted = samples_wanted(iters, gbs, eval_interval, eval_iters);
  wanted[kTest] = 0;                                       // the loop does not test
  if (recipe.get_string("train", "objective") == "dpo") {  // preference pairs (DPO)
    if (mbs % 2 != 0)
      throw UsageError("train.objective = \"dpo\": train.micro_batch_size = " +
                       std::to_string(mbs) + " must be even (a pair's two rows share one)");
    pairs = std::make_unique<PairData>(recipe, session);
    samplers = pairs->samplers(wanted, seq_len);
    feed.preference = std::make_unique<Feed::Preference>();
  } else {
    samplers = build_samplers(recipe, session, wanted, seq_len);
  }
  if (!samplers[kTrain])
    throw RunError("the training split is empty (data.split = \"" +
                   recipe.get_string("data", "split") + "\")");
  train_samples = samplers[kTrain].get();
  valid_samples = samplers[kValid].get();

  create_model(vocab);
  create_optimizer();
  report_memory();
  schedule = session.schedule();
  // The squared gradient norm is summed over the model-parallel ranks, and over the
  // data-parallel ranks too when each holds a different shard; expert gradients (each expert
  // rank holds other experts, counted by one rank of each expert-data group) over the world.
  norm_group = sharded ? nullptr : session.group(LOOM_GROUP_MODEL);
  expert_group = sharded ? nullptr : session.group(LOOM_GROUP_WORLD);
  data_group = session.group(LOOM_GROUP_DATA_CONTEXT);
  prepare_device_clip(registry);
  {
    double counts[1] = {(double)local_params};
    sum_over(be, comm, session.group(LOOM_GROUP_MODEL), counts, 1);
    spdlog::info(
        "model: {} parameters on this rank ({} tensors, {} in the model-parallel "
        "group); {} micro-batches of {} x {} per step",
        local_params, params.size(), (int64_t)counts[0], num_micro, mbs, seq_len);
  }
  log_fp8(recipe);

  // This rank's checkpoint files; replicas of a data-parallel group write nothing their
  // group's rank 0 writes.
  model_file = checkpoint_file("model", layout, false);
  opt_file = checkpoint_file("optimizer", layout, sharded && dp * layout.context > 1);
  // Under expert parallelism the first expert-data replica of every expert rank writes too
  // (its file has the expert rank's tag): each holds other experts.
  writes_model = (layout.data_rank * layout.context + layout.context_rank) < layout.expert;
  writes_opt = writes_model || sharded;

  info.struct_size = LOOM_BACKEND_INFO_SIZE_V2;
  check(be.api->get_info(be.self, &info), "backend info");
  flops_per_token = mapi->flops_per_token(chunks[0]);
  feed.allocate(mbs, seq_len, Feed::packed_eod(recipe, tok), dataset_sample_spec(recipe, registry));
  feed.dp = dp;
  feed.dp_rank = layout.data_rank;
}

// The model chunks of this pipeline rank, their parameters (initialised) and the gradient
// strategy over their gradients.
void TrainRun::create_model(int64_t vocab) {
  const int stages = place.total;
  for (size_t v = 0; v < place.stages.size(); ++v) ready_chunks.push_back({this, v});
  residency = session.grad_residency();
  // The step profile's per-layer times: a model that keeps everything anyway (no strategy
  // residency) is asked to announce its layers (NOTIFY), on one pipeline stage of one chunk,
  // where the units are the whole model's layers.
  const bool announce = timer && residency == LOOM_RESIDENCY_NONE && stages == 1;
  for (size_t v = 0; v < place.stages.size(); ++v) {
    loom_model_create_args margs = model_create_args(recipe, vocab, place.stages[v], stages);
    margs.residency = announce ? LOOM_RESIDENCY_NOTIFY : residency;
    margs.unit_needed = &TrainRun::on_unit_needed;
    margs.unit_grads = &TrainRun::on_unit_grads;
    margs.residency_user = &ready_chunks[v];
    margs.grad_ready = &TrainRun::on_grad_ready;
    margs.grad_ready_user = &ready_chunks[v];
    auto [api, m] = v == 0 ? session.model(margs) : session.model_chunk(margs);
    mapi = api;
    chunks.push_back(m);
  }
  check_model_residency(recipe, mapi, residency);
  // Every ABI 2 model is driven through its stages (a whole model is stage 0 of 1).
  if (!mapi->stage_info || !mapi->stage_forward || !mapi->stage_backward || !mapi->finish_grads)
    throw UsageError("model/" + recipe.plugin("model") +
                     " leaves a stage slot NULL (stage_info, stage_forward, stage_backward, "
                     "finish_grads): ABI 2 drives every model through its stages");

  for (loom_model* m : chunks) {
    grad_of.emplace_back();
    for (size_t i = 0; i < mapi->num_params(m); ++i) {
      loom_model_param p{};
      p.struct_size = LOOM_MODEL_PARAM_SIZE_V2_25;
      p.unit = -1;  // a model older than ABI 2.13 leaves it
      check(mapi->get_param(m, i, &p), "listing model parameters");
      check_param_groups(p, recipe.plugin("model"));
      if (p.frozen) frozen_params += loom_tensor_numel(p.value);
      if (p.adapter) adapters.insert(p.name);
      grad_of.back().push_back(p.buffer ? -1 : (int64_t)params.size());
      (p.buffer ? buffers : params).push_back(p);
    }
  }
  ready_count.assign(params.size(), 0);
  std::vector<int32_t> reduce_groups;
  const bool has_experts = std::any_of(params.begin(), params.end(), [](const auto& p) {
    return p.reduce_group == LOOM_GROUP_EXPERT_DATA;
  });
  if (layout.expert > 1 && !has_experts)
    throw UsageError("parallel.expert = " + std::to_string(layout.expert) + ": model/" +
                     recipe.plugin("model") +
                     " has no expert parameters to split (a mixture of experts has them)");
  std::vector<int32_t> units;
  for (const loom_model_param& p : params) {
    units.push_back(p.unit);
    reduce_groups.push_back(p.reduce_group);
    grads.push_back(p.grad);
    values.push_back(p.value);
    local_params += loom_tensor_numel(p.value);
  }
  for (loom_model* m : chunks)
    if (!walk_through)
      check(mapi->init_params(m, stream_seed(seed, "init")), "initialising parameters");
  // what the gradient plugin allocates on the backend (the distributed optimizer's flat
  // buffers; grad/ddp's buckets are host memory), for `loom validate --memory`
  loom_backend_info info{};
  info.struct_size = LOOM_BACKEND_INFO_SIZE_V2;
  check(be.api->get_info(be.self, &info), "backend info");
  const double before = (double)info.mem_in_use;
  const bool has_units = std::all_of(units.begin(), units.end(), [](int32_t u) { return u >= 0; });
  grad_strategy = session.grad(grads.data(), grads.size(), reduce_groups.data(),
                               has_units && chunks.size() == 1 ? units.data() : nullptr);
  check(be.api->get_info(be.self, &info), "backend info");
  grad_plugin_bytes = (double)info.mem_in_use - before;
}

// The optimizer steps whole parameters, or this rank's shards of them (ZeRO-1), in f32 main
// copies when the model computes in bf16/fp16 — of this rank's shards only when sharded
// (Megatron's 6 + 12/d bytes per parameter); they are cast into the model (then gathered)
// after each step.
void TrainRun::create_optimizer() {
  const auto [papi, par] = grad_strategy;
  const size_t nparams = params.size();
  sharded = papi->shard_params != nullptr;
  shards.resize(nparams);
  if (sharded) {
    for (auto& sh : shards) sh.struct_size = LOOM_PARAM_SHARD_SIZE_V2;
    check(papi->shard_params(par, values.data(), shards.data()), "sharding the optimizer");
  }
  // Under expert parallelism each expert-data group holds one expert rank's experts, its
  // replicas across data and context: the group's first rank counts them in the norm.
  int expert_data_rank = 0;
  if (layout.expert > 1 && !sharded)
    expert_data_rank = comm.api->group_rank(comm.self, session.group(LOOM_GROUP_EXPERT_DATA));
  std::vector<DLTensor*> mirrored = values;
  if (sharded)
    for (size_t i = 0; i < nparams; ++i) mirrored[i] = shards[i].param;
  main = std::make_unique<MainParams>(be, mirrored);
  main->from_model();
  std::vector<loom_opt_param> opt_params;
  for (size_t i = 0; i < nparams; ++i) {
    DLTensor* value = main->main(i);
    DLTensor* grad = sharded ? shards[i].grad : params[i].grad;
    if (loom_tensor_numel(value) == 0) continue;
    opt_params.push_back(
        {LOOM_OPT_PARAM_SIZE_V2, params[i].name, value, grad, params[i].weight_decay});
    // Replicas of a tensor-parallel group hold the same replicated tensor; a pipeline
    // duplicate (the tied embedding on the last stage) is its first stage's tensor.
    // Context-parallel replicas hold the same gradients after the reduction too (a sharded
    // optimizer's shards are distinct already); expert-parallel experts are counted by the
    // first rank of their expert-data group (squared_grad_norm sums them over the world).
    const bool expert = params[i].reduce_group == LOOM_GROUP_EXPERT_DATA;
    const bool first_replica =
        sharded || (expert && layout.expert > 1 ? expert_data_rank == 0 : layout.context_rank == 0);
    if ((params[i].tp_split_dim >= 0 || layout.tensor_rank == 0) && first_replica &&
        !params[i].pipeline_duplicate) {
      (expert ? expert_norm_grads : norm_grads).push_back(grad);
      (expert ? expert_norm_names : norm_names).push_back(params[i].name);
    }
  }
  optimizer = session.optimizer(opt_params.data(), opt_params.size());
}

// Bytes per parameter on this rank, measured, to set beside Megatron's table
// (docs/parallelism.md).
StateBytes TrainRun::state_bytes() const {
  const auto [oapi, opt] = optimizer;
  StateBytes b;
  // Under a residency the model keeps only what is in flight: the shards are the state.
  auto bytes = [](const DLTensor* t) {
    return (double)loom_tensor_numel(t) * loom_dtype_bytes(t->dtype);
  };
  for (size_t i = 0; i < values.size(); ++i) {
    b.values += bytes(residency == LOOM_RESIDENCY_PARAMS ? shards[i].param : values[i]);
    b.grads += bytes(residency != LOOM_RESIDENCY_NONE ? shards[i].grad : grads[i]);
  }
  for (size_t i = 0; i < oapi->num_state(opt); ++i) {
    const char* name = nullptr;
    DLTensor* t = nullptr;
    check(oapi->get_state(opt, i, &name, &t), "listing optimizer state");
    b.optimizer += (double)loom_tensor_numel(t) * loom_dtype_bytes(t->dtype);
  }
  b.main = main->bytes();
  for (const loom_model_param& p : buffers)
    b.values += (double)loom_tensor_numel(p.value) * loom_dtype_bytes(p.value->dtype);
  return b;
}

void TrainRun::report_memory() const {
  const auto [papi, par] = grad_strategy;
  const StateBytes b = state_bytes();
  // per parameter of the model: a frozen base's count too, so that LoRA's figure sets beside
  // a full finetune's
  const double n = (double)std::max<int64_t>(model_params(), 1);
  const double own = papi->bytes_per_param ? papi->bytes_per_param(par) : 0.0;
  if (frozen_params > 0)
    spdlog::info(
        "peft: {} trained adapter parameters, {} frozen (no gradient, no optimizer "
        "state) on this rank",
        local_params, frozen_params);
  spdlog::info(
      "memory per parameter on this rank: {:.2f} (param) + {:.2f} (grad) + {}{:.2f} "
      "(optimizer state) = {:.2f} bytes, plus {:.2f} of parallel/{} buffers",
      b.values / n, b.grads / n,
      main->mixed() ? fmt::format("{:.2f} (f32 main param) + ", b.main / n) : "", b.optimizer / n,
      (b.values + b.grads + b.optimizer + b.main) / n, own, recipe.get_string("parallel", "data"));
}

}  // namespace loom::engine
