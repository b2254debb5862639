// The `loom` command line: run, validate, plugins, generate, data, pack, install, version.
//
// Exit codes: 0 success; 2 a usage, recipe or plugin-selection error (one line on stderr:
// "loom: error: <reason>"); 1 a failure while running.
#include <spdlog/spdlog.h>

#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <numeric>
#include <sstream>

#include "base/errors.hpp"
#include "base/log.hpp"
#include "base/text_table.hpp"
#include "cli/command.hpp"
#include "data/data_inspect.hpp"
#include "data/data_samples.hpp"
#include "data/preprocess.hpp"
#include "loader/package.hpp"
#include "loader/probe_room.hpp"
#include "loader/registry.hpp"
#include "recipe/parallel_layout.hpp"
#include "recipe/recipe.hpp"
#include "recipe/recipe_docs.hpp"
#include "session/config_check.hpp"
#include "session/host.hpp"
#include "train/batch_check.hpp"
#include "train/launch.hpp"
#include "train/memory_estimate.hpp"
#include "train/train.hpp"

namespace fs = std::filesystem;
using namespace loom::engine;
using namespace loom::engine::cli;

namespace {

// Usage text after the command list.
const char* const kUsageTail =
    "\n"
    "`loom <command> --help` describes a command. Plugins are searched in LOOM_PLUGIN_PATH,\n"
    "the build tree, ~/.local/lib/loom/plugins and the install prefix; LOOM_LOG_LEVEL sets\n"
    "the log level (info).\n";

// A recipe without a [comm] plugin started as several ranks gets comm/mpi (logged once);
// one that names comm/single is refused, by every rank that names it, with the fix, rather
// than let every rank train alone (or fail on "world size 1 is not divisible by ...").
void follow_launcher(Recipe& recipe, bool validated) {
  const auto [world, rank] = launched_as();
  if (world <= 1) return;
  if (!validated) {
    if (recipe.sets("comm", "plugin")) return;
    recipe.set("comm.plugin=mpi");
    if (rank == 0)
      spdlog::info(
          "started as {} ranks by a launcher and the recipe names no comm plugin: "
          "using comm/mpi",
          world);
    return;
  }
  if (recipe.plugin("comm") != "single") return;
  // Every rank that says so prints it: the recipe (an MPMD block, an --set) may say it on one
  // rank only, and that rank's silent exit would leave the job a mystery.
  throw UsageError("rank " + std::to_string(rank) + ": started as " + std::to_string(world) +
                   " ranks by a launcher (mpirun, srun), but the recipe says comm.plugin = "
                   "\"single\", so every rank would train alone: set comm.plugin = \"mpi\" "
                   "(or leave [comm] out, which picks it under a launcher), or start one process");
}

Recipe load_and_validate(const Command& c, Registry& registry) {
  fs::path path = c.required<std::string>("recipe", "RECIPE");
  Recipe recipe = Recipe::load(path, c.list("set"));
  follow_launcher(recipe, false);
  registry.discover();
  recipe.validate(registry);
  follow_launcher(recipe, true);
  return recipe;
}

int cmd_run(const std::vector<std::string>& args) {
  Command c("run", "RECIPE [--set section.key=value]...");
  c.hidden.add_options()("recipe", po::value<std::string>(), "the recipe TOML file");
  add_set_option(c);
  c.positional.add("recipe", 1);
  if (!c.parse(args)) return 0;
  Registry registry;
  Recipe recipe = load_and_validate(c, registry);
  default_threads_per_rank(recipe);
  return run_training(recipe, registry);
}

int cmd_validate(const std::vector<std::string>& args) {
  Command c("validate", "RECIPE [--set section.key=value]... [--print] [--world N] [--memory]");
  c.hidden.add_options()("recipe", po::value<std::string>(), "the recipe TOML file");
  c.options.add_options()("print",
                          "print the resolved recipe (every key, defaults filled) as TOML")(
      "world", po::value<int>(),
      "ranks to lay out (default: the launcher's world size, else the fewest the layout "
      "takes: tensor x context x pipeline, with the data ranks expert parallelism needs)")(
      "memory",
      "print what each rank would hold (parameters, gradients, main parameters, "
      "optimizer state, buffers, activations), from one step walked through on "
      "backend/meta: nothing is computed or allocated");
  add_set_option(c);
  c.positional.add("recipe", 1);
  if (!c.parse(args)) return 0;
  Registry registry;
  Recipe recipe = load_and_validate(c, registry);
  if (c.vm.count("print")) {
    std::cout << recipe.to_toml();
    return 0;
  }
  std::string plugins;
  for (const PluginSection& s : plugin_sections()) {
    plugins += " " + kind_name(s.kind) + "/" + recipe.plugin(s.name);
    if (s.kind == LOOM_KIND_ATTENTION)
      plugins += " grad/" + recipe.get_string("parallel", "data") + " schedule/" +
                 recipe.get_string("parallel", "schedule");
  }
  if (c.vm.count("world") && c.vm["world"].as<int>() < 1)
    throw UsageError("loom validate: --world must be at least 1, got " +
                     std::to_string(c.vm["world"].as<int>()));
  int world = c.vm.count("world") ? c.vm["world"].as<int>() : launcher_world_size();
  if (world <= 0) {  // the smallest world the layout fits: expert parallelism needs data ranks
    loom::layout::Degrees d = layout_degrees(recipe);
    world = d.tensor * d.context * d.pipeline * (d.expert / std::gcd(d.expert, d.context));
  }
  check_layout(recipe, world);
  check_model_batch(recipe, registry);
  check_plugin_configs(recipe, registry, world);
  // What `loom run` would refuse about the folders it writes, before anything is built.
  if (std::string why = folder_refusal(recipe); !why.empty()) throw UsageError(why);
  std::cout << describe_layout(recipe, world);
  if (c.vm.count("memory")) {
    const std::vector<MemoryRole> roles =
        estimate_memory(recipe.path(), c.list("set"), recipe, world, registry);
    print_memory(roles, std::cout);
    std::cout << device_memory(recipe, registry, roles);
  }
  size_t n = recipe.num_sections_set();
  std::cout << "ok: " << recipe.path().string() << ": " << n << (n == 1 ? " section" : " sections")
            << ", plugins:" << plugins << "\n";
  return 0;
}

std::string join_words(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : "|") + w;
  return out;
}

