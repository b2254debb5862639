// The engine's side of loom/cpp/regular_file.hpp: a file named by the user that is not a
// regular file is the user's to fix (exit 2).
#pragma once

#include <string>
#include <vector>

#include "base/errors.hpp"
#include "loom/cpp/regular_file.hpp"

namespace loom::engine {

// Before a file named by the user is read: throws UsageError when `path` exists but is not a
// regular file (a FIFO, a device, a directory), the message starting with `what`
// ("data.path: ") when given. A missing or unreadable file is left to the reader.
inline void require_regular_file(const std::string& path, const std::string& what = "") {
  if (std::string why = loom::not_regular_file(path); !why.empty()) throw UsageError(what + why);
}

// A recipe key that names a file to read (`path`, `*_file`, an indexed `prefix`'s .bin and
// .idx) must name a regular file: "" when it does, else "= \"<value>\": <why>". Checked with
// the recipe, so that `loom validate` says so too, and for each data.*blend entry as its
// dataset is made; a missing file is left to the plugin.
inline std::string names_a_non_regular_file(const std::string& key, const std::string& value) {
  if (value.empty()) return "";
  std::vector<std::string> files;
  if (key == "path" || (key.size() > 5 && key.ends_with("_file"))) files = {value};
  if (key == "prefix") files = {value + ".bin", value + ".idx"};
  for (const std::string& f : files)
    if (std::string why = loom::not_regular_file(f); !why.empty())
      return "= \"" + value + "\": " + why;
  return "";
}

}  // namespace loom::engine
