// `loom checkpoint`, `loom parity`, `loom import-hf` and `loom export-hf`: the commands that
// read, compare, convert or check checkpoints. Their options are checked here; the work is in
// checkpoint_tools.cpp, parity*.cpp and hf_interop.cpp.
#include <cmath>
#include <filesystem>
#include <sstream>

#include "checkpoint/checkpoint_tools.hpp"
#include "checkpoint/hf_interop.hpp"
#include "cli/command.hpp"
#include "eval/parity.hpp"
#include "loader/registry.hpp"

namespace fs = std::filesystem;

namespace loom::engine::cli {

int cmd_checkpoint(const std::vector<std::string>& args) {
  Command c("checkpoint",
            "merge DIR OUT.safetensors | diff DIR1 DIR2 [--rtol R] | convert SRC DST --tensor N "
            "--pipeline M [--virtual-stages V]");
  c.hidden.add_options()("what", po::value<std::string>(), "merge, diff or convert")(
      "a", po::value<std::string>(), "checkpoint")("b", po::value<std::string>(), "second path");
  c.options.add_options()("rtol", po::value<double>()->default_value(1e-5),
                          "diff: largest max|a-b| / max|a| accepted per tensor")(
      "norm", "diff: compare ||a-b||_2 / ||a||_2 instead")(
      "tensor", po::value<int>()->default_value(1), "convert: target tensor-parallel size")(
      "pipeline", po::value<int>()->default_value(1), "convert: target pipeline-parallel size")(
      "virtual-stages", po::value<int>()->default_value(1),
      "convert: target virtual pipeline stages per rank")(
      "overwrite",
      "merge, convert: replace an existing output (convert: write over the "
      "checkpoints in DST)");
  add_set_option(c);
  c.positional.add("what", 1).add("a", 1).add("b", 1);
  if (!c.parse(args)) return 0;
  std::string what = c.required<std::string>("what", "merge, diff or convert");
  fs::path a = c.required<std::string>("a", "DIR"), b = c.required<std::string>("b", "OUT");
  if (what == "merge") {
    checkpoint_merge(a, b, c.vm.count("overwrite"));
    return 0;
  }
  if (what == "diff") {
    const double rtol = c.vm["rtol"].as<double>();
    if (!(rtol >= 0) || !std::isfinite(rtol))
      throw UsageError("loom checkpoint diff: --rtol must be a finite number >= 0, got " +
                       std::to_string(rtol));
    return checkpoint_diff(a, b, rtol, c.vm.count("norm"));
  }
  if (what == "convert") {
    const int t = c.vm["tensor"].as<int>(), p = c.vm["pipeline"].as<int>(),
              v = c.vm["virtual-stages"].as<int>();
    if (t < 1 || p < 1 || v < 1)
      throw UsageError(
          "loom checkpoint convert: --tensor, --pipeline and --virtual-stages must be >= 1");
    Registry registry;
    registry.discover();
    checkpoint_convert(a, b, t, p, v, c.list("set"), registry, c.vm.count("overwrite"));
    return 0;
  }
  throw UsageError("loom checkpoint: '" + what + "' is neither merge, diff nor convert");
}

int cmd_parity(const std::vector<std::string>& args) {
  Command c("parity",
            "RECIPE (--layouts L1,L2,... | --fuzz N [--seed S]) [--iters N] [options]\n\n"
            "Trains the recipe for N iterations on one rank, then in each layout under mpirun\n"
            "(or srun), with the same seed and global batch, and compares every iteration's\n"
            "loss terms and gradient norm and every final parameter (merged from the ranks'\n"
            "checkpoint shards) with the single rank's. In fp64 (the default) every value\n"
            "within 1e-9 (parameters element by element, max|a-b|/max|a|); in fp32 1e-5\n"
            "relative, parameters in ||a-b||/||a||, which a correct layout can miss (a zero\n"
            "gradient's rounding noise, amplified by Adam). Exit 0 when every layout passes,\n"
            "1 when one differs or fails (its runs are kept), 2 for a usage or recipe error or\n"
            "a launcher that cannot start ranks (the fix named).\n\n"
            "A layout is parts joined by '+', each at most once: tpN, ppN, ppNvpM (virtual\n"
            "stages), cpN, epN, dpN, sp, zero1 or dist (distributed optimizer), fsdp or fsdpN\n"
            "(= dpN+fsdp), zero2, zero3, etp, a2a, gpipe, zbh1, zbv, dualpipev (schedules;\n"
            "zbv and dualpipev place two chunks a rank in a V), recompute, selective, overlap,\n"
            "mbN (micro-batch size). Ranks: the product of the degrees. A layout with mbN is\n"
            "compared with one rank with micro-batch N (the size can change a model's loss,\n"
            "as Megatron's per-micro-batch means do). --fuzz N draws N valid layouts at\n"
            "random (reproducibly from --seed); a failure prints its layout for --layouts.\n"
            "See docs/parallelism.md.");
  ParityOptions o;
  std::string layouts;
  c.hidden.add_options()("recipe", po::value<std::string>(), "the recipe TOML file");
  c.options.add_options()("layouts", po::value<std::string>(&layouts),
                          "comma-separated layouts, e.g. tp2,pp2vp2,dp2+zero1,tp2+sp")(
      "iters", po::value<int64_t>(&o.iters)->default_value(o.iters), "iterations of every run")(
      "dtype", po::value<std::string>(&o.dtype)->default_value(o.dtype),
      "fp64 or fp32 (precision.dtype; fp64 leaves only rounding, at 1e-9)")(
      "fuzz", po::value<int>(&o.fuzz), "draw this many valid layouts at random instead")(
      "seed", po::value<uint64_t>(&o.seed)->default_value(o.seed), "--fuzz's draw")(
      "max-ranks", po::value<int>(&o.max_ranks)->default_value(o.max_ranks),
      "--fuzz: the largest layout, in ranks (OpenMPI oversubscribes the cores)")(
      "rtol", po::value<double>(),
      "one tolerance for the loss, the grad norm and the parameters, instead of the dtype's")(
      "layout-set", po::value<std::vector<std::string>>()->composing(),
      "override a recipe key in the layouts' runs only (to see the check fail)")(
      "mpiexec", po::value<std::string>(&o.mpiexec),
      "the launcher (default: mpirun, mpiexec or srun from PATH)")(
      "mpiexec-arg", po::value<std::vector<std::string>>()->composing(),
      "one more argument for the launcher, before -np (repeatable)")(
      "keep", po::value<std::string>(),
      "run in this new folder and keep it (recipes, logs, metrics, checkpoints)");
  add_set_option(c);
  c.positional.add("recipe", 1);
  if (!c.parse(args)) return 0;
  o.recipe = c.required<std::string>("recipe", "RECIPE");
  if (!c.vm.count("layouts") && !c.vm.count("fuzz"))
    throw UsageError("loom parity: missing --layouts or --fuzz (see loom parity --help)");
  if (c.vm.count("fuzz") && o.fuzz < 1)
    throw UsageError("loom parity: --fuzz must be a number of layouts >= 1, got " +
                     std::to_string(o.fuzz));
  std::stringstream list(layouts);
  for (std::string t; std::getline(list, t, ',');) o.layouts.push_back(t);
  if (!layouts.empty() && layouts.back() == ',') o.layouts.push_back("");
  if (c.vm.count("rtol")) {
    o.rtol = c.vm["rtol"].as<double>();
    if (!(o.rtol >= 0) || !std::isfinite(o.rtol))
      throw UsageError("loom parity: --rtol must be a finite number >= 0, got " +
                       std::to_string(o.rtol));
  }
  o.sets = c.list("set");
  o.layout_sets = c.list("layout-set");
  o.mpiexec_args = c.list("mpiexec-arg");
  if (c.vm.count("keep")) o.keep = c.vm["keep"].as<std::string>();
  Registry registry;
  registry.discover();
  return run_parity(o, registry, std::cout);
}

int cmd_import_hf(const std::vector<std::string>& args) {
  Command c("import-hf", "HF_DIR OUT_CHECKPOINT [--overwrite]");
  c.hidden.add_options()("hf", po::value<std::string>(), "HF model directory")(
      "out", po::value<std::string>(), "checkpoint folder to write");
  c.options.add_options()("overwrite", "write over the checkpoints already in OUT");
  c.positional.add("hf", 1).add("out", 1);
  if (!c.parse(args)) return 0;
  import_hf(c.required<std::string>("hf", "HF_DIR"), c.required<std::string>("out", "OUT"),
            c.vm.count("overwrite"));
  return 0;
}

int cmd_export_hf(const std::vector<std::string>& args) {
  Command c("export-hf",
            "CHECKPOINT OUT_DIR [--dtype D] [--max-shard-size BYTES] [--merge-lora] [--overwrite]");
  c.hidden.add_options()("ckpt", po::value<std::string>(), "checkpoint")(
      "out", po::value<std::string>(), "HF directory to write");
  c.options.add_options()("dtype", po::value<std::string>()->default_value(""),
                          "float32, bfloat16 or float16 (default: as imported, else float32)")(
      "max-shard-size", po::value<uint64_t>()->default_value(5000000000ull),
      "bytes per safetensors file; larger models are sharded with an index")(
      "merge-lora", "a LoRA run's checkpoint: write its weights with the adapters merged in")(
      "overwrite", "replace a non-empty OUT_DIR whole (its old files do not survive)");
  c.positional.add("ckpt", 1).add("out", 1);
  if (!c.parse(args)) return 0;
  Registry registry;
  registry.discover();
  export_hf(c.required<std::string>("ckpt", "CHECKPOINT"), c.required<std::string>("out", "OUT"),
            registry, c.vm["dtype"].as<std::string>(), c.vm["max-shard-size"].as<uint64_t>(),
            c.vm.count("overwrite"), c.vm.count("merge-lora"));
  return 0;
}

int cmd_export_peft(const std::vector<std::string>& args) {
  Command c("export-peft", "CHECKPOINT OUT_DIR [--overwrite]");
  c.hidden.add_options()("ckpt", po::value<std::string>(), "checkpoint")(
      "out", po::value<std::string>(), "adapter directory to write");
  c.options.add_options()("overwrite",
                          "replace a non-empty OUT_DIR whole (its old files do not survive)");
  c.positional.add("ckpt", 1).add("out", 1);
  if (!c.parse(args)) return 0;
  Registry registry;
  registry.discover();
  export_peft(c.required<std::string>("ckpt", "CHECKPOINT"), c.required<std::string>("out", "OUT"),
              registry, c.vm.count("overwrite"));
  return 0;
}

}  // namespace loom::engine::cli
