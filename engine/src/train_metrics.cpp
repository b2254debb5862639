// A training run's metrics (Metrics, train_run.hpp): one JSON line per iteration and per
// evaluation in train.metrics, written by world rank 0 (losses reach it through the
// schedule's sum over the pipeline group and the sum over the data-parallel group), and the
// log lines every log_interval.
#include <spdlog/spdlog.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "errors.hpp"
#include "train_run.hpp"

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

}  // namespace

Metrics::Metrics(const TrainRun& run) : run_(run) {
  const std::string path = run.recipe.get_string("train", "metrics");
  if (path.empty() || run.rank != 0) return;
  if (fs::path(path).has_parent_path()) fs::create_directories(fs::path(path).parent_path());
  // A resumed run appends to the curve it continues.
  file_.open(path, run.start_iter > 0 ? std::ios::app : std::ios::trunc);
  if (!file_) throw RunError("cannot write metrics file " + path);
}

void Metrics::step(int64_t iter, const StepStats& s, int64_t mem_peak) {
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
    file_ << line.dump() << "\n" << std::flush;
  }
  if (iter % run_.log_interval == 0 || iter == run_.start_iter + 1 || iter == run_.iters) {
    for (const auto& [name, value] : s.extra_losses)
      spdlog::info("iter {:>6}/{} | {} loss {:.4f}", iter, run_.iters, name, value);
    spdlog::info(
        "iter {:>6}/{} | loss {:.4f} | lr {:.3e} | grad_norm {:.3f} | {:.0f} tok/s | "
        "mfu {:.1f}% | mem {}",
        iter, run_.iters, s.loss, s.lr, s.grad_norm, s.tokens_per_s, 100 * s.mfu,
        human_bytes((double)mem_peak));
  }
}

void Metrics::eval(int64_t iter, double loss) {
  spdlog::info("iter {:>6}/{} | eval_loss {:.4f} | eval ppl {:.2f}", iter, run_.iters, loss,
               std::exp(loss));
  if (file_.is_open())
    file_ << nlohmann::json{{"iter", iter}, {"eval_loss", loss}}.dump() << "\n" << std::flush;
}

}  // namespace loom::engine
