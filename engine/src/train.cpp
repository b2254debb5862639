// The training loop: micro-batches through the pipeline schedule (gradient accumulation),
// the model's own gradient completion, data-parallel gradient reduction, clipping by global
// norm, the optimizer step, LR schedule, logging, metrics, evaluation and checkpoints.
#include "train.hpp"

#include <spdlog/spdlog.h>

#include <array>
#include <chrono>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "checkpoint.hpp"
#include "errors.hpp"
#include "host.hpp"
#include "parallel_layout.hpp"
#include "precision.hpp"
#include "sampler.hpp"
#include "schedule.hpp"

namespace fs = std::filesystem;

namespace loom::engine {
namespace {

std::string st_dtype(DLDataType d) {
  if (d.code == kDLFloat && d.bits == 32) return "F32";
  if (d.code == kDLFloat && d.bits == 64) return "F64";
  if (d.code == kDLFloat && d.bits == 16) return "F16";
  if (d.code == kDLBfloat && d.bits == 16) return "BF16";
  if (d.code == kDLInt && d.bits == 32) return "I32";
  throw RunError("tensor dtype not storable in a checkpoint");
}

// A named device tensor as checkpoint data, and back.
StTensor download(const loom_backend_ref& be, const DLTensor* t) {
  StTensor s;
  s.dtype = st_dtype(t->dtype);
  s.shape.assign(t->shape, t->shape + t->ndim);
  s.data.resize((size_t)loom_tensor_numel(t) * loom_dtype_bytes(t->dtype));
  check(be.api->to_host(be.self, t, s.data.data(), s.data.size()), "reading a tensor");
  return s;
}

// An f32 backend tensor of t's shape, freed with the object: the staging of a bf16/f16
// tensor's checkpoint data, which is always f32.
struct WideCopy {
  const loom_backend_ref& be;
  DLTensor* t = nullptr;
  WideCopy(const loom_backend_ref& b, const DLTensor* like) : be(b) {
    check(be.api->alloc_tensor(be.self, loom_f32(), like->ndim, like->shape, &t),
          "widening a tensor");
  }
  ~WideCopy() { be.api->free_tensor(be.self, t); }
  WideCopy(const WideCopy&) = delete;
  WideCopy& operator=(const WideCopy&) = delete;
};

// A tensor as f32 checkpoint data: bf16/f16 values are widened exactly.
StTensor download_f32(const loom_backend_ref& be, const DLTensor* t) {
  if (is_wide(t->dtype)) return download(be, t);
  WideCopy wide(be, t);
  check(be.api->ops->copy(be.self, wide.t, t), "widening a tensor");
  return download(be, wide.t);
}

void upload(const loom_backend_ref& be, const StFile& file, const std::string& name, DLTensor* t,
            const std::string& where);

// upload into a bf16/f16 tensor from f32 checkpoint data (values saved by download_f32).
void upload_cast(const loom_backend_ref& be, const StFile& file, const std::string& name,
                 DLTensor* t, const std::string& where) {
  if (is_wide(t->dtype)) return upload(be, file, name, t, where);
  WideCopy wide(be, t);
  upload(be, file, name, wide.t, where);
  check(be.api->ops->copy(be.self, t, wide.t), "loading " + name);
}

void upload(const loom_backend_ref& be, const StFile& file, const std::string& name, DLTensor* t,
            const std::string& where) {
  auto it = file.find(name);
  if (it == file.end()) throw RunError(where + ": no tensor '" + name + "'");
  const StTensor& s = it->second;
  std::vector<int64_t> shape(t->shape, t->shape + t->ndim);
  if (s.dtype != st_dtype(t->dtype) || s.shape != shape)
    throw RunError(where + ": tensor '" + name + "' has dtype/shape " + s.dtype +
                   " that does not match the model's (a different model configuration?)");
  check(be.api->from_host(be.self, t, s.data.data(), s.data.size()), "loading " + name);
}

struct Batch {
  std::vector<int32_t> tokens, targets;
};

// Sums `n` host doubles over the ranks of `group` (NULL: the world; a no-op on one rank).
void sum_over(const loom_comm_ref& comm, loom_comm_group* group, double* values, int64_t n) {
  if (comm.api->world_size(comm.self) == 1) return;
  if (group && comm.api->group_size(comm.self, group) == 1) return;
  int64_t shape[1] = {n};
  DLTensor t{};
  t.data = values;
  t.device = {kDLCPU, 0};
  t.ndim = 1;
  t.dtype = loom_f64();
  t.shape = shape;
  check(comm.api->all_reduce(comm.self, group, &t, LOOM_REDUCE_SUM), "summing over ranks");
}

std::string human_bytes(double b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", b, unit[u]);
  return buf;
}

// Where a rank's parameter sits in the full tensor, for the checkpoint metadata that lets
// `merge_model` (and later a resharding load) put shards together.
nlohmann::json shard_entry(const loom_model_param& p, const loom_parallel_layout& l) {
  std::vector<int64_t> shape(p.value->shape, p.value->shape + p.value->ndim);
  const int d = p.tp_split_dim;
  nlohmann::json e = {
      {"split_dim", l.tensor > 1 ? d : -1}, {"tp_rank", l.tensor_rank}, {"tp_size", l.tensor}};
  if (l.tensor > 1 && d >= 0) {
    shape[d] *= l.tensor;
    std::vector<int64_t> blocks;
    if (p.tp_num_blocks > 1)
      blocks.assign(p.tp_block_sizes, p.tp_block_sizes + p.tp_num_blocks);
    else
      blocks = {shape[d]};
    e["blocks"] = blocks;
  }
  e["shape"] = shape;
  return e;
}

// State the pipeline schedule's get_microbatch callback reads.
struct Feed {
  Sampler* sampler = nullptr;
  int64_t first = 0;  // sample index of micro-batch 0 of data-parallel rank 0
  int64_t mbs = 0, seq_len = 0, dp = 1, dp_rank = 0;
  double loss_scale = 0;
  std::vector<int32_t> tokens, targets;

