// Request checking for `loom serve`: a JSON body read strictly (valid UTF-8, an object, no
// unknown field, each field of its type and range), every refusal an ApiError that names the
// field and what it takes.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "serve/serve_api.hpp"

namespace loom::engine {

// Thrown while a request waits when its client has gone: nothing is written back.
struct ClientGone {};

// The body as a JSON object; an ApiError for invalid UTF-8, malformed JSON or another type.
nlohmann::json parse_body(const std::string& body);
// Bytes of `s` up to the last complete UTF-8 character (a multi-byte character whose bytes
// have not all arrived is held back; invalid bytes pass).
size_t utf8_complete(const std::string& s);
// Offset of the first byte that is not valid UTF-8, or npos.
size_t utf8_invalid_at(const std::string& s);

class Fields {
 public:
  // `allowed`: the fields the endpoint reads; `refused`: known fields it does not support,
  // each with the reason given back.
  Fields(const nlohmann::json& obj, std::string where, std::vector<std::string> allowed,
         std::vector<std::pair<std::string, std::string>> refused = {});
  bool has(const char* key) const;  // present and not null
  int64_t integer(const char* key, int64_t def, int64_t lo, int64_t hi) const;
  double number(const char* key, double def, double lo, double hi, bool lo_inclusive) const;
  bool boolean(const char* key, bool def) const;
  std::string string(const char* key, const std::string& def) const;
  // A string, or an array of strings (non-empty when `required`).
  std::vector<std::string> strings(const char* key, bool required) const;

 private:
  [[noreturn]] void bad(const char* key, const std::string& what) const;
  const nlohmann::json& obj_;
  std::string where_;
};

}  // namespace loom::engine
