// Recipes: loading (TOML++, includes, --set overrides) and validation against the engine's
// and the selected plugins' schemas. Every value remembers where it was set, so an error
// names file:line and, for a misspelt name, the nearest valid one.
#include "recipe.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

#include "errors.hpp"
#include "registry.hpp"

namespace fs = std::filesystem;

namespace loom::engine {

namespace {

constexpr const char* kSetFile = "<--set>";
constexpr const char* kDefaultFile = "<default>";

// Where a value came from, for messages: "recipes/gpt.toml:12" or "--set model.n_layer".
std::string where(const Value& v, const std::string& section, const std::string& key) {
  if (v.file == kSetFile) return "--set " + section + "." + key;
  if (v.line > 0) return v.file + ":" + std::to_string(v.line);
  return v.file;
}

// The shortest text that reads back as `x`, in plain decimal notation for magnitudes
// from 1e-5 to 1e15 (0.0003, not 3e-04).
std::string shortest_decimal(double x) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, x);
  std::string s(buf, res.ptr);
  double mag = std::fabs(x);
  if (s.find('e') != std::string::npos && mag >= 1e-5 && mag < 1e15) {
    res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::fixed);
    s.assign(buf, res.ptr);
  }
  return s;
}

std::string format_number(double x) {
  if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 1e15) {
    return std::to_string(static_cast<int64_t>(x));
  }
  return shortest_decimal(x);
}

// A bound that means "unbounded" when plugins write DBL_MAX or 1e18 for it.
bool unbounded(double b) { return !std::isfinite(b) || std::fabs(b) >= 1e15; }

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

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

const char* type_phrase(loom_param_type t) {
  switch (t) {
    case LOOM_PARAM_BOOL:
      return "a boolean";
    case LOOM_PARAM_INT:
      return "an integer";
    case LOOM_PARAM_FLOAT:
      return "a number";
    case LOOM_PARAM_STRING:
      return "a string";
  }
  return "a value";
}

std::vector<std::string> split_choices(const char* choices) {
  std::vector<std::string> out;
  if (choices == nullptr) return out;
  std::string s = choices;
  size_t start = 0;
  while (start <= s.size()) {
    size_t bar = s.find('|', start);
    if (bar == std::string::npos) bar = s.size();
    if (bar > start) out.push_back(s.substr(start, bar - start));
    start = bar + 1;
  }
  return out;
}

// "" or what is wrong with a value of the declared type against range and choices.
std::string check_bounds(const loom_param_spec& spec, const Value& v) {
  if ((spec.type == LOOM_PARAM_INT || spec.type == LOOM_PARAM_FLOAT) &&
      spec.min_value <= spec.max_value) {
    double x = spec.type == LOOM_PARAM_INT ? static_cast<double>(v.i) : v.f;
    bool lo_ok = unbounded(spec.min_value) || x >= spec.min_value;
    bool hi_ok = unbounded(spec.max_value) || x <= spec.max_value;
    if (std::isnan(x) || !lo_ok || !hi_ok) {
      std::string got = spec.type == LOOM_PARAM_INT ? std::to_string(v.i) : format_number(v.f);
      return "must be " + describe_range(spec) + ", got " + got;
    }
  }
  if (spec.type == LOOM_PARAM_STRING) {
    std::vector<std::string> choices = split_choices(spec.choices);
    if (!choices.empty() && std::find(choices.begin(), choices.end(), v.s) == choices.end()) {
      std::string msg = "must be one of " + std::string(spec.choices) + ", got " + quoted(v.s);
      std::string guess = nearest(v.s, choices);
      if (!guess.empty()) msg += "; did you mean '" + guess + "'?";
      return msg;
    }
  }
  return "";
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

}  // namespace