std::pair<loom_plugin_kind, std::string> parse_kind_name(const std::string& text) {
  size_t slash = text.find('/');
  if (slash == std::string::npos)
    throw UsageError("expected KIND/NAME such as model/gpt, got '" + text + "'");
  std::string kind = text.substr(0, slash), name = text.substr(slash + 1);
  if (kind == "data") kind = "dataset";
  auto k = kind_from_name(kind);
  if (!k) {
    std::vector<std::string> kinds;
    for (int i = 1; i <= LOOM_KIND_SCHEDULE; ++i)
      kinds.push_back(kind_name(static_cast<loom_plugin_kind>(i)));
    std::string guess = nearest(kind, kinds);
    throw UsageError("unknown plugin kind '" + kind + "'" +
                     (guess.empty() ? "" : "; did you mean '" + guess + "'?"));
  }
  return {*k, name};
}

int describe(Registry& registry, const std::string& what) {
  auto [kind, name] = parse_kind_name(what);
  registry.discover();
  const PluginInfo& p = registry.get(kind, name);
  const std::string& section = section_of_kind()[kind];
  std::cout << kind_name(kind) << "/" << p.name << " " << p.version;
  if (!p.description.empty()) std::cout << ": " << p.description;
  std::cout << "\n  vendor " << (p.vendor.empty() ? "?" : p.vendor) << ", license "
            << (p.license.empty() ? "?" : p.license) << ", ABI " << p.abi_major << "."
            << p.abi_minor << "\n  " << p.path.string() << "\n";
  if (!p.capabilities.empty()) {
    std::cout << "  capabilities:";
    for (const std::string& c : p.capabilities) std::cout << " " << c;
    std::cout << "\n";
  }
  std::cout << "\n";
  std::cout << "selected with [" << section << "] " << selector_of_kind(kind) << " = \"" << p.name
            << "\"";
  if (p.desc->num_params == 0) {
    std::cout << "; it takes no keys\n";
    return 0;
  }
  std::cout << "; its keys:\n\n";
  std::vector<std::vector<std::string>> rows = {{"KEY", "TYPE", "DEFAULT", "RANGE", "DOC"}};
  for (size_t i = 0; i < p.desc->num_params; ++i) {
    const loom_param_spec& s = p.desc->params[i];
    Value v;
    std::string def = s.default_value == nullptr    ? "(required)"
                      : parse_default(s, v).empty() ? toml_literal(v)
                                                    : s.default_value;
    rows.push_back({s.name, type_name(s.type), def, describe_range(s), s.doc ? s.doc : ""});
  }
  print_table(rows, std::cout);
  return 0;
}

