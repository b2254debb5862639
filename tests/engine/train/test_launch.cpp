// backend.threads' default under a launcher (launch.cpp) and the launchers' local size.
#include <doctest/doctest.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "engine_test_util.hpp"
#include "recipe/parallel_layout.hpp"
#include "recipe/recipe.hpp"
#include "train/launch.hpp"

using namespace loom::engine;
using namespace enginetest;

namespace {

// Every variable the choice reads, cleared for the test case and restored after it.
struct CleanLauncherEnv {
  std::vector<std::unique_ptr<ScopedEnv>> saved;
  CleanLauncherEnv() {
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                          "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE",
                          "LOCAL_WORLD_SIZE", "SLURM_STEP_TASKS_PER_NODE", "SLURM_CPUS_PER_TASK",
                          "OMP_NUM_THREADS", "SLURM_STEP_NUM_TASKS", "PMI_SIZE", "PMIX_SIZE"}) {
      saved.push_back(std::make_unique<ScopedEnv>(v, ""));
      ::unsetenv(v);
    }
  }
};

std::string omp_threads() {
  const char* v = std::getenv("OMP_NUM_THREADS");
  return v ? v : "(unset)";
}

}  // namespace

TEST_CASE("the launchers' ranks on this node") {
  CleanLauncherEnv clean;
  CHECK(launcher_local_size().first == 0);
  ::setenv("SLURM_STEP_TASKS_PER_NODE", "4(x2)", 1);
  CHECK(launcher_local_size().first == 4);
  ::setenv("SLURM_STEP_TASKS_PER_NODE", "4,3", 1);  // per node: not this node's
  CHECK(launcher_local_size().first == 0);
  ::setenv("LOCAL_WORLD_SIZE", "8", 1);
  CHECK(launcher_local_size().first == 8);
  ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  CHECK(launcher_local_size().first == 2);
  CHECK(std::string(launcher_local_size().second) == "OMPI_COMM_WORLD_LOCAL_SIZE");
}

TEST_CASE("backend threads under a launcher: the rank's share, unless told") {
  CleanLauncherEnv clean;
  TempDir dir;
  const Recipe plain = Recipe::load(write_file(dir / "r.toml", "[train]\nseed = 1\n"), {});
  const Recipe told = Recipe::load(dir / "r.toml", {"backend.threads=3"});

  default_threads_per_rank(plain);  // one process: nothing chosen
  CHECK(omp_threads() == "(unset)");

  ::setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  ::setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4096", 1);  // more ranks here than cores
  default_threads_per_rank(told);
  CHECK(omp_threads() == "(unset)");  // backend.threads wins
  default_threads_per_rank(plain);
  cpu_set_t mask;
  REQUIRE(sched_getaffinity(0, sizeof mask, &mask) == 0);
  const int bound = CPU_COUNT(&mask), cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
  CHECK(omp_threads() == std::to_string(bound < cores ? bound : 1));

  ::setenv("OMP_NUM_THREADS", "5", 1);  // the user's wins
  default_threads_per_rank(plain);
  CHECK(omp_threads() == "5");
  ::unsetenv("OMP_NUM_THREADS");
  ::setenv("SLURM_CPUS_PER_TASK", "6", 1);  // what SLURM gave each task
  default_threads_per_rank(plain);
  CHECK(omp_threads() == "6");
}
