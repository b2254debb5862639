// The training loop: micro-batches with gradient accumulation, data-parallel gradient
// reduction, clipping by global norm, the optimizer step, LR schedule, logging, metrics,
// evaluation and checkpoints.
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

// Sums `n` host doubles over every rank of the world (a no-op on one rank).
void sum_over_world(const loom_comm_ref& comm, double* values, int64_t n) {
  if (comm.api->world_size(comm.self) == 1) return;
  int64_t shape[1] = {n};
  DLTensor t{};
  t.data = values;
  t.device = {kDLCPU, 0};
  t.ndim = 1;
  t.dtype = loom_f64();
  t.shape = shape;
  check(comm.api->all_reduce(comm.self, nullptr, &t, LOOM_REDUCE_SUM), "summing over ranks");
}

std::string human_bytes(double b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", b, unit[u]);
  return buf;
}

}  // namespace

void run_training(Recipe& recipe, Registry& registry) {
  for (const char* key : {"tensor", "pipeline", "context", "expert", "virtual_stages"}) {
    int64_t v = recipe.get_int("parallel", key);
    if (v != 1)
      throw UsageError("parallel." + std::string(key) + " = " + std::to_string(v) +
                       ": this build trains at world size 1 (comm/single); model-parallel "
                       "degrees other than 1 are not available yet");
  }
  std::string dtype = recipe.get_string("precision", "dtype");
  if (dtype != "fp32")
    throw UsageError("precision.dtype = \"" + dtype +
                     "\": mixed precision is not available yet; use \"fp32\"");

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
  int64_t gbs = recipe.get_int("train", "global_batch_size");
  if (gbs == 0) gbs = mbs * world;
  if (gbs % (mbs * world) != 0)
    throw UsageError("train.global_batch_size = " + std::to_string(gbs) +
                     " is not a multiple of micro_batch_size (" + std::to_string(mbs) +
                     ") x data-parallel size (" + std::to_string(world) + ")");
  const int64_t num_micro = gbs / (mbs * world);

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

  loom_model_create_args margs{LOOM_MODEL_CREATE_ARGS_SIZE_V1, vocab, seq_len, mbs, loom_f32()};
  auto [mapi, model] = session.model(margs);
  const size_t nparams = mapi->num_params(model);
  std::vector<loom_model_param> params(nparams);
  std::vector<loom_opt_param> opt_params(nparams);
  std::vector<DLTensor*> grads(nparams);
  int64_t total_params = 0;
  for (size_t i = 0; i < nparams; ++i) {
    params[i].struct_size = LOOM_MODEL_PARAM_SIZE_V1;
    check(mapi->get_param(model, i, &params[i]), "listing model parameters");
    opt_params[i] = {LOOM_OPT_PARAM_SIZE_V1, params[i].name, params[i].value, params[i].grad,
                     params[i].weight_decay};
    grads[i] = params[i].grad;
    total_params += loom_tensor_numel(params[i].value);
  }
  check(mapi->init_params(model, stream_seed(seed, "init")), "initialising parameters");
  auto [oapi, opt] = session.optimizer(opt_params.data(), nparams);
  auto [papi, par] = session.parallel(grads.data(), grads.size());
  spdlog::info("model: {} parameters in {} tensors; {} micro-batches of {} x {} per step",
               total_params, nparams, num_micro, mbs, seq_len);

  // Resume.
  int64_t start_iter = 0, consumed = 0;
  std::string load_dir = recipe.get_string("checkpoint", "load");
  if (!load_dir.empty() && !resolve_checkpoint(load_dir).empty()) {
    Checkpoint ck = load_checkpoint(load_dir);
    std::string where = resolve_checkpoint(load_dir).string();
    for (auto& p : params) upload(be, ck.model, p.name, p.value, where);
    for (size_t i = 0; i < oapi->num_state(opt); ++i) {
      const char* name = nullptr;
      DLTensor* t = nullptr;
      check(oapi->get_state(opt, i, &name, &t), "listing optimizer state");
      upload(be, ck.optimizer, name, t, where);
    }
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

  // Data-parallel replicas hold the same model: rank 0 alone writes metrics and checkpoints.
  const bool writer = comm.api->world_rank(comm.self) == 0;
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
    for (auto& p : params) ck.model[p.name] = download(be, p.value);
    for (size_t i = 0; i < oapi->num_state(opt); ++i) {
      const char* name = nullptr;
      DLTensor* t = nullptr;
      check(oapi->get_state(opt, i, &name, &t), "listing optimizer state");
      ck.optimizer[name] = download(be, t);
    }
    save_checkpoint(save_dir, ck);
    spdlog::info("saved checkpoint {}/iter_{:07d}", save_dir, iteration);
  };

  loom_backend_info info{};
  info.struct_size = LOOM_BACKEND_INFO_SIZE_V1;
  check(be.api->get_info(be.self, &info), "backend info");
  const double flops_per_token = mapi->flops_per_token(model);
  const int rank = comm.api->world_rank(comm.self);
  Batch batch{std::vector<int32_t>((size_t)(mbs * seq_len)),
              std::vector<int32_t>((size_t)(mbs * seq_len))};

  auto fill = [&](Sampler& s, int64_t first) {
    for (int64_t b = 0; b < mbs; ++b)
      s.sample(first + b, batch.tokens.data() + b * seq_len, batch.targets.data() + b * seq_len);
  };
  auto evaluate = [&](int64_t k) {
    double loss = 0;
    int64_t count = 0;
    for (int64_t i = 0; i < eval_iters * num_micro; ++i) {
      fill(*valid, k * eval_iters * gbs + (i * world + rank) * mbs);
      loom_microbatch mb{
          LOOM_MICROBATCH_SIZE_V1, batch.tokens.data(), batch.targets.data(), mbs, seq_len, 0.0};
      double l = 0;
      int64_t n = 0;
      check(mapi->forward(model, &mb, &l, &n), "evaluation forward");
      loss += l;
      count += n;
    }
    double totals[2] = {loss, (double)count};
    sum_over_world(comm, totals, 2);
    loss = totals[0];
    count = (int64_t)totals[1];
    return loss / (double)std::max<int64_t>(count, 1);
  };

  spdlog::info("training {} iterations from {} (global batch {} samples, lr {} {} -> {})", iters,
               start_iter, gbs, lr.kind, lr.max, lr.min);
  for (int64_t it = start_iter; it < iters; ++it) {
    auto t0 = std::chrono::steady_clock::now();
    check(mapi->zero_grad(model), "zero_grad");
    const double step_tokens = (double)(gbs * seq_len);
    // Each rank scales by its own token count; the data-parallel reduction averages over
    // ranks, so the gradient is d(mean token loss over the global batch)/dθ.
    const double rank_tokens = (double)(num_micro * mbs * seq_len);
    double loss_sum = 0;
    int64_t tokens = 0;
    for (int64_t m = 0; m < num_micro; ++m) {
      // Data-parallel rank r takes samples r*mbs .. of each block of world*mbs.
      fill(train, consumed + (m * world + rank) * mbs);
      loom_microbatch mb{
          LOOM_MICROBATCH_SIZE_V1, batch.tokens.data(), batch.targets.data(), mbs, seq_len,
          1.0 / rank_tokens};
      double l = 0;
      int64_t n = 0;
      check(mapi->forward_backward(model, &mb, &l, &n), "forward/backward");
      loss_sum += l;
      tokens += n;
    }
    consumed += gbs;
    check(papi->reduce_gradients(par), "reducing gradients");
    double totals[2] = {loss_sum, (double)tokens};  // the global batch's, for the log
    sum_over_world(comm, totals, 2);
    loss_sum = totals[0];
    tokens = (int64_t)totals[1];
    double sq = 0;
    for (DLTensor* g : grads) {
      double s = 0;
      check(be.api->ops->sum_squares(be.self, g, &s), "gradient norm");
      sq += s;
    }
    const double grad_norm = std::sqrt(sq);
    if (!std::isfinite(grad_norm))
      throw RunError("iteration " + std::to_string(it + 1) +
                     ": gradient norm is not finite (loss " + std::to_string(loss_sum / tokens) +
                     "); lower lr.max or check the data");
    double scale = 1.0;
    if (grad_clip > 0 && grad_norm > grad_clip) scale = grad_clip / (grad_norm + 1e-6);
    const double cur_lr = lr.at(it);
    loom_opt_step_args step{LOOM_OPT_STEP_ARGS_SIZE_V1, cur_lr, it + 1, scale};
    check(oapi->step(opt, &step), "optimizer step");
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
    if (writer && !save_dir.empty() &&
        ((save_interval > 0 && iter % save_interval == 0) || iter == iters))
      save(iter);
  }
  if (!save_dir.empty() && start_iter >= iters)
    spdlog::info("nothing to train: checkpoint is at iteration {} of {}", start_iter, iters);
}

}  // namespace loom::engine
