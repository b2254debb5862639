// `loom parity`'s launcher (parity_launch.hpp).
#include "eval/parity_launch.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/errors.hpp"

extern char** environ;

namespace fs = std::filesystem;

namespace loom::engine {

namespace {

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

// SIGINT or SIGTERM: passed on to the run in progress (a terminal's Ctrl-C reaches it anyway),
// and parity stops after it, removing its temporary folder.
volatile sig_atomic_t g_signal = 0;
volatile pid_t g_child = 0;

extern "C" void on_signal(int sig) {
  g_signal = sig;
  if (g_child > 0) ::kill(g_child, sig);
}

struct sigaction g_old_int {
}, g_old_term{};

}  // namespace

std::vector<std::string> ParityLauncher::line(int ranks,
                                              const std::vector<std::string>& command) const {
  std::vector<std::string> out = argv;
  out.push_back(srun ? "-n" : "-np");
  out.push_back(std::to_string(ranks));
  out.insert(out.end(), command.begin(), command.end());
  return out;
}

ParityLauncher find_parity_launcher(const ParityOptions& o) {
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
  ParityLauncher l;
  l.srun = exe.filename() == "srun";
  l.argv = {exe.string()};
  l.argv.insert(l.argv.end(), o.mpiexec_args.begin(), o.mpiexec_args.end());
  return l;
}

ParitySignals::ParitySignals() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &g_old_int);
  ::sigaction(SIGTERM, &sa, &g_old_term);
}

ParitySignals::~ParitySignals() {
  ::sigaction(SIGINT, &g_old_int, nullptr);
  ::sigaction(SIGTERM, &g_old_term, nullptr);
}

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

std::string log_tail(const fs::path& log, size_t lines) {
  std::ifstream in(log);
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  std::string out;
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i)
    out += "    " + all[i] + "\n";
  return out;
}

std::string launcher_refusal(const fs::path& log) {
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  // OpenMPI's words (4.x and 5.x); MPICH's Hydra and srun run as root and oversubscribe.
  if (s.find("attempt to run as root") != std::string::npos ||
      s.find("allow-run-as-root") != std::string::npos)
    return "OpenMPI's mpirun refuses to run as root; export OMPI_ALLOW_RUN_AS_ROOT=1 and "
           "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (or run as another user)";
  if (s.find("not enough slots") != std::string::npos)
    return "mpirun has fewer slots than the layout's ranks; add --mpiexec-arg --oversubscribe "
           "(or export OMPI_MCA_rmaps_base_oversubscribe=1)";
  return "";
}

void check_launcher(const ParityLauncher& l, int ranks, const fs::path& log) {
  if (l.srun) return;
  const int rc = run_logged(l.line(ranks, {"true"}), log);
  if (rc == 0) return;
  const std::string why = launcher_refusal(log);
  if (!why.empty())
    throw UsageError("loom parity: " + l.argv[0] + " cannot start " + std::to_string(ranks) +
                     " ranks: " + why + "; its log: " + log.string());
  throw RunError("loom parity: " + l.argv[0] + " cannot start " + std::to_string(ranks) +
                 " ranks of `true` (exit " + std::to_string(rc) + "); its log " + log.string() +
                 " ends:\n" + log_tail(log, 15));
}

}  // namespace loom::engine
