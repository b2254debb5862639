// A training run's metrics (Metrics, train_run.hpp): one JSON line per iteration and per
// evaluation in train.metrics, written by world rank 0 (losses reach it through the
// schedule's sum over the pipeline group and the sum over the data-parallel group), and the
// log lines every log_interval.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "base/errors.hpp"
#include "base/mfu.hpp"
#include "base/require_regular.hpp"
#include "session/step_timer.hpp"
#include "train/tensorboard.hpp"
#include "train/train_run.hpp"

namespace fs = std::filesystem;

namespace loom::engine {
namespace {

std::string human_bytes(double b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", b, unit[u]);
  return buf;
}

double steady_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// "42s", "3m07s", "2h05m"
std::string human_duration(double s) {
  char buf[32];
  const int64_t t = (int64_t)std::llround(std::max(s, 0.0));
  if (t < 60)
    std::snprintf(buf, sizeof buf, "%llds", (long long)t);
  else if (t < 3600)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", (long long)(t / 60), (long long)(t % 60));
  else
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", (long long)(t / 3600),
                  (long long)(t % 3600 / 60));
  return buf;
}

// The step profile on a metrics line: per kind its ms, calls and floor per step, flat keys
// ("timer_ms.gemm_fwd") as the other groups of statistics.
void add_profile(nlohmann::json& line, const TimerReport& p) {
  for (int k = 0; k < kTimeKinds; ++k) {
    const size_t i = (size_t)k;
    if (p.calls[i] == 0) continue;
    const std::string name = time_kind_name((TimeKind)k);
    line["timer_ms." + name] = p.ms[i];
    line["timer_calls." + name] = p.calls[i];
    line["timer_floor_ms." + name] = p.floor_ms(k);
    line["timer_flops." + name] = p.flops[i];
    line["timer_bytes." + name] = p.bytes[i];
  }
  line["timer_ms.gap"] = p.gap_ms();
  line["timer_step_ms"] = p.step_ms;
  for (size_t u = 0; u < p.unit_ms.size(); ++u)
    line["timer_unit_ms." + std::to_string(u)] = p.unit_ms[u];
  line["timer_outside_ms"] = p.outside_ms;
  line["timer_steps"] = p.steps;
  line["kernel_launches_per_step"] = p.launches;
  line["host_syncs_per_step"] = p.host_syncs;
  line["device_mallocs_per_step"] = p.mallocs;
  line["device_mallocs_after_step2"] = p.mallocs_after_step2;
  line["ceiling_gemm_tflops"] = p.gemm_tflops;
  line["ceiling_copy_gbps"] = p.copy_gbps;
}

// A fresh run's train.metrics that holds lines already (an earlier run's, or the run this one
// restarts without resuming) is kept as <path>.N, the first free N, not written over.
void keep_earlier_run(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec) || fs::file_size(path, ec) == 0 || ec) return;
  for (int n = 1;; ++n) {
    const std::string kept = path + "." + std::to_string(n);
    if (fs::exists(fs::symlink_status(kept, ec))) continue;
    fs::rename(path, kept, ec);
    if (ec)
      throw RunError("train.metrics = \"" + path + "\": cannot keep the earlier run's file as " +
                     kept + " (" + ec.message() + ")");
    spdlog::warn("train.metrics = \"{}\" held an earlier run's metrics: kept as {}", path, kept);
    return;
  }
}

// A resumed run's train.metrics without the lines past the checkpoint it resumes from (a run
// killed after its last save logged them), so that each iteration appears once.
void drop_lines_after(const std::string& path, int64_t start_iter) {
  std::ifstream in(path);
  if (!in) return;  // none yet: the run makes it
  std::string text, kept;
  bool dropped = false;
  while (std::getline(in, text)) {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    const bool after = j.is_object() && j.contains("iter") && j["iter"].is_number_integer() &&
                       j["iter"].get<int64_t>() > start_iter;
    dropped |= after;
    if (!after) kept += text + "\n";
  }
  in.close();
  if (!dropped) return;
  std::ofstream out(path, std::ios::trunc);
  out << kept;
  if (!out) throw RunError("cannot write metrics file " + path);
  spdlog::info("train.metrics: dropped the lines after iteration {}, which this run repeats",
               start_iter);
}

}  // namespace

Metrics::~Metrics() = default;

