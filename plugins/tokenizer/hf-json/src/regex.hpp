// A compiled PCRE2 pattern (UTF + Unicode properties, JIT when available) that lists the
// non-overlapping matches in a string, left to right, as Oniguruma/regex-crate users of
// Hugging Face's patterns expect. Literal patterns (HF's {"String": ...}) are escaped.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hfjson {

class Regex {
 public:
  // Throws loom::Error (INVALID_ARGUMENT) naming `where` when the pattern does not compile.
  Regex(const std::string& pattern, bool literal, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // [start, end) byte ranges of the matches; empty matches are skipped. `s` must be valid
  // UTF-8 (the pipeline sanitises input first).
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hfjson
