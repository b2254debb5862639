// What a run started by a launcher (mpirun, srun, a torchrun-like one) owes to it: the CPU
// threads each rank may use, and the check that every rank was started with the same recipe.
#pragma once

#include "loom/loom.h"

namespace loom::engine {

class Recipe;

// backend.threads' default under a launcher, as torchrun sets OMP_NUM_THREADS: the cores of
// this node shared by the ranks on it (or SLURM_CPUS_PER_TASK, or the cores the launcher
// bound this rank to). Sets OMP_NUM_THREADS, which backend/cpu's threads = 0 follows, and logs
// the choice (rank 0). Nothing when the recipe sets backend.threads, OMP_NUM_THREADS is set,
// or the run is one process. Call before any plugin is loaded.
void default_threads_per_rank(const Recipe& recipe);

// Refuses, with exit 2 on every rank, a job whose ranks resolved different recipes (MPMD
// `mpirun -np 1 loom run A.toml : -np 1 loom run B.toml`, an --set on one rank): a hash of the
// resolved recipe is compared with rank 0's, and on a mismatch each differing rank names its
// first key that differs from rank 0's. Keys that choose this rank's own hardware
// (backend.device, threads, blas_coretype) may differ. COLLECTIVE over the world: the first
// thing a run communicates, so that ranks that would build different models never reach a
// collective of mismatched sizes.
void agree_on_recipe(const Recipe& recipe, const loom_backend_ref& be, const loom_comm_ref& comm);

}  // namespace loom::engine
