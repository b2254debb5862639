// Plugin discovery and loading (Boost.DLL). A library that cannot be used is refused with a
// one-line reason and never crashes the host.
#pragma once

#include <deque>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/plugin.h"

namespace loom::engine {

const char* engine_version();  // Loom's own version, "0.1.0"

// "built for Loom ABI 1.1, this host is 2.0 (rebuild it against the Loom 2 SDK)".
std::string abi_mismatch(uint64_t major, uint64_t minor);

std::string kind_name(loom_plugin_kind kind);  // "backend", ...
std::optional<loom_plugin_kind> kind_from_name(const std::string& name);
// Indexed by the kind's enum value (index 0 is ""): the recipe section that selects and
// configures a plugin of that kind ("data" for LOOM_KIND_DATASET).
const std::vector<std::string>& section_of_kind();
// The key of that section that names the plugin: "plugin", or for the two kinds that share
// [parallel], "data" (grad) and "schedule" (schedule).
std::string selector_of_kind(loom_plugin_kind kind);

struct PluginInfo {
  std::filesystem::path path;  // the .so
  loom_plugin_kind kind{};
  std::string name, version, vendor, license, description;
  uint32_t abi_major = 0, abi_minor = 0;
  bool from_manifest = false;                    // described by a package manifest, not loaded yet
  const loom_plugin_descriptor* desc = nullptr;  // set once loaded
  std::vector<std::string> capabilities;         // extension ids the plugin implements
  bool has_capability(const std::string& id) const;
  std::string capabilities_text() const;  // "loom.decode/1, ..." or "none", for messages
  // The table of capability `id` on the descriptor's ext chain, or NULL (also when the
  // plugin is not loaded).
  const loom_ext* find_ext(const char* id) const;
};

struct Refusal {
  std::filesystem::path path;
  std::string kind, name;  // from the manifest or file name, when known
  std::string reason;      // one line
};

// How Registry::discover treats the libraries it finds.
enum class Discovery {
  // Find them; load each only when get() asks for its kind/name (by its file name,
  // loom-<kind>-<name>.so), so that a broken plugin a command does not use cannot take the
  // command down. Packages are listed from their manifests.
  kOnDemand,
  // Load plain libraries to describe them, each probed in a child process first (one that
  // crashes is refused, not fatal); packages listed from their manifests (`loom plugins`).
  kList,
  // kList, and packages loaded too (`loom plugins --load`).
  kLoadAll,
};

class Registry {
 public:
  Registry();
  ~Registry();
  // Search order: LOOM_PLUGIN_PATH (':'-separated), the build tree (LOOM_BUILD_PLUGIN_DIR
  // and ../plugins beside the running executable), the user folder
  // ~/.local/lib/loom/plugins (where `loom install` puts packages by default), the install
  // prefix. LOOM_PLUGIN_PATH_ONLY=1 searches LOOM_PLUGIN_PATH alone (hermetic tests).
  // Packages' sha256 is verified when they are found, loaded or not. Libraries stay loaded
  // for the Registry's lifetime; calling discover again rescans. Folders and plugin files
  // anyone may write are warned about (a log line).
  void discover(Discovery how = Discovery::kOnDemand);
  void add_path(const std::filesystem::path& dir);  // searched after the others
  // The plugins loaded or listed so far (on demand: those asked for).
  const std::deque<PluginInfo>& plugins() const;  // stable: get() returns references into it
  // The names of kind's plugins: loaded, listed, or found by file name (not loaded).
  std::vector<std::string> names(loom_plugin_kind kind) const;
  const std::vector<Refusal>& refused() const;
  // The loaded plugin or a UsageError naming the kind/name, the nearest valid name, and
  // the refusal reason when a library of that kind/name was refused.
  const PluginInfo& get(loom_plugin_kind kind, const std::string& name);
  const std::vector<std::filesystem::path>& search_paths() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The table of capability `id` that `info`'s plugin provides, at least `min_size` bytes, or
// a UsageError naming the plugin, the id and `needed_for` ("`loom generate`").
const loom_ext* require_ext(const PluginInfo& info, const char* id, size_t min_size,
                            const std::string& needed_for);

// Loads `so` just long enough to read and check its descriptor (no duplicate check) and
// copies it into `out` (out.desc stays null: the library is unloaded on return). Returns
// "" or the one-line reason the registry would refuse it. Used by `loom pack`.
std::string probe_plugin(const std::filesystem::path& so, PluginInfo& out);
// probe_plugin in a child process: a library whose loading crashes or hangs is refused with
// that reason, and this process runs none of its code. `out` gets the descriptor's strings,
// kind and ABI (desc stays null). Used by `loom install`.
std::string probe_plugin_isolated(const std::filesystem::path& so, PluginInfo& out);

}  // namespace loom::engine
