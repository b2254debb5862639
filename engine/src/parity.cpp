// `loom parity` (parity.hpp): the recipe trained on one rank and in each layout, each run a
// real `loom run` of its own resolved recipe (the layouts under mpirun or srun), then the
// metrics files and the final checkpoints compared: the loss terms and gradient norm of every
// iteration (read_metrics, the format Metrics writes) and every parameter tensor, merged from
// the ranks' shards (compare_models, as `loom checkpoint diff`).
#include "parity.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <numeric>
#include <ostream>
#include <sstream>

#include "batch_check.hpp"
#include "checkpoint_tools.hpp"
#include "config_check.hpp"
#include "errors.hpp"
#include "memory_estimate.hpp"
#include "parallel_layout.hpp"
#include "parity_launch.hpp"
#include "recipe.hpp"
#include "registry.hpp"
#include "text_table.hpp"
#include "train_run.hpp"

namespace fs = std::filesystem;

namespace loom::engine {

namespace {

// The [parallel] keys a layout decides; the recipe's own values are replaced.
const char* const kLayoutKeys[] = {
    "tensor",         "pipeline",          "context",      "expert", "expert_tensor",
    "virtual_stages", "sequence_parallel", "cp_comm_type", "data"};

// What a layout is held to.
struct Tolerances {
  double loss = 1e-5, grad = 1e-5, params = 1e-5;
  bool norm = true;  // parameters by ||a-b|| / ||a||, else max |a-b| / max |a|
};

// Switch's load-balancing loss (moe_router_load_balancing_type = "aux_loss") is computed over
// each micro-batch's tokens, so it changes with the micro-batch size: a layout may not change
// that size then (found by --fuzz: mb1 against 2 moved loss_moe_aux by 3e-3).
void check_micro_batch(const Recipe& layout, int64_t reference) {
  const int64_t mbs = layout.get_int("train", "micro_batch_size");
  if (mbs == reference) return;
  bool per_micro_batch = false;
  try {
    per_micro_batch = layout.get_int("model", "num_experts") > 0 &&
                      layout.get_float("model", "moe_aux_loss_coeff") > 0 &&
                      layout.get_string("model", "moe_router_load_balancing_type") == "aux_loss";
  } catch (const std::exception&) {  // a model without experts
  }
  if (per_micro_batch)
    throw UsageError("mb" + std::to_string(mbs) +
                     ": the experts' load-balancing loss (model.moe_aux_loss_coeff > 0, "
                     "moe_router_load_balancing_type = \"aux_loss\") is computed per "
                     "micro-batch, so another micro-batch size changes the loss itself; keep "
                     "the recipe's micro_batch_size or use \"seq_aux_loss\"");
}

// The batch every run shares: the single rank's micro-batch, and the global batch set in every
// run (0: the recipe's).
struct Batch {
  int64_t global = 0, micro = 0;
};

// The run's recipe: the user's with --set, the layout's [parallel] keys (the recipe's own
// degrees, strategy and comm replaced), N iterations, the metrics file and a checkpoint at
// the end in `dir`, the dtype; validated against `world` ranks (the plugins' own checks too)
// and written to dir/recipe.toml.
fs::path prepare_run(const ParityOptions& o, const ParityLayout& l, bool is_layout,
                     const Batch& batch, const fs::path& dir, Registry& registry) {
  Recipe r = Recipe::load(o.recipe, o.sets);
  for (const char* key : kLayoutKeys) r.drop_key("parallel", key);
  r.drop_section("comm");
  for (const char* key : {"tensorboard", "exit_interval", "exit_duration_mins"})
    r.drop_key("train", key);
  for (const char* key : {"load", "interval", "overwrite"}) r.drop_key("checkpoint", key);
  r.set("train.iters=" + std::to_string(o.iters));
  if (batch.global > 0) r.set("train.global_batch_size=" + std::to_string(batch.global));
  r.set("train.metrics=" + (dir / "metrics.jsonl").string());
  r.set("checkpoint.save=" + (dir / "checkpoint").string());
  r.set("precision.dtype=" + o.dtype);
  r.set(std::string("comm.plugin=") + (is_layout ? "mpi" : "single"));
  std::string grad = l.grad;
  for (const std::string& s : l.sets) r.set(s);
  if (is_layout)
    for (const std::string& s : o.layout_sets) {
      r.set(s);
      if (s.rfind("parallel.data=", 0) == 0) grad = s.substr(14);
    }
  keep_grad_keys_of(r, registry, grad);
  r.validate(registry);
  check_micro_batch(r, batch.micro);
  check_layout(r, l.world);
  check_model_batch(r, registry);
  // What the plugins themselves refuse (FSDP with a pipeline, T5 with context parallelism),
  // before any run: a layout the model cannot take is a usage error, and never drawn by --fuzz.
  check_plugin_configs(r, registry, l.world);
  fs::create_directories(dir);
  const fs::path path = dir / "recipe.toml";
  std::ofstream(path) << r.to_toml();
  return path;
}

// The relative difference of a value of the layout's run from the single rank's; infinite
// when one is not finite and they differ.
double relative(double a, double b) {
  if (a == b) return 0;
  if (!std::isfinite(a) || !std::isfinite(b)) return INFINITY;
  return std::fabs(a - b) / std::max(std::fabs(a), 1e-12);
}

struct Worst {
  double rel = 0;
  int64_t iter = 0;
  std::string key;
  double a = 0, b = 0;
  void see(double r, int64_t i, const std::string& k, double x, double y) {
    if (r > rel || (std::isnan(r) && !std::isnan(rel))) rel = r, iter = i, key = k, a = x, b = y;
  }
};

struct Outcome {
  std::string token;
  int world = 1, exit_code = 0;
  double seconds = 0;
  Worst loss, grad;
  std::vector<TensorDiff> params;    // model order
  std::string problem;               // the run failed, or its files do not compare
  std::vector<std::string> reasons;  // what is beyond the tolerances
  std::string first_bad;             // the first tensor beyond it, in model order
};

std::string num(double v) {
  if (v == 0) return "0";
  if (std::isinf(v)) return "inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1e", v);
  return buf;
}

std::string seconds_str(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

// The two runs' metrics, line by line: every loss term and the gradient norm.
void compare_metrics(const fs::path& one, const fs::path& par, Outcome& r) {
  const std::vector<MetricsLine> a = read_metrics(one), b = read_metrics(par);
  if (a.size() != b.size()) {
    r.problem = "the metrics files hold " + std::to_string(a.size()) + " and " +
                std::to_string(b.size()) + " lines";
    return;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].iter != b[i].iter || a[i].eval != b[i].eval) {
      r.problem = "metrics line " + std::to_string(i + 1) + " is iteration " +
                  std::to_string(a[i].iter) + " on 1 rank but " + std::to_string(b[i].iter);
      return;
    }
    for (const auto& [key, x] : a[i].values) {
      const bool loss = is_loss_metric(key);
      if (!loss && key != "grad_norm") continue;
      auto it = b[i].values.find(key);
      if (it == b[i].values.end()) {
        r.problem = "iteration " + std::to_string(a[i].iter) + ": no " + key + " in the layout's";
        return;
      }
      (loss ? r.loss : r.grad).see(relative(x, it->second), a[i].iter, key, x, it->second);
    }
  }
}

