// `loom parity` (parity.hpp): the recipe trained on one rank and in each layout, each run a
// real `loom run` of its own resolved recipe (the layouts under mpirun or srun), then the
// metrics files and the final checkpoints compared: the loss terms and gradient norm of every
// iteration (read_metrics, the format Metrics writes) and every parameter tensor, merged from
// the ranks' shards (compare_models, as `loom checkpoint diff`).
#include "parity.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
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
#include "errors.hpp"
#include "memory_estimate.hpp"
#include "parallel_layout.hpp"
#include "recipe.hpp"
#include "registry.hpp"
#include "text_table.hpp"
#include "train_run.hpp"

extern char** environ;

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

struct Launcher {
  std::vector<std::string> argv;  // up to the rank count's option
  bool srun = false;
};

bool executable(const fs::path& p) {
  return ::access(p.c_str(), X_OK) == 0 && !fs::is_directory(p);
}

fs::path on_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return executable(name) ? fs::path(name) : fs::path();
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':'))
    if (!dir.empty() && executable(fs::path(dir) / name)) return fs::path(dir) / name;
  return {};
}

// mpirun, mpiexec or srun: --mpiexec's, else the first on PATH.
Launcher find_launcher(const ParityOptions& o) {
  fs::path exe;
  if (!o.mpiexec.empty()) {
    exe = on_path(o.mpiexec);
    if (exe.empty())
      throw UsageError("loom parity: --mpiexec " + o.mpiexec + " is not an executable" +
                       (o.mpiexec.find('/') == std::string::npos ? " on PATH" : ""));
  } else {
    for (const char* name : {"mpirun", "mpiexec", "srun"})
      if (exe = on_path(name); !exe.empty()) break;
    if (exe.empty())
      throw UsageError(
          "loom parity: no launcher found: neither mpirun, mpiexec nor srun is on PATH; install "
          "an MPI (OpenMPI's mpirun) or name one with --mpiexec PATH");
  }
  Launcher l;
  l.srun = exe.filename() == "srun";
  l.argv = {exe.string()};
  l.argv.insert(l.argv.end(), o.mpiexec_args.begin(), o.mpiexec_args.end());
  return l;
}

// SIGINT or SIGTERM: passed on to the run in progress (a terminal's Ctrl-C reaches it anyway),
// and parity stops after it, removing its temporary folder.
volatile sig_atomic_t g_signal = 0;
volatile pid_t g_child = 0;

extern "C" void on_signal(int sig) {
  g_signal = sig;
  if (g_child > 0) ::kill(g_child, sig);
}

struct SignalGuard {
  struct sigaction old_int {
  }, old_term{};
  SignalGuard() {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &old_int);
    ::sigaction(SIGTERM, &sa, &old_term);
  }
  ~SignalGuard() {
    ::sigaction(SIGINT, &old_int, nullptr);
    ::sigaction(SIGTERM, &old_term, nullptr);
  }
};

// Runs argv (stdin from /dev/null, stdout and stderr to `log`); its exit status, 128 + the
// signal when one ended it. Ends the command (exit 128 + the signal) when parity itself was
// signalled meanwhile.
int run_logged(const std::vector<std::string>& argv, const fs::path& log) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&files, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&files, 1, 2);
  pid_t pid = 0;
  const int err = posix_spawn(&pid, args[0], &files, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  if (err != 0) throw RunError("loom parity: cannot start " + argv[0] + ": " + std::strerror(err));
  g_child = pid;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw RunError("loom parity: waiting for " + argv[0] + " failed");
  g_child = 0;
  if (g_signal) {
    spdlog::warn("parity: stopped by signal {}", (int)g_signal);
    throw QuietExit{128 + g_signal};
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
}

std::string tail_of(const fs::path& log, size_t lines) {
  std::ifstream in(log);
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  std::string out;
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i)
    out += "    " + all[i] + "\n";
  return out;
}

