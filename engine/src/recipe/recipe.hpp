// Recipes: TOML files composed with `include`, overridden with --set, validated against
// the engine's and the selected plugins' schemas before anything runs.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "loader/schema.hpp"
#include "loom/common.h"
#include "loom/plugin.h"

namespace loom::engine {

class Registry;

}  // namespace loom::engine

// The host's implementation of the opaque loom_config: one validated recipe section.
struct loom_config {
  std::string section;  // "model", "train", ...
  std::map<std::string, loom::engine::Value> values;
};

namespace loom::engine {

class Recipe {
 public:
  // Parses `path` (and its includes) and applies `overrides` ("section.key=value").
  // Throws UsageError with file:line for a syntax error or a missing include.
  //
  // A top-level `include = "base.toml"` (or a list) names recipes resolved relative to the
  // including file; they merge key by key, later includes over earlier ones and the
  // including file over all of them (recursively; a cycle is an error). Each --set value
  // is parsed as a TOML value ("12", "true", "\"x\"") and taken as a string when it does
  // not parse as one (--set model.activation=gelu); a --set value for a string key is
  // always taken as written.
  static Recipe load(const std::filesystem::path& path, const std::vector<std::string>& overrides);
  // Forgets what the recipe says in `section` (before validate): a saved run's [data] when
  // `loom eval` reads its own files.
  void drop_section(const std::string& section) { raw_.erase(section); }
  // Whether the recipe's files or --set give section.key (before or after validate).
  bool sets(const std::string& section, const std::string& key) const {
    auto it = raw_.find(section);
    return it != raw_.end() && it->second.keys.count(key) > 0;
  }
  // Forgets one key the recipe sets (before validate).
  void drop_key(const std::string& section, const std::string& key) {
    auto it = raw_.find(section);
    if (it != raw_.end()) it->second.keys.erase(key);
  }
  // One more "section.key=value" as --set gives it (before validate).
  void set(const std::string& assignment);
  // Checks every section and key against the engine's sections and the schemas of the
  // plugins the recipe selects, fills defaults, checks types and ranges.
  // Throws UsageError: "<file>:<line>: unknown key 'model.n_layr'; did you mean 'n_layer'?"
  void validate(Registry& registry);

  // After validate every engine and plugin section exists, with defaults filled.
  const loom_config& section(const std::string& name) const;  // validated, defaults filled
  // Whether the recipe itself (its files or --set) mentions the section.
  bool has_section(const std::string& name) const;
  // The plugin a section selects: its `plugin` key ([parallel]: its `data` key); "" when
  // the section selects none or the recipe is not validated yet.
  std::string plugin(const std::string& section) const;
  const std::filesystem::path& path() const;
  std::string to_toml() const;  // the resolved recipe, for checkpoints
  // The resolved recipe as ("section.key", TOML literal) pairs, in to_toml's order.
  std::vector<std::pair<std::string, std::string>> resolved_keys() const;
  size_t num_sections_set() const;  // sections the recipe mentions (for `loom validate`)

  // Typed getters for engine sections (after validate). A key that is not declared, or is
  // declared with another type, throws RunError (an engine bug).
  int64_t get_int(const std::string& section, const std::string& key) const;
  double get_float(const std::string& section, const std::string& key) const;
  bool get_bool(const std::string& section, const std::string& key) const;
  std::string get_string(const std::string& section, const std::string& key) const;

  // A value as read from a recipe file or --set, before validation.
  struct RawValue {
    Value value;              // type is set only for bool/int/float/string
    std::string unsupported;  // "array", "table", "date", ... when not a scalar
    std::string set_text;     // the text after '=' for a --set value
    bool from_set = false;
  };
  struct RawSection {
    std::string file;
    int line = 0;
    std::map<std::string, RawValue> keys;
  };

 private:
  friend class RecipeValidator;                  // recipe_validate.cpp fills sections_ and order_
  bool apply_deterministic(Registry& registry);  // train.deterministic into plugin sections

  std::filesystem::path path_;
  std::map<std::string, RawSection> raw_;
  std::map<std::string, loom_config> sections_;
  // Section and key order for to_toml: engine sections, then plugin sections, keys in
  // schema order.
  std::vector<std::pair<std::string, std::vector<std::string>>> order_;
  bool validated_ = false;
};

// The engine's own sections and their keys, as loom_param_spec tables.
struct EngineSection {
  const char* name;
  const loom_param_spec* params;
  size_t num_params;
  const char* doc;  // one line
};
const std::vector<EngineSection>& engine_sections();  // train, checkpoint, precision, lr, parallel

// The sections that select and configure one plugin each: `plugin` picks it (default
// below); its keys are the engine-owned `extra` ones (`plugin` first, then e.g. [data]
// split) followed by the selected plugin's schema.
struct PluginSection {
  const char* name;  // "model"
  loom_plugin_kind kind;
  const char* default_plugin;
  const loom_param_spec* extra;  // engine-owned keys: `plugin`, then [data] split
  size_t num_extra;
  const char* doc;  // one line
};
const std::vector<PluginSection>&
plugin_sections();  // backend comm model attention optimizer tokenizer data
const EngineSection* find_engine_section(const std::string& name);
const PluginSection* find_plugin_section(const std::string& name);
// [parallel] `data` selects a parallel plugin whose keys join [parallel]'s own.
constexpr const char* kParallelSelector = "data";

// Host table functions for loom_config.
loom_error* config_get_bool(const loom_config* cfg, const char* key, int* out);
loom_error* config_get_int(const loom_config* cfg, const char* key, int64_t* out);
loom_error* config_get_float(const loom_config* cfg, const char* key, double* out);
loom_error* config_get_string(const loom_config* cfg, const char* key, const char** out);

// Parses data.split ("969,30,1": one to three non-negative weights, positive sum) into
// three weights (missing ones 0). Returns "" or what is wrong, for "data.split <problem>".
std::string parse_split(const std::string& text, std::vector<double>* weights);

// train.recompute_modules ("core_attn,mlp_act"): "" when valid (the LOOM_RECOMPUTE_* bits
// into *bits when not NULL), else the problem, naming the nearest module to a wrong one.
std::string parse_recompute_modules(const std::string& text, uint32_t* bits);

}  // namespace loom::engine
