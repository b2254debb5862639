// Plugin discovery: the search path, packages and plain libraries found there, loading on
// demand, and refusals. Every library is checked before the engine trusts anything in it —
// ELF header, the entry symbol, the descriptor's size, ABI, kind, name and schema, the
// function table's size (plugin_load.cpp, plugin_check.cpp), and for packages the sha256
// pinned by the manifest (before dlopen) — and refused with a one-line reason instead of
// crashing the host.
#include "loader/registry.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <system_error>

#include "base/errors.hpp"
#include "loader/package.hpp"
#include "loader/plugin_check.hpp"
#include "loader/plugin_load.hpp"
#include "loader/schema.hpp"
#include "loom/loom.h"

namespace fs = std::filesystem;

namespace loom::engine {

namespace {

// World-writable plugin folders and files: anyone on the machine can put code there that
// loom then runs as the user. Said once per path per process.
void warn_if_world_writable(const fs::path& p, const char* what) {
  static std::set<std::string> warned;
  std::error_code ec;
  const fs::file_status st = fs::status(p, ec);
  if (ec || (st.permissions() & fs::perms::others_write) == fs::perms::none) return;
  if (!warned.insert(p.string()).second) return;
  spdlog::warn(
      "plugin {} {} is world-writable: anyone on this machine can replace the code loom "
      "loads from it (chmod o-w it)",
      what, p.string());
}

std::vector<fs::path> split_path_list(const char* text) {
  std::vector<fs::path> out;
  if (text == nullptr) return out;
  std::string s = text;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(':', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.emplace_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

fs::path executable_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

}  // namespace

const char* engine_version() { return LOOM_VERSION; }

bool PluginInfo::has_capability(const std::string& id) const {
  return std::find(capabilities.begin(), capabilities.end(), id) != capabilities.end();
}

std::string PluginInfo::capabilities_text() const {
  std::string listed;
  for (const std::string& c : capabilities) listed += (listed.empty() ? "" : ", ") + c;
  return listed.empty() ? "none" : listed;
}

const loom_ext* PluginInfo::find_ext(const char* id) const {
  return desc == nullptr ? nullptr : loom_ext_find(desc->ext, id);
}

const loom_ext* require_ext(const PluginInfo& info, const char* id, size_t min_size,
                            const std::string& needed_for) {
  const std::string who = kind_name(info.kind) + "/" + info.name;
  if (!info.has_capability(id))
    throw UsageError(needed_for + " needs capability '" + id + "', which plugin " + who +
                     " does not implement (its capabilities: " + info.capabilities_text() + ")");
  const loom_ext* e = info.find_ext(id);
  if (e == nullptr || e->struct_size < min_size)
    throw UsageError("plugin " + who + " lists capability '" + id +
                     "' but its table is missing or smaller than the host expects");
  return e;
}

struct Registry::Impl {
  std::vector<fs::path> paths;
  // A deque: get() hands out references, and later loads must not move what they point at.
  std::deque<PluginInfo> plugins;
  std::vector<Refusal> refused;
  std::vector<Library> libs;  // kept loaded: descriptors point into them
  bool discovered = false;

  const PluginInfo* find(loom_plugin_kind kind, const std::string& name) const {
    for (const PluginInfo& p : plugins)
      if (p.kind == kind && p.name == name) return &p;
    return nullptr;
  }

  void refuse(const fs::path& path, std::string kind, std::string name, std::string reason) {
    refused.push_back(Refusal{path, std::move(kind), std::move(name), one_line(reason)});
  }

  // "" or the duplicate reason.
  std::string duplicate_of(loom_plugin_kind kind, const std::string& name) const {
    const PluginInfo* first = find(kind, name);
    if (first == nullptr) return "";
    return "duplicates " + kind_name(kind) + "/" + name + " already loaded from " +
           first->path.string();
  }

  // A plain library found but not loaded (on demand), with the kind/name its file name says.
  struct Pending {
    fs::path so;
    std::string kind, name;
  };
  std::vector<Pending> pending;

  void scan_library(const fs::path& so, Discovery how) {
    warn_if_world_writable(so, "file");
    auto [gkind, gname] = guess_from_file(so);
    if (how == Discovery::kOnDemand) {
      pending.push_back({so, gkind, gname});
      return;
    }
    // Listing: each library first in a child process, so that one that crashes is listed as
    // refused instead of ending the listing.
    const ProbeReport probe = probe_in_child(so);
    if (!probe.reason.empty()) return refuse(so, gkind, gname, probe.reason);
    load_plain(so);
  }

  // Loads a plain library in this process (guarded) and registers it, or refuses it.
  void load_plain(const fs::path& so) {
    auto [gkind, gname] = guess_from_file(so);
    Library lib;
    const loom_plugin_descriptor* d = nullptr;
    std::string reason = load_guarded(so, lib, d);
    if (!reason.empty()) {
      // Name the refusal from the descriptor when it was readable enough to trust.
      if (d != nullptr && d->struct_size >= LOOM_PLUGIN_DESCRIPTOR_SIZE_V2 &&
          valid_plugin_name(d->name) && valid_kind(raw_enum(d->kind))) {
        gkind = kind_name(d->kind);
        gname = d->name;
      }
      refuse(so, gkind, gname, reason);
      return;
    }
    std::string dup = duplicate_of(d->kind, d->name);
    if (!dup.empty()) return refuse(so, kind_name(d->kind), d->name, dup);
    PluginInfo info;
    fill_info(info, so, d);
    plugins.push_back(std::move(info));
    libs.push_back(std::move(lib));
  }

  void scan_package(const fs::path& folder, Discovery how) {
    const bool load = how == Discovery::kLoadAll;
    warn_if_world_writable(folder, "package folder");
    Manifest m;
    std::string reason = read_manifest(folder / "manifest.toml", m);
    fs::path so = m.file.empty() ? folder : folder / m.file;
    if (!m.file.empty()) warn_if_world_writable(so, "file");
    auto fail = [&](const std::string& why) { refuse(so, m.kind, m.name, why); };
    if (!reason.empty()) return fail(reason);
    auto kind = kind_from_name(m.kind);
    if (!kind) return fail("manifest names unknown plugin kind '" + m.kind + "'");
    if (m.abi_major != LOOM_ABI_MAJOR) return fail(abi_mismatch(m.abi_major, m.abi_minor));
    std::error_code ec;
    if (!fs::is_regular_file(so, ec))
      return fail("manifest names '" + m.file + "' but the package has no such file");
    std::string actual;
    try {
      actual = sha256_of_file(so);
    } catch (const std::exception& e) {
      return fail(e.what());
    }
    if (actual != m.sha256)
      return fail("sha256 mismatch: manifest says " + m.sha256.substr(0, 16) + "..., file is " +
                  actual.substr(0, 16) + "... (modified after packaging)");
    std::string dup = duplicate_of(*kind, m.name);
    if (!dup.empty()) return fail(dup);
    if (!load) {
      PluginInfo info;
      info.path = so;
      info.kind = *kind;
      info.name = m.name;
      info.version = m.version;
      info.vendor = m.vendor;
      info.license = m.license;
      info.description = m.description;
      info.abi_major = static_cast<uint32_t>(m.abi_major);
      info.abi_minor = static_cast<uint32_t>(m.abi_minor);
      info.from_manifest = true;
      plugins.push_back(std::move(info));
      return;
    }
    const ProbeReport probe = probe_in_child(so);
    if (!probe.reason.empty()) return fail(probe.reason);
    Library lib;
    const loom_plugin_descriptor* d = nullptr;
    reason = load_guarded(so, lib, d);
    if (reason.empty()) reason = manifest_disagrees(m, d);
    if (!reason.empty()) return fail(reason);
    PluginInfo info;
    fill_info(info, so, d);
    plugins.push_back(std::move(info));
    libs.push_back(std::move(lib));
  }

  static std::string manifest_disagrees(const Manifest& m, const loom_plugin_descriptor* d) {
    if (kind_name(d->kind) != m.kind || m.name != d->name)
      return "manifest says " + m.kind + "/" + m.name + " but the library is " +
             kind_name(d->kind) + "/" + d->name;
    return "";
  }

  void scan_dir(const fs::path& dir, Discovery how) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) return;
    warn_if_world_writable(dir, "folder");
    std::vector<fs::path> entries;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
      entries.push_back(it->path());
    std::sort(entries.begin(), entries.end());  // deterministic: first in name order wins
    for (const fs::path& e : entries) {
      if (e.filename().string().starts_with(".")) continue;  // e.g. an install in progress
      if (fs::is_directory(e, ec)) {
        if (fs::exists(e / "manifest.toml", ec)) scan_package(e, how);
      } else if (e.extension() == ".so") {
        scan_library(e, how);
      }
    }
  }

