// Small string helpers the engine's subsystems share.
#pragma once

#include <string>

namespace loom::engine {

// `s` with every occurrence of `from` replaced by `to`, left to right, never rescanning what
// was put in (chat templates' {role}/{content}, WikiText's detokenizer).
inline std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

}  // namespace loom::engine