int cmd_plugins(const std::vector<std::string>& args) {
  Command c("plugins", "[--load] | describe KIND/NAME");
  c.options.add_options()("load",
                          "load every library (also packages) to check it, not only list it");
  c.hidden.add_options()("words", po::value<std::vector<std::string>>(), "describe KIND/NAME");
  c.positional.add("words", -1);
  if (!c.parse(args)) return 0;
  std::vector<std::string> words = c.list("words");
  Registry registry;
  if (!words.empty()) {
    if (words[0] != "describe" || words.size() != 2)
      throw UsageError("loom plugins: expected `loom plugins describe KIND/NAME`");
    return describe(registry, words[1]);
  }
  registry.discover(c.vm.count("load") > 0 ? Discovery::kLoadAll : Discovery::kList);
  std::vector<std::vector<std::string>> rows = {
      {"KIND", "NAME", "VERSION", "ABI", "VENDOR", "PATH"}};
  for (const PluginInfo& p : registry.plugins())
    rows.push_back({kind_name(p.kind), p.name, p.version,
                    std::to_string(p.abi_major) + "." + std::to_string(p.abi_minor), p.vendor,
                    p.path.string()});
  if (rows.size() > 1) {
    print_table(rows, std::cout);
  } else {
    std::cout << "no plugins found\n";
  }
  if (!registry.refused().empty()) {
    std::cout << "\nrefused:\n";
    for (const Refusal& r : registry.refused())
      std::cout << "  " << r.path.string() << ": " << r.reason << "\n";
  }
  std::string dirs;
  for (const fs::path& d : registry.search_paths()) dirs += (dirs.empty() ? "" : ":") + d.string();
  std::cout << "\nsearched: " << dirs << "\n";
  return 0;
}

int cmd_pack(const std::vector<std::string>& args) {
  Command c("pack", "DIR [-o OUT.tar.gz] [--overwrite]");
  c.hidden.add_options()("dir", po::value<std::string>(),
                         "folder with one plugin .so and its LICENSE");
  c.options.add_options()("output,o", po::value<std::string>(),
                          "archive to write (default <kind>-<name>-<version>.tar.gz)")(
      "overwrite", "replace an existing archive");
  c.positional.add("dir", 1);
  if (!c.parse(args)) return 0;
  fs::path dir = c.required<std::string>("dir", "DIR");
  fs::path out = c.vm.count("output") ? fs::path(c.vm["output"].as<std::string>()) : fs::path();
  fs::path written = pack_plugin(dir, out, c.vm.count("overwrite"));
  std::cout << "packed " << written.string() << "\n";
  return 0;
}

int cmd_install(const std::vector<std::string>& args) {
  Command c("install", "PKG.tar.gz [--dir DIR]");
  c.hidden.add_options()("package", po::value<std::string>(), "package made by `loom pack`");
  c.options.add_options()(
      "dir", po::value<std::string>(),
      "plugin folder (default: first LOOM_PLUGIN_PATH entry, else ~/.local/lib/loom/plugins)");
  c.positional.add("package", 1);
  if (!c.parse(args)) return 0;
  fs::path pkg = c.required<std::string>("package", "PKG.tar.gz");
  fs::path dir = c.vm.count("dir") ? fs::path(c.vm["dir"].as<std::string>()) : fs::path();
  if (ProbeRoom::landlock_abi() < 1)
    std::cerr << "loom install: warning: this kernel has no Landlock, so the package's code, "
                 "which installing runs, is not kept from writing outside its scratch folder "
                 "(docs/writing-a-plugin.md)\n";
  InstallResult r = install_package(pkg, dir);
  for (const std::string& old : r.replaced) std::cout << "replaced " << old << "\n";
  std::cout << "installed " << r.kind << "/" << r.name << " " << r.version << " into "
            << r.folder.string() << "\n";
  return 0;
}

int cmd_version(const std::vector<std::string>& args) {
  Command c("version", "");
  if (!c.parse(args)) return 0;
  std::cout << "loom " << engine_version() << " (plugin ABI " << LOOM_ABI_MAJOR << "."
            << LOOM_ABI_MINOR << ")\n";
  return 0;
}

