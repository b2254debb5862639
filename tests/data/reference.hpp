// Reads the reference files under tests/data/data: lines of words, '#' lines skipped.
#pragma once

#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace sref {

inline std::vector<std::vector<std::string>> lines(const std::string& name) {
  std::ifstream in(std::string(LOOM_SOURCE_DIR) + "/tests/data/data/" + name);
  REQUIRE_MESSAGE(in.good(), "missing reference file " << name);
  std::vector<std::vector<std::string>> out;
  for (std::string l; std::getline(in, l);) {
    if (l.empty() || l[0] == '#') continue;
    std::stringstream ss(l);
    std::vector<std::string> words;
    for (std::string w; ss >> w;) words.push_back(w);
    out.push_back(words);
  }
  return out;
}

// Words [from, end) of a line as integers.
template <class T = int64_t>
std::vector<T> ints(const std::vector<std::string>& words, size_t from) {
  std::vector<T> out;
  for (size_t i = from; i < words.size(); ++i) out.push_back((T)std::stoll(words[i]));
  return out;
}

}  // namespace sref