Metrics::Metrics(const TrainRun& run) : run_(run), started_(steady_s()) {
  const std::string tb = run.recipe.get_string("train", "tensorboard");
  if (!tb.empty() && run.rank == 0) {
    tb_ = std::make_unique<TensorBoardWriter>(tb);
    spdlog::info("TensorBoard events: {}", tb_->path().string());
  }
  const std::string path = run.recipe.get_string("train", "metrics");
  if (path.empty() || run.rank != 0) return;
  // A resumed run appends to the curve it continues; a fresh one starts its own file.
  if (run.start_iter == 0) keep_earlier_run(path);
  if (run.start_iter > 0) drop_lines_after(path, run.start_iter);
  file_.open(path, run.start_iter > 0 ? std::ios::app : std::ios::trunc);
  if (!file_) throw RunError("cannot write metrics file " + path);
}

// Every rank's mean busy time per step since the last log line, summed over the world
// (COLLECTIVE: every rank logs at the same iterations), as Megatron's straggler detector
// reports it.
Metrics::RankTimes Metrics::rank_times(double mean_s) const {
  std::vector<double> t((size_t)run_.world, 0.0);
  t[(size_t)run_.rank] = mean_s;
  sum_over(run_.be, run_.comm, nullptr, t.data(), run_.world);
  RankTimes out{t[0], t[0], 0};
  for (int r = 1; r < run_.world; ++r) {
    out.min = std::min(out.min, t[(size_t)r]);
    if (t[(size_t)r] > out.max) out.max = t[(size_t)r], out.slowest = r;
  }
  return out;
}

double model_flops_utilisation(double flops_per_s, double& peak_gflops, int world) {
  if (peak_gflops <= 0 || world < 1) return 0.0;
  const double per_rank = flops_per_s / world * 1e-9;
  if (per_rank > peak_gflops) {
    spdlog::info(
        "mfu: a step ran at {:.1f} GFLOP/s per rank, above the backend's peak of {:.1f} (a "
        "sample taken as it started); MFU is against {:.1f} from here",
        per_rank, peak_gflops, per_rank);
    peak_gflops = per_rank;
  }
  return per_rank / peak_gflops;
}

void Metrics::step(int64_t iter, const StepStats& s, int64_t mem_peak) {
  const bool log =
      iter % run_.log_interval == 0 || iter == run_.start_iter + 1 || iter == run_.iters;
  interval_s_ += s.seconds - s.comm_wait_s, ++interval_n_;
  std::optional<RankTimes> ranks;
  if (log && run_.world > 1) ranks = rank_times(interval_s_ / (double)interval_n_);
  if (log) interval_s_ = 0, interval_n_ = 0;
  std::optional<TimerReport> profile;
  if (log && run_.timer) profile = run_.timer->take();
  if (file_.is_open()) {
    nlohmann::json line = {{"iter", iter},
                           {"loss", s.loss},
                           {"lr", s.lr},
                           {"grad_norm", s.grad_norm},
                           {"tokens_per_s", s.tokens_per_s},
                           {"mfu", s.mfu},
                           {"mem_bytes", mem_peak},
                           {"skipped", !s.stepped},
                           {"loss_scale", s.loss_scale},
                           {"step_s", s.seconds}};
    for (const auto& [name, value] : s.extra_losses) line["loss_" + name] = value;
    for (const auto& [name, value] : s.stats) line[name] = value;
    if (ranks) {
      line["busy_s_min_rank"] = ranks->min;
      line["busy_s_max_rank"] = ranks->max;
      line["slowest_rank"] = ranks->slowest;
    }
    if (profile) add_profile(line, *profile);
    file_ << line.dump() << "\n" << std::flush;
  }
  if (tb_) {  // Megatron's tag names where it has them
    tb_->scalar("lm loss", iter, s.loss);
    for (const auto& [name, value] : s.extra_losses) tb_->scalar(name + " loss", iter, value);
    for (const auto& [name, value] : s.stats) tb_->scalar(name, iter, value);
    tb_->scalar("learning-rate", iter, s.lr);
    tb_->scalar("grad-norm", iter, s.grad_norm);
    tb_->scalar("loss-scale", iter, s.loss_scale);
    tb_->scalar("throughput/tokens-per-second", iter, s.tokens_per_s);
    tb_->scalar("throughput/mfu", iter, s.mfu);
    tb_->scalar("memory/peak-bytes", iter, (double)mem_peak);
    tb_->scalar("iteration-time", iter, s.seconds);
    if (profile) {
      for (int k = 0; k < kTimeKinds; ++k)
        if (profile->calls[(size_t)k] > 0)
          tb_->scalar(std::string("timers/") + time_kind_name((TimeKind)k) + "-ms", iter,
                      profile->ms[(size_t)k]);
      tb_->scalar("timers/gap-ms", iter, profile->gap_ms());
      tb_->scalar("timers/kernel-launches", iter, profile->launches);
      tb_->scalar("timers/host-syncs", iter, profile->host_syncs);
    }
  }
  if (log) {
    for (const auto& [name, value] : s.extra_losses)
      spdlog::info("iter {:>6}/{} | {} loss {:.4f}", iter, run_.iters, name, value);
    log_stats(iter, s.stats, "");
    // The ETA extrapolates this run's mean iteration time (evaluations and saves included).
    const double elapsed = steady_s() - started_;
    const double done = (double)std::max<int64_t>(iter - run_.start_iter, 1);
    spdlog::info(
        "iter {:>6}/{} | loss {:.4f} | lr {:.3e} | grad_norm {:.3f} | {:.0f} tok/s | "
        "mfu {:.1f}% | mem {} | elapsed {} | eta {}",
        iter, run_.iters, s.loss, s.lr, s.grad_norm, s.tokens_per_s, 100 * s.mfu,
        human_bytes((double)mem_peak), human_duration(elapsed),
        human_duration(elapsed / done * (double)(run_.iters - iter)));
    if (profile) spdlog::info("iter {:>6}/{} | {}", iter, run_.iters, format_report(*profile));
    if (ranks)
      spdlog::info(
          "iter {:>6}/{} | busy time per step over {} ranks (not waiting in comm): min {:.1f} "
          "ms, max {:.1f} ms (rank {}), spread {:.1f}%",
          iter, run_.iters, run_.world, 1e3 * ranks->min, 1e3 * ranks->max, ranks->slowest,
          100 * (ranks->max - ranks->min) / std::max(ranks->min, 1e-12));
  }
}

