// checkpoint.finetune (TrainRun::finetune, train_run.hpp): a run that starts from pretrained
// weights only, as Megatron's --finetune / --no-load-optim: a Loom checkpoint of any
// layout, or a Hugging Face GPT-2 / Llama directory, cut for this rank's place in the
// layout; the optimizer starts fresh and the iteration at 0. The recipe's [model] keys must
// describe the checkpoint's model; a mismatch names both values. A new head (BERT's
// classifier) starts from its initialisation when checkpoint.finetune_fresh names it; any
// other parameter the checkpoint lacks is refused.
#include <spdlog/spdlog.h>
#include <toml++/toml.h>

#include <algorithm>

#include "base/errors.hpp"
#include "base/require_regular.hpp"
#include "checkpoint/hf_interop.hpp"
#include "train/train_run.hpp"

namespace fs = std::filesystem;

namespace loom::engine {
namespace {

// A Loom checkpoint's [model] keys (its resolved recipe), as TOML literals.
std::map<std::string, std::string> checkpoint_model_keys(const fs::path& folder) {
  std::map<std::string, std::string> out;
  toml::table t;
  require_regular_file((folder / "recipe.toml").string());
  try {
    t = toml::parse_file((folder / "recipe.toml").string());
  } catch (const toml::parse_error& e) {
    throw RunError((folder / "recipe.toml").string() + ": " + std::string(e.description()));
  }
  if (const toml::table* m = t["model"].as_table())
    for (auto& [k, node] : *m) {
      Value v;
      if (auto i = node.value<int64_t>(); i && node.is_integer())
        v.type = LOOM_PARAM_INT, v.i = *i;
      else if (auto f = node.value<double>(); f && node.is_floating_point())
        v.type = LOOM_PARAM_FLOAT, v.f = *f;
      else if (auto b = node.value<bool>())
        v.type = LOOM_PARAM_BOOL, v.b = *b;
      else if (auto s = node.value<std::string>())
        v.type = LOOM_PARAM_STRING, v.s = *s;
      else
        continue;
      out[std::string(k.str())] = toml_literal(v);
    }
  return out;
}

bool same_value(const std::string& a, const std::string& b) {
  if (a == b) return true;
  try {
    size_t i = 0, j = 0;
    const double x = std::stod(a, &i), y = std::stod(b, &j);
    return i == a.size() && j == b.size() && x == y;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

void TrainRun::finetune(const fs::path& dir) {
  FullCheckpoint full;
  std::map<std::string, std::string> theirs;
  int64_t their_vocab = 0;
  std::string where = dir.string();
  start_model = fs::absolute(dir).lexically_normal().string();  // (a Loom one's: below)
  if (is_hf_dir(dir)) {
    HfModel m = read_hf(dir);
    theirs = m.arch.model_keys;
    their_vocab = m.arch.vocab;
    full.main = std::move(m.tensors);
    hf_meta = {{"loom.hf_config", m.config.dump()}, {"loom.hf_dtype", m.dtype}};
  } else {
    Checkpoint ck = load_checkpoint(dir, "", "");
    where = ck.folder.string();
    start_model = fs::absolute(ck.folder).lexically_normal().string();
    // LoRA: the frozen weights stay in this folder, which the run's saves name
    if (frozen_params > 0) peft_base = fs::absolute(ck.folder).lexically_normal().string();
    full = merge_checkpoint(ck.folder, false, own_params());
    theirs = checkpoint_model_keys(ck.folder);
    hf_meta = hf_origin(ck.folder);
    const auto meta = model_metadata(ck.folder);
    if (auto it = meta.find("loom.vocab"); it != meta.end()) their_vocab = std::stoll(it->second);
  }
  std::map<std::string, std::string> ours;
  for (auto& [k, v] : recipe.section("model").values) ours[k] = toml_literal(v);
  resolve_model_defaults(ours);
  resolve_model_defaults(theirs);
  // Parameters named by checkpoint.finetune_fresh keep their initialisation (a new head).
  std::vector<std::string> fresh;
  std::string list = recipe.get_string("checkpoint", "finetune_fresh");
  for (size_t at = 0; at <= list.size();) {
    size_t comma = std::min(list.find(',', at), list.size());
    std::string p = list.substr(at, comma - at);
    p.erase(0, p.find_first_not_of(' '));
    p.erase(p.find_last_not_of(' ') + 1);
    if (!p.empty()) fresh.push_back(p);
    at = comma + 1;
  }
  // A new head on the same body may be another plugin (model/bert -> model/bert-classifier).
  if (!fresh.empty()) theirs.erase("plugin");
  // Initialisation and vocabulary padding do not describe the trained function, nor do the
  // adapters this run adds to it (or a LoRA run's that made the checkpoint).
  for (const char* k : {"init_std", "pad_vocab_to", "peft", "peft_rank", "peft_alpha",
                        "peft_dropout", "peft_target_modules"})
    theirs.erase(k);
  for (auto& [k, v] : theirs) {
    auto it = ours.find(k);
    if (it != ours.end() && !same_value(it->second, v))
      throw UsageError("checkpoint.finetune: model." + k + " is " + it->second +
                       " in the recipe but " + v + " in " + where +
                       (k == "plugin" ? "; a new head on the checkpoint's body (its parameters "
                                        "named by checkpoint.finetune_fresh) may change it"
                                      : ""));
  }
  if (their_vocab > 0 && their_vocab < vocab)
    throw UsageError("checkpoint.finetune: the recipe's tokenizer has " + std::to_string(vocab) +
                     " tokens but " + where + " was trained with " + std::to_string(their_vocab));
  std::vector<std::string> started;
  // LoRA's adapters start from their initialisation (B = 0: the pretrained function).
  auto is_fresh = [&](const std::string& name) {
    if (adapters.count(name)) return !full.main.count(name);
    for (const std::string& p : fresh)
      if (name.compare(0, p.size(), p) == 0) {
        started.push_back(name);
        return true;
      }
    return false;
  };
  std::string missing;  // a parameter the checkpoint lacks is a new head or a wrong checkpoint
  for (const loom_model_param& p : params) {
    const std::string name = p.name;
    const bool named = adapters.count(name) > 0 ||
                       std::any_of(fresh.begin(), fresh.end(), [&](const std::string& f) {
                         return name.compare(0, f.size(), f) == 0;
                       });
    if (!named && !full.main.count(name)) missing += (missing.empty() ? "" : ", ") + name;
  }
  for (const loom_model_param& b : buffers)  // a frozen base weight never learns: it must be there
    if (b.frozen && !full.main.count(b.name))
      missing += (missing.empty() ? "" : ", ") + std::string(b.name);
  if (!missing.empty())
    throw UsageError("checkpoint.finetune: " + where + " has no " + missing +
                     "; a new head starts fresh when checkpoint.finetune_fresh names it (e.g. "
                     "\"classifier\")");
  load_full(full, where, false, is_fresh);
  spdlog::info("finetuning from {}: weights only, a fresh optimizer, iteration 0", where);
  if (!fresh.empty()) {
    std::string names;
    for (const std::string& n : started) names += (names.empty() ? "" : ", ") + n;
    spdlog::info(
        "checkpoint.finetune_fresh: {} parameter(s) start from their initialisation "
        "on this rank: {}",
        started.size(), names.empty() ? "none" : names);
  }
}

Recipe inference_recipe(const fs::path& dir, const std::vector<std::string>& overrides,
                        const std::vector<std::string>& extra, Registry& registry) {
  std::vector<std::string> sets = {"parallel.tensor=1",
                                   "parallel.pipeline=1",
                                   "parallel.virtual_stages=1",
                                   "parallel.context=1",
                                   "parallel.sequence_parallel=false",
                                   "comm.plugin=single"};
  sets.insert(sets.end(), overrides.begin(), overrides.end());
  for (std::string s :
       {"checkpoint.load=", "checkpoint.save=", "train.metrics=", "train.tensorboard=",
        "train.eval_interval=0", "train.iters=1", "train.global_batch_size=0",
        "train.objective=lm"})  // the weights of a DPO run read as a language model's
    sets.push_back(s);
  sets.push_back("checkpoint.finetune=" + dir.string());
  sets.insert(sets.end(), extra.begin(), extra.end());
  Recipe recipe = Recipe::load(dir / "recipe.toml", sets);
  recipe.drop_section("data");
  recipe.validate(registry);
  // Generation, evaluation and serving report no MFU, so the backend's GEMM benchmark at
  // start-up (backend/cpu's measure_gemm: a 2048^3 sgemm, 0.65 s of every `loom generate`
  // on 2 cores) is skipped unless the caller's --set asks for it.
  const std::string gemm = "backend.measure_gemm";
  const bool asked = std::any_of(overrides.begin(), overrides.end(), [&](const std::string& s) {
    return s.compare(0, gemm.size() + 1, gemm + "=") == 0;
  });
  const loom_plugin_descriptor* be = registry.get(LOOM_KIND_BACKEND, recipe.plugin("backend")).desc;
  const bool declared =
      std::any_of(be->params, be->params + be->num_params,
                  [](const loom_param_spec& p) { return std::string(p.name) == "measure_gemm"; });
  if (declared && !asked) {
    recipe.set(gemm + "=false");
    recipe.validate(registry);
  }
  return recipe;
}

}  // namespace loom::engine
