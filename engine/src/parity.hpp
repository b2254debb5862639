// `loom parity`: a recipe trained on one rank and in parallel layouts, under the system's
// launcher (mpirun, srun), and every layout's losses, gradient norms and final parameters
// compared with the single rank's (parity.cpp; what tests/training/equivalence.sh checks
// for the built-in models, for any recipe and plugins).
#pragma once

#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

namespace loom::engine {

class Registry;

// One layout token ("tp2+pp2", "dp2+zero1") as recipe keys (parity_layout.cpp).
struct ParityLayout {
  std::string token;
  int world = 1;                  // ranks: the product of the degrees
  int data = 1;                   // data-parallel ranks (world / tensor x context x pipeline)
  std::string grad = "ddp";       // parallel.data
  std::vector<std::string> sets;  // "parallel.tensor=2", ...
};
// Parses one token: parts joined by '+', each one of tpN, ppN, ppNvpM, cpN, epN, dpN, sp,
// zero1 (or dist), fsdp, fsdpN (= dpN+fsdp), zero2, zero3, etp, a2a, gpipe.
// Throws UsageError naming the part it does not know, and the grammar.
ParityLayout parse_parity_layout(const std::string& token);

struct ParityOptions {
  std::filesystem::path recipe;
  std::vector<std::string> layouts;  // tokens
  int64_t iters = 10;
  std::string dtype = "fp32";            // fp32 or fp64
  double rtol = -1;                      // < 0: the dtype's defaults
  std::vector<std::string> sets;         // every run
  std::vector<std::string> layout_sets;  // the layouts' runs only (to see a check fail)
  std::string mpiexec;                   // "" = mpirun, mpiexec or srun from PATH
  std::vector<std::string> mpiexec_args;
  std::filesystem::path keep;  // "" = a temporary folder, removed at the end
};

// Runs everything, prints the table to `out`; 0 when every layout passes, 1 when one does
// not (or its run failed). Throws UsageError for a bad token or recipe (before any run),
// RunError when the single-rank run fails.
int run_parity(const ParityOptions& o, Registry& registry, std::ostream& out);

}  // namespace loom::engine