  // Loads a plugin listed from its manifest; on failure it becomes a refusal.
  void load_listed(PluginInfo& info) {
    Library lib;
    const loom_plugin_descriptor* d = nullptr;
    Manifest m;
    std::string reason = read_manifest(info.path.parent_path() / "manifest.toml", m);
    if (reason.empty()) {
      std::string actual;
      try {
        actual = sha256_of_file(info.path);
      } catch (const std::exception& e) {
        reason = e.what();
      }
      if (reason.empty() && actual != m.sha256) reason = "sha256 mismatch (modified after listing)";
    }
    if (reason.empty()) reason = load_guarded(info.path, lib, d);
    if (reason.empty()) reason = manifest_disagrees(m, d);
    if (!reason.empty()) {
      std::string kind = kind_name(info.kind), name = info.name;
      refuse(info.path, kind, name, reason);
      throw UsageError("plugin " + kind + "/" + name + " refused: " + info.path.string() + ": " +
                       refused.back().reason);
    }
    fill_info(info, info.path, d);
    libs.push_back(std::move(lib));
  }

  // Loads the pending libraries whose file names say kind/name, in search order, until one
  // registers as it. The others stay unloaded: a broken plugin the command does not use
  // cannot take it down.
  void load_pending(const std::string& kind, const std::string& name) {
    for (size_t i = 0; i < pending.size();) {
      if (pending[i].kind != kind || pending[i].name != name) {
        ++i;
        continue;
      }
      const fs::path so = pending[i].so;
      pending.erase(pending.begin() + (ptrdiff_t)i);
      load_plain(so);
      auto k = kind_from_name(kind);
      if (k && find(*k, name) != nullptr) return;
    }
  }

