// The training loop: one iteration is train_step below — every micro-batch through the
// pipeline schedule (gradient accumulation), the model's own gradient completion, the
// data-parallel gradient reduction, clipping by global norm and the optimizer step. The run
// around it (set-up, checkpoints, metrics) is TrainRun's, in train_run.hpp.
#include "train/train.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <utility>

#include "base/errors.hpp"
#include "base/mfu.hpp"
#include "loom/cpp/clip.hpp"
#include "loom/cpp/tensor.hpp"
#include "session/comm_watch.hpp"
#include "session/step_timer.hpp"
#include "train/train_graph.hpp"
#include "train/train_norm.hpp"
#include "train/train_run.hpp"
#include "train/train_stop.hpp"

namespace loom::engine {
namespace {

// The loss terms summed over the data-parallel ranks (their sums and counts), in place.
void sum_terms(TrainRun& r, std::vector<LossTerm>& terms) {
  std::vector<double> sums;
  for (const LossTerm& t : terms) sums.insert(sums.end(), {t.sum, t.count});
  sum_over(r.be, r.comm, r.data_group, sums.data(), (int64_t)sums.size());
  for (size_t i = 0; i < terms.size(); ++i) {
    terms[i].sum = sums[2 * i];
    terms[i].count = sums[2 * i + 1];
  }
}

// Runs `micro` micro-batches from r.feed.first through the schedule; returns the loss terms
// summed over them and over the data-parallel ranks. device_losses: the model may keep sums
// in r.device_sums (loom.device-losses/1), and the terms are this rank's host parts alone,
// summed over the ranks once the rest is read (finish_reads).
std::vector<LossTerm> run_micro(TrainRun& r, int64_t micro, bool forward_only,
                                bool device_losses = false) {
  r.feed.prepare(micro);  // DPO's rows for each micro-batch
  const loom_schedule_args a =
      r.run_schedule(micro, forward_only, r.feed.loss_scale, &Feed::get, &r.feed, device_losses);
  if (a.num_losses == 0 || a.losses == nullptr)
    throw RunError("schedule/" + r.recipe.plugin("schedule") + " reported no loss terms");
  if (device_losses && (int64_t)a.num_losses > r.loss_terms)
    throw RunError("schedule/" + r.recipe.plugin("schedule") + " reported " +
                   std::to_string(a.num_losses) + " loss terms; stage_info listed " +
                   std::to_string(r.loss_terms));
  std::vector<LossTerm> terms;
  for (size_t i = 0; i < a.num_losses; ++i)
    terms.push_back({a.losses[i].name, a.losses[i].sum, a.losses[i].count, a.losses[i].weight});
  if (!device_losses) sum_terms(r, terms);
  return terms;
}

// The step's losses for the log: the main term, then the others by kind.
void set_losses(StepStats& s, const std::vector<LossTerm>& losses) {
  s.loss = losses[0].mean();
  for (size_t i = 1; i < losses.size(); ++i)
    (losses[i].weight == 0 ? s.stats : s.extra_losses)
        .emplace_back(losses[i].name, losses[i].mean());
}

// The training micro-batches of a step, with gradient readiness passed on to the strategy
// (TrainRun::on_grad_ready) while they run.
std::vector<LossTerm> train_micro(TrainRun& r, bool device_losses) {
  std::fill(r.ready_count.begin(), r.ready_count.end(), 0);
  struct Scope {
    bool& on;
    explicit Scope(bool& b) : on(b) { on = true; }
    ~Scope() { on = false; }
  } ready(r.forward_ready);
  std::vector<LossTerm> losses = run_micro(r, r.num_micro, false, device_losses);
  if (!r.ready_error.empty()) throw RunError(std::exchange(r.ready_error, std::string()));
  // The end of the backward passes on the clock grad/ddp's debug lines use (a traced run,
  // tests/parallel/overlap_grad_reduce.sh, sets them against each other).
  spdlog::debug(
      "t={:.0f}us backward passes done",
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
  return losses;
}

// The validation loss terms of evaluation k (the first is the loss; a classifier's accuracy
// may follow), which reads valid samples [k, k+1) x eval_iters x global batch.
std::vector<LossTerm> evaluate(TrainRun& r, int64_t k) {
  r.feed.sampler = r.valid_samples;
  r.feed.first = k * r.eval_iters * r.gbs;
  r.feed.loss_scale = 0.0;
  return run_micro(r, r.eval_iters * r.num_micro, true);
}

// The gradients of one iteration (0-based `it`) on the global batch at r.consumed, which it
// advances: every micro-batch's forward and backward, the model's completion, the
// data-parallel reduction and the global norm. `attempt` > 0: a rerun of the same batch.
// `norm_read` (train.grad_norm_on_device): the norm stays on the device, its read started
// into *norm_read, and s.grad_norm is unknown (NaN) until finish_device_norm; with
// r.loss_terms, so are the losses (r.pending_losses holds this rank's host parts).
// The feed of a training step on the global batch at r.consumed. Each rank scales by its own
// token count; the data-parallel reduction averages over ranks, so the gradient is d(mean
// token loss over the global batch)/dθ.
void train_feed(TrainRun& r) {
  r.feed.sampler = r.train_samples;
  r.feed.first = r.consumed;
  r.feed.loss_scale = r.scaler.scale / (double)(r.num_micro * r.mbs * r.seq_len);
}

// A step's device work up to the gradients: zero_grad (and the loss sums, device_losses),
// every micro-batch's forward and backward, the model's completion and the data-parallel
// reduction. Returns the schedule's loss terms.
std::vector<LossTerm> gradients(TrainRun& r, bool device_losses) {
  for (loom_model* m : r.chunks) check(r.mapi->zero_grad(m), "zero_grad");
  if (device_losses) check(r.be.api->ops->fill(r.be.self, r.device_sums->t, 0.0), "loss sums");
  std::vector<LossTerm> losses = train_micro(r, device_losses);
  if (r.timer) r.timer->set_unit(-1);  // the rest of the step is outside the layers
  for (loom_model* m : r.chunks) check(r.mapi->finish_grads(m), "completing gradients");
  const auto [papi, par] = r.grad_strategy;
  const loom_grad_reduce_args reduce{LOOM_GRAD_REDUCE_ARGS_SIZE_V2, nullptr};
  check(papi->reduce(par, &reduce), "reducing gradients");
  return losses;
}

StepStats compute_gradients(TrainRun& r, int64_t it, int attempt, void** norm_read = nullptr) {
  const bool device_losses = norm_read && r.loss_terms > 0;
  train_feed(r);
  if (r.hooks && r.hooks->nan(it, attempt)) r.feed.loss_scale = std::nan("");  // tests only
  std::vector<LossTerm> losses = gradients(r, device_losses);
  r.consumed += r.gbs;

  StepStats s;  // losses of the global batch, for the log
  // Gradients carry the loss scale (1 unless fp16): the norm is of the unscaled ones.
  s.loss_scale = r.scaler.scale;
  bool host_part_finite = true;
  if (device_losses) {
    for (const LossTerm& t : losses) host_part_finite = host_part_finite && std::isfinite(t.sum);
    r.pending_losses = std::move(losses);
    s.loss = std::nan("");
  } else {
    set_losses(s, losses);
  }
  if (norm_read)
    *norm_read = start_device_norm(r, !host_part_finite), s.grad_norm = std::nan("");
  else
    s.grad_norm = loom::grad_norm(squared_grad_norm(r), s.loss_scale);
  return s;
}

// The norm of a step whose read started, and its losses where they were pending: the device's
// sums added to this rank's host parts, then summed over the data-parallel ranks.
void finish_reads(TrainRun& r, StepStats& s, void* norm_read) {
  std::vector<double> device((size_t)r.loss_terms);
  s.grad_norm = loom::grad_norm(finish_device_norm(r, norm_read, device.data()), s.loss_scale);
  if (r.pending_losses.empty()) return;
  std::vector<LossTerm> losses = std::exchange(r.pending_losses, {});
  for (size_t i = 0; i < losses.size(); ++i) losses[i].sum += device[i];
  sum_terms(r, losses);
  set_losses(s, losses);
}

// The next update's step count, and with r.opt_values (loom.opt-schedule/1) its learning
// rate and step count written where the update reads them on the device (a small copy,
// queued).
int64_t next_schedule(TrainRun& r, double lr) {
  ++r.opt_steps;
  if (r.opt_values) {
    const double values[2] = {lr, (double)r.opt_steps};
    check(r.be.api->from_host(r.be.self, r.opt_values->t, values, sizeof values),
          "the learning rate");
  }
  return r.opt_steps;
}

// The optimizer's step (gradients times grad_scale, and the clip of `clip` when given), the
// cast into the model and the strategy's gather, under the profile's optimizer kind. With
// r.opt_values the update reads the learning rate and the step count next_schedule wrote.
void enqueue_update(TrainRun& r, double lr, int64_t count, double grad_scale,
                    const loom_opt_clip* clip) {
  loom_opt_step_args step{LOOM_OPT_STEP_ARGS_SIZE_V2, lr, count, grad_scale,
                          clip ? &clip->base : nullptr};
  loom_opt_schedule schedule{
      {sizeof(loom_opt_schedule), LOOM_EXT_OPT_SCHEDULE, LOOM_EXT_REQUIRED, step.ext},
      r.opt_values ? r.opt_values->t : nullptr};
  if (r.opt_values) step.ext = &schedule.base;
  // The optimizer's kernels, the cast to the model's dtype and the strategy's gather; its
  // floor reads the gradients and reads and writes the main parameters and the state once,
  // and writes the model's values (the f32 values themselves when there is no main copy).
  if (r.timer && r.optimizer_floor_bytes < 0) {
    const StateBytes b = r.state_bytes();
    r.optimizer_floor_bytes =
        b.grads + 2 * b.optimizer + (b.main > 0 ? 2 * b.main + b.values : 2 * b.values);
  }
  const StepTimer::Scope timed(TimeKind::optimizer,
                               Work{0, std::max(r.optimizer_floor_bytes, 0.0)});
  check(r.optimizer.first->step(r.optimizer.second, &step), "optimizer step");
  r.main->to_model();  // (sharded: this rank's slices of the values, gathered next)
  const auto [papi, par] = r.grad_strategy;
  if (papi->after_step) check(papi->after_step(par), "gathering updated parameters");
}

void launch_update(TrainRun& r, double lr, double grad_scale, const loom_opt_clip* clip) {
  enqueue_update(r, lr, next_schedule(r, lr), grad_scale, clip);
}

// The update's clip by the norm's squares on the device (loom.opt-clip/1).
loom_opt_clip device_clip(TrainRun& r, const DLTensor* squares, double loss_scale) {
  return loom_opt_clip{{sizeof(loom_opt_clip), LOOM_EXT_OPT_CLIP, LOOM_EXT_REQUIRED, nullptr},
                       squares,
                       loss_scale,
                       r.grad_clip};
}

void warn_overflow(const TrainRun& r, const StepStats& s, int64_t it) {
  spdlog::warn(
      "iteration {}: gradients overflowed at loss scale {:g}; step skipped, scale "
      "now {:g}",
      it + 1, s.loss_scale, r.scaler.scale);
}

// The update of a step whose gradients are computed: the loss scaler's verdict (fp16), clipping
// by global norm, the optimizer step on the main parameters, and the strategy's gather.
void apply_update(TrainRun& r, StepStats& s, int64_t it) {
  if (s.stepped) s.stepped = r.scaler.update(std::isfinite(s.grad_norm));
  s.lr = r.lr.at(it);
  if (s.stepped)
    launch_update(r, s.lr, loom::clip_scale(s.grad_norm, s.loss_scale, r.grad_clip), nullptr);
  else if (r.scaler.dynamic && std::isfinite(s.grad_norm) == false)
    warn_overflow(r, s, it);
}

// The host's decision on a step whose update was enqueued before the norm was known.
StepStats decide_on_device(TrainRun& r, StepStats s, int64_t it) {
  const bool finite = std::isfinite(s.grad_norm);
  if (!finite) --r.opt_steps;  // the optimizer took no step
  if (numbers_ok(r, s)) {
    s.stepped = r.scaler.update(finite);
    if (!finite) warn_overflow(r, s, it);  // fp16: the loss scaler's skip
    return s;
  }
  s = on_bad_numbers(r, s, it, [&] { return compute_gradients(r, it, 1); });
  if (s.stepped) apply_update(r, s, it);  // the rerun's gradients, finite
  return s;
}

// train.grad_norm_on_device: the update of a step whose norm is still on the device (its read
// started), enqueued before the host knows the norm: the optimizer clips with the norm's
// squares and changes nothing where it is not finite. Then the host reads the norm (and the
// losses, where they were on the device too) and decides as apply_update would have: the
// same updates, the same loss scale, the same train.nan_check outcome, to the bit. The loss
// is known and finite, or was on the device, where a non-finite one made the norm NaN
// (loom.ce-loss-total/1's gradient rows, start_device_norm's poison), so the step changed
// nothing.
StepStats update_on_device(TrainRun& r, StepStats s, int64_t it, void* norm_read) {
  s.lr = r.lr.at(it);
  View squares(r.device_sums->t, {2});
  const loom_opt_clip clip = device_clip(r, squares.get(), s.loss_scale);
  launch_update(r, s.lr, 1.0, &clip);
  finish_reads(r, s, norm_read);
  return decide_on_device(r, s, it);
}

// train.cuda_graph: zero_grad through the update as one launch of the recorded step
// (train_graph.hpp), the host's part around it update_on_device's: the same numbers as the
// eager step, to the bit. The LM loss is the run's one term, summed on the device; its count
// is the host's (GraphStep::upload), which the model's, where its code ran, must equal.
StepStats graph_step(TrainRun& r, int64_t it) {
  GraphStep& g = *r.graph;
  StepStats s;
  s.loss_scale = r.scaler.scale;
  s.lr = r.lr.at(it);
  train_feed(r);
  const double count = g.upload(r.num_micro);
  const int64_t step = next_schedule(r, s.lr);
  View squares(r.device_sums->t, {2});
  const loom_opt_clip clip = device_clip(r, squares.get(), s.loss_scale);
  g.launch([&] {
    g.reported = gradients(r, true);
    sum_device_norm(r, false);
    enqueue_update(r, s.lr, step, 1.0, &clip);
  });
  r.consumed += r.gbs;
  if (g.body_ran) {  // what the model reported against what the host counted
    const std::vector<LossTerm>& t = g.reported;
    if (t.size() != 1 || t[0].sum != 0 || t[0].count != count)
      throw RunError("train.cuda_graph: the model reported " + std::to_string(t.size()) +
                     " loss terms, the first with " + std::to_string(t.empty() ? 0 : t[0].count) +
                     " targets and a host part; the host expected one term of " +
                     std::to_string(count) + " targets, all on the device");
  }
  double device = 0;
  s.grad_norm = loom::grad_norm(finish_device_norm(r, start_device_read(r), &device), s.loss_scale);
  std::vector<LossTerm> losses = g.reported;
  losses[0].sum = device, losses[0].count = count;
  set_losses(s, losses);
  if (!numbers_ok(r, s)) g.invalidate();  // train.nan_check's rerun is eager
  return decide_on_device(r, s, it);
}

// Whether iteration `it` replays the recorded step (train.cuda_graph, past its warm-up). The
// tests' poisoned step is eager; an eager step after a capture makes the next one record again.
bool replayed(TrainRun& r, int64_t it) {
  if (!r.graph) return false;
  if (!r.graph->warming_up() && !(r.hooks && r.hooks->nan(it, 0))) return true;
  r.graph->invalidate();
  return false;
}

// One iteration (0-based `it`) on the global batch that starts at r.consumed. A loss or
// gradient norm that is not finite (and not fp16's overflow, which the loss scaler owns) goes
// to train.nan_check (train_guard.cpp) before anything is updated.
StepStats train_step(TrainRun& r, int64_t it) {
  const auto t0 = std::chrono::steady_clock::now();
  const double waited0 = CommWatch::waited_s();
  if (r.timer) r.timer->begin_step();
  if (r.hooks) r.hooks->stall(r.rank, it);  // tests only
  StepStats s;
  if (replayed(r, it)) {
    s = graph_step(r, it);
  } else {
    void* norm_read = nullptr;
    s = compute_gradients(r, it, 0, r.device_sums ? &norm_read : nullptr);
    if (norm_read && (std::isfinite(s.loss) || !r.pending_losses.empty())) {
      s = update_on_device(r, s, it, norm_read);
    } else {
      if (norm_read) finish_reads(r, s, norm_read);
      if (!numbers_ok(r, s))
        s = on_bad_numbers(r, s, it, [&] { return compute_gradients(r, it, 1); });
      apply_update(r, s, it);
    }
  }
  // The step's last device work (the optimizer, the cast into the model) is not waited for:
  // the host logs and reads the next batch while it runs, and the next step's first read (its
  // loss) waits for it. Over steps the wall clock still counts all of it. The profile reads
  // its timing marks at the end of the step, so it waits here.
  if (r.timer) check(r.be.api->synchronize(r.be.self), "synchronize");
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (r.timer) r.timer->end_step(s.seconds);
  s.comm_wait_s = CommWatch::waited_s() - waited0;
  s.tokens_per_s = (double)(r.gbs * r.seq_len) / s.seconds;
  s.mfu = model_flops_utilisation(r.flops_per_token * s.tokens_per_s, r.info.peak_gflops, r.world);
  if (s.stepped) r.spikes.add(r, it + 1, s.loss, r.consumed - r.gbs);
  return s;
}

}  // namespace

// A chunk's announcement: its get_param indices [first, first + count) are complete for this
// backward pass. Counted per gradient; runs of gradients the step's last pass completed go to
// the strategy. Errors wait for the end of the micro-batches (this is a C callback).
void TrainRun::on_grad_ready(void* user, int64_t first, int64_t count) {
  const ReadyChunk& rc = *static_cast<const ReadyChunk*>(user);
  TrainRun& r = *rc.run;
  const auto [papi, par] = r.grad_strategy;
  if (!r.forward_ready || !r.ready_error.empty() || papi == nullptr ||
      papi->struct_size < LOOM_GRAD_API_SIZE_V2_12 || papi->grad_ready == nullptr)
    return;
  const std::vector<int64_t>& grad_of = r.grad_of[rc.chunk];
  int64_t run_first = 0, run_count = 0;
  auto flush = [&] {
    if (run_count == 0) return;
    try {
      check(papi->grad_ready(par, run_first, run_count), "starting a gradient reduction");
    } catch (const std::exception& e) {
      r.ready_error = e.what();
    }
    run_count = 0;
  };
  for (int64_t i = std::max<int64_t>(first, 0); i < first + count && i < (int64_t)grad_of.size();
       ++i) {
    const int64_t g = grad_of[(size_t)i];
    if (g < 0 || ++r.ready_count[(size_t)g] != r.num_micro) continue;
    if (run_count > 0 && run_first + run_count == g) {
      ++run_count;
    } else {
      flush();
      run_first = g, run_count = 1;
    }
  }
  flush();
}

void dry_step(TrainRun& r) {
  for (loom_model* m : r.chunks) check(r.mapi->zero_grad(m), "zero_grad");
  r.feed.sampler = r.train_samples;
  r.feed.first = 0;
  r.feed.loss_scale = r.scaler.scale / (double)(r.num_micro * r.mbs * r.seq_len);
  run_micro(r, r.num_micro, false);
  for (loom_model* m : r.chunks) check(r.mapi->finish_grads(m), "completing gradients");
}

loom_schedule_args TrainRun::run_schedule(int64_t micro, bool forward_only, double loss_scale,
                                          loom_error* (*get)(void*, int64_t, loom_microbatch*),
                                          void* user, bool device_losses) {
  loom_schedule_args a{};
  a.struct_size = LOOM_SCHEDULE_ARGS_SIZE_V2;
  a.model_api = mapi;
  a.chunks = chunks.data();
  a.num_chunks = chunks.size();
  a.num_microbatches = micro;
  a.batch = mbs;
  a.seq_len = seq_len;
  a.loss_scale = loss_scale;
  a.get_microbatch = get;
  a.user = user;
  a.forward_only = forward_only ? 1 : 0;
  // a training step's extensions: the model's split backward, and the trace of a traced step
  const loom_ext* chain = !forward_only && split.model ? &split.base : nullptr;
  if (!forward_only && tracing) chain = trace->chain(chain);
  // the loss terms' sums on the device, after the norm's two squares
  View sums = device_losses ? View(device_sums->t, {loss_terms}, 2) : View();
  loom_device_losses on_device{{sizeof(loom_device_losses), LOOM_EXT_DEVICE_LOSSES, 0, chain},
                               sums.get()};
  if (device_losses) chain = &on_device.base;
  a.ext = chain;
  check(schedule.first->run(schedule.second, &a), "pipeline schedule");
  return a;
}

int run_training(Recipe& recipe, Registry& registry) {
  // First, so that a signal during set-up (MPI_Init, index building, checkpoint loading) ends
  // the run at once: there is nothing to save yet.
  const RunStopper stopper(recipe.get_bool("train", "exit_signal_handler"),
                           recipe.get_float("train", "exit_duration_mins"),
                           recipe.get_int("train", "exit_interval"));
  TrainRun r(recipe, registry);
  r.prepare_save_dir();
  r.resume();
  r.hold_params(false);   // a fully sharded strategy's units are gathered when used from now on
  r.prepare_reference();  // DPO: the reference log-probabilities, before the first update
  r.graph = GraphStep::create(r, registry);
  check(r.be.api->get_info(r.be.self, &r.info), "backend info");
  spdlog::info("backend memory in use before the first step: {} bytes ({:.2f} per parameter)",
               r.info.mem_in_use,
               (double)r.info.mem_in_use / (double)std::max<int64_t>(r.model_params(), 1));
  Metrics metrics(r);
  const std::string save_dir = recipe.get_string("checkpoint", "save");
  const int64_t save_interval = recipe.get_int("checkpoint", "interval");
  const bool async_save = recipe.get_bool("checkpoint", "async");
  spdlog::info("training {} iterations from {} (global batch {} samples, lr {} {} -> {})", r.iters,
               r.start_iter, r.gbs, r.lr.kind, r.lr.max, r.lr.min);
  stopper.training_starts();
  for (int64_t it = r.start_iter; it < r.iters; ++it) {
    CommWatch::set_iteration(it + 1);
    r.tracing = r.trace && r.trace->wanted(it + 1);
    if (r.tracing) r.trace->start();
    const StepStats s = train_step(r, it);
    if (r.tracing) {
      r.tracing = false;
      r.trace->finish();
    }
    const int64_t iter = it + 1;
    check(r.be.api->get_info(r.be.self, &r.info), "backend info");
    metrics.step(iter, s, (int64_t)r.info.mem_peak);
    const bool eval =
        r.valid_samples && r.eval_interval > 0 && (iter % r.eval_interval == 0 || iter == r.iters);
    if (eval) metrics.eval(iter, evaluate(r, (iter - 1) / r.eval_interval));
    const bool save =
        !save_dir.empty() && ((save_interval > 0 && iter % save_interval == 0) || iter == r.iters);
    // The last save blocks: the run ends with it in place.
    if (save) r.save(iter, async_save && iter != r.iters);
    if (r.graph && (eval || save)) r.graph->invalidate();  // eager device work between steps
    r.finish_save(false);  // a background save, once every rank's files are written
    if (iter == r.iters) break;
    if (const std::optional<StopReason> stop = stopper.after_step(r, iter)) {
      if (!save_dir.empty() && !save) r.save(iter);
      r.finish_save(true);
      spdlog::warn(
          "stopping after iteration {} of {} ({}): {}; exit code {}", iter, r.iters, stop->why,
          save_dir.empty() ? "nothing saved, checkpoint.save is empty"
                           : "resume with checkpoint.load = \"auto\" (or \"" + save_dir + "\")",
          stop->exit_code);
      return stop->exit_code;
    }
  }
  if (!save_dir.empty() && r.start_iter >= r.iters)
    spdlog::info("nothing to train: checkpoint is at iteration {} of {}", r.start_iter, r.iters);
  return 0;
}

}  // namespace loom::engine
