// The output and listing rules of `loom`'s file tools (tool_output.hpp).
#include "base/tool_output.hpp"

#include <unistd.h>

#include <algorithm>

#include "base/errors.hpp"

namespace fs = std::filesystem;

namespace loom::engine {
namespace {

// The path with links, "." and ".." resolved as far as it exists (the rest as written).
fs::path canonical_as_far_as_exists(const fs::path& p) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(fs::absolute(p, ec), ec);
  if (ec) c = fs::absolute(p).lexically_normal();
  return c.has_filename() || !c.has_relative_path() ? c : c.parent_path();  // "a/b/" is "a/b"
}

// `inner` is `outer` or lies under it (both canonical).
bool within(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin();
  for (const fs::path& part : outer) {
    if (part.empty()) continue;  // a trailing separator
    if (i == inner.end() || *i != part) return false;
    ++i;
  }
  return true;
}

bool same_file(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  return fs::exists(a, ec) && fs::exists(b, ec) && fs::equivalent(a, b, ec) && !ec;
}

// A sibling of `p` no other writer uses: ".NAME.WHAT-PID".
fs::path sibling(const fs::path& p, const char* what) {
  const fs::path abs = fs::absolute(p).lexically_normal();
  const fs::path name = abs.has_filename() ? abs.filename() : abs.parent_path().filename();
  const fs::path dir = abs.has_filename() ? abs.parent_path() : abs.parent_path().parent_path();
  std::string hidden(1, '.');  // appended piece by piece: GCC 12's -Wrestrict misfires on "." + s
  hidden.append(name.string()).append(".").append(what).append("-");
  hidden.append(std::to_string(::getpid()));
  return dir / hidden;
}

}  // namespace

void check_output(const std::string& command, const fs::path& out,
                  const std::vector<fs::path>& inputs, bool overwrite,
                  const std::function<bool(const fs::path&)>& existing_ok) {
  const fs::path o = canonical_as_far_as_exists(out);
  for (const fs::path& in : inputs) {
    if (in.empty()) continue;
    const fs::path i = canonical_as_far_as_exists(in);
    const char* how = same_file(out, in) || o == i ? "is"
                      : within(o, i)               ? "lies inside"
                      : within(i, o)               ? "holds"
                                                   : nullptr;
    if (how)
      throw UsageError(command + ": the output " + out.string() + " " + how + " the input " +
                       in.string() +
                       ": writing it would destroy what it reads; choose another "
                       "output");
  }
  std::error_code ec;
  const bool exists = fs::symlink_status(out, ec).type() != fs::file_type::not_found && !ec;
  if (!exists || overwrite || (existing_ok && existing_ok(out))) return;
  throw UsageError(command + ": the output " + out.string() +
                   " already exists; pass --overwrite to replace it, or choose another output");
}

namespace {

// Runs `write`; when it throws, `tmp` (what it was writing) is removed and the error goes on,
// a file-system error as a RunError naming `out`.
void or_remove(const fs::path& out, const fs::path& tmp, const std::function<void()>& write) {
  std::error_code ec;
  try {
    write();
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    throw RunError("cannot write " + out.string() + ": " + e.what());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace

void write_file_atomically(const fs::path& out, const std::function<void(const fs::path&)>& write) {
  const fs::path tmp = sibling(out, "tmp");
  or_remove(out, tmp, [&] {
    write(tmp);
    fs::rename(tmp, out);
  });
}

void write_folder_atomically(const fs::path& out,
                             const std::function<void(const fs::path&)>& fill) {
  const fs::path tmp = sibling(out, "tmp"), old = sibling(out, "old");
  std::error_code ec;
  fs::remove_all(tmp, ec);
  or_remove(out, tmp, [&] {
    fs::create_directories(tmp);
    fill(tmp);
  });
  // rename(2) puts a folder over an empty one; anything else is moved aside first.
  const bool had_old = fs::symlink_status(out, ec).type() != fs::file_type::not_found &&
                       !(fs::is_directory(out, ec) && fs::is_empty(out, ec));
  ec.clear();  // "not found" above is no error
  if (had_old) fs::rename(out, old, ec);
  if (!ec) fs::rename(tmp, out, ec);
  if (ec) {
    std::error_code ignore;
    if (had_old && !fs::exists(out, ignore)) fs::rename(old, out, ignore);
    fs::remove_all(tmp, ignore);
    throw RunError("cannot put " + out.string() + " in place: " + ec.message());
  }
  if (had_old) fs::remove_all(old, ec);
}

fs::path entry_in_folder(const fs::path& folder, const std::string& name, const fs::path& listing) {
  auto refuse = [&](const std::string& why) {
    std::string shown = name.substr(0, 120);
    std::replace_if(
        shown.begin(), shown.end(), [](char c) { return c >= 0 && c < 32; }, '?');
    return UsageError(listing.string() + ": entry '" + shown + "' " + why +
                      "; a listing names only plain files inside " + folder.string());
  };
  if (name.empty() || name == "." || name == "..") throw refuse("is not a file name");
  if (name.find('/') != std::string::npos || name.find('\\') != std::string::npos ||
      name.find('\0') != std::string::npos)
    throw refuse(name[0] == '/' ? "is an absolute path" : "is a path, not a plain file name");
  const fs::path p = folder / name;
  std::error_code ec;
  if (fs::is_symlink(p, ec)) {
    const fs::path target = fs::weakly_canonical(p, ec);
    if (ec || !within(target, fs::weakly_canonical(folder, ec)))
      throw refuse("is a link that leaves the folder (to " + target.string() + ")");
  }
  return p;
}

}  // namespace loom::engine
