// Recipes, validation: every section and key against the engine's sections and the schemas
// of the plugins the recipe selects; types converted, ranges and choices checked, defaults
// filled. An error names file:line (or --set) and, for a misspelt name, the nearest valid
// one.
#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "base/errors.hpp"
#include "base/require_regular.hpp"
#include "loader/registry.hpp"
#include "recipe/recipe.hpp"
#include "recipe/samples_wanted.hpp"

namespace loom::engine {
namespace {

// Where a value came from, for messages: "recipes/gpt.toml:12" or "--set model.n_layer".
std::string where(const Value& v, const std::string& section, const std::string& key) {
  if (v.file == kSetFile) return "--set " + section + "." + key;
  if (v.line > 0) return v.file + ":" + std::to_string(v.line);
  return v.file;
}

std::string describe_value(const Recipe::RawValue& raw) {
  if (!raw.unsupported.empty()) return raw.unsupported;
  const Value& v = raw.value;
  switch (v.type) {
    case LOOM_PARAM_BOOL:
      return std::string("boolean ") + (v.b ? "true" : "false");
    case LOOM_PARAM_INT:
      return "integer " + std::to_string(v.i);
    case LOOM_PARAM_FLOAT:
      return "float " + format_number(v.f);
    case LOOM_PARAM_STRING:
      return "string " + quoted(one_line(v.s, 80));
  }
  return "value";
}

// data.split: one to three comma-separated non-negative weights with a positive sum.
// A dataset's location key (`prefix` for indexed data, `path` for jsonl) need not be set when
// a blend string names the locations: the host makes one instance per blended entry.
bool supplied_by_blend(const loom_config& cfg, const std::string& key) {
  if (key != "prefix" && key != "path") return false;
  for (const char* blend : {"blend", "train_blend", "valid_blend", "test_blend"}) {
    auto it = cfg.values.find(blend);
    if (it != cfg.values.end() && !it->second.s.empty()) return true;
  }
  return false;
}

// One section's accepted keys, and who owns them (for messages).
struct Schema {
  std::vector<const loom_param_spec*> params;
  std::string owner;  // "model/gpt", "[train]"
  const loom_param_spec* find(const std::string& key) const {
    for (const loom_param_spec* p : params)
      if (key == p->name) return p;
    return nullptr;
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const loom_param_spec* p : params) out.push_back(p->name);
    return out;
  }
};

// Converts a raw value to the declared type or returns the problem.
std::string convert(const Recipe::RawValue& raw, const loom_param_spec& spec, Value& out) {
  out = raw.value;
  if (raw.unsupported.empty() && raw.value.type == spec.type) return "";
  if (raw.unsupported.empty() && spec.type == LOOM_PARAM_FLOAT &&
      raw.value.type == LOOM_PARAM_INT) {
    out.type = LOOM_PARAM_FLOAT;
    out.f = static_cast<double>(raw.value.i);
    return "";
  }
  // A text key whose default is a number takes a number as its digits (moe_layer_freq = 2,
  // beside its "[0]*3+[1]*5" form); other text keys (a plugin's name) still refuse one.
  if (raw.unsupported.empty() && spec.type == LOOM_PARAM_STRING &&
      raw.value.type == LOOM_PARAM_INT && spec.default_value && *spec.default_value &&
      std::string(spec.default_value).find_first_not_of("0123456789") == std::string::npos) {
    out.type = LOOM_PARAM_STRING;
    out.s = std::to_string(raw.value.i);
    return "";
  }
  if (raw.from_set && spec.type == LOOM_PARAM_STRING) {  // --set x.name=2024 means the text
    out.type = LOOM_PARAM_STRING;
    out.s = raw.set_text;
    return "";
  }
  return std::string("must be ") + type_phrase(spec.type) + ", got " + describe_value(raw);
}

std::vector<std::string> all_section_names() {
  std::vector<std::string> out;
  for (const EngineSection& s : engine_sections()) out.push_back(s.name);
  for (const PluginSection& s : plugin_sections()) out.push_back(s.name);
  return out;
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

}  // namespace

namespace {
// The comma-separated parts of `text`, each without its surrounding spaces ("" gives one
// empty part).
std::vector<std::string> comma_parts(const std::string& text) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string part = text.substr(start, comma - start);
    while (!part.empty() && part.front() == ' ') part.erase(part.begin());
    while (!part.empty() && part.back() == ' ') part.pop_back();
    parts.push_back(std::move(part));
    start = comma + 1;
  }
  return parts;
}
}  // namespace