// `loom data SUBCOMMAND ...`: tools over a recipe's data. Each subcommand parses its own
// options; add new ones (e.g. `inspect`) to the table below.
int cmd_data_samples(const std::vector<std::string>& args) {
  Command c("data samples", "RECIPE --split train|valid|test [--first K] --count N [--set ...]");
  c.hidden.add_options()("recipe", po::value<std::string>(), "the recipe TOML file");
  c.options.add_options()("split", po::value<std::string>()->default_value("train"),
                          "train, valid or test")("count", po::value<int64_t>()->default_value(10),
                                                  "samples to print")(
      "first", po::value<int64_t>()->default_value(0),
      "the first sample to print: a position in the split's order (a loss spike's log line "
      "names the step's)")(
      "targets", po::bool_switch(),
      "print each sample's tokens and the targets training reads (-1: not trained, by a chat "
      "dataset's loss mask or a packed document's end)");
  add_set_option(c);
  c.positional.add("recipe", 1);
  if (!c.parse(args)) return 0;
  Registry registry;
  Recipe recipe = load_and_validate(c, registry);
  print_samples(recipe, registry, c.vm["split"].as<std::string>(), c.vm["first"].as<int64_t>(),
                c.vm["count"].as<int64_t>(), std::cout, c.vm["targets"].as<bool>());
  return 0;
}

int cmd_data(const std::vector<std::string>& args) {
  const std::vector<std::pair<std::string, int (*)(const std::vector<std::string>&)>> subs = {
      {"samples", cmd_data_samples},
      {"inspect", cmd_data_inspect},
  };
  std::vector<std::string> names;
  for (const auto& [name, fn] : subs) names.push_back(name);
  if (args.empty())
    throw UsageError("loom data: expected a subcommand: " + join_words(names) +
                     " (see loom data --help)");
  if (args[0] == "--help" || args[0] == "-h") {
    std::cout << "usage: loom data <" << join_words(names) << "> ...\n";
    return 0;
  }
  std::vector<std::string> rest(args.begin() + 1, args.end());
  for (const auto& [name, fn] : subs)
    if (args[0] == name) return fn(rest);
  std::string guess = nearest(args[0], names);
  throw UsageError("unknown command 'loom data " + args[0] + "'" +
                   (guess.empty() ? " (see loom data --help)" : "; did you mean '" + guess + "'?"));
}

// Hidden: `loom docs recipes` prints docs/recipes.md.
int cmd_docs(const std::vector<std::string>& args) {
  Command c("docs", "recipes");
  c.hidden.add_options()("what", po::value<std::string>(), "recipes");
  c.positional.add("what", 1);
  if (!c.parse(args)) return 0;
  if (c.required<std::string>("what", "what to document (recipes)") != "recipes")
    throw UsageError("loom docs: only `loom docs recipes` exists");
  Registry registry;
  registry.discover(Discovery::kList);
  std::cout << recipes_markdown(registry);
  return 0;
}

// Every command once: its name, its function and its lines in `loom --help` (synopsis,
// what it does; none for a hidden one). The usage text, the dispatch and "did you mean" all
// read this table.
struct CommandEntry {
  const char* name;
  int (*run)(const std::vector<std::string>&);
  std::vector<std::pair<const char*, const char*>> help;
};

