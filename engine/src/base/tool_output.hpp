// What `loom` tools that write files (checkpoint merge/convert, import-hf, export-hf,
// preprocess, pack) and that read folders through a listing (a checkpoint's manifest, a
// Hugging Face shard index, a package manifest) agree on:
//  - an output never is, holds or lies inside one of the command's inputs, compared by
//    canonical path and by inode, so `./`, `..`, links and hard links do not hide it;
//  - an existing output is replaced only when the user said --overwrite;
//  - a file is written beside its final name and renamed into place, a folder likewise as a
//    whole, so a failure leaves the old output (or none) and never half of a new one;
//  - a name a listing gives is a plain file name inside the listed folder.
// Every refusal is a UsageError (exit 2) naming the path and the reason.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace loom::engine {

// Refuses `out` when it is, lies inside, or holds one of `inputs` (`command` starts the
// message: "loom checkpoint merge"), and, unless `overwrite`, when it exists at all
// (`existing_ok`, when given, may accept some existing outputs: an empty folder).
void check_output(const std::string& command, const std::filesystem::path& out,
                  const std::vector<std::filesystem::path>& inputs, bool overwrite,
                  const std::function<bool(const std::filesystem::path&)>& existing_ok = {});

// Writes `out` through `write(tmp)`: `tmp` is a fresh sibling name, renamed onto `out` once
// `write` returned; removed when it throws.
void write_file_atomically(const std::filesystem::path& out,
                           const std::function<void(const std::filesystem::path&)>& write);

// Fills the folder `out` through `fill(tmp)` on a fresh sibling folder, then swaps it in
// whole: an old `out` is moved aside, the new one renamed into place, the old removed.
// A throw from `fill` leaves `out` as it was.
void write_folder_atomically(const std::filesystem::path& out,
                             const std::function<void(const std::filesystem::path&)>& fill);

// `folder / name` for a name that `listing` (a manifest, an index) gives for a file of
// `folder`: a plain file name (no '/', no "..", not absolute, not empty) that, where it is
// a link, stays inside `folder`. Anything else is a UsageError naming the listing and the
// entry: a listing never sends a reader elsewhere (/etc/passwd, /dev/zero, ../../x).
std::filesystem::path entry_in_folder(const std::filesystem::path& folder, const std::string& name,
                                      const std::filesystem::path& listing);

}  // namespace loom::engine
