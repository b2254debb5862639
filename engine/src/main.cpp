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
#include <sstream>

#include "batch_check.hpp"
#include "checkpoint_tools.hpp"
#include "config_check.hpp"
#include "data_inspect.hpp"
#include "data_samples.hpp"
#include "errors.hpp"
#include "eval.hpp"
#include "generate.hpp"
#include "hf_interop.hpp"
#include "host.hpp"
#include "launch.hpp"
#include "log.hpp"
#include "memory_estimate.hpp"
#include "package.hpp"
#include "parallel_layout.hpp"
#include "parity.hpp"
#include "preprocess.hpp"
#include "recipe.hpp"
#include "recipe_docs.hpp"
#include "registry.hpp"
#include "serve.hpp"
#include "text_table.hpp"
#include "train.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;
using namespace loom::engine;

namespace {

const char* const kUsage =
    "usage: loom <command> [options]\n"
    "\n"
    "commands:\n"
    "  run RECIPE [--set section.key=value]...   train as the recipe says\n"
    "  validate RECIPE [--set ...] [--print]     check a recipe without running it\n"
    "  plugins [--load]                          list plugins and refused libraries\n"
    "  plugins describe KIND/NAME                a plugin's description and recipe keys\n"
    "  generate --checkpoint DIR --prompt TEXT   sample text from a checkpoint\n"
    "  serve --checkpoint DIR [--port 5000]      HTTP: Megatron's /api, OpenAI's /v1/...\n"
    "  eval --checkpoint DIR --task T --data F   WikiText perplexity or LAMBADA accuracy\n"
    "  data samples RECIPE --split S --count N   the first samples of a split, in training order\n"
    "  data inspect PREFIX [--tokenizer NAME]    what a .bin/.idx indexed dataset holds\n"
    "  preprocess --input F --output-prefix P    JSON lines -> Megatron .bin/.idx (see --help)\n"
    "  checkpoint merge DIR OUT.safetensors      a checkpoint of any layout as full tensors\n"
    "  checkpoint diff DIR1 DIR2 [--rtol R]      compare two checkpoints' models (--norm)\n"
    "  checkpoint convert SRC DST --tensor N --pipeline M   rewrite for another layout\n"
    "  parity RECIPE --layouts tp2,pp2,...       train on 1 rank and in each layout (mpirun),\n"
    "                                            compare losses and parameters; 1 if any differ\n"
    "  import-hf HF_DIR OUT                      a Hugging Face GPT-2/Llama model as a checkpoint\n"
    "  export-hf CHECKPOINT OUT_DIR              a checkpoint as a Hugging Face model directory\n"
    "  pack DIR [-o OUT.tar.gz]                  package a plugin .so with its LICENSE\n"
    "  install PKG.tar.gz [--dir DIR]            install a plugin package\n"
    "  version                                   Loom and plugin ABI versions\n"
    "\n"
    "`loom <command> --help` describes a command. Plugins are searched in LOOM_PLUGIN_PATH,\n"
    "the build tree, ~/.local/lib/loom/plugins and the install prefix; LOOM_LOG_LEVEL sets\n"
    "the log level (info).\n";

struct Command {
  std::string name, synopsis;
  std::string notes;                // shown by --help after the options
  po::options_description options;  // shown by --help
  po::options_description hidden;   // the positional arguments, named in the synopsis
  po::positional_options_description positional;
  po::variables_map vm;
  Command(std::string n, std::string syn)
      : name(std::move(n)), synopsis(std::move(syn)), options("options"), hidden("arguments") {
    options.add_options()("help,h", "show this help");
  }
  // Parses `args`; returns false when --help was printed.
  bool parse(const std::vector<std::string>& args) {
    try {
      po::options_description all;
      all.add(options).add(hidden);
      po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
      po::notify(vm);
    } catch (const po::error& e) {
      throw UsageError("loom " + name + ": " + std::string(e.what()) + " (see loom " + name +
                       " --help)");
    }
    if (vm.count("help")) {
      std::cout << "usage: loom " << name << " " << synopsis << "\n\n" << options << "\n";
      if (!notes.empty()) std::cout << notes << "\n";
      return false;
    }
    return true;
  }
  template <class T>
  T required(const std::string& key, const std::string& what) const {
    if (!vm.count(key))
      throw UsageError("loom " + name + ": missing " + what + " (see loom " + name + " --help)");
    return vm[key].as<T>();
  }
  std::vector<std::string> list(const std::string& key) const {
    return vm.count(key) ? vm[key].as<std::vector<std::string>>() : std::vector<std::string>{};
  }
};

void add_set_option(Command& c) {
  c.options.add_options()("set", po::value<std::vector<std::string>>()->composing(),
                          "override a recipe key: section.key=value (repeatable)");
}

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
      "ranks to lay out (default: the launcher's world size, else tensor x context x "
      "pipeline)")("memory",
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
  if (world <= 0) {
    loom::layout::Degrees d = layout_degrees(recipe);
    world = d.tensor * d.context * d.pipeline;
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

int cmd_generate(const std::vector<std::string>& args) {
  Command c("generate", "--checkpoint DIR --prompt TEXT [options]");
  GenerateOptions o;
  c.options.add_options()("checkpoint", po::value<std::string>(),
                          "checkpoint directory (or its parent, with `latest`)")(
      "prompt", po::value<std::string>(), "text to continue")(
      "max-new-tokens", po::value<int64_t>(&o.max_new_tokens)->default_value(o.max_new_tokens),
      "tokens to generate")("temperature",
                            po::value<double>(&o.temperature)->default_value(o.temperature),
                            "sampling temperature; 0 = greedy")(
      "top-k", po::value<int64_t>(&o.top_k)->default_value(o.top_k),
      "keep the k likeliest; 0 = off")("top-p", po::value<double>(&o.top_p)->default_value(o.top_p),
                                       "keep the smallest set with this probability mass; 1 = off")(
      "seed", po::value<uint64_t>(&o.seed)->default_value(o.seed), "sampling seed")(
      "logits-out", po::value<std::string>(),
      "write the logits of every prompt position to this safetensors file (tensor "
      "\"logits\", prompt tokens x vocabulary, f32)");
  add_set_option(c);
  if (!c.parse(args)) return 0;
  o.checkpoint = c.required<std::string>("checkpoint", "--checkpoint DIR");
  o.prompt = c.required<std::string>("prompt", "--prompt TEXT");
  o.overrides = c.list("set");
  if (c.vm.count("logits-out")) o.logits_out = c.vm["logits-out"].as<std::string>();
  if (o.max_new_tokens < 0 || o.max_new_tokens > (int64_t{1} << 30))
    throw UsageError("loom generate: --max-new-tokens must be from 0 to 1073741824, got " +
                     std::to_string(o.max_new_tokens));
  if (!(o.temperature >= 0)) throw UsageError("loom generate: --temperature must be >= 0");
  if (o.top_k < 0) throw UsageError("loom generate: --top-k must be >= 0");
  if (!(o.top_p > 0 && o.top_p <= 1)) throw UsageError("loom generate: --top-p must be in (0, 1]");
  Registry registry;
  registry.discover();
  generate(o, registry);
  return 0;
}

int cmd_serve(const std::vector<std::string>& args) {
  Command c("serve", "--checkpoint DIR [options]");
  ServeOptions o;
  c.options.add_options()("checkpoint", po::value<std::string>(),
                          "checkpoint directory (or its parent, with `latest`), or a Hugging "
                          "Face GPT-2/Llama directory")(
      "host", po::value<std::string>(&o.host)->default_value(o.host), "address to listen on")(
      "port", po::value<int>(&o.port)->default_value(o.port), "port; 0 = any free one")(
      "port-file", po::value<std::string>(), "write the port listened on to this file")(
      "model-name", po::value<std::string>(&o.model_name),
      "the model's id in /v1/models and responses (default: the checkpoint folder's name)")(
      "max-batch", po::value<int64_t>(&o.max_batch)->default_value(o.max_batch),
      "sequences decoded together (continuous batching)")(
      "max-queue", po::value<int64_t>(&o.max_queue)->default_value(o.max_queue),
      "requests waiting for a free sequence; beyond, 503")(
      "max-len", po::value<int64_t>(&o.max_len)->default_value(o.max_len),
      "tokens per sequence, prompt included; 0 = the model's context (or train.seq_len)")(
      "max-body", po::value<int64_t>(&o.max_body)->default_value(o.max_body),
      "largest request body in bytes; beyond, 413")(
      "max-connections", po::value<int64_t>(&o.max_connections)->default_value(o.max_connections),
      "open connections; beyond, 503")(
      "idle-timeout", po::value<double>(&o.idle_timeout)->default_value(o.idle_timeout),
      "seconds a connection may wait before a request's first byte (then it is closed), and "
      "a client may take to accept any byte of an answer")(
      "header-timeout", po::value<double>(&o.header_timeout)->default_value(o.header_timeout),
      "seconds for the rest of a request's header once it has begun; then 408")(
      "body-timeout", po::value<double>(&o.body_timeout)->default_value(o.body_timeout),
      "seconds for a request's body after its header; then 408");
  add_set_option(c);
  if (!c.parse(args)) return 0;
  o.checkpoint = c.required<std::string>("checkpoint", "--checkpoint DIR");
  o.overrides = c.list("set");
  if (c.vm.count("port-file")) o.port_file = c.vm["port-file"].as<std::string>();
  if (o.port < 0 || o.port > 65535) throw UsageError("loom serve: --port must be 0..65535");
  for (auto [v, name] : {std::pair{o.max_batch, "--max-batch"},
                         {o.max_body, "--max-body"},
                         {o.max_connections, "--max-connections"}})
    if (v < 1) throw UsageError(std::string("loom serve: ") + name + " must be >= 1");
  for (auto [v, name] : {std::pair{o.idle_timeout, "--idle-timeout"},
                         {o.header_timeout, "--header-timeout"},
                         {o.body_timeout, "--body-timeout"}})
    if (!(v > 0 && v <= 86400))
      throw UsageError(std::string("loom serve: ") + name + " must be > 0 and <= 86400 seconds");
  if (o.max_queue < 0 || o.max_len < 0)
    throw UsageError("loom serve: --max-queue and --max-len must be >= 0");
  Registry registry;
  registry.discover();
  serve(o, registry);
  return 0;
}

int cmd_eval(const std::vector<std::string>& args) {
  Command c("eval", "--checkpoint DIR --task wikitext|lambada --data FILE [options]");
  EvalOptions o;
  c.options.add_options()("checkpoint", po::value<std::string>(),
                          "checkpoint directory (any layout), or a Hugging Face GPT-2/Llama "
                          "directory")("task", po::value<std::string>(&o.task),
                                       "wikitext (perplexity) or lambada (cloze accuracy)")(
      "data", po::value<std::string>(),
      "wikitext: the raw text file (wiki.test.tokens); lambada: JSON lines with \"text\"")(
      "seq-len", po::value<int64_t>(&o.seq_len)->default_value(0),
      "tokens per window; 0 = the checkpoint's train.seq_len")(
      "overlapping-eval", po::value<int64_t>(&o.overlapping)->default_value(o.overlapping),
      "wikitext: stride of the windows; each window after the first scores its last this many "
      "tokens (Megatron's --overlapping-eval)")(
      "strict", po::bool_switch(&o.strict),
      "lambada: predict the whole last word, not just its last token (Megatron's "
      "--strict-lambada)")("micro-batch", po::value<int64_t>(&o.micro_batch)->default_value(0),
                           "samples per micro-batch; 0 = the checkpoint's train.micro_batch_size")(
      "output", po::value<std::string>(), "also write the results to this JSON file");
  add_set_option(c);
  c.notes = kEvalDataNotes;
  if (!c.parse(args)) return 0;
  o.checkpoint = c.required<std::string>("checkpoint", "--checkpoint DIR");
  o.data = c.required<std::string>("data", "--data FILE");
  if (o.task.empty()) throw UsageError("loom eval: --task wikitext|lambada is required");
  if (c.vm.count("output")) o.output = c.vm["output"].as<std::string>();
  o.overrides = c.list("set");
  if (o.overlapping < 1 || o.seq_len < 0 || o.micro_batch < 0)
    throw UsageError(
        "loom eval: --overlapping-eval must be >= 1, --seq-len and --micro-batch >= 0");
  Registry registry;
  registry.discover();
  evaluate_checkpoint(o, registry);
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
      "names the step's)");
  add_set_option(c);
  c.positional.add("recipe", 1);
  if (!c.parse(args)) return 0;
  Registry registry;
  Recipe recipe = load_and_validate(c, registry);
  print_samples(recipe, registry, c.vm["split"].as<std::string>(), c.vm["first"].as<int64_t>(),
                c.vm["count"].as<int64_t>(), std::cout);
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
            "(= dpN+fsdp), zero2, zero3, etp, a2a, gpipe, recompute, selective, overlap, mbN\n"
            "(micro-batch size). Ranks: the product of the degrees. A layout with mbN is\n"
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
  Command c("export-hf", "CHECKPOINT OUT_DIR [--dtype D] [--max-shard-size BYTES] [--overwrite]");
  c.hidden.add_options()("ckpt", po::value<std::string>(), "checkpoint")(
      "out", po::value<std::string>(), "HF directory to write");
  c.options.add_options()("dtype", po::value<std::string>()->default_value(""),
                          "float32, bfloat16 or float16 (default: as imported, else float32)")(
      "max-shard-size", po::value<uint64_t>()->default_value(5000000000ull),
      "bytes per safetensors file; larger models are sharded with an index")(
      "overwrite", "replace a non-empty OUT_DIR whole (its old files do not survive)");
  c.positional.add("ckpt", 1).add("out", 1);
  if (!c.parse(args)) return 0;
  Registry registry;
  registry.discover();
  export_hf(c.required<std::string>("ckpt", "CHECKPOINT"), c.required<std::string>("out", "OUT"),
            registry, c.vm["dtype"].as<std::string>(), c.vm["max-shard-size"].as<uint64_t>(),
            c.vm.count("overwrite"));
  return 0;
}

int dispatch(const std::vector<std::string>& argv) {
  if (argv.empty()) {
    std::cerr << kUsage;
    return 2;
  }
  const std::string& cmd = argv[0];
  std::vector<std::string> rest(argv.begin() + 1, argv.end());
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (cmd == "--version") return cmd_version({});
  if (cmd == "run") return cmd_run(rest);
  if (cmd == "validate") return cmd_validate(rest);
  if (cmd == "plugins") return cmd_plugins(rest);
  if (cmd == "generate") return cmd_generate(rest);
  if (cmd == "serve") return cmd_serve(rest);
  if (cmd == "eval") return cmd_eval(rest);
  if (cmd == "pack") return cmd_pack(rest);
  if (cmd == "checkpoint") return cmd_checkpoint(rest);
  if (cmd == "parity") return cmd_parity(rest);
  if (cmd == "import-hf") return cmd_import_hf(rest);
  if (cmd == "export-hf") return cmd_export_hf(rest);
  if (cmd == "install") return cmd_install(rest);
  if (cmd == "version") return cmd_version(rest);
  if (cmd == "docs") return cmd_docs(rest);
  if (cmd == "data") return cmd_data(rest);
  if (cmd == "preprocess") return cmd_preprocess(rest);  // preprocess.cpp
  std::string guess = nearest(
      cmd, {"run", "validate", "plugins", "generate", "serve", "eval", "pack", "install", "version",
            "data", "preprocess", "checkpoint", "parity", "import-hf", "export-hf"});
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