  static loom_error* get(void* user, int64_t i, loom_microbatch* out) {
    auto* f = static_cast<Feed*>(user);
    try {
      // Data-parallel rank r takes samples r*mbs .. of each block of dp*mbs.
      const int64_t base = f->first + (i * f->dp + f->dp_rank) * f->mbs;
      for (int64_t b = 0; b < f->mbs; ++b)
        f->sampler->sample(base + b, f->tokens.data() + b * f->seq_len,
                           f->targets.data() + b * f->seq_len);
    } catch (const std::exception& e) {
      return host_abi::error_new(LOOM_ERR_IO, e.what());
    }
    *out = loom_microbatch{LOOM_MICROBATCH_SIZE_V1,
                           f->tokens.data(),
                           f->targets.data(),
                           f->mbs,
                           f->seq_len,
                           f->loss_scale};
    return nullptr;
  }
};

}  // namespace

void run_training(Recipe& recipe, Registry& registry) {
  for (const char* key : {"context", "expert"}) {
    int64_t v = recipe.get_int("parallel", key);
    if (v != 1)
      throw UsageError("parallel." + std::string(key) + " = " + std::to_string(v) +
                       ": context and expert parallelism are not available yet; use 1");
  }
  const DLDataType compute = compute_dtype(recipe.get_string("precision", "dtype"));
  LossScaler scaler = LossScaler::from_recipe(recipe);

  const uint64_t seed = (uint64_t)recipe.get_int("train", "seed");
  const int64_t iters = recipe.get_int("train", "iters");
  const int64_t seq_len = recipe.get_int("train", "seq_len");
  const int64_t mbs = recipe.get_int("train", "micro_batch_size");
  const int64_t log_interval = recipe.get_int("train", "log_interval");
  const int64_t eval_interval = recipe.get_int("train", "eval_interval");
  const int64_t eval_iters = recipe.get_int("train", "eval_iters");
  const double grad_clip = recipe.get_float("train", "grad_clip");

  Session session(recipe, registry);
  loom_comm_ref comm = session.comm();
  const int world = comm.api->world_size(comm.self);
  const int rank = comm.api->world_rank(comm.self);
  const loom_parallel_layout L = session.layout();  // checks the layout, makes the groups
  const int64_t dp = L.data;
  int64_t gbs = recipe.get_int("train", "global_batch_size");
  if (gbs == 0) gbs = mbs * dp;
  const int64_t num_micro = microbatches_per_step(recipe, (int)dp);
  if (rank == 0) {
    std::string text = describe_layout(recipe, world);
    if (world > 1) spdlog::info("{}", text.substr(0, text.find('\n')));
  }

  loom_backend_ref be = session.backend();
  loom_tokenizer_ref tok = session.tokenizer();
  const int64_t vocab = tok.api->vocab_size(tok.self);
  // Megatron's GPT dataset: samples wanted per split decide epochs and index arrays. The
  // loop reads train samples from `consumed` on, and evaluation k (0, 1, ...) reads valid
  // samples [k, k+1) x eval_iters x global batch, so both resume from the iteration alone.
  std::array<int64_t, 3> wanted = samples_wanted(iters, gbs, eval_interval, eval_iters);
  wanted[kTest] = 0;  // the loop does not test
  auto samplers = build_samplers(recipe, session, wanted, seq_len);
  if (!samplers[kTrain])
    throw RunError("the training split is empty (data.split = \"" +
                   recipe.get_string("data", "split") + "\")");
  Sampler& train = *samplers[kTrain];
  Sampler* valid = samplers[kValid].get();

  // The model: one chunk per virtual stage of this pipeline rank.
  const int stages = L.pipeline * L.virtual_stages;
  const loom_model_api* mapi = nullptr;
  std::vector<loom_model*> chunks;
  for (int v = 0; v < L.virtual_stages; ++v) {
    loom_model_create_args margs{LOOM_MODEL_CREATE_ARGS_SIZE_V1_1, vocab, seq_len, mbs, compute,
                                 v * L.pipeline + L.pipeline_rank, stages};
    auto [api, m] = v == 0 ? session.model(margs) : session.model_chunk(margs);
    mapi = api;
    chunks.push_back(m);
  }
  const bool staged = mapi->struct_size >= LOOM_MODEL_API_SIZE_V1_1 && mapi->stage_forward;
  if (!staged && (stages > 1 || L.tensor > 1))
    throw UsageError("model/" + recipe.plugin("model") +
                     " has no pipeline-stage API (ABI 1.1); it trains at tensor = pipeline = 1");

  std::vector<loom_model_param> params;
  for (loom_model* m : chunks)
    for (size_t i = 0; i < mapi->num_params(m); ++i) {
      loom_model_param p{};
      p.struct_size = LOOM_MODEL_PARAM_SIZE_V1_1;
      check(mapi->get_param(m, i, &p), "listing model parameters");
      if (p.struct_size < LOOM_MODEL_PARAM_SIZE_V1_1) p.tp_num_blocks = 0, p.pipeline_duplicate = 0;
      params.push_back(p);
    }
  const size_t nparams = params.size();
  std::vector<DLTensor*> grads(nparams), values(nparams);
  int64_t local_params = 0;
  for (size_t i = 0; i < nparams; ++i) {
    grads[i] = params[i].grad;
    values[i] = params[i].value;
    local_params += loom_tensor_numel(params[i].value);
  }
  for (loom_model* m : chunks)
    check(mapi->init_params(m, stream_seed(seed, "init")), "initialising parameters");
  // f32 main parameters when the model computes in bf16/fp16: the optimizer steps these.
  auto [papi, par] = session.parallel(grads.data(), grads.size());
  const bool v11 = papi->struct_size >= LOOM_PARALLEL_API_SIZE_V1_1;

  // The optimizer steps whole parameters, or this rank's shards of them (ZeRO-1).
  std::vector<loom_opt_param> opt_params;
  std::vector<const DLTensor*> norm_grads;  // gradients of the norm, each counted once
  const bool sharded = v11 && papi->shard_params;
  std::vector<loom_param_shard> shards(nparams);
  if (sharded) {
    for (auto& sh : shards) sh.struct_size = LOOM_PARAM_SHARD_SIZE_V1_1;
    check(papi->shard_params(par, values.data(), shards.data()), "sharding the optimizer");
  }
  // f32 main parameters when the model computes in bf16/fp16 — of this rank's shards only
  // when the optimizer is sharded (Megatron's 6 + 12/d bytes per parameter): the optimizer
  // steps these, and they are cast into the model (then gathered) after each step.
  std::vector<DLTensor*> mirrored = values;
  if (sharded)
    for (size_t i = 0; i < nparams; ++i) mirrored[i] = shards[i].param;
  MainParams main(be, mirrored);
  main.from_model();
  for (size_t i = 0; i < nparams; ++i) {
    DLTensor* value = main.main(i);
    DLTensor* grad = sharded ? shards[i].grad : params[i].grad;
    if (loom_tensor_numel(value) == 0) continue;
    opt_params.push_back(
        {LOOM_OPT_PARAM_SIZE_V1, params[i].name, value, grad, params[i].weight_decay});
    // Replicas of a tensor-parallel group hold the same replicated tensor; a pipeline
    // duplicate (the tied embedding on the last stage) is its first stage's tensor.
    if ((params[i].tp_split_dim >= 0 || L.tensor_rank == 0) && !params[i].pipeline_duplicate)
      norm_grads.push_back(grad);
  }
  auto [oapi, opt] = session.optimizer(opt_params.data(), opt_params.size());
  {  // measured, to set beside Megatron's table (docs/parallelism.md)
    double value_bytes = 0, state_bytes = 0;
    for (size_t i = 0; i < nparams; ++i)
      value_bytes += (double)loom_tensor_numel(values[i]) * loom_dtype_bytes(values[i]->dtype);
    for (size_t i = 0; i < oapi->num_state(opt); ++i) {
      const char* name = nullptr;
      DLTensor* t = nullptr;
      check(oapi->get_state(opt, i, &name, &t), "listing optimizer state");
      state_bytes += (double)loom_tensor_numel(t) * loom_dtype_bytes(t->dtype);
    }
    const double n = (double)std::max<int64_t>(local_params, 1);
    const double own = v11 && papi->bytes_per_param ? papi->bytes_per_param(par) : 0.0;
    double grad_bytes = 0;
    for (size_t i = 0; i < nparams; ++i)
      grad_bytes += (double)loom_tensor_numel(grads[i]) * loom_dtype_bytes(grads[i]->dtype);
    const double main_bytes = main.bytes() / n;
    spdlog::info(
        "memory per parameter on this rank: {:.2f} (param) + {:.2f} (grad) + {}{:.2f} "
        "(optimizer state) = {:.2f} bytes, plus {:.2f} of parallel/{} buffers",
        value_bytes / n, grad_bytes / n,
        main.mixed() ? fmt::format("{:.2f} (f32 main param) + ", main_bytes) : "", state_bytes / n,
        (value_bytes + grad_bytes + state_bytes) / n + main_bytes, own,
        recipe.get_string("parallel", "data"));
  }
  std::pair<const loom_parallel_api*, loom_parallel*> sched{nullptr, nullptr};
  if (staged) sched = session.schedule();
  // The squared gradient norm is summed over the model-parallel ranks, and over the
  // data-parallel ranks too when each holds a different shard.
  loom_comm_group* norm_group = sharded ? nullptr : session.group(LOOM_GROUP_MODEL);
  loom_comm_group* data_group = session.group(LOOM_GROUP_DATA_CONTEXT);
  {
    double counts[1] = {(double)local_params};
    sum_over(comm, session.group(LOOM_GROUP_MODEL), counts, 1);
    spdlog::info(
        "model: {} parameters on this rank ({} tensors, {} in the model-parallel "
        "group); {} micro-batches of {} x {} per step",
        local_params, nparams, (int64_t)counts[0], num_micro, mbs, seq_len);
  }

  // Resume. Each rank reads its own files.
  const bool model_parallel = L.tensor * L.pipeline > 1;
  auto rank_tag = [&] {
    char buf[64];
    std::snprintf(buf, sizeof buf, "-tp%02d-pp%03d", L.tensor_rank, L.pipeline_rank);
    return std::string(buf);
  };
  const std::string model_file =
      model_parallel ? "model" + rank_tag() + ".safetensors" : "model.safetensors";
  std::string opt_file = model_parallel ? "optimizer" + rank_tag() : "optimizer";
  if (sharded && dp > 1) opt_file += "-dp" + std::to_string(L.data_rank);
  opt_file += ".safetensors";
  // Replicas of a data-parallel group write nothing their group's rank 0 writes.
  const bool writes_model = L.data_rank == 0 && L.context_rank == 0;
  const bool writes_opt = writes_model || sharded;

  int64_t start_iter = 0, consumed = 0;
  int64_t opt_steps = 0;  // steps the optimizer took: iterations less fp16's skipped ones
  std::string load_dir = recipe.get_string("checkpoint", "load");
  if (!load_dir.empty() && !resolve_checkpoint(load_dir).empty()) {
    Checkpoint ck = load_checkpoint(load_dir, model_file, opt_file);
    std::string where = resolve_checkpoint(load_dir).string();
    // The model file holds f32 main parameters, or (sharded optimizer) the model's values in
    // f32, with the main shards in this rank's optimizer file.
    for (size_t i = 0; i < nparams; ++i) {
      if (sharded && main.main(i) != shards[i].param)  // every rank's own, duplicates too
        upload(be, ck.optimizer, std::string("main.") + params[i].name, main.main(i), where);
      if (params[i].pipeline_duplicate) continue;
      if (sharded)
        upload_cast(be, ck.model, params[i].name, params[i].value, where);
      else
        upload(be, ck.model, params[i].name, main.main(i), where);
    }
    for (size_t i = 0; i < oapi->num_state(opt); ++i) {
      const char* name = nullptr;
      DLTensor* t = nullptr;
      check(oapi->get_state(opt, i, &name, &t), "listing optimizer state");
      upload(be, ck.optimizer, name, t, where);
    }
    // The tied embedding's copy on the last stage follows its first-stage tensor.
    if (L.pipeline > 1)
      for (size_t i = 0; i < nparams; ++i)
        if (std::string(params[i].name) == "wte") {
          DLTensor t = *(sharded ? params[i].value : main.main(i));
          loom_comm_group* g = session.group(LOOM_GROUP_EMBEDDING);
          if (comm.api->group_size(comm.self, g) > 1)
            check(comm.api->broadcast(comm.self, g, &t, 0), "syncing the tied embedding");
        }
    if (!sharded) main.to_model();
    scaler.load(ck.state);
    auto taken = ck.state.find("optimizer_steps");
    opt_steps = taken != ck.state.end() ? (int64_t)taken->second : ck.iteration;
    start_iter = ck.iteration;
    consumed = ck.consumed_samples;
    spdlog::info("resumed from {} at iteration {} ({} samples consumed)", where, start_iter,
                 consumed);
  } else if (!load_dir.empty()) {
    spdlog::warn("checkpoint.load = \"{}\" holds no checkpoint yet; starting from scratch",
                 load_dir);
  }

  LrSchedule lr;
  lr.kind = recipe.get_string("lr", "schedule");
  lr.max = recipe.get_float("lr", "max");
  lr.min = recipe.get_float("lr", "min");
  lr.warmup = recipe.get_int("lr", "warmup_iters");
  lr.decay_iters = recipe.get_int("lr", "decay_iters");
  if (lr.decay_iters == 0) lr.decay_iters = iters;
  lr.wsd_decay_fraction = recipe.get_float("lr", "wsd_decay_fraction");

  // World rank 0 (first stage, first replica) writes the metrics; losses reach it through
  // the schedule's sum over the pipeline group and the sum over the data-parallel group.
  const bool writer = rank == 0;
  std::ofstream metrics;
  std::string metrics_path = recipe.get_string("train", "metrics");
  if (!metrics_path.empty() && writer) {
    if (fs::path(metrics_path).has_parent_path())
      fs::create_directories(fs::path(metrics_path).parent_path());
    metrics.open(metrics_path, start_iter > 0 ? std::ios::app : std::ios::trunc);
    if (!metrics) throw RunError("cannot write metrics file " + metrics_path);
  }

  std::string save_dir = recipe.get_string("checkpoint", "save");
  int64_t save_interval = recipe.get_int("checkpoint", "interval");
  auto save = [&](int64_t iteration) {
    Checkpoint ck;
    ck.iteration = iteration;
    ck.consumed_samples = consumed;
    ck.seed = seed;
    ck.recipe_toml = recipe.to_toml();
    ck.parallel = {{"tensor", L.tensor},
                   {"pipeline", L.pipeline},
                   {"virtual_stages", L.virtual_stages},
                   {"data", L.data},
                   {"sharded_optimizer", sharded ? 1 : 0}};
    ck.model_file = writes_model ? model_file : "";
    ck.optimizer_file = writes_opt ? opt_file : "";
    nlohmann::json entries = nlohmann::json::object();
    for (size_t i = 0; i < nparams; ++i) {
      if (sharded && main.main(i) != shards[i].param)
        ck.optimizer[std::string("main.") + params[i].name] = download(be, main.main(i));
      if (params[i].pipeline_duplicate) continue;
      ck.model[params[i].name] = download_f32(be, sharded ? params[i].value : main.main(i));
      entries[params[i].name] = shard_entry(params[i], L);
    }
    if (scaler.dynamic) ck.state = scaler.state();
    ck.state["optimizer_steps"] = (double)opt_steps;
    ck.model_meta["loom.shards"] = entries.dump();
    nlohmann::json opt_entries = nlohmann::json::object();
    for (size_t i = 0; i < oapi->num_state(opt); ++i) {
      const char* name = nullptr;
      DLTensor* t = nullptr;
      check(oapi->get_state(opt, i, &name, &t), "listing optimizer state");
      ck.optimizer[name] = download(be, t);
    }
    if (sharded) {  // flat offsets of each parameter's shard, for resharding
      for (size_t i = 0; i < nparams; ++i)
        if (loom_tensor_numel(shards[i].param) > 0)
          opt_entries[params[i].name] = {{"flat_offset", shards[i].offset},
                                         {"numel", loom_tensor_numel(shards[i].param)},
                                         {"param", shard_entry(params[i], L)}};
      ck.optimizer_meta["loom.shards"] = opt_entries.dump();
    }
    Collective coll;
    coll.leader = rank == 0;
    coll.barrier = [&] {
      if (world > 1) check(comm.api->barrier(comm.self, nullptr), "checkpoint barrier");
    };
    save_checkpoint(save_dir, ck, coll);
    spdlog::info("saved checkpoint {}/iter_{:07d}", save_dir, iteration);
  };

  loom_backend_info info{};
  info.struct_size = LOOM_BACKEND_INFO_SIZE_V1;
  check(be.api->get_info(be.self, &info), "backend info");
  const double flops_per_token = mapi->flops_per_token(chunks[0]);
  Feed feed;
  feed.mbs = mbs;
  feed.seq_len = seq_len;
  feed.dp = dp;
  feed.dp_rank = L.data_rank;
  feed.tokens.resize((size_t)(mbs * seq_len));
  feed.targets.resize((size_t)(mbs * seq_len));

  // Runs `micro` micro-batches from feed.first through the schedule (or, for a model
  // without the stage API, one forward(_backward) each); returns {loss sum, tokens} over
  // the pipeline.
  auto run_micro = [&](int64_t micro, bool forward_only) -> std::pair<double, int64_t> {
    if (sched.second) {
      loom_pipeline_args a{};
      a.struct_size = LOOM_PIPELINE_ARGS_SIZE_V1_1;
      a.model_api = mapi;
      a.chunks = chunks.data();
      a.num_chunks = chunks.size();
      a.num_microbatches = micro;
      a.get_microbatch = &Feed::get;
      a.user = &feed;
      a.forward_only = forward_only ? 1 : 0;
      check(sched.first->run_pipeline(sched.second, &a), "pipeline schedule");
      return {a.loss_sum, a.tokens};
    }
    double loss = 0;
    int64_t count = 0;
    for (int64_t m = 0; m < micro; ++m) {
      loom_microbatch mb{};
      check(Feed::get(&feed, m, &mb), "reading a micro-batch");
      double l = 0;
      int64_t n = 0;
      if (forward_only)
        check(mapi->forward(chunks[0], &mb, &l, &n), "evaluation forward");
      else
        check(mapi->forward_backward(chunks[0], &mb, &l, &n), "forward/backward");
      loss += l;
      count += n;
    }
    return {loss, count};
  };

  auto evaluate = [&](int64_t k) {
    feed.sampler = valid;
    feed.first = k * eval_iters * gbs;
    feed.loss_scale = 0.0;
    auto [loss, count] = run_micro(eval_iters * num_micro, true);
    double totals[2] = {loss, (double)count};
    sum_over(comm, data_group, totals, 2);
    return totals[0] / std::max(totals[1], 1.0);
  };

  spdlog::info("training {} iterations from {} (global batch {} samples, lr {} {} -> {})", iters,
               start_iter, gbs, lr.kind, lr.max, lr.min);
  for (int64_t it = start_iter; it < iters; ++it) {
    auto t0 = std::chrono::steady_clock::now();
    for (loom_model* m : chunks) check(mapi->zero_grad(m), "zero_grad");
    const double step_tokens = (double)(gbs * seq_len);
    // Each rank scales by its own token count; the data-parallel reduction averages over
    // ranks, so the gradient is d(mean token loss over the global batch)/dθ.
    feed.sampler = &train;
    feed.first = consumed;
    feed.loss_scale = scaler.scale / (double)(num_micro * mbs * seq_len);
    auto [loss_sum, tokens] = run_micro(num_micro, false);
    consumed += gbs;
    if (staged)
      for (loom_model* m : chunks) check(mapi->finish_grads(m), "completing gradients");
    check(papi->reduce_gradients(par), "reducing gradients");
    double totals[2] = {loss_sum, (double)tokens};  // the global batch's, for the log
    sum_over(comm, data_group, totals, 2);
    loss_sum = totals[0];
    tokens = (int64_t)totals[1];
    double sq = 0;
    for (const DLTensor* g : norm_grads) {
      double s = 0;
      check(be.api->ops->sum_squares(be.self, g, &s), "gradient norm");
      sq += s;
    }
    sum_over(comm, norm_group, &sq, 1);
    // Gradients carry the loss scale (1 unless fp16): the norm is of the unscaled ones.
    const double used_scale = scaler.scale;
    const double grad_norm = std::sqrt(sq) / used_scale;
    const bool finite = std::isfinite(grad_norm);
    const bool stepped = scaler.update(finite);
    if (!finite && !scaler.dynamic)
      throw RunError("iteration " + std::to_string(it + 1) +
                     ": gradient norm is not finite (loss " + std::to_string(loss_sum / tokens) +
                     "); lower lr.max or check the data");
    const double cur_lr = lr.at(it);
    if (stepped) {
      double scale = 1.0 / used_scale;
      if (grad_clip > 0 && grad_norm > grad_clip) scale *= grad_clip / (grad_norm + 1e-6);
      loom_opt_step_args step{LOOM_OPT_STEP_ARGS_SIZE_V1, cur_lr, ++opt_steps, scale};
      check(oapi->step(opt, &step), "optimizer step");
      main.to_model();  // (sharded: this rank's slices of the values, gathered next)
      if (v11 && papi->after_step) check(papi->after_step(par), "gathering updated parameters");
    } else {
      spdlog::warn(
          "iteration {}: gradients overflowed at loss scale {:g}; step skipped, scale "
          "now {:g}",
          it + 1, used_scale, scaler.scale);
    }
    check(be.api->synchronize(be.self), "synchronize");
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double loss = loss_sum / (double)std::max<int64_t>(tokens, 1);
    const double tps = step_tokens / secs;
    const double mfu =
        info.peak_gflops > 0 ? flops_per_token * tps / (info.peak_gflops * 1e9 * world) : 0.0;
    check(be.api->get_info(be.self, &info), "backend info");
    const int64_t iter = it + 1;
    if (metrics.is_open()) {
      nlohmann::json line = {{"iter", iter},
                             {"loss", loss},
                             {"lr", cur_lr},
                             {"grad_norm", grad_norm},
                             {"tokens_per_s", tps},
                             {"mfu", mfu},
                             {"mem_bytes", info.mem_peak},
                             {"skipped", !stepped},
                             {"loss_scale", used_scale},
                             {"step_s", secs}};
      metrics << line.dump() << "\n" << std::flush;
    }
    if (iter % log_interval == 0 || iter == start_iter + 1 || iter == iters)
      spdlog::info(
          "iter {:>6}/{} | loss {:.4f} | lr {:.3e} | grad_norm {:.3f} | {:.0f} tok/s | "
          "mfu {:.1f}% | mem {}",
          iter, iters, loss, cur_lr, grad_norm, tps, 100 * mfu, human_bytes((double)info.mem_peak));
    if (valid && eval_interval > 0 && (iter % eval_interval == 0 || iter == iters)) {
      double el = evaluate((iter - 1) / eval_interval);
      spdlog::info("iter {:>6}/{} | eval_loss {:.4f} | eval ppl {:.2f}", iter, iters, el,
                   std::exp(el));
      if (metrics.is_open())
        metrics << nlohmann::json{{"iter", iter}, {"eval_loss", el}}.dump() << "\n" << std::flush;
    }
    if (!save_dir.empty() && ((save_interval > 0 && iter % save_interval == 0) || iter == iters))
      save(iter);
  }
  if (!save_dir.empty() && start_iter >= iters)
    spdlog::info("nothing to train: checkpoint is at iteration {} of {}", start_iter, iters);
}

}  // namespace loom::engine
