// A plugin's recipe schema as the host reads it (schema.hpp).
#include "loader/schema.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "base/errors.hpp"

namespace loom::engine {

namespace {

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

}  // namespace

std::string format_number(double x) {
  if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 1e15) {
    return std::to_string(static_cast<int64_t>(x));
  }
  return shortest_decimal(x);
}

// A bound that means "unbounded" when plugins write DBL_MAX or 1e18 for it.
bool unbounded(double b) { return !std::isfinite(b) || std::fabs(b) >= 1e15; }

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

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

// "" or what is wrong with a value of the declared type against range and choices.
std::string check_bounds(const loom_param_spec& spec, const Value& v) {
  if ((spec.type == LOOM_PARAM_INT || spec.type == LOOM_PARAM_FLOAT) &&
      spec.min_value <= spec.max_value) {
    double x = spec.type == LOOM_PARAM_INT ? static_cast<double>(v.i) : v.f;
    bool lo_ok = unbounded(spec.min_value) || x >= spec.min_value;
    bool hi_ok = unbounded(spec.max_value) || x <= spec.max_value;
    if (std::isnan(x) || std::isinf(x) || !lo_ok || !hi_ok) {  // a recipe number is finite
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

}  // namespace loom::engine
