// A plugin's recipe schema as the host reads it: the Value a recipe key holds, a schema's
// default parsed and checked against its range and choices, values as TOML text, and the
// nearest name to a misspelt one. Below the recipe (which validates against schemas) and
// the registry (which checks a plugin's schema when it loads one).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/plugin.h"

namespace loom::engine {

struct Value {
  loom_param_type type = LOOM_PARAM_STRING;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::string file;  // where it was set ("<default>", "<--set>" or a path)
  int line = 0;
};

// Value::file of a value set by --set, and of a schema's default.
inline constexpr const char* kSetFile = "<--set>";
inline constexpr const char* kDefaultFile = "<default>";

// The shortest text that reads back as `x`, in plain decimal notation for magnitudes from
// 1e-5 to 1e15 (0.0003, not 3e-04).
std::string shortest_decimal(double x);

// Parses a schema's default_value (TOML literal text; a string may be bare or quoted) into
// `out` (file "<default>") and checks it against the range and choices. Returns "" or the
// problem; a NULL default (required key) is a problem here.
std::string parse_default(const loom_param_spec& spec, Value& out);
// Range and choices of `spec` as text: ">= 1", "0 to 1", "fp32|bf16|fp16", or "".
std::string describe_range(const loom_param_spec& spec);
const char* type_name(loom_param_type type);  // "bool", "int", "float", "string"
// A value as TOML text: true, 12, 0.0003, "text" (quoted and escaped).
std::string toml_literal(const Value& v);

// Levenshtein-nearest of `candidates` to `word`, or "" when none is close.
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

// Helpers of the messages above, shared with the recipe validator.
std::string format_number(double x);         // 12, 0.5, 1e-06 (integers without a point)
bool unbounded(double b);                    // DBL_MAX or 1e18 as a bound: none
std::string quoted(const std::string& s);    // "s"
const char* type_phrase(loom_param_type t);  // "an integer", ...
// "" or what is wrong with `v` against `spec`'s range or choices.
std::string check_bounds(const loom_param_spec& spec, const Value& v);

}  // namespace loom::engine