std::string parse_split(const std::string& text, std::vector<double>* weights) {
  std::vector<double> w;
  for (const std::string& part : comma_parts(text)) {
    double x = 0;
    auto res = std::from_chars(part.data(), part.data() + part.size(), x);
    if (part.empty() || res.ec != std::errc() || res.ptr != part.data() + part.size() ||
        !(x >= 0) || !std::isfinite(x))
      return "must be one to three comma-separated non-negative weights like \"98,2,0\", got " +
             quoted(text);
    w.push_back(x);
  }
  if (w.size() > 3) return "has more than three weights (train, valid, test): " + quoted(text);
  double sum = 0;
  for (double x : w) sum += x;
  if (sum <= 0) return "weights sum to zero: " + quoted(text);
  w.resize(3, 0.0);
  if (weights) *weights = w;
  return "";
}

std::string parse_recompute_modules(const std::string& text, uint32_t* bits) {
  const std::vector<std::string> names = {"core_attn", "mlp_act", "layernorm"};
  uint32_t out = 0;
  for (const std::string& part : comma_parts(text)) {
    const auto it = std::find(names.begin(), names.end(), part);
    if (it == names.end()) {
      const std::string guess = nearest(part, names);
      return "names an unknown module \"" + part + "\"" +
             (guess.empty() ? "; modules: " + join(names, ", ")
                            : "; did you mean '" + guess + "'?");
    }
    out |= 1u << (it - names.begin());  // LOOM_RECOMPUTE_CORE_ATTN, _MLP_ACT, _LAYERNORM
  }
  if (bits) *bits = out;
  return "";
}

// Validation of one recipe: fills its sections_ and order_ (Recipe's friend).
class RecipeValidator {
 public:
  RecipeValidator(Recipe& recipe, Registry& registry)
      : r_(recipe), registry_(registry), file_(recipe.path_.string()) {}

  void run() {
    r_.sections_.clear();
    r_.order_.clear();
    r_.validated_ = false;
    refuse_unknown_sections();
    for (const EngineSection& es : engine_sections()) check_section(es.name, engine_schema(es));
    for (const PluginSection& ps : plugin_sections()) {
      const PluginInfo& info = select(ps.name, "plugin", ps.kind, ps.default_plugin);
      Schema schema;
      schema.owner = kind_name(ps.kind) + "/" + info.name;
      for (size_t i = 0; i < ps.num_extra; ++i) schema.params.push_back(&ps.extra[i]);
      for (size_t i = 0; i < info.desc->num_params; ++i)
        schema.params.push_back(&info.desc->params[i]);
      check_section(ps.name, schema);
    }
    check_train_sizes();
    r_.validated_ = true;
  }

 private:
  using RawSection = Recipe::RawSection;
  using RawValue = Recipe::RawValue;

  const RawSection& raw_section(const std::string& name) const {
    static const RawSection kEmpty;
    auto it = r_.raw_.find(name);
    return it == r_.raw_.end() ? kEmpty : it->second;
  }

  void refuse_unknown_sections() const {
    for (const auto& [name, sec] : r_.raw_) {
      if (find_engine_section(name) || find_plugin_section(name)) continue;
      std::string at =
          sec.file == kSetFile ? std::string("--set") : sec.file + ":" + std::to_string(sec.line);
      std::vector<std::string> names = all_section_names();
      std::string guess = nearest(name, names);
      throw UsageError(at + ": unknown section [" + name + "]" +
                       (guess.empty() ? "; valid sections: " + join(names, ", ")
                                      : "; did you mean [" + guess + "]?"));
    }
  }