// Parameter differences in model order (names the model does not list last, by name).
std::vector<TensorDiff> in_model_order(std::vector<TensorDiff> diffs,
                                       const std::vector<std::string>& order) {
  std::map<std::string, size_t> rank;
  for (size_t i = 0; i < order.size(); ++i) rank.emplace(order[i], i);
  std::stable_sort(diffs.begin(), diffs.end(), [&](const TensorDiff& x, const TensorDiff& y) {
    auto rx = rank.find(x.name), ry = rank.find(y.name);
    const size_t a = rx == rank.end() ? order.size() : rx->second;
    const size_t b = ry == rank.end() ? order.size() : ry->second;
    return a < b;
  });
  return diffs;
}

void judge(Outcome& r, const Tolerances& tol) {
  auto over = [](double v, double t) { return !(v <= t); };
  if (over(r.loss.rel, tol.loss))
    r.reasons.push_back(r.loss.key + " at iteration " + std::to_string(r.loss.iter) + ": 1 rank " +
                        fmt::format("{:.9g}", r.loss.a) + ", layout " +
                        fmt::format("{:.9g}", r.loss.b) + " (relative " + num(r.loss.rel) + " > " +
                        num(tol.loss) + ")");
  if (over(r.grad.rel, tol.grad))
    r.reasons.push_back("grad_norm at iteration " + std::to_string(r.grad.iter) + ": 1 rank " +
                        fmt::format("{:.9g}", r.grad.a) + ", layout " +
                        fmt::format("{:.9g}", r.grad.b) + " (relative " + num(r.grad.rel) + " > " +
                        num(tol.grad) + ")");
  const TensorDiff* first = nullptr;
  const TensorDiff* largest = nullptr;
  size_t bad = 0;
  for (const TensorDiff& d : r.params) {
    if (d.within(tol.params)) continue;
    ++bad;
    if (!first) first = &d;
    if (d.problem.empty() && (!largest || !(d.rel <= largest->rel))) largest = &d;
  }
  if (first) {
    r.first_bad = first->name;
    const std::string what = tol.norm ? "||a-b||/||a||" : "max|a-b|/max|a|";
    auto say = [&](const TensorDiff& d) {
      return d.name + " (" + (d.problem.empty() ? what + " " + num(d.rel) : d.problem) + ")";
    };
    std::string line = "parameters: " + std::to_string(bad) + " of " +
                       std::to_string(r.params.size()) + " tensors beyond " + num(tol.params) +
                       "; first in model order " + say(*first);
    if (largest && largest != first) line += "; largest " + say(*largest);
    r.reasons.push_back(line);
  }
}