std::string parse_split(const std::string& text, std::vector<double>* weights) {
  std::vector<double> w;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string part = text.substr(start, comma - start);
    while (!part.empty() && part.front() == ' ') part.erase(part.begin());
    while (!part.empty() && part.back() == ' ') part.pop_back();
    double x = 0;
    auto res = std::from_chars(part.data(), part.data() + part.size(), x);
    if (part.empty() || res.ec != std::errc() || res.ptr != part.data() + part.size() ||
        !(x >= 0) || !std::isfinite(x))
      return "must be one to three comma-separated non-negative weights like \"98,2,0\", got " +
             quoted(text);
    w.push_back(x);
    start = comma + 1;
  }
  if (w.size() > 3) return "has more than three weights (train, valid, test): " + quoted(text);
  double sum = 0;
  for (double x : w) sum += x;
  if (sum <= 0) return "weights sum to zero: " + quoted(text);
  w.resize(3, 0.0);
  if (weights) *weights = w;
  return "";
}

namespace {

// Converts a TOML++ node into a raw value.
Recipe::RawValue raw_from_node(const toml::node& node, const std::string& file) {
  Recipe::RawValue raw;
  raw.value.file = file;
  raw.value.line = static_cast<int>(node.source().begin.line);
  if (auto b = node.as_boolean()) {
    raw.value.type = LOOM_PARAM_BOOL;
    raw.value.b = b->get();
  } else if (auto i = node.as_integer()) {
    raw.value.type = LOOM_PARAM_INT;
    raw.value.i = i->get();
  } else if (auto f = node.as_floating_point()) {
    raw.value.type = LOOM_PARAM_FLOAT;
    raw.value.f = f->get();
  } else if (auto s = node.as_string()) {
    raw.value.type = LOOM_PARAM_STRING;
    raw.value.s = s->get();
  } else if (node.is_array()) {
    raw.unsupported = "an array";
  } else if (node.is_table()) {
    raw.unsupported = "a table";
  } else {
    raw.unsupported = "a date/time";
  }
  return raw;
}

using RawTree = std::map<std::string, Recipe::RawSection>;

void merge_into(RawTree& base, const RawTree& over) {
  for (const auto& [name, sec] : over) {
    auto [it, fresh] = base.try_emplace(name, sec);
    if (fresh) continue;
    it->second.file = sec.file;
    it->second.line = sec.line;
    for (const auto& [key, value] : sec.keys) it->second.keys[key] = value;
  }
}

std::string chain_text(const std::vector<fs::path>& stack, const fs::path& again) {
  std::string text;
  for (const fs::path& p : stack) text += p.filename().string() + " -> ";
  return text + again.filename().string();
}

// Loads `display` (a path as the user would write it) and what it includes.
RawTree load_file(const fs::path& display, std::vector<fs::path>& stack, const std::string& from) {
  std::error_code ec;
  fs::path canon = fs::weakly_canonical(fs::absolute(display, ec), ec);
  if (std::find(stack.begin(), stack.end(), canon) != stack.end())
    throw UsageError(from + ": include cycle: " + chain_text(stack, canon));
  if (!fs::is_regular_file(canon, ec)) {
    if (from.empty()) throw UsageError("recipe '" + display.string() + "' not found");
    throw UsageError(from + ": included recipe '" + display.string() + "' not found");
  }
  const std::string file = display.string();
  toml::table tbl;
  try {
    tbl = toml::parse_file(canon.string());
  } catch (const toml::parse_error& e) {
    throw UsageError(file + ":" + std::to_string(e.source().begin.line) + ":" +
                     std::to_string(e.source().begin.column) + ": " +
                     one_line(std::string(e.description())));
  }
  stack.push_back(canon);

  RawTree merged;
  if (toml::node* inc = tbl.get("include")) {
    std::string at = file + ":" + std::to_string(inc->source().begin.line);
    std::vector<std::string> names;
    if (auto s = inc->as_string()) {
      names.push_back(s->get());
    } else if (auto arr = inc->as_array()) {
      for (const toml::node& n : *arr) {
        if (!n.is_string()) throw UsageError(at + ": include must list file names (strings)");
        names.push_back(*n.value<std::string>());
      }
    } else {
      throw UsageError(at + ": include must be a file name or a list of file names");
    }
    for (const std::string& name : names) {
      fs::path p = name;
      if (p.is_relative()) p = (display.parent_path() / p).lexically_normal();
      merge_into(merged, load_file(p, stack, at));
    }
  }

  RawTree own;
  for (const auto& [k, node] : tbl) {
    std::string key(k.str());
    if (key == "include") continue;
    const toml::table* section = node.as_table();
    if (section == nullptr)
      throw UsageError(file + ":" + std::to_string(node.source().begin.line) + ": key '" + key +
                       "' must be inside a section such as [train]");
    Recipe::RawSection& sec = own[key];
    sec.file = file;
    sec.line = static_cast<int>(node.source().begin.line);
    for (const auto& [sk, snode] : *section)
      sec.keys[std::string(sk.str())] = raw_from_node(snode, file);
  }
  merge_into(merged, own);
  stack.pop_back();
  return merged;
}

void apply_override(RawTree& tree, const std::string& text) {
  size_t eq = text.find('=');
  std::string lhs = text.substr(0, eq);
  size_t dot = lhs.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot == 0 || dot + 1 >= lhs.size() ||
      lhs.find('.', dot + 1) != std::string::npos || lhs.find(' ') != std::string::npos)
    throw UsageError("--set expects section.key=value, got '" + text + "'");
  std::string section = lhs.substr(0, dot), key = lhs.substr(dot + 1);
  std::string value = text.substr(eq + 1);