  // An engine section's keys; [parallel]'s include those of the grad plugin it selects.
  Schema engine_schema(const EngineSection& es) const {
    Schema schema;
    schema.owner = "[" + std::string(es.name) + "]";
    for (size_t i = 0; i < es.num_params; ++i) schema.params.push_back(&es.params[i]);
    if (std::string(es.name) == "parallel") {
      const loom_param_spec* sel = schema.find(kParallelSelector);
      const PluginInfo& info =
          select(es.name, kParallelSelector, LOOM_KIND_GRAD, sel ? sel->default_value : "ddp");
      schema.owner = "[parallel] and grad/" + info.name;
      select(es.name, "schedule", LOOM_KIND_SCHEDULE, "1f1b");  // a schedule plugin exists
      for (size_t i = 0; i < info.desc->num_params; ++i)
        if (!schema.find(info.desc->params[i].name)) schema.params.push_back(&info.desc->params[i]);
    }
    return schema;
  }

  // Resolves the plugin a selector key names; the key must be a string.
  const PluginInfo& select(const std::string& section, const std::string& key,
                           loom_plugin_kind kind, const char* fallback) const {
    const RawSection& sec = raw_section(section);
    auto it = sec.keys.find(key);
    std::string name = fallback;
    std::string at = file_;
    std::string note = " (the default of " + section + "." + key + ")";
    if (it != sec.keys.end()) {
      at = where(it->second.value, section, key);
      note.clear();
      Value v;
      loom_param_spec spec = loom_param_spec{
          LOOM_PARAM_SPEC_SIZE_V2, key.c_str(), LOOM_PARAM_STRING, fallback, "", 1, 0, nullptr};
      std::string problem = convert(it->second, spec, v);
      if (!problem.empty()) throw UsageError(at + ": " + section + "." + key + " " + problem);
      name = v.s;
    }
    try {
      return registry_.get(kind, name);
    } catch (const UsageError& e) {
      throw UsageError(at + ": " + e.what() + note);
    }
  }

  // The recipe's keys of section `name` against its schema, in file order, then the
  // schema's defaults for the rest.
  void check_section(const std::string& name, const Schema& schema) {
    const RawSection& sec = raw_section(name);
    std::vector<std::pair<std::string, const RawValue*>> keys;
    for (const auto& [k, v] : sec.keys) keys.emplace_back(k, &v);
    std::stable_sort(keys.begin(), keys.end(), [](const auto& a, const auto& b) {
      return a.second->value.line < b.second->value.line;
    });
    loom_config cfg;
    cfg.section = name;
    for (const auto& [key, raw] : keys) cfg.values[key] = checked(name, key, *raw, schema);
    std::vector<std::string> order;
    for (const loom_param_spec* spec : schema.params) {
      order.push_back(spec->name);
      if (!cfg.values.count(spec->name))
        cfg.values[spec->name] = fill_default(name, *spec, cfg, schema);
    }
    r_.sections_[name] = std::move(cfg);
    r_.order_.emplace_back(name, std::move(order));
  }

  // One key the recipe sets: known to the schema, of its type, in its range.
  Value checked(const std::string& name, const std::string& key, const RawValue& raw,
                const Schema& schema) const {
    const loom_param_spec* spec = schema.find(key);
    std::string at = where(raw.value, name, key);
    if (spec == nullptr) {
      std::vector<std::string> names = schema.names();
      std::string guess = nearest(key, names);
      throw UsageError(at + ": unknown key '" + name + "." + key + "' for " + schema.owner +
                       (guess.empty() ? "; valid keys: " + join(names, ", ")
                                      : "; did you mean '" + guess + "'?"));
    }
    Value v;
    std::string problem = convert(raw, *spec, v);
    if (problem.empty()) problem = check_bounds(*spec, v);
    if (problem.empty() && spec->type == LOOM_PARAM_STRING)
      problem = names_a_non_regular_file(key, v.s);
    if (problem.empty() && name == "data" && key == "split") problem = parse_split(v.s, nullptr);
    if (problem.empty() && name == "train" && key == "recompute_modules")
      problem = parse_recompute_modules(v.s, nullptr);
    if (!problem.empty()) throw UsageError(at + ": " + name + "." + key + " " + problem);
    return v;
  }