  // Loads the pending libraries whose file names do not follow loom-<kind>-<name>.so: any of
  // them may be the plugin asked for.
  void load_unconventional() {
    std::vector<fs::path> todo;
    for (size_t i = 0; i < pending.size();) {
      if (kind_from_name(pending[i].kind)) {
        ++i;
        continue;
      }
      todo.push_back(pending[i].so);
      pending.erase(pending.begin() + (ptrdiff_t)i);
    }
    for (const fs::path& so : todo) load_plain(so);
  }
};

Registry::Registry() : impl_(std::make_unique<Impl>()) {
  std::vector<fs::path> candidates = split_path_list(std::getenv("LOOM_PLUGIN_PATH"));
  const char* only = std::getenv("LOOM_PLUGIN_PATH_ONLY");
  if (only == nullptr || std::string(only).empty() || std::string(only) == "0") {
    candidates.emplace_back(LOOM_BUILD_PLUGIN_DIR);
    fs::path exe_dir = executable_dir();
    if (!exe_dir.empty()) candidates.push_back(exe_dir.parent_path() / "plugins");
    fs::path user = user_plugin_dir();
    if (!user.empty()) candidates.push_back(user);
    candidates.emplace_back(LOOM_INSTALL_PLUGIN_DIR);
  }
  for (const fs::path& c : candidates) add_path(c);
}

Registry::~Registry() = default;

void Registry::add_path(const fs::path& dir) {
  std::error_code ec;
  fs::path norm = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  if (ec) norm = dir;
  if (std::find(impl_->paths.begin(), impl_->paths.end(), norm) == impl_->paths.end())
    impl_->paths.push_back(norm);
}

void Registry::discover(Discovery how) {
  impl_->plugins.clear();
  impl_->refused.clear();
  impl_->pending.clear();
  for (const fs::path& dir : impl_->paths) impl_->scan_dir(dir, how);
  impl_->discovered = true;
}

const std::deque<PluginInfo>& Registry::plugins() const { return impl_->plugins; }
const std::vector<Refusal>& Registry::refused() const { return impl_->refused; }
const std::vector<fs::path>& Registry::search_paths() const { return impl_->paths; }

const PluginInfo& Registry::get(loom_plugin_kind kind, const std::string& name) {
  if (!impl_->discovered) discover();
  const std::string k = kind_name(kind);
  impl_->load_pending(k, name);
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (PluginInfo& p : impl_->plugins) {
      if (p.kind != kind || p.name != name) continue;
      if (p.desc == nullptr) {
        for (const Refusal& r : impl_->refused)  // an earlier attempt to load it failed
          if (r.path == p.path)
            throw UsageError("plugin " + kind_name(kind) + "/" + name +
                             " refused: " + r.path.string() + ": " + r.reason);
        impl_->load_listed(p);
      }
      return p;
    }
    if (attempt == 0) impl_->load_unconventional();
  }
  for (const Refusal& r : impl_->refused)
    if (r.kind == k && r.name == name)
      throw UsageError("plugin " + k + "/" + name + " refused: " + r.path.string() + ": " +
                       r.reason);
  std::vector<std::string> names;  // loaded or listed, and found by file name
  for (const PluginInfo& p : impl_->plugins)
    if (p.kind == kind) names.push_back(p.name);
  for (const Impl::Pending& p : impl_->pending)
    if (p.kind == k && std::find(names.begin(), names.end(), p.name) == names.end())
      names.push_back(p.name);
  std::string guess = nearest(name, names);
  if (!guess.empty())
    throw UsageError("no plugin " + k + "/" + name + "; did you mean " + k + "/" + guess + "?");
  if (!names.empty()) {
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    throw UsageError("no plugin " + k + "/" + name + " (available " + k + " plugins: " + list +
                     ")");
  }
  std::string dirs;
  for (const fs::path& d : impl_->paths) dirs += (dirs.empty() ? "" : ":") + d.string();
  // Appended piece by piece: one long chain of `+` here trips g++ 12's -Wrestrict at -O3
  // (a false positive in its inlined char_traits copy).
  std::string message = "no plugin " + k + "/" + name;
  message += ": no " + k + " plugins found (searched ";
  message += dirs;
  message += "; set LOOM_PLUGIN_PATH)";
  throw UsageError(message);
}

std::vector<std::string> Registry::names(loom_plugin_kind kind) const {
  std::vector<std::string> out;
  for (const PluginInfo& p : impl_->plugins)
    if (p.kind == kind) out.push_back(p.name);
  for (const Impl::Pending& p : impl_->pending)
    if (p.kind == kind_name(kind) && std::find(out.begin(), out.end(), p.name) == out.end())
      out.push_back(p.name);
  return out;
}

}  // namespace loom::engine
