// Loom SDK C++ helpers (header-only, plugin side): the check of loom/cpp/regular_file.hpp as
// a plugin error, for a plugin that reads a file the recipe names.
#pragma once

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

}  // namespace loom
