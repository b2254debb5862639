// `loom parity`'s launcher (parity_launch.cpp): finding mpirun, mpiexec or srun, running a
// command with its output in a log, and telling a launcher that could not start ranks at all
// (OpenMPI as root, too few slots) from a layout whose run failed.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "eval/parity.hpp"

namespace loom::engine {

struct ParityLauncher {
  std::vector<std::string> argv;  // up to the rank count's option
  bool srun = false;
  // The command line that starts `ranks` copies of `command`.
  std::vector<std::string> line(int ranks, const std::vector<std::string>& command) const;
};

// --mpiexec's, else the first of mpirun, mpiexec, srun on PATH; UsageError when none is.
ParityLauncher find_parity_launcher(const ParityOptions& o);

// Runs argv (stdin from /dev/null, stdout and stderr to `log`); its exit status, 128 + the
// signal when one ended it. SIGINT and SIGTERM reach the command while it runs (ParitySignals
// installed), and then parity stops: QuietExit{128 + signal}.
int run_logged(const std::vector<std::string>& argv, const std::filesystem::path& log);

// Passes SIGINT and SIGTERM on to the command run_logged runs, while it lives.
struct ParitySignals {
  ParitySignals();
  ~ParitySignals();
  ParitySignals(const ParitySignals&) = delete;
  ParitySignals& operator=(const ParitySignals&) = delete;
};

// The last `lines` lines of a log, indented.
std::string log_tail(const std::filesystem::path& log, size_t lines);

// When `log` is a launcher's refusal to start any rank, what to do about it (the environment
// variables OpenMPI wants as root, --oversubscribe); "" when the log says nothing of the kind.
std::string launcher_refusal(const std::filesystem::path& log);

// Starts `ranks` copies of `true` under the launcher (not srun, which would queue for an
// allocation), before any layout's run: throws UsageError naming the fix when the launcher
// refuses, RunError with the log's end when it fails otherwise. The log stays in `log`.
void check_launcher(const ParityLauncher& l, int ranks, const std::filesystem::path& log);

}  // namespace loom::engine
