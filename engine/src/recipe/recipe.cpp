// Recipes: the validated values (typed getters, the resolved recipe as TOML for
// checkpoints) and the host table's config getters. Loading is recipe_load.cpp, validation
// recipe_validate.cpp.
#include "recipe/recipe.hpp"

#include <charconv>
#include <cmath>
#include <sstream>

#include "base/errors.hpp"

namespace fs = std::filesystem;

namespace loom::engine {

const EngineSection* find_engine_section(const std::string& name) {
  for (const EngineSection& s : engine_sections())
    if (name == s.name) return &s;
  return nullptr;
}

const PluginSection* find_plugin_section(const std::string& name) {
  for (const PluginSection& s : plugin_sections())
    if (name == s.name) return &s;
  return nullptr;
}

const loom_config& Recipe::section(const std::string& name) const {
  auto it = sections_.find(name);
  if (it == sections_.end())
    throw RunError("recipe section [" + name + "] is not available" +
                   (validated_ ? "" : " (the recipe was not validated)"));
  return it->second;
}

bool Recipe::has_section(const std::string& name) const { return raw_.count(name) > 0; }

size_t Recipe::num_sections_set() const { return raw_.size(); }

std::string Recipe::plugin(const std::string& section) const {
  auto it = sections_.find(section);
  if (it == sections_.end()) return "";
  const char* key = section == "parallel" ? kParallelSelector : "plugin";
  auto v = it->second.values.find(key);
  if (v == it->second.values.end() || v->second.type != LOOM_PARAM_STRING) return "";
  return v->second.s;
}

const fs::path& Recipe::path() const { return path_; }

std::string Recipe::to_toml() const {
  std::ostringstream out;
  out << "# The resolved recipe: every section and key, defaults filled.\n";
  for (const auto& [name, keys] : order_) {
    const loom_config& cfg = sections_.at(name);
    out << "\n[" << name << "]\n";
    for (const std::string& key : keys)
      out << key << " = " << toml_literal(cfg.values.at(key)) << "\n";
  }
  return out.str();
}

std::vector<std::pair<std::string, std::string>> Recipe::resolved_keys() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, keys] : order_)
    for (const std::string& key : keys)
      out.emplace_back(name + "." + key, toml_literal(sections_.at(name).values.at(key)));
  return out;
}

namespace {
const Value& lookup(const std::map<std::string, loom_config>& sections, const std::string& section,
                    const std::string& key, loom_param_type type) {
  auto s = sections.find(section);
  if (s == sections.end()) throw RunError("recipe section [" + section + "] is not available");
  auto v = s->second.values.find(key);
  if (v == s->second.values.end())
    throw RunError("recipe key " + section + "." + key + " is not declared");
  if (v->second.type != type)
    throw RunError("recipe key " + section + "." + key + " is " + type_name(v->second.type) +
                   ", not " + type_name(type));
  return v->second;
}
}  // namespace

int64_t Recipe::get_int(const std::string& section, const std::string& key) const {
  return lookup(sections_, section, key, LOOM_PARAM_INT).i;
}
double Recipe::get_float(const std::string& section, const std::string& key) const {
  return lookup(sections_, section, key, LOOM_PARAM_FLOAT).f;
}
bool Recipe::get_bool(const std::string& section, const std::string& key) const {
  return lookup(sections_, section, key, LOOM_PARAM_BOOL).b;
}
std::string Recipe::get_string(const std::string& section, const std::string& key) const {
  return lookup(sections_, section, key, LOOM_PARAM_STRING).s;
}

// --- host table functions ----------------------------------------------------------------

namespace {
loom_error* config_lookup(const loom_config* cfg, const char* key, loom_param_type type,
                          const Value** out) noexcept {
  try {
    if (cfg == nullptr || key == nullptr || out == nullptr)
      return make_error(LOOM_ERR_INVALID_ARGUMENT, "config_get: NULL argument");
    auto it = cfg->values.find(key);
    if (it == cfg->values.end())
      return make_error(LOOM_ERR_INVALID_ARGUMENT, "config [" + cfg->section + "] has no key '" +
                                                       key + "' (not declared in the schema)");
    if (it->second.type != type)
      return make_error(LOOM_ERR_INVALID_ARGUMENT, "config key " + cfg->section + "." + key +
                                                       " is " + type_name(it->second.type) +
                                                       ", not " + type_name(type));
    *out = &it->second;
    return nullptr;
  } catch (...) {
    return make_error(LOOM_ERR_OUT_OF_MEMORY, "out of memory");
  }
}
}  // namespace

loom_error* config_get_bool(const loom_config* cfg, const char* key, int* out) {
  const Value* v = nullptr;
  if (loom_error* e = config_lookup(cfg, key, LOOM_PARAM_BOOL, &v)) return e;
  *out = v->b ? 1 : 0;
  return nullptr;
}
loom_error* config_get_int(const loom_config* cfg, const char* key, int64_t* out) {
  const Value* v = nullptr;
  if (loom_error* e = config_lookup(cfg, key, LOOM_PARAM_INT, &v)) return e;
  *out = v->i;
  return nullptr;
}
loom_error* config_get_float(const loom_config* cfg, const char* key, double* out) {
  const Value* v = nullptr;
  if (loom_error* e = config_lookup(cfg, key, LOOM_PARAM_FLOAT, &v)) return e;
  *out = v->f;
  return nullptr;
}
loom_error* config_get_string(const loom_config* cfg, const char* key, const char** out) {
  const Value* v = nullptr;
  if (loom_error* e = config_lookup(cfg, key, LOOM_PARAM_STRING, &v)) return e;
  *out = v->s.c_str();
  return nullptr;
}

}  // namespace loom::engine
