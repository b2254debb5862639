// `loom parity` (parity.hpp): the recipe trained on one rank (once per micro-batch size among
// the layouts) and in each layout, each run a real `loom run` of its own resolved recipe (the
// layouts under mpirun or srun), then each layout's metrics file and final checkpoint compared
// with its one-rank run's (parity_compare.cpp).
#include "eval/parity.hpp"

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
#include <set>
#include <sstream>

#include "base/errors.hpp"
#include "base/text_table.hpp"
#include "checkpoint/checkpoint_tools.hpp"
#include "eval/parity_compare.hpp"
#include "eval/parity_launch.hpp"
#include "loader/registry.hpp"
#include "recipe/parallel_layout.hpp"
#include "recipe/recipe.hpp"
#include "session/config_check.hpp"
#include "train/batch_check.hpp"
#include "train/memory_estimate.hpp"
#include "train/train_run.hpp"

namespace fs = std::filesystem;

namespace loom::engine {

namespace {

using parity::compare_runs;
using parity::likely_cause;
using parity::num;
using parity::Outcome;
using parity::seconds_str;
using parity::Tolerances;
using parity::worst_tensor;

// The [parallel] keys a layout decides; the recipe's own values are replaced.
const char* const kLayoutKeys[] = {
    "tensor",         "pipeline",          "context",      "expert", "expert_tensor",
    "virtual_stages", "sequence_parallel", "cp_comm_type", "data"};

// The batch every run shares: the recipe's micro-batch (a layout's mbN replaces it), and the
// global batch set in every run (0: the recipe's).
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
// none, the least common multiple of the layouts' data-parallel sizes x the recipe's
// micro-batch and x their own (so that every layout, and every one-rank reference of its
// micro-batch size, accumulates whole micro-batches). Fuzzed layouts are drawn later, with degrees
// that are powers of two up to
// --max-ranks: the recipe's micro-batch x the largest such power.
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
  for (const ParityLayout& l : layouts)
    lcm = std::lcm(std::lcm(lcm, b.micro * l.data), (l.micro > 0 ? l.micro : b.micro) * l.data);
  if (o.fuzz > 0) {
    int64_t ranks = 1;
    while (ranks * 2 <= o.max_ranks) ranks *= 2;
    lcm = std::lcm(lcm, b.micro * ranks);
  }
  b.global = lcm;
  return b;
}

std::string run_dir_name(const std::string& token) {
  std::string name = token;
  for (char& c : name)
    if (c == '+') c = '_';
  return name;
}

// The one-rank runs the layouts are compared with, one per micro-batch size. That size is a
// hyperparameter, not a layout: Megatron's BERT and T5 losses are the mean over each
// micro-batch's targets, averaged over the micro-batches, and Switch's balancing loss is
// computed per micro-batch, so mb1 against the recipe's mb2 changes the gradient itself. A
// layout with mbN is held to one rank with mbN, whatever the model. Each reference is
// validated before any run, and run once, before the first layout that needs it.
struct Reference {
  fs::path dir, recipe;
  bool ran = false;
  double seconds = 0;
};

struct References {
  const ParityOptions& o;
  const Batch& batch;
  fs::path folder;
  Registry& registry;
  std::map<int64_t, Reference> by_micro;

  int64_t micro_of(const ParityLayout& l) const { return l.micro > 0 ? l.micro : batch.micro; }

  // The reference `l` is compared with, its recipe written and validated (once per size);
  // UsageError when it is refused.
  Reference& prepare(const ParityLayout& l) {
    const int64_t micro = micro_of(l);
    if (auto it = by_micro.find(micro); it != by_micro.end()) return it->second;
    ParityLayout one = parse_parity_layout("tp1");
    one.token = "1 rank";
    Reference r;
    r.dir = folder / "1rank";
    if (micro != batch.micro) {
      one.sets.push_back("train.micro_batch_size=" + std::to_string(micro));
      r.dir += "-mb" + std::to_string(micro);
    }
    try {
      r.recipe = prepare_run(o, one, false, batch, r.dir, registry);
    } catch (const UsageError& e) {
      if (micro == batch.micro) throw;  // the recipe itself
      throw UsageError("its one-rank reference with micro-batch " + std::to_string(micro) + ": " +
                       e.what());
    }
    return by_micro.emplace(micro, r).first->second;
  }

