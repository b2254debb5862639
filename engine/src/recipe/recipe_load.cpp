// Recipes, loading: TOML files through TOML++, `include` resolved relative to the including
// file (merged key by key, a cycle refused), then --set overrides. Every value keeps the
// file and line it came from, for validation's messages (recipe_validate.cpp).
#include <toml++/toml.h>

#include <algorithm>

#include "base/errors.hpp"
#include "base/require_regular.hpp"
#include "recipe/recipe.hpp"

namespace fs = std::filesystem;

namespace loom::engine {
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
  if (fs::is_directory(canon, ec))
    throw UsageError((from.empty() ? std::string() : from + ": included ") + "recipe '" +
                     display.string() + "' is a folder, not a recipe file (a .toml)");
  require_regular_file(canon.string(), (from.empty() ? std::string() : from + ": included ") +
                                           "recipe '" + display.string() + "': ");
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
  // A value may be taken as written (a string key's always is), so it must be a TOML string
  // too: the resolved recipe (to_toml, which a checkpoint saves and `loom generate` reads
  // back) holds it, and TOML text is UTF-8.
  Value as_text;
  as_text.s = value;
  try {
    (void)toml::parse("k = " + toml_literal(as_text));
  } catch (const toml::parse_error&) {
    throw UsageError("--set " + lhs + ": the value is not valid UTF-8 text");
  }

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

}  // namespace

Recipe Recipe::load(const fs::path& path, const std::vector<std::string>& overrides) {
  Recipe r;
  r.path_ = path;
  std::vector<fs::path> stack;
  r.raw_ = load_file(path, stack, "");
  for (const std::string& o : overrides) apply_override(r.raw_, o);
  return r;
}

void Recipe::set(const std::string& assignment) {
  apply_override(raw_, assignment);
  validated_ = false;
}

}  // namespace loom::engine