// Statistics one line per group: the names up to their last '.' ("moe_load.h3" for the
// shares of layer 3's experts "moe_load.h3.e0", "moe_load.h3.e1", ...), values in order.
void Metrics::log_stats(int64_t iter, const std::vector<std::pair<std::string, double>>& stats,
                        const std::string& prefix) const {
  std::string group, values;
  auto flush = [&] {
    if (!group.empty())
      spdlog::info("iter {:>6}/{} | {}{}{}", iter, run_.iters, prefix, group, values);
    values.clear();
  };
  for (const auto& [name, value] : stats) {
    const size_t dot = name.rfind('.');
    const std::string g = dot == std::string::npos ? name : name.substr(0, dot);
    if (g != group) flush();
    group = g;
    values += fmt::format(" {:.4f}", value);
  }
  flush();
}

void Metrics::eval(int64_t iter, const std::vector<LossTerm>& terms) {
  const double loss = terms[0].mean();
  std::string more;
  nlohmann::json line{{"iter", iter}, {"eval_loss", loss}};
  std::vector<std::pair<std::string, double>> stats;
  for (size_t i = 1; i < terms.size(); ++i) {
    if (terms[i].weight == 0 && terms[i].name.find('.') != std::string::npos)
      stats.emplace_back(terms[i].name, terms[i].mean());  // grouped below
    else
      more += fmt::format(" | eval {} {:.4f}", terms[i].name, terms[i].mean());
    line["eval_" + terms[i].name] = terms[i].mean();
  }
  spdlog::info("iter {:>6}/{} | eval_loss {:.4f} | eval ppl {:.2f}{}", iter, run_.iters, loss,
               std::exp(loss), more);
  log_stats(iter, stats, "eval ");
  if (file_.is_open()) file_ << line.dump() << "\n" << std::flush;
  if (tb_) {
    tb_->scalar("lm loss validation", iter, loss);
    tb_->scalar("lm loss validation ppl", iter, std::exp(loss));
    for (size_t i = 1; i < terms.size(); ++i)
      tb_->scalar(terms[i].name + " validation", iter, terms[i].mean());
  }
}

std::vector<MetricsLine> read_metrics(const fs::path& path) {
  require_regular_file(path.string(), "metrics file ");
  std::ifstream in(path);
  if (!in) throw RunError("cannot read metrics file " + path.string());
  std::vector<MetricsLine> lines;
  std::string text;
  for (int n = 1; std::getline(in, text); ++n) {
    if (text.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (!j.is_object() || !j.contains("iter") || !j["iter"].is_number_integer())
      throw RunError(path.string() + ":" + std::to_string(n) +
                     ": not a metrics line (a JSON object with \"iter\")");
    MetricsLine line;
    line.iter = j["iter"].get<int64_t>();
    line.eval = j.contains("eval_loss");
    for (const auto& [key, value] : j.items())
      if (key != "iter" && value.is_number()) line.values[key] = value.get<double>();
    lines.push_back(std::move(line));
  }
  return lines;
}

bool is_loss_metric(const std::string& key) {
  if (key.find('.') != std::string::npos) return false;  // a group of statistics
  if (key == "loss" || key == "eval_loss") return true;
  if (key.rfind("loss_", 0) == 0) return key != "loss_scale";
  return key.rfind("eval_", 0) == 0;  // eval_<term>
}

}  // namespace loom::engine