  Recipe::RawValue raw;
  raw.from_set = true;
  raw.set_text = value;
  raw.value.file = kSetFile;
  bool parsed = false;
  try {
    toml::table t = toml::parse("k = " + value);
    if (const toml::node* n = t.get("k")) {
      raw = raw_from_node(*n, kSetFile);
      raw.value.line = 0;
      raw.from_set = true;
      raw.set_text = value;
      parsed = true;
    }
  } catch (const toml::parse_error&) {
  }
  if (!parsed) {
    raw.value.type = LOOM_PARAM_STRING;
    raw.value.s = value;
  }
  Recipe::RawSection& sec = tree[section];
  if (sec.file.empty()) sec.file = kSetFile;
  sec.keys[key] = raw;
}

// Case-insensitive optimal-string-alignment distance (Levenshtein plus transpositions).
size_t edit_distance(const std::string& a, const std::string& b) {
  auto low = [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); };
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      size_t cost = low(a[i - 1]) == low(b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && low(a[i - 1]) == low(b[j - 2]) && low(a[i - 2]) == low(b[j - 1]))
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
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

std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = SIZE_MAX;
  const size_t limit = std::max<size_t>(1, (word.size() + 2) / 3);
  for (const std::string& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  // A suggestion must keep part of the word: "c" -> "a" is no help.
  return best_d <= limit && best_d < word.size() ? best : "";
}

const char* type_name(loom_param_type type) {
  switch (type) {
    case LOOM_PARAM_BOOL:
      return "bool";
    case LOOM_PARAM_INT:
      return "int";
    case LOOM_PARAM_FLOAT:
      return "float";
    case LOOM_PARAM_STRING:
      return "string";
  }
  return "?";
}

std::string describe_range(const loom_param_spec& spec) {
  if (spec.type == LOOM_PARAM_STRING) return spec.choices ? spec.choices : "";
  if (spec.type == LOOM_PARAM_BOOL || spec.min_value > spec.max_value) return "";
  bool lo = !unbounded(spec.min_value), hi = !unbounded(spec.max_value);
  if (lo && hi) {
    return "between " + format_number(spec.min_value) + " and " + format_number(spec.max_value);
  }
  if (lo) return ">= " + format_number(spec.min_value);
  if (hi) return "<= " + format_number(spec.max_value);
  return "";
}

