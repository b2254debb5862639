// Logging: spdlog's default logger writes "[r<rank>] message" lines to stderr (stdout stays
// for command output such as generated text), at the level LOOM_LOG_LEVEL names
// (trace, debug, info, warn, error, off) on every rank. Without it rank 0 logs at info and
// the other ranks at warn. Warnings and errors say so: "[r0] warning: ...".
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace loom::engine::log {

// Installs the default logger. The rank starts from the launcher's environment
// (OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID, RANK) or 0. Safe to call again.
void setup();
// Changes the rank prefix once the comm plugin knows the rank.
void set_rank(int rank);
int rank();

// Progress of long work (loading, indexing, converting): on a terminal one line redrawn in
// place with a carriage return; otherwise an info line at most every `interval` seconds
// and one at the end, so logs stay readable.
class Progress {
 public:
  // `tty`: 1 or 0 forces the mode; -1 asks whether stderr is a terminal.
  Progress(std::string what, int64_t total, double interval_seconds = 10.0, int tty = -1);
  ~Progress();  // finishes when finish() was not called
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  void update(int64_t done);
  void finish();

 private:
  void print(bool final);
  std::string what_;
  int64_t total_, done_ = 0;
  double interval_;
  bool tty_, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace loom::engine::log