// What a failure likely means, from where it shows: the first iteration's loss (the forward
// pass or the data), a later loss or the gradient norm (the backward pass, a reduction, the
// step), or only the final parameters (the step of a few tensors, or fp32 rounding).
std::string likely_cause(const Outcome& r, const Tolerances& tol, const std::string& dtype) {
  const bool loss = !(r.loss.rel <= tol.loss), grad = !(r.grad.rel <= tol.grad);
  if (loss && r.loss.iter <= 1)
    return "the first iteration's loss already differs: the layout computes a different forward "
           "pass or reads different samples (a split that changes the model, a batch drawn "
           "otherwise)";
  if (loss || grad)
    return "the losses or gradient norms drift apart after the first step: gradients reduced "
           "over the wrong group or not at all, or a different optimizer step (learning rate, "
           "schedule, clipping)";
  std::string why =
      "the losses and gradient norms agree but parameters do not: the step of these tensors "
      "differs (a gradient missing from a reduction, an optimizer setting or state sharded "
      "wrongly)";
  if (dtype == "fp32")
    why +=
        "; in fp32 it can also be rounding: a tensor whose gradient is exactly zero (an "
        "attention key bias) turns noise of the size of Adam's eps into steps of the size "
        "of the learning rate; rerun with --dtype fp64 (the default), which leaves only "
        "rounding at 1e-9";
  return why;
}

const TensorDiff* worst_tensor(const Outcome& r) {
  const TensorDiff* w = nullptr;
  for (const TensorDiff& d : r.params)
    if (d.problem.empty() && (!w || d.rel > w->rel)) w = &d;
  return w;
}

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The runs' folder: --keep's, else a temporary one, removed at the end unless a layout failed
// (its recipe, log, metrics and checkpoint are what a user needs to see why).
struct RunFolder {
  fs::path path;
  bool remove = true;
  explicit RunFolder(const fs::path& keep) {
    if (!keep.empty()) {
      if (fs::exists(keep) && !(fs::is_directory(keep) && fs::is_empty(keep)))
        throw UsageError("loom parity: --keep " + keep.string() +
                         " exists and is not an empty folder");
      fs::create_directories(keep);
      path = fs::absolute(keep);
      remove = false;
      return;
    }
    std::string templ = (fs::temp_directory_path() / "loom-parity-XXXXXX").string();
    if (!::mkdtemp(templ.data())) throw RunError("loom parity: cannot make a temporary folder");
    path = templ;
  }
  ~RunFolder() {
    std::error_code ec;
    if (remove && !path.empty()) fs::remove_all(path, ec);
  }
};