const std::vector<CommandEntry>& commands() {
  static const std::vector<CommandEntry> table = {
      {"run", cmd_run, {{"run RECIPE [--set section.key=value]...", "train as the recipe says"}}},
      {"validate",
       cmd_validate,
       {{"validate RECIPE [--set ...] [--print]", "check a recipe without running it"}}},
      {"plugins",
       cmd_plugins,
       {{"plugins [--load]", "list plugins and refused libraries"},
        {"plugins describe KIND/NAME", "a plugin's description and recipe keys"}}},
      {"generate",
       cmd_generate,
       {{"generate --checkpoint DIR --prompt TEXT", "sample text from a checkpoint"}}},
      {"serve",
       cmd_serve,
       {{"serve --checkpoint DIR [--port 5000]", "HTTP: Megatron's /api, OpenAI's /v1/..."}}},
      {"eval",
       cmd_eval,
       {{"eval --checkpoint DIR --task T --data F", "WikiText perplexity or LAMBADA accuracy"}}},
      {"data",
       cmd_data,
       {{"data samples RECIPE --split S --count N",
         "the first samples of a split, in training order"},
        {"data inspect PREFIX [--tokenizer NAME]", "what a .bin/.idx indexed dataset holds"}}},
      {"preprocess",
       cmd_preprocess,
       {{"preprocess --input F --output-prefix P",
         "JSON lines -> Megatron .bin/.idx (see --help)"}}},
      {"checkpoint",
       cmd_checkpoint,
       {{"checkpoint merge DIR OUT.safetensors", "a checkpoint of any layout as full tensors"},
        {"checkpoint diff DIR1 DIR2 [--rtol R]", "compare two checkpoints' models (--norm)"},
        {"checkpoint convert SRC DST --tensor N --pipeline M", "rewrite for another layout"}}},
      {"parity",
       cmd_parity,
       {{"parity RECIPE --layouts tp2,pp2,...", "train on 1 rank and in each layout (mpirun),"},
        {"", "compare losses and parameters; 1 if any differ"}}},
      {"import-hf",
       cmd_import_hf,
       {{"import-hf HF_DIR OUT", "a Hugging Face GPT-2/Llama model as a checkpoint"}}},
      {"export-hf",
       cmd_export_hf,
       {{"export-hf CHECKPOINT OUT_DIR", "a checkpoint as a Hugging Face model directory"}}},
      {"export-peft",
       cmd_export_peft,
       {{"export-peft CHECKPOINT OUT_DIR", "a LoRA run's adapters in HF PEFT's layout"}}},
      {"schedule",
       cmd_schedule,
       {{"schedule show NAME -p P -m M [--svg F]",
         "draw a pipeline schedule: F, B, W per rank, bubble"}}},
      {"pack", cmd_pack, {{"pack DIR [-o OUT.tar.gz]", "package a plugin .so with its LICENSE"}}},
      {"install", cmd_install, {{"install PKG.tar.gz [--dir DIR]", "install a plugin package"}}},
      {"version", cmd_version, {{"version", "Loom and plugin ABI versions"}}},
      {"docs", cmd_docs, {}},  // hidden: `loom docs recipes` prints docs/recipes.md
  };
  return table;
}

std::string usage() {
  std::string out = "usage: loom <command> [options]\n\ncommands:\n";
  constexpr size_t kColumn = 42;  // where the descriptions start, after two spaces
  for (const CommandEntry& c : commands())
    for (const auto& [synopsis, what] : c.help) {
      std::string line = "  " + std::string(synopsis);
      // A synopsis too long for the column gets three spaces before its description.
      line.append(line.size() < 2 + kColumn ? 2 + kColumn - line.size() : 3, ' ');
      out += line + what + "\n";
    }
  return out + kUsageTail;
}

int dispatch(const std::vector<std::string>& argv) {
  if (argv.empty()) {
    std::cerr << usage();
    return 2;
  }
  const std::string& cmd = argv[0];
  std::vector<std::string> rest(argv.begin() + 1, argv.end());
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::cout << usage();
    return 0;
  }
  if (cmd == "--version") return cmd_version({});
  std::vector<std::string> names;
  for (const CommandEntry& c : commands()) {
    if (cmd == c.name) return c.run(rest);
    names.emplace_back(c.name);
  }
  std::string guess = nearest(cmd, names);
  throw UsageError("unknown command '" + cmd + "'" +
                   (guess.empty() ? " (see loom --help)" : "; did you mean '" + guess + "'?"));
}

}  // namespace

int main(int argc, char** argv) {
  loom::engine::log::setup();
  try {
    return dispatch(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const QuietExit& q) {
    return q.code;
  } catch (const std::exception& e) {
    const int code = dynamic_cast<const UsageError*>(&e) ? 2 : 1;
    std::cout.flush();
    const std::string rank = job_abort_armed() ? "rank " + std::to_string(job_rank()) + ": " : "";
    std::fprintf(stderr, "loom: error: %s%s\n", rank.c_str(), one_line(e.what(), 2000).c_str());
    // One rank of a multi-rank job: the others may wait for it in a collective; end them all
    // rather than hang (the session left its plugins, and MPI, as they were).
    if (job_abort_armed()) abort_job(code);
    return code;
  }
}