  // A key the recipe leaves out: its default, or a refusal when it has none.
  Value fill_default(const std::string& name, const loom_param_spec& spec, const loom_config& cfg,
                     const Schema& schema) const {
    Value v;
    if (spec.default_value == nullptr && name == "data" && supplied_by_blend(cfg, spec.name)) {
      v.type = LOOM_PARAM_STRING;  // each blended instance gets its own path from the blend
      v.file = "<blend>";
      return v;
    }
    if (spec.default_value == nullptr)
      throw UsageError(file_ + ": missing required key '" + name + "." + spec.name + "' for " +
                       schema.owner +
                       (spec.doc && *spec.doc ? " (" + std::string(spec.doc) + ")" : ""));
    std::string problem = parse_default(spec, v);
    if (!problem.empty()) throw UsageError(schema.owner + ": key '" + spec.name + "': " + problem);
    return v;
  }

  // Sizes that pass their ranges one by one but not together: a micro-batch's tokens, and
  // the samples each split asks for (with the smallest global batch, one data-parallel rank;
  // the run checks again with its own). Refused here, before any index is built.
  void check_train_sizes() const {
    const loom_config& train = r_.sections_.at("train");
    auto num = [&](const char* key) { return train.values.at(key).i; };
    // The first of `keys` the recipe sets, as file:line, for the message's location.
    auto at = [&](std::initializer_list<const char*> keys) {
      for (const char* key : keys) {
        const Value& v = train.values.at(key);
        if (v.file != kDefaultFile) return where(v, "train", key);
      }
      return file_;
    };
    const int64_t mbs = num("micro_batch_size"), seq_len = num("seq_len");
    int64_t tokens = 0;
    if (__builtin_mul_overflow(mbs, seq_len, &tokens) || tokens > kMaxMicroBatchTokens)
      throw UsageError(at({"micro_batch_size", "seq_len"}) +
                       ": train.micro_batch_size x train.seq_len = " + std::to_string(mbs) + " x " +
                       std::to_string(seq_len) + " tokens per micro-batch, more than " +
                       std::to_string(kMaxMicroBatchTokens) + " (2^31-1)");
    const int64_t gbs = num("global_batch_size");
    try {
      samples_wanted(num("iters"), gbs == 0 ? mbs : gbs, num("eval_interval"), num("eval_iters"));
    } catch (const UsageError& e) {
      throw UsageError(
          at({"iters", "global_batch_size", "micro_batch_size", "eval_iters", "eval_interval"}) +
          ": " + e.what());
    }
  }

  Recipe& r_;
  Registry& registry_;
  const std::string file_;
};

// train.deterministic: `deterministic = true` in each plugin section whose plugin declares
// that switch, unless the recipe says false there, which contradicts it. Sets keys, so the
// recipe is validated again after.
bool Recipe::apply_deterministic(Registry& registry) {
  if (!get_bool("train", "deterministic")) return false;
  bool changed = false;
  for (const PluginSection& ps : plugin_sections()) {
    const loom_plugin_descriptor* d = registry.get(ps.kind, plugin(ps.name)).desc;
    if (std::none_of(d->params, d->params + d->num_params, [](const loom_param_spec& p) {
          return std::string(p.name) == "deterministic" && p.type == LOOM_PARAM_BOOL;
        }))
      continue;
    if (!sets(ps.name, "deterministic")) {
      set(std::string(ps.name) + ".deterministic=true");
      changed = true;
    } else if (!get_bool(ps.name, "deterministic")) {
      const Value& v = raw_.at(ps.name).keys.at("deterministic").value;
      throw UsageError(where(v, ps.name, "deterministic") + ": " + ps.name +
                       ".deterministic = false contradicts train.deterministic = true "
                       "(which sets it in every plugin that has it); drop one of the two");
    }
  }
  return changed;
}

void Recipe::validate(Registry& registry) {
  RecipeValidator(*this, registry).run();
  if (apply_deterministic(registry)) RecipeValidator(*this, registry).run();
}

}  // namespace loom::engine