std::string parse_default(const loom_param_spec& spec, Value& out) {
  out = Value{};
  out.type = spec.type;
  out.file = kDefaultFile;
  if (spec.default_value == nullptr) return "no default (required)";
  const std::string text = spec.default_value;
  const std::string bad = "default " + quoted(text) + " is not " + type_phrase(spec.type);
  switch (spec.type) {
    case LOOM_PARAM_BOOL:
      if (text != "true" && text != "false") return bad;
      out.b = text == "true";
      break;
    case LOOM_PARAM_INT: {
      auto res = std::from_chars(text.data(), text.data() + text.size(), out.i);
      if (text.empty() || res.ec != std::errc() || res.ptr != text.data() + text.size()) return bad;
      break;
    }
    case LOOM_PARAM_FLOAT: {
      auto res = std::from_chars(text.data(), text.data() + text.size(), out.f);
      if (text.empty() || res.ec != std::errc() || res.ptr != text.data() + text.size()) return bad;
      break;
    }
    case LOOM_PARAM_STRING:
      out.s = text;
      if (text.size() >= 2 && text.front() == '"' && text.back() == '"') {
        try {
          toml::table t = toml::parse("k = " + text);
          out.s = *t["k"].value<std::string>();
        } catch (const toml::parse_error&) {
          return "default " + text + " is not a valid TOML string";
        }
      }
      break;
    default:
      return "unknown type";
  }
  std::string problem = check_bounds(spec, out);
  return problem.empty() ? "" : "default " + problem;
}

std::string toml_literal(const Value& v) {
  switch (v.type) {
    case LOOM_PARAM_BOOL:
      return v.b ? "true" : "false";
    case LOOM_PARAM_INT:
      return std::to_string(v.i);
    case LOOM_PARAM_FLOAT: {
      if (std::isnan(v.f)) return "nan";
      if (std::isinf(v.f)) return v.f > 0 ? "inf" : "-inf";
      std::string s = shortest_decimal(v.f);
      if (s.find_first_of(".e") == std::string::npos) s += ".0";
      return s;
    }
    case LOOM_PARAM_STRING: {
      std::string out = "\"";
      for (unsigned char c : v.s) {
        switch (c) {
          case '"':
            out += "\\\"";
            break;
          case '\\':
            out += "\\\\";
            break;
          case '\n':
            out += "\\n";
            break;
          case '\t':
            out += "\\t";
            break;
          case '\r':
            out += "\\r";
            break;
          default:
            if (c < 0x20 || c == 0x7f) {
              char buf[8];
              std::snprintf(buf, sizeof buf, "\\u%04x", c);
              out += buf;
            } else {
              out += static_cast<char>(c);
            }
        }
      }
      return out + "\"";
    }
  }
  return "\"\"";
}

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

Recipe Recipe::load(const fs::path& path, const std::vector<std::string>& overrides) {
  Recipe r;
  r.path_ = path;
  std::vector<fs::path> stack;
  r.raw_ = load_file(path, stack, "");
  for (const std::string& o : overrides) apply_override(r.raw_, o);
  return r;
}