  // Runs `micro`'s reference unless it ran; RunError with its log's end when it fails.
  const Reference& run(int64_t micro, const std::string& loom) {
    Reference& r = by_micro.at(micro);
    if (r.ran) return r;
    const std::string which = micro == batch.micro ? "" : ", micro-batch " + std::to_string(micro);
    spdlog::info("parity: 1 rank ({} iterations, {}{})", o.iters, o.dtype, which);
    const auto t0 = std::chrono::steady_clock::now();
    const fs::path log = r.dir / "log.txt";
    const int rc = run_logged({loom, "run", r.recipe.string()}, log);
    if (rc != 0)
      throw RunError("loom parity: the single-rank run" + which + " failed (exit " +
                     std::to_string(rc) + "); its log " + log.string() + " ends:\n" +
                     log_tail(log, 15));
    r.seconds = since(t0);
    r.ran = true;
    return r;
  }
};

// --fuzz's layouts, each kept only when it and its one-rank reference are valid (their recipes
// validated in a scratch folder, the reference's kept).
std::vector<ParityLayout> drawn_layouts(const ParityOptions& o, const Batch& batch,
                                        References& refs, const fs::path& folder,
                                        Registry& registry) {
  const fs::path scratch = folder / "drawing";
  const std::vector<std::string> drawn =
      draw_parity_layouts(o.fuzz, o.seed, o.max_ranks, [&](const std::string& token) {
        try {
          const ParityLayout l = parse_parity_layout(token);
          prepare_run(o, l, true, batch, scratch, registry);
          refs.prepare(l);
          return std::string();
        } catch (const UsageError& e) {
          return std::string(e.what());
        }
      });
  fs::remove_all(scratch);
  std::vector<ParityLayout> layouts;
  for (const std::string& t : drawn) layouts.push_back(parse_parity_layout(t));
  return layouts;
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

// One layout's run under the launcher, compared with its one-rank reference's (in `one_dir`).
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
  compare_runs(one_dir, dir, order, tol, r);
  return r;
}

// What the layouts were compared with: "1 rank took 1.3 s", or, when a layout changed the
// micro-batch size, each size's one-rank run, the recipe's first.
std::string references_line(const References& refs) {
  std::vector<std::pair<int64_t, const Reference*>> ran;
  for (const auto& [micro, r] : refs.by_micro)
    if (r.ran) ran.emplace_back(micro, &r);
  std::stable_partition(ran.begin(), ran.end(),
                        [&](const auto& r) { return r.first == refs.batch.micro; });
  if (ran.size() == 1 && ran[0].first == refs.batch.micro)
    return "1 rank took " + seconds_str(ran[0].second->seconds);
  std::string line = "1 rank took ";
  for (size_t i = 0; i < ran.size(); ++i)
    line += (i ? ", " : "") + seconds_str(ran[i].second->seconds) + " with micro-batch " +
            std::to_string(ran[i].first) +
            (ran[i].first == refs.batch.micro ? " (the recipe's)" : "");
  return line;
}

// The table, each failure's reasons and likely cause, the summary; the number that failed.
// With more than one micro-batch size among the layouts, a REFERENCE column names the
// one-rank run each row is compared with.
int report(const ParityOptions& o, const std::vector<Outcome>& outcomes, const Tolerances& tol,
           const References& refs, const RunFolder& folder, std::ostream& out) {
  const std::string how = tol.norm ? "||a-b||/||a||" : "max|a-b|/max|a|";
  out << "parity of " << o.recipe.string() << ": " << o.iters << " iterations in " << o.dtype
      << (refs.batch.global > 0 ? ", global batch " + std::to_string(refs.batch.global) : "")
      << "; " << references_line(refs) << "\n"
      << "tolerances: loss terms and grad norm " << num(tol.loss)
      << " relative (largest over the iterations), parameters " << num(tol.params) << " in " << how
      << " per tensor\n\n";
  std::set<int64_t> micros;
  for (const Outcome& r : outcomes) micros.insert(r.micro);
  const bool several = micros.size() > 1;
  std::vector<std::vector<std::string>> rows = {
      {"LAYOUT", "RANKS", "LOSS", "GRAD NORM", "PARAMS", "WORST TENSOR", "TIME", "RESULT"}};
  if (several) rows[0].insert(rows[0].begin() + 2, "REFERENCE");
  int failed = 0;
  for (const Outcome& r : outcomes) {
    const bool ok = r.problem.empty() && r.reasons.empty();
    failed += ok ? 0 : 1;
    if (!r.problem.empty()) {
      rows.push_back({r.token, std::to_string(r.world), "-", "-", "-", "-", seconds_str(r.seconds),
                      r.exit_code ? "ERROR (run failed)" : "ERROR"});
    } else {
      const TensorDiff* worst = worst_tensor(r);
      std::string result = "pass";
      if (!ok) result = r.first_bad.empty() ? "FAIL" : "FAIL: " + r.first_bad;
      rows.push_back({r.token, std::to_string(r.world), num(r.loss.rel), num(r.grad.rel),
                      worst ? num(worst->rel) : "-", worst ? worst->name : "-",
                      seconds_str(r.seconds), result});
    }
    if (several) rows.back().insert(rows.back().begin() + 2, "1 rank mb" + std::to_string(r.micro));
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
  References refs{o, batch, folder.path, registry, {}};
  // The recipe's own reference first: a recipe that is wrong is refused as such, not as a
  // layout's; it runs only when a layout keeps the recipe's micro-batch size.
  const fs::path one_recipe = refs.prepare(parse_parity_layout("tp1")).recipe;
  if (o.fuzz > 0) {
    layouts = drawn_layouts(o, batch, refs, folder.path, registry);
    out << "fuzz: " << layouts.size() << " layouts drawn from seed " << o.seed << " (at most "
        << o.max_ranks << " ranks)\n";
  }
  std::vector<fs::path> recipes, dirs;
  int max_world = 1;
  for (const ParityLayout& l : layouts) {
    dirs.push_back(folder.path / run_dir_name(l.token));
    for (size_t i = 0; i + 1 < dirs.size(); ++i)  // the same token twice
      if (dirs[i] == dirs.back()) dirs.back() += fmt::format(".{}", dirs.size());
    try {
      recipes.push_back(prepare_run(o, l, true, batch, dirs.back(), registry));
      refs.prepare(l);
    } catch (const UsageError& e) {
      throw UsageError("loom parity: layout '" + l.token + "': " + e.what());
    }
    max_world = std::max(max_world, l.world);
  }
  std::vector<std::string> order;
  try {
    order = model_param_names(one_recipe, registry);
  } catch (const std::exception& e) {
    spdlog::warn(
        "parity: the model's parameter order is unknown ({}); tensors are named in "
        "name order",
        e.what());
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
  std::vector<Outcome> outcomes;
  for (size_t i = 0; i < layouts.size(); ++i) {
    const int64_t micro = refs.micro_of(layouts[i]);
    try {
      const fs::path& one_dir = refs.run(micro, loom).dir;
      outcomes.push_back(
          run_layout(layouts[i], launcher, loom, recipes[i], dirs[i], one_dir, order, tol));
    } catch (const UsageError&) {
      folder.remove = false;
      throw;
    } catch (const RunError&) {  // a reference's run failed: its log stays
      folder.remove = false;
      throw;
    }
    Outcome& r = outcomes.back();
    r.micro = micro;
    if (r.problem.empty() && r.reasons.empty() && o.keep.empty())
      fs::remove_all(dirs[i]);
    else if (!(r.problem.empty() && r.reasons.empty()))
      folder.remove = false;
  }
  return report(o, outcomes, tol, refs, folder, out) ? 1 : 0;
}

}  // namespace loom::engine
