// Loom SDK C++ helpers (header-only, plugin side): the check of loom/cpp/regular_file.hpp as
// a plugin error, and the whole read, for a plugin that reads a file the recipe names.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include "loom/cpp/plugin.hpp"
#include "loom/cpp/regular_file.hpp"

namespace loom {

// Before a file named by the recipe is read: throws (invalid argument) when `path` exists but
// is not a regular file, a FIFO or /dev/zero for one; the message starts with `who`
// ("tokenizer/wordpiece: vocab_file: "). A missing file is left to the caller's open.
inline void require_regular_file(const std::string& path, const std::string& who) {
  const std::string why = not_regular_file(path);
  if (!why.empty()) throw Error(LOOM_ERR_INVALID_ARGUMENT, who + why);
}

// The whole of the file at `path`, which recipe key `key` of plugin `who` names
// ("tokenizer/wordpiece", "vocab_file"): refused as require_regular_file does, and
// LOOM_ERR_IO, naming the key and the path, when it cannot be opened or read.
inline std::string read_recipe_file(const std::string& path, const std::string& who,
                                    const std::string& key) {
  require_regular_file(path, who + ": " + key + ": ");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(LOOM_ERR_IO, who + ": cannot open " + key + " \"" + path + "\"");
  std::ostringstream all;
  all << in.rdbuf();
  if (in.bad()) throw Error(LOOM_ERR_IO, who + ": cannot read " + key + " \"" + path + "\"");
  return all.str();
}

}  // namespace loom
