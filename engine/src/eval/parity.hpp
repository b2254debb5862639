// `loom parity`: a recipe trained on one rank and in parallel layouts, under the system's
// launcher (mpirun, srun), and every layout's losses, gradient norms and final parameters
// compared with the single rank's (parity.cpp; what tests/training/equivalence.sh checks
// for the built-in models, for any recipe and plugins).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
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
  int micro = 0;                  // mbN's N; 0: the recipe's micro-batch size
  std::vector<std::string> sets;  // "parallel.tensor=2", "train.micro_batch_size=1", ...
};
// Parses one token: parts joined by '+', each one of tpN, ppN, ppNvpM, cpN, epN, dpN, sp,
// zero1 (or dist), fsdp, fsdpN (= dpN+fsdp), zero2, zero3, etp, a2a, gpipe, recompute,
// selective, overlap, mbN, each at most once. Throws UsageError naming the part it does not
// know (and the grammar), a part given twice, or a flag without the degree it needs.
ParityLayout parse_parity_layout(const std::string& token);

struct ParityOptions {
  std::filesystem::path recipe;
  std::vector<std::string> layouts;  // tokens
  int64_t iters = 10;
  // fp64 by default: in fp32, a parameter whose gradient is exactly zero (an attention key
  // bias) turns rounding noise into steps of the size of the learning rate, and a correct
  // layout fails; in fp64 every correct layout matches to 1e-9.
  std::string dtype = "fp64";            // fp32 or fp64
  double rtol = -1;                      // < 0: the dtype's defaults
  std::vector<std::string> sets;         // every run
  std::vector<std::string> layout_sets;  // the layouts' runs only (to see a check fail)
  std::string mpiexec;                   // "" = mpirun, mpiexec or srun from PATH
  std::vector<std::string> mpiexec_args;
  std::filesystem::path keep;  // "" = a temporary folder, removed at the end
  int fuzz = 0;                // > 0: that many layouts drawn (draw_parity_layouts), no `layouts`
  uint64_t seed = 1;           // the draw's
  int max_ranks = 8;           // the drawn layouts' largest world
};

// Draws `n` different layout tokens from `seed` (the same ones on every machine): random
// degrees of TP, PP (with virtual stages or GPipe), CP (p2p or a2a), EP (with ETP), DP (DDP,
// ZeRO-1, FSDP at stage 2 or 3), SP, recompute, overlap and micro-batch size, powers of two
// with 2 to `max_ranks` ranks, each kept only when `refusal(token)` returns "" (the recipe's
// model and batch split that way). Fewer than `n` when the attempts run out.
std::vector<std::string> draw_parity_layouts(
    int n, uint64_t seed, int max_ranks,
    const std::function<std::string(const std::string&)>& refusal);

// Runs everything, prints the table to `out`; 0 when every layout passes, 1 when one does
// not (or its run failed). Each layout is compared with a one-rank run of its own micro-batch
// size (one per size, run once): the size can change the objective itself (Megatron's BERT
// and T5 losses are means per micro-batch, Switch's balancing loss is per micro-batch). Throws
// UsageError for a bad token or recipe (before any run) or a launcher that cannot start ranks
// (naming the fix), RunError when the single-rank run fails. The runs of failed layouts stay (their
// folder is printed).
int run_parity(const ParityOptions& o, Registry& registry, std::ostream& out);

}  // namespace loom::engine
