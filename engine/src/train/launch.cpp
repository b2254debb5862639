// backend.threads' default under a launcher and the check that every rank runs one recipe
// (launch.hpp).
#include "train/launch.hpp"

#include <sched.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/errors.hpp"
#include "data/gpt_dataset.hpp"
#include "recipe/parallel_layout.hpp"
#include "recipe/recipe.hpp"
#include "session/host.hpp"
#include "train/train_run.hpp"

namespace loom::engine {
namespace {

// Settings of this rank's own hardware, which ranks on different nodes may set differently.
bool per_rank_key(const std::string& key) {
  return key == "backend.device" || key == "backend.threads" || key == "backend.blas_coretype";
}

int positive_env(const char* var) {
  const char* v = std::getenv(var);
  if (v == nullptr) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return end != v && n > 0 && n < (1 << 20) ? static_cast<int>(n) : 0;
}

}  // namespace

void default_threads_per_rank(const Recipe& recipe) {
  const auto [world, rank] = launched_as();
  if (world <= 1 || recipe.sets("backend", "threads") || std::getenv("OMP_NUM_THREADS")) return;
  cpu_set_t mask;
  const int bound = sched_getaffinity(0, sizeof mask, &mask) == 0 ? CPU_COUNT(&mask) : 0;
  const int cores = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  const auto [local, source] = launcher_local_size();
  int threads = 0;
  std::string why;
  if (const int per_task = positive_env("SLURM_CPUS_PER_TASK")) {
    threads = per_task;
    why = "SLURM_CPUS_PER_TASK";
  } else if (bound > 0 && bound < cores) {  // the launcher bound this rank to its own cores
    threads = bound;
    why = "the cores this rank is bound to";
  } else if (local > 0) {
    threads = std::max(1, cores / local);
    why = std::to_string(cores) + " cores / " + std::to_string(local) +
          " ranks on this node, from " + source;
  } else {
    return;  // the launcher does not say how many ranks share this node
  }
  setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);
  if (rank == 0)
    spdlog::info(
        "backend threads: {} per rank ({}); backend.threads or OMP_NUM_THREADS sets another "
        "number",
        threads, why);
}

namespace {

// "key = value" lines as (key, value) pairs.
std::vector<std::pair<std::string, std::string>> parse_lines(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> kv;
  for (size_t at = 0, end; at < text.size(); at = end + 1) {
    end = text.find('\n', at);
    const std::string line = text.substr(at, end - at);
    const size_t eq = line.find(" = ");
    kv.emplace_back(line.substr(0, eq), eq == std::string::npos ? "" : line.substr(eq + 3));
  }
  return kv;
}

// Rank `rank`'s complaint: its first key (in rank 0's order, then its own) whose value is not
// rank 0's, and how many differ.
std::string first_difference(const std::string& mine, const std::string& rank0, int rank) {
  const auto ours = parse_lines(mine), base = parse_lines(rank0);
  const std::map<std::string, std::string> ours_map(ours.begin(), ours.end()),
      base_map(base.begin(), base.end());
  std::vector<std::string> keys;
  for (const auto& kv : base) keys.push_back(kv.first);
  for (const auto& kv : ours)
    if (!base_map.count(kv.first)) keys.push_back(kv.first);
  int count = 0;
  std::string first;
  for (const std::string& key : keys) {
    const auto a = base_map.find(key), b = ours_map.find(key);
    const std::string va = a == base_map.end() ? "(no such key)" : a->second;
    const std::string vb = b == ours_map.end() ? "(no such key)" : b->second;
    if (va != vb && count++ == 0)
      first = key + ": rank 0 has " + va + ", rank " + std::to_string(rank) + " has " + vb;
  }
  return "rank " + std::to_string(rank) + ": this rank's recipe differs from rank 0's at " + first +
         " (" + std::to_string(count) + (count == 1 ? " key differs" : " keys differ") +
         "); every rank of a job must run the same recipe";
}

uint64_t hash_piece(const std::string& hex, int i) {
  return std::stoull(hex.substr(4 * (size_t)i, 4), nullptr, 16);
}

}  // namespace

void agree_on_recipe(const Recipe& recipe, const loom_backend_ref& be, const loom_comm_ref& comm) {
  const int world = comm.api->world_size(comm.self), rank = comm.api->world_rank(comm.self);
  if (world <= 1) return;
  std::string text;
  for (const auto& [key, value] : recipe.resolved_keys())
    if (!per_rank_key(key)) text += key + " = " + value + "\n";
  const std::string hash = sha256_hex(text.data(), text.size());
  // Rank 0's hash in 16-bit pieces (exact in a sum of doubles, where the others add zeros) and
  // its text's length; then how many ranks differ. A sum is what every comm has.
  double head[5] = {};
  if (rank == 0) {
    for (int i = 0; i < 4; ++i) head[i] = (double)hash_piece(hash, i);
    head[4] = (double)text.size();
  }
  sum_over(be, comm, nullptr, head, 5);
  bool same = true;
  for (int i = 0; i < 4; ++i) same = same && head[i] == (double)hash_piece(hash, i);
  double differing[1] = {same ? 0.0 : 1.0};
  sum_over(be, comm, nullptr, differing, 1);
  if (differing[0] == 0) return;

  // Rank 0's text to every rank; each differing rank names its first differing key.
  std::vector<double> bytes((size_t)head[4], 0.0);
  if (rank == 0)
    for (size_t i = 0; i < text.size(); ++i) bytes[i] = (unsigned char)text[i];
  sum_over(be, comm, nullptr, bytes.data(), (int64_t)bytes.size());
  std::string rank0(bytes.size(), '\0');
  for (size_t i = 0; i < bytes.size(); ++i) rank0[i] = (char)bytes[i];
  std::string message;
  if (rank == 0)
    message =
        "the ranks of this job resolved different recipes: " + std::to_string((int)differing[0]) +
        " of " + std::to_string(world) +
        " ranks differ from rank 0 (each names its first differing key); start every rank "
        "with the same recipe and --set overrides";
  else if (!same)
    message = first_difference(text, rank0, rank);
  if (!message.empty()) {
    std::fflush(stdout);
    std::fprintf(stderr, "loom: error: %s\n", message.c_str());
    std::fflush(stderr);
  }
  // Every rank has printed before any exits (the launcher ends the rest when one does), and
  // all stop here together: the comm finalizes as on a clean exit.
  double said[1] = {0};
  sum_over(be, comm, nullptr, said, 1);
  disarm_job_abort();
  throw QuietExit{2};
}

}  // namespace loom::engine