void Recipe::validate(Registry& registry) {
  sections_.clear();
  order_.clear();
  validated_ = false;
  const std::string recipe_file = path_.string();

  for (const auto& [name, sec] : raw_) {
    if (find_engine_section(name) || find_plugin_section(name)) continue;
    std::string at =
        sec.file == kSetFile ? std::string("--set") : sec.file + ":" + std::to_string(sec.line);
    std::vector<std::string> names = all_section_names();
    std::string guess = nearest(name, names);
    throw UsageError(at + ": unknown section [" + name + "]" +
                     (guess.empty() ? "; valid sections: " + join(names, ", ")
                                    : "; did you mean [" + guess + "]?"));
  }

  static const RawSection kEmpty;
  auto raw_section = [&](const std::string& name) -> const RawSection& {
    auto it = raw_.find(name);
    return it == raw_.end() ? kEmpty : it->second;
  };

  // Resolves the plugin a selector key names; the key must be a string.
  auto select = [&](const std::string& section, const std::string& key, loom_plugin_kind kind,
                    const char* fallback) -> const PluginInfo& {
    const RawSection& sec = raw_section(section);
    auto it = sec.keys.find(key);
    std::string name = fallback;
    std::string at = recipe_file;
    std::string note = " (the default of " + section + "." + key + ")";
    if (it != sec.keys.end()) {
      at = where(it->second.value, section, key);
      note.clear();
      Value v;
      loom_param_spec spec = loom_param_spec{
          LOOM_PARAM_SPEC_SIZE_V1, key.c_str(), LOOM_PARAM_STRING, fallback, "", 1, 0, nullptr};
      std::string problem = convert(it->second, spec, v);
      if (!problem.empty()) throw UsageError(at + ": " + section + "." + key + " " + problem);
      name = v.s;
    }
    try {
      return registry.get(kind, name);
    } catch (const UsageError& e) {
      throw UsageError(at + ": " + e.what() + note);
    }
  };

  auto check_section = [&](const std::string& name, const Schema& schema) {
    const RawSection& sec = raw_section(name);
    std::vector<std::pair<std::string, const RawValue*>> keys;
    for (const auto& [k, v] : sec.keys) keys.emplace_back(k, &v);
    std::stable_sort(keys.begin(), keys.end(), [](const auto& a, const auto& b) {
      return a.second->value.line < b.second->value.line;
    });
    loom_config cfg;
    cfg.section = name;
    for (const auto& [key, raw] : keys) {
      const loom_param_spec* spec = schema.find(key);
      std::string at = where(raw->value, name, key);
      if (spec == nullptr) {
        std::vector<std::string> names = schema.names();
        std::string guess = nearest(key, names);
        throw UsageError(at + ": unknown key '" + name + "." + key + "' for " + schema.owner +
                         (guess.empty() ? "; valid keys: " + join(names, ", ")
                                        : "; did you mean '" + guess + "'?"));
      }
      Value v;
      std::string problem = convert(*raw, *spec, v);
      if (problem.empty()) problem = check_bounds(*spec, v);
      if (problem.empty() && name == "data" && key == "split") problem = parse_split(v.s, nullptr);
      if (!problem.empty()) throw UsageError(at + ": " + name + "." + key + " " + problem);
      cfg.values[key] = v;
    }
    std::vector<std::string> order;
    for (const loom_param_spec* spec : schema.params) {
      order.push_back(spec->name);
      if (cfg.values.count(spec->name)) continue;
      if (spec->default_value == nullptr && name == "data" && supplied_by_blend(cfg, spec->name)) {
        Value v;  // each blended instance gets its own path from the blend string
        v.type = LOOM_PARAM_STRING;
        v.file = "<blend>";
        cfg.values[spec->name] = v;
        continue;
      }
      if (spec->default_value == nullptr) {
        throw UsageError(recipe_file + ": missing required key '" + name + "." + spec->name +
                         "' for " + schema.owner +
                         (spec->doc && *spec->doc ? " (" + std::string(spec->doc) + ")" : ""));
      }
      Value v;
      std::string problem = parse_default(*spec, v);
      if (!problem.empty())
        throw UsageError(schema.owner + ": key '" + spec->name + "': " + problem);
      cfg.values[spec->name] = v;
    }
    sections_[name] = std::move(cfg);
    order_.emplace_back(name, std::move(order));
  };

  for (const EngineSection& es : engine_sections()) {
    Schema schema;
    schema.owner = "[" + std::string(es.name) + "]";
    for (size_t i = 0; i < es.num_params; ++i) schema.params.push_back(&es.params[i]);
    if (std::string(es.name) == "parallel") {
      const loom_param_spec* sel = schema.find(kParallelSelector);
      const PluginInfo& info =
          select(es.name, kParallelSelector, LOOM_KIND_PARALLEL, sel ? sel->default_value : "ddp");
      schema.owner = "[parallel] and parallel/" + info.name;
      select(es.name, "schedule", LOOM_KIND_PARALLEL, "1f1b");  // a schedule plugin exists
      for (size_t i = 0; i < info.desc->num_params; ++i)
        if (!schema.find(info.desc->params[i].name)) schema.params.push_back(&info.desc->params[i]);
    }
    check_section(es.name, schema);
  }
  for (const PluginSection& ps : plugin_sections()) {
    const PluginInfo& info = select(ps.name, "plugin", ps.kind, ps.default_plugin);
    Schema schema;
    schema.owner = kind_name(ps.kind) + "/" + info.name;
    for (size_t i = 0; i < ps.num_extra; ++i) schema.params.push_back(&ps.extra[i]);
    for (size_t i = 0; i < info.desc->num_params; ++i)
      schema.params.push_back(&info.desc->params[i]);
    check_section(ps.name, schema);
  }
  validated_ = true;
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