// The batch every run uses: the recipe's micro-batch, and its global batch or, when it sets
// none, micro-batch x the data-parallel sizes' least common multiple, accumulated by the single
// rank. Fuzzed layouts are drawn later, with degrees that are powers of two up to --max-ranks: the
// largest such power.
Batch common_batch(const ParityOptions& o, const std::vector<ParityLayout>& layouts,
                   Registry& registry) {
  Recipe r = Recipe::load(o.recipe, o.sets);
  for (const char* key : kLayoutKeys) r.drop_key("parallel", key);
  r.drop_section("comm");
  keep_grad_keys_of(r, registry, "ddp");
  r.validate(registry);
  Batch b;
  b.micro = r.get_int("train", "micro_batch_size");
  if (r.get_int("train", "global_batch_size") != 0) return b;
  int64_t lcm = 1;
  for (const ParityLayout& l : layouts) lcm = std::lcm(lcm, (int64_t)l.data);
  if (o.fuzz > 0)
    while (lcm * 2 <= o.max_ranks) lcm *= 2;
  b.global = b.micro * lcm;
  return b;
}

std::string run_dir_name(const std::string& token) {
  std::string name = token;
  for (char& c : name)
    if (c == '+') c = '_';
  return name;
}

void check_options(const ParityOptions& o) {
  if (o.dtype != "fp32" && o.dtype != "fp64")
    throw UsageError("loom parity: --dtype must be fp32 or fp64, got '" + o.dtype + "'");
  if (o.iters < 1) throw UsageError("loom parity: --iters must be at least 1");
  if (o.rtol >= 0 && !std::isfinite(o.rtol))
    throw UsageError("loom parity: --rtol must be a finite number >= 0");
  if (o.fuzz < 0) throw UsageError("loom parity: --fuzz must be a number of layouts >= 1");
  if (o.fuzz > 0 && !o.layouts.empty())
    throw UsageError("loom parity: --layouts and --fuzz both given; give one");
  if (o.fuzz == 0 && o.layouts.empty()) throw UsageError("loom parity: --layouts names no layout");
  if (o.max_ranks < 2) throw UsageError("loom parity: --max-ranks must be at least 2");
  if (!fs::is_regular_file(o.recipe))
    throw UsageError("loom parity: recipe " + o.recipe.string() + " is not a file");
}

// One layout's run under the launcher, compared with the single rank's.
Outcome run_layout(const ParityLayout& l, const ParityLauncher& launcher, const std::string& loom,
                   const fs::path& recipe, const fs::path& dir, const fs::path& one_dir,
                   const std::vector<std::string>& order, const Tolerances& tol) {
  Outcome r;
  r.token = l.token;
  r.world = l.world;
  spdlog::info("parity: {} ({} ranks)", l.token, l.world);
  const auto t0 = std::chrono::steady_clock::now();
  const fs::path log = dir / "log.txt";
  r.exit_code = run_logged(launcher.line(l.world, {loom, "run", recipe.string()}), log);
  r.seconds = since(t0);
  if (r.exit_code != 0) {
    // A launcher that starts no rank fails every layout alike: say so once, with the fix.
    const std::string why = launcher_refusal(log);
    if (!why.empty())
      throw UsageError("loom parity: layout '" + l.token + "': " + launcher.argv[0] +
                       " cannot start " + std::to_string(l.world) + " ranks: " + why +
                       "; its log: " + log.string());
    r.problem = "the run failed (exit " + std::to_string(r.exit_code) + "); its log " +
                log.string() + " ends:\n" + log_tail(log, 15);
    return r;
  }
  try {
    compare_metrics(one_dir / "metrics.jsonl", dir / "metrics.jsonl", r);
    r.params =
        in_model_order(compare_models(one_dir / "checkpoint", dir / "checkpoint", tol.norm), order);
  } catch (const std::exception& e) {
    r.problem = e.what();
  }
  if (r.problem.empty()) judge(r, tol);
  return r;
}