// The run's recipe: the user's with --set, the layout's [parallel] keys (the recipe's own
// degrees, strategy and comm replaced), N iterations, the metrics file and a checkpoint at
// the end in `dir`, the dtype; validated against `world` ranks and written to dir/recipe.toml.
fs::path prepare_run(const ParityOptions& o, const ParityLayout& l, bool is_layout, int64_t gbs,
                     const fs::path& dir, Registry& registry) {
  Recipe r = Recipe::load(o.recipe, o.sets);
  for (const char* key : kLayoutKeys) r.drop_key("parallel", key);
  r.drop_section("comm");
  for (const char* key : {"tensorboard", "exit_interval", "exit_duration_mins"})
    r.drop_key("train", key);
  for (const char* key : {"load", "interval", "overwrite"}) r.drop_key("checkpoint", key);
  r.set("train.iters=" + std::to_string(o.iters));
  if (gbs > 0) r.set("train.global_batch_size=" + std::to_string(gbs));
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

const TensorDiff* worst_tensor(const Outcome& r) {
  const TensorDiff* w = nullptr;
  for (const TensorDiff& d : r.params)
    if (d.problem.empty() && (!w || d.rel > w->rel)) w = &d;
  return w;
}

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// A temporary folder removed at the end, unless it is --keep's.
struct RunFolder {
  fs::path path;
  bool remove = true;
  ~RunFolder() {
    std::error_code ec;
    if (remove && !path.empty()) fs::remove_all(path, ec);
  }
};

}  // namespace

