// libFuzzer harness: recipe loading (TOML++ parse, `include`, --set overrides) and
// validation against the engine's sections and plugin schemas (recipe_load.cpp,
// recipe_validate.cpp, recipe.cpp, engine_sections.cpp).
//
// Input: NUL-separated parts: recipe.toml, then base.toml (what the recipe may include),
// then --set overrides, one per part. A bad recipe must be refused with UsageError; a
// recipe that validates must come back the same from its own to_toml() (a checkpoint saves
// that text and `loom generate` rebuilds the run from it).
//
// The registry is a stand-in (plugins are not loaded): every kind offers the plugin names
// below, each with a schema of one key per type, a range, a choice list and, for the data
// plugins, a required key. The rest is the product's code.
#include <cmath>

#include "base/errors.hpp"
#include "fuzz_host.hpp"
#include "loader/registry.hpp"
#include "loom/cpp/plugin.hpp"
#include "recipe/recipe.hpp"

namespace loom::engine {

namespace {

constexpr loom_param_spec kParams[] = {
    loom::param("width", LOOM_PARAM_INT, "8", "an int with a range", 1, 4096),
    loom::param("rate", LOOM_PARAM_FLOAT, "0.5", "a float with a range", 0, 1),
    loom::param("scale", LOOM_PARAM_FLOAT, "1e300", "a float without one"),
    loom::param("mode", LOOM_PARAM_STRING, "a", "a string with choices", 1, 0, "a|b|c"),
    loom::param("label", LOOM_PARAM_STRING, "", "any string"),
    loom::param("on", LOOM_PARAM_BOOL, "false", "a bool"),
    loom::param("path", LOOM_PARAM_STRING, nullptr, "required (data plugins only)"),
};
constexpr size_t kNumParams = sizeof kParams / sizeof kParams[0];

const char* const kNames[] = {"cpu",
                              "meta",
                              "reference",
                              "flash-cpu",
                              "single",
                              "gpt",
                              "bert",
                              "t5",
                              "adamw",
                              "sgd",
                              "byte",
                              "hf-json",
                              "null",
                              "mock",
                              "jsonl",
                              "indexed",
                              "ddp",
                              "fsdp",
                              "distributed-optimizer",
                              "1f1b",
                              "interleaved"};

}  // namespace

struct Registry::Impl {
  std::map<std::pair<int, std::string>, PluginInfo> infos;
  std::map<std::pair<int, std::string>, loom_plugin_descriptor> descs;
};
Registry::Registry() : impl_(std::make_unique<Impl>()) {}
Registry::~Registry() = default;

std::string kind_name(loom_plugin_kind kind) { return "kind" + std::to_string(kind); }

const PluginInfo& Registry::get(loom_plugin_kind kind, const std::string& name) {
  const auto key = std::make_pair(static_cast<int>(kind), name);
  if (auto it = impl_->infos.find(key); it != impl_->infos.end()) return it->second;
  bool known = false;
  for (const char* n : kNames) known = known || name == n;
  if (!known) throw UsageError("no " + kind_name(kind) + " plugin '" + name + "'");
  const bool data = kind == LOOM_KIND_DATASET;
  loom_plugin_descriptor& d = impl_->descs[key];
  d = {LOOM_PLUGIN_DESCRIPTOR_SIZE_V2,
       LOOM_ABI_MAJOR,
       LOOM_ABI_MINOR,
       kind,
       "",
       "0",
       "",
       "",
       "",
       kParams,
       data ? kNumParams : kNumParams - 1,
       nullptr,
       nullptr,
       nullptr,
       nullptr};  // check_config
  PluginInfo& info = impl_->infos[key];
  info.kind = kind;
  info.name = name;
  info.desc = &d;
  d.name = info.name.c_str();
  return info;
}

}  // namespace loom::engine

namespace {

using loom::engine::Recipe;
using loom::engine::UsageError;

std::vector<std::string> split_nul(std::string_view s) {
  std::vector<std::string> parts;
  for (;;) {
    const size_t cut = s.find('\0');
    parts.emplace_back(s.substr(0, cut));
    if (cut == std::string_view::npos) return parts;
    s.remove_prefix(cut + 1);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static loom::engine::Registry registry;
  const std::vector<std::string> parts =
      split_nul(std::string_view(reinterpret_cast<const char*>(data), size));
  const std::string path = loomfuzz::put_file("recipe.toml", parts[0]);
  loomfuzz::put_file("base.toml", parts.size() > 1 ? parts[1] : "");
  const std::vector<std::string> overrides(parts.size() > 2 ? parts.begin() + 2 : parts.end(),
                                           parts.end());
  std::string text;
  try {
    Recipe r = Recipe::load(path, overrides);
    r.validate(registry);
    text = r.to_toml();
    (void)r.num_sections_set();
    for (const char* s : {"train", "model", "data", "parallel", "lr"})
      (void)r.section(s).values.size();
  } catch (const UsageError& e) {
    loomfuzz::note(e.what());
    return 0;
  }
  // What validated must validate again from its own text, to the same text.
  const std::string again = loomfuzz::put_file("resolved.toml", text);
  try {
    Recipe r = Recipe::load(again, {});
    r.validate(registry);
    if (r.to_toml() != text) {
      std::fprintf(stderr, "to_toml changed on reload:\n%s\n---\n%s\n", text.c_str(),
                   r.to_toml().c_str());
      std::abort();
    }
  } catch (const UsageError& e) {
    std::fprintf(stderr, "the resolved recipe does not load again: %s\n%s\n", e.what(),
                 text.c_str());
    std::abort();
  }
  return 0;
}