// The table, each failure's reasons and likely cause, the summary; the number that failed.
int report(const ParityOptions& o, const std::vector<Outcome>& outcomes, const Tolerances& tol,
           const Batch& batch, double one_s, const RunFolder& folder, std::ostream& out) {
  const std::string how = tol.norm ? "||a-b||/||a||" : "max|a-b|/max|a|";
  out << "parity of " << o.recipe.string() << ": " << o.iters << " iterations in " << o.dtype
      << (batch.global > 0 ? ", global batch " + std::to_string(batch.global) : "")
      << "; 1 rank took " << seconds_str(one_s) << "\n"
      << "tolerances: loss terms and grad norm " << num(tol.loss)
      << " relative (largest over the iterations), parameters " << num(tol.params) << " in " << how
      << " per tensor\n\n";
  std::vector<std::vector<std::string>> rows = {
      {"LAYOUT", "RANKS", "LOSS", "GRAD NORM", "PARAMS", "WORST TENSOR", "TIME", "RESULT"}};
  int failed = 0;
  for (const Outcome& r : outcomes) {
    const bool ok = r.problem.empty() && r.reasons.empty();
    failed += ok ? 0 : 1;
    if (!r.problem.empty()) {
      rows.push_back({r.token, std::to_string(r.world), "-", "-", "-", "-", seconds_str(r.seconds),
                      r.exit_code ? "ERROR (run failed)" : "ERROR"});
      continue;
    }
    const TensorDiff* worst = worst_tensor(r);
    std::string result = "pass";
    if (!ok) result = r.first_bad.empty() ? "FAIL" : "FAIL: " + r.first_bad;
    rows.push_back({r.token, std::to_string(r.world), num(r.loss.rel), num(r.grad.rel),
                    worst ? num(worst->rel) : "-", worst ? worst->name : "-",
                    seconds_str(r.seconds), result});
  }
  print_table(rows, out);
  for (const Outcome& r : outcomes) {
    if (!r.problem.empty()) out << "\n" << r.token << ": " << r.problem << "\n";
    if (r.reasons.empty()) continue;
    out << "\n" << r.token << ": FAIL\n";
    for (const std::string& why : r.reasons) out << "  " << why << "\n";
    out << "  likely: " << likely_cause(r, tol, o.dtype) << "\n";
    out << "  rerun alone: loom parity " << o.recipe.string() << " --layouts " << r.token
        << " --iters " << o.iters << (o.dtype == "fp64" ? "" : " --dtype " + o.dtype)
        << (o.sets.empty() && o.layout_sets.empty() ? "" : " (and this run's --set options)")
        << "\n";
  }
  const size_t n = outcomes.size();
  std::string summary;
  if (n == 1)
    summary = failed ? "the layout fails the check" : "the layout matches 1 rank";
  else
    summary = failed
                  ? std::to_string(failed) + " of " + std::to_string(n) + " layouts fail the check"
                  : "all " + std::to_string(n) + " layouts match 1 rank";
  if (!folder.remove)
    summary += (o.keep.empty() ? "; the runs (recipes, logs, metrics, checkpoints) are kept in "
                               : "; runs kept in ") +
               folder.path.string();
  out << "\n" << summary << "\n";
  return failed;
}

}  // namespace

