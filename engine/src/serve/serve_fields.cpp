// Strict request checking for `loom serve` (serve_fields.hpp).
#include "serve/serve_fields.hpp"

#include <cmath>

#include "recipe/recipe.hpp"

namespace loom::engine {

using json = nlohmann::json;

size_t utf8_invalid_at(const std::string& s) {
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned c = b[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || (len == 2 && c < 0xC2) || (len == 4 && c > 0xF4) || i + len > n) return i;
    for (size_t k = 1; k < len; ++k)
      if ((b[i + k] & 0xC0) != 0x80) return i;
    // overlong 3/4-byte forms, surrogates, and code points past U+10FFFF
    if ((c == 0xE0 && b[i + 1] < 0xA0) || (c == 0xED && b[i + 1] >= 0xA0) ||
        (c == 0xF0 && b[i + 1] < 0x90) || (c == 0xF4 && b[i + 1] >= 0x90))
      return i;
    i += len;
  }
  return std::string::npos;
}

size_t utf8_complete(const std::string& s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const unsigned c = (unsigned char)s[n - back];
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t len = c < 0x80         ? 1
                       : (c >> 5) == 6  ? 2
                       : (c >> 4) == 14 ? 3
                       : (c >> 3) == 30 ? 4
                                        : 1;
    return len > back ? n - back : n;
  }
  return n;
}

json parse_body(const std::string& body) {
  if (body.empty()) throw ApiError{400, "the request body is empty: expected a JSON object"};
  const size_t bad = utf8_invalid_at(body);
  if (bad != std::string::npos)
    throw ApiError{400, "the request body is not valid UTF-8 (byte " + std::to_string(bad) + ")"};
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a huge number
    throw ApiError{400, std::string("malformed JSON: ") + e.what()};
  }
  if (!j.is_object())
    throw ApiError{400,
                   std::string("the request body must be a JSON object, not ") + j.type_name()};
  return j;
}

Fields::Fields(const json& obj, std::string where, std::vector<std::string> allowed,
               std::vector<std::pair<std::string, std::string>> refused)
    : obj_(obj), where_(std::move(where)) {
  for (const auto& [key, value] : obj.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    for (const auto& [name, why] : refused)
      if (name == key) throw ApiError{400, why, key};
    std::string list;
    for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
    const std::string near = nearest(key, allowed);
    throw ApiError{400,
                   "unknown field '" + key + "'" +
                       (near.empty() ? "" : " (did you mean '" + near + "'?)") + "; " + where_ +
                       " takes " + list,
                   key};
  }
}

void Fields::bad(const char* key, const std::string& what) const {
  throw ApiError{400, std::string("'") + key + "' must be " + what, key};
}

bool Fields::has(const char* key) const { return obj_.contains(key) && !obj_[key].is_null(); }

int64_t Fields::integer(const char* key, int64_t def, int64_t lo, int64_t hi) const {
  if (!has(key)) return def;
  const json& v = obj_[key];
  const std::string range = "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
  if (!v.is_number_integer()) bad(key, range + ", not " + v.dump());
  if (v.is_number_unsigned() && v.get<uint64_t>() > (uint64_t)INT64_MAX) bad(key, range);
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) bad(key, range + ", not " + std::to_string(x));
  return x;
}

double Fields::number(const char* key, double def, double lo, double hi, bool lo_inclusive) const {
  if (!has(key)) return def;
  const json& v = obj_[key];
  const std::string range = std::string("a number ") + (lo_inclusive ? ">= " : "> ") +
                            json(lo).dump() + " and <= " + json(hi).dump();
  if (!v.is_number()) bad(key, range + ", not " + v.dump());
  const double x = v.get<double>();
  if (!std::isfinite(x) || x > hi || x < lo || (!lo_inclusive && x == lo))
    bad(key, range + ", not " + v.dump());
  return x;
}

bool Fields::boolean(const char* key, bool def) const {
  if (!has(key)) return def;
  if (!obj_[key].is_boolean()) bad(key, "true or false, not " + obj_[key].dump());
  return obj_[key].get<bool>();
}

std::string Fields::string(const char* key, const std::string& def) const {
  if (!has(key)) return def;
  if (!obj_[key].is_string()) bad(key, "a string, not " + std::string(obj_[key].type_name()));
  return obj_[key].get<std::string>();
}

std::vector<std::string> Fields::strings(const char* key, bool required) const {
  if (!has(key)) {
    if (required) throw ApiError{400, std::string("'") + key + "' is required", key};
    return {};
  }
  const json& v = obj_[key];
  if (v.is_string()) return {v.get<std::string>()};
  if (!v.is_array() || (required && v.empty()))
    bad(key,
        required ? "a string or a non-empty array of strings" : "a string or an array of strings");
  std::vector<std::string> out;
  for (const json& e : v) {
    if (!e.is_string()) bad(key, "an array of strings; it holds a " + std::string(e.type_name()));
    out.push_back(e.get<std::string>());
  }
  return out;
}

}  // namespace loom::engine