int run_parity(const ParityOptions& o, Registry& registry, std::ostream& out) {
  // Everything a user can get wrong is refused before the first run.
  if (o.dtype != "fp32" && o.dtype != "fp64")
    throw UsageError("loom parity: --dtype must be fp32 or fp64, got '" + o.dtype + "'");
  if (o.iters < 1) throw UsageError("loom parity: --iters must be at least 1");
  if (o.rtol >= 0 && !std::isfinite(o.rtol))
    throw UsageError("loom parity: --rtol must be a finite number >= 0");
  if (o.layouts.empty()) throw UsageError("loom parity: --layouts names no layout");
  std::vector<ParityLayout> layouts;
  for (const std::string& t : o.layouts) layouts.push_back(parse_parity_layout(t));
  const Launcher launcher = find_launcher(o);
  if (!fs::is_regular_file(o.recipe))
    throw UsageError("loom parity: recipe " + o.recipe.string() + " is not a file");
  Tolerances tol;
  if (o.dtype == "fp64") tol = {1e-9, 1e-9, 1e-9, false};
  if (o.rtol >= 0) tol.loss = tol.grad = tol.params = o.rtol;

  RunFolder folder;
  if (!o.keep.empty()) {
    if (fs::exists(o.keep) && !(fs::is_directory(o.keep) && fs::is_empty(o.keep)))
      throw UsageError("loom parity: --keep " + o.keep.string() +
                       " exists and is not an empty folder");
    fs::create_directories(o.keep);
    folder.path = fs::absolute(o.keep);
    folder.remove = false;
  } else {
    std::string templ = (fs::temp_directory_path() / "loom-parity-XXXXXX").string();
    if (!::mkdtemp(templ.data())) throw RunError("loom parity: cannot make a temporary folder");
    folder.path = templ;
  }

  // One global batch for all: the recipe's, else micro-batch x every layout's data-parallel
  // size (their least common multiple), accumulated by the single rank.
  ParityLayout one = parse_parity_layout("tp1");
  one.token = "1 rank";
  int64_t gbs = 0;
  {
    Recipe r = Recipe::load(o.recipe, o.sets);
    for (const char* key : kLayoutKeys) r.drop_key("parallel", key);
    r.drop_section("comm");
    keep_grad_keys_of(r, registry, "ddp");
    r.validate(registry);
    if (r.get_int("train", "global_batch_size") == 0) {
      int64_t lcm = 1;
      for (const ParityLayout& l : layouts) lcm = std::lcm(lcm, (int64_t)l.data);
      gbs = r.get_int("train", "micro_batch_size") * lcm;
    }
  }
  std::vector<fs::path> recipes;
  const fs::path one_dir = folder.path / "1rank";
  recipes.push_back(prepare_run(o, one, false, gbs, one_dir, registry));
  std::vector<fs::path> dirs;
  for (const ParityLayout& l : layouts) {
    std::string name = l.token;
    for (char& c : name)
      if (c == '+') c = '_';
    dirs.push_back(folder.path / name);
    for (size_t i = 0; i + 1 < dirs.size(); ++i)  // the same token twice
      if (dirs[i] == dirs.back()) dirs.back() += "." + std::to_string(dirs.size());
    try {
      recipes.push_back(prepare_run(o, l, true, gbs, dirs.back(), registry));
    } catch (const UsageError& e) {
      throw UsageError("loom parity: layout '" + l.token + "': " + e.what());
    }
  }

  const SignalGuard signals;
  const std::string loom = fs::read_symlink("/proc/self/exe").string();
  // OpenMPI refuses more ranks than cores unless told; a parity check runs small layouts on
  // small machines (MPICH and srun ignore the variable).
  ::setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
  auto t0 = std::chrono::steady_clock::now();
  spdlog::info("parity: 1 rank ({} iterations, {})", o.iters, o.dtype);
  int rc = run_logged({loom, "run", recipes[0].string()}, one_dir / "log.txt");
  if (rc != 0)
    throw RunError("loom parity: the single-rank run failed (exit " + std::to_string(rc) +
                   "); its log " + (one_dir / "log.txt").string() + " ends:\n" +
                   tail_of(one_dir / "log.txt", 15));
  const double one_s = since(t0);
  std::vector<std::string> order;
  try {
    order = model_param_names(recipes[0], registry);
  } catch (const std::exception& e) {
    spdlog::warn(
        "parity: the model's parameter order is unknown ({}); tensors are named in "
        "name order",
        e.what());
  }

  std::vector<Outcome> outcomes;
  for (size_t i = 0; i < layouts.size(); ++i) {
    const ParityLayout& l = layouts[i];
    Outcome r;
    r.token = l.token;
    r.world = l.world;
    std::vector<std::string> argv = launcher.argv;
    argv.insert(argv.end(), {launcher.srun ? "-n" : "-np", std::to_string(l.world), loom, "run",
                             recipes[i + 1].string()});
    spdlog::info("parity: {} ({} ranks)", l.token, l.world);
    t0 = std::chrono::steady_clock::now();
    r.exit_code = run_logged(argv, dirs[i] / "log.txt");
    r.seconds = since(t0);
    if (r.exit_code != 0) {
      r.problem = "the run failed (exit " + std::to_string(r.exit_code) + "); its log " +
                  (dirs[i] / "log.txt").string() + " ends:\n" + tail_of(dirs[i] / "log.txt", 15);
    } else {
      try {
        compare_metrics(one_dir / "metrics.jsonl", dirs[i] / "metrics.jsonl", r);
        r.params = in_model_order(
            compare_models(one_dir / "checkpoint", dirs[i] / "checkpoint", tol.norm), order);
      } catch (const std::exception& e) {
        r.problem = e.what();
      }
    }
    if (r.problem.empty()) judge(r, tol);
    outcomes.push_back(std::move(r));
  }

  const std::string how = tol.norm ? "||a-b||/||a||" : "max|a-b|/max|a|";
  out << "parity of " << o.recipe.string() << ": " << o.iters << " iterations in " << o.dtype
      << (gbs > 0 ? ", global batch " + std::to_string(gbs) : "") << "; 1 rank took "
      << seconds_str(one_s) << "\n"
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
    if (!r.reasons.empty()) {
      out << "\n" << r.token << ": FAIL\n";
      for (const std::string& why : r.reasons) out << "  " << why << "\n";
    }
  }
  const size_t n = outcomes.size();
  std::string summary;
  if (n == 1)
    summary = failed ? "the layout fails the check" : "the layout matches 1 rank";
  else
    summary = failed
                  ? std::to_string(failed) + " of " + std::to_string(n) + " layouts fail the check"
                  : "all " + std::to_string(n) + " layouts match 1 rank";
  out << "\n"
      << summary << (o.keep.empty() ? "" : "; runs kept in " + folder.path.string()) << "\n";
  return failed ? 1 : 0;
}

}  // namespace loom::engine