int run_parity(const ParityOptions& o, Registry& registry, std::ostream& out) {
  // Everything a user can get wrong is refused before the first run.
  check_options(o);
  std::vector<ParityLayout> layouts;
  for (const std::string& t : o.layouts) layouts.push_back(parse_parity_layout(t));
  const ParityLauncher launcher = find_parity_launcher(o);
  Tolerances tol;
  if (o.dtype == "fp64") tol = {1e-9, 1e-9, 1e-9, false};
  if (o.rtol >= 0) tol.loss = tol.grad = tol.params = o.rtol;

  RunFolder folder(o.keep);
  const Batch batch = common_batch(o, layouts, registry);
  ParityLayout one = parse_parity_layout("tp1");
  one.token = "1 rank";
  const fs::path one_dir = folder.path / "1rank";
  const fs::path one_recipe = prepare_run(o, one, false, batch, one_dir, registry);
  if (o.fuzz > 0) {
    const fs::path scratch = folder.path / "drawing";
    const std::vector<std::string> drawn =
        draw_parity_layouts(o.fuzz, o.seed, o.max_ranks, [&](const std::string& token) {
          try {
            prepare_run(o, parse_parity_layout(token), true, batch, scratch, registry);
            return std::string();
          } catch (const UsageError& e) {
            return std::string(e.what());
          }
        });
    fs::remove_all(scratch);
    for (const std::string& t : drawn) layouts.push_back(parse_parity_layout(t));
    out << "fuzz: " << layouts.size() << " layouts drawn from seed " << o.seed << " (at most "
        << o.max_ranks << " ranks)\n";
  }
  std::vector<fs::path> recipes, dirs;
  int max_world = 1;
  for (const ParityLayout& l : layouts) {
    dirs.push_back(folder.path / run_dir_name(l.token));
    for (size_t i = 0; i + 1 < dirs.size(); ++i)  // the same token twice
      if (dirs[i] == dirs.back()) dirs.back() += "." + std::to_string(dirs.size());
    try {
      recipes.push_back(prepare_run(o, l, true, batch, dirs.back(), registry));
    } catch (const UsageError& e) {
      throw UsageError("loom parity: layout '" + l.token + "': " + e.what());
    }
    max_world = std::max(max_world, l.world);
  }

  const ParitySignals signals;
  const std::string loom = fs::read_symlink("/proc/self/exe").string();
  // OpenMPI refuses more ranks than cores unless told; a parity check runs small layouts on
  // small machines (MPICH and srun ignore the variable).
  ::setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
  try {
    check_launcher(launcher, max_world, folder.path / "launcher-log.txt");
  } catch (...) {
    folder.remove = false;
    throw;
  }
  auto t0 = std::chrono::steady_clock::now();
  spdlog::info("parity: 1 rank ({} iterations, {})", o.iters, o.dtype);
  const int rc = run_logged({loom, "run", one_recipe.string()}, one_dir / "log.txt");
  if (rc != 0) {
    folder.remove = false;
    throw RunError("loom parity: the single-rank run failed (exit " + std::to_string(rc) +
                   "); its log " + (one_dir / "log.txt").string() + " ends:\n" +
                   log_tail(one_dir / "log.txt", 15));
  }
  const double one_s = since(t0);
  std::vector<std::string> order;
  try {
    order = model_param_names(one_recipe, registry);
  } catch (const std::exception& e) {
    spdlog::warn(
        "parity: the model's parameter order is unknown ({}); tensors are named in "
        "name order",
        e.what());
  }

  std::vector<Outcome> outcomes;
  for (size_t i = 0; i < layouts.size(); ++i) {
    try {
      outcomes.push_back(
          run_layout(layouts[i], launcher, loom, recipes[i], dirs[i], one_dir, order, tol));
    } catch (const UsageError&) {
      folder.remove = false;
      throw;
    }
    const Outcome& r = outcomes.back();
    if (r.problem.empty() && r.reasons.empty() && o.keep.empty())
      fs::remove_all(dirs[i]);
    else if (!(r.problem.empty() && r.reasons.empty()))
      folder.remove = false;
  }
  return report(o, outcomes, tol, batch, one_s, folder, out) ? 1 : 0;
}

}  // namespace loom::engine
