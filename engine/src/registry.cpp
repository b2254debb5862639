// Plugin discovery and loading. Every library is checked before the engine trusts anything
// in it — ELF header, the entry symbol, the descriptor's size, ABI, kind, name and schema,
// the function table's size, and for packages the sha256 pinned by the manifest (before
// dlopen) — and refused with a one-line reason instead of crashing the host.
#define BOOST_DLL_USE_STD_FS
#include "registry.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <boost/dll/shared_library.hpp>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <system_error>

#include "errors.hpp"
#include "loom/loom.h"
#include "package.hpp"
#include "recipe.hpp"

namespace fs = std::filesystem;

namespace loom::engine {

namespace {

const char* const kKindNames[] = {"",     "backend",   "comm",      "model",   "attention",
                                  "grad", "optimizer", "tokenizer", "dataset", "schedule"};
constexpr int kNumKinds = 9;

// The descriptor's first fields, the same in every major: enough to read its ABI version.
constexpr size_t kVersionBytes = LOOM_STRUCT_SIZE(loom_plugin_descriptor, abi_minor);

std::string abi_text(uint64_t major, uint64_t minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

// Size of the function table each kind must provide at ABI 2.0.
size_t api_size_v2(loom_plugin_kind kind) {
  switch (kind) {
    case LOOM_KIND_BACKEND:
      return LOOM_BACKEND_API_SIZE_V2;
    case LOOM_KIND_COMM:
      return LOOM_COMM_API_SIZE_V2;
    case LOOM_KIND_MODEL:
      return LOOM_MODEL_API_SIZE_V2;
    case LOOM_KIND_ATTENTION:
      return LOOM_ATTENTION_API_SIZE_V2;
    case LOOM_KIND_GRAD:
      return LOOM_GRAD_API_SIZE_V2;
    case LOOM_KIND_SCHEDULE:
      return LOOM_SCHEDULE_API_SIZE_V2;
    case LOOM_KIND_OPTIMIZER:
      return LOOM_OPTIMIZER_API_SIZE_V2;
    case LOOM_KIND_TOKENIZER:
      return LOOM_TOKENIZER_API_SIZE_V2;
    case LOOM_KIND_DATASET:
      return LOOM_DATASET_API_SIZE_V2;
  }
  return 0;
}

// An enum field as the integer the plugin stored: reading an out-of-range value through the
// enum type would be undefined behaviour, and plugins are untrusted.
template <class E>
int raw_enum(const E& field) {
  static_assert(sizeof(E) == sizeof(int));
  int v = 0;
  std::memcpy(&v, &field, sizeof v);
  return v;
}

bool valid_kind(int k) { return k >= 1 && k <= kNumKinds; }

bool valid_plugin_name(const char* s) {
  if (s == nullptr || *s == '\0') return false;
  for (const char* p = s; *p; ++p) {
    unsigned char c = static_cast<unsigned char>(*p);
    if (!(std::isalnum(c) || c == '-' || c == '_' || c == '.')) return false;
  }
  return true;
}

// "loom-backend-cpu.so" -> {"backend", "cpu"}; best effort for naming refusals.
std::pair<std::string, std::string> guess_from_file(const fs::path& so) {
  std::string stem = so.filename().string();
  if (stem.size() > 3 && stem.ends_with(".so")) stem.resize(stem.size() - 3);
  if (!stem.starts_with("loom-")) return {"", stem};
  stem = stem.substr(5);
  size_t dash = stem.find('-');
  if (dash == std::string::npos) return {"", stem};
  return {stem.substr(0, dash), stem.substr(dash + 1)};
}

// What a shared library a plugin may need belongs to, for refusal messages: " (the CUDA
// runtime)", or "" for one not known here.
std::string library_role(const std::string& lib) {
  static const std::pair<const char*, const char*> kRoles[] = {{"libcudart.", "the CUDA runtime"},
                                                               {"libcuda.", "the NVIDIA driver"},
                                                               {"libcublasLt.", "cuBLASLt"},
                                                               {"libcublas.", "cuBLAS"},
                                                               {"libcudnn", "cuDNN"},
                                                               {"libnccl.", "NCCL"},
                                                               {"libmpi.", "MPI"},
                                                               {"libopenblas", "OpenBLAS"}};
  for (const auto& [prefix, role] : kRoles)
    if (lib.starts_with(prefix)) return std::string(" (") + role + ")";
  return "";
}

// dlopen's message without the "(dlerror system message: ...)" wrapping and the path.
std::string dlopen_reason(const std::string& what, const fs::path& so) {
  std::string msg = what;
  const std::string marker = "(dlerror system message: ";
  size_t at = msg.find(marker);
  if (at != std::string::npos) {
    msg = msg.substr(at + marker.size());
    if (!msg.empty() && msg.back() == ')') msg.pop_back();
  }
  const std::string prefix = so.string() + ": ";
  if (msg.starts_with(prefix)) msg = msg.substr(prefix.size());
  // A library the plugin needs is missing (the usual case on a machine without CUDA): name
  // it, and what it is part of, first.
  const std::string missing = ": cannot open shared object file";
  if (size_t end = msg.find(missing); end != std::string::npos) {
    const std::string lib = msg.substr(0, end);
    return "cannot load: " + one_line(lib, 80) + " not found" + library_role(lib) +
           "; install it or add its folder to LD_LIBRARY_PATH";
  }
  return "cannot load: " + one_line(msg, 200);
}

bool has_elf_header(const fs::path& so) {
  std::ifstream in(so, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic,
                                          "\x7f"
                                          "ELF",
                                          4) == 0;
}

// Checks one schema entry as the recipe validator will read it.
std::string check_param(const loom_param_spec& p, size_t i) {
  std::string at = "parameter " + std::to_string(i);
  if (p.struct_size < LOOM_PARAM_SPEC_SIZE_V2)
    return at + ": struct_size " + std::to_string(p.struct_size) + " is smaller than ABI 2.0's " +
           std::to_string(LOOM_PARAM_SPEC_SIZE_V2);
  if (p.name == nullptr || *p.name == '\0') return at + " has no name";
  at = "parameter '" + std::string(p.name) + "'";
  const int type = raw_enum(p.type);
  if (type < LOOM_PARAM_BOOL || type > LOOM_PARAM_STRING)
    return at + " has unknown type " + std::to_string(type);
  if (p.default_value != nullptr) {
    Value v;
    std::string problem = parse_default(p, v);
    if (!problem.empty()) return at + ": " + problem;
  }
  return "";
}

// An extension id: a name of [a-z0-9._-], a slash and a version number ("loom.decode/1").
bool valid_ext_id(const char* id) {
  if (id == nullptr) return false;
  const char* slash = std::strchr(id, '/');
  if (slash == nullptr || slash == id || slash[1] == '\0') return false;
  for (const char* c = id; c < slash; ++c)
    if (!(std::islower((unsigned char)*c) || std::isdigit((unsigned char)*c) || *c == '.' ||
          *c == '-' || *c == '_'))
      return false;
  for (const char* c = slash + 1; *c; ++c)
    if (!std::isdigit((unsigned char)*c)) return false;
  return std::strlen(id) <= 128;
}

// The capabilities list and the ext chain: well-formed ids, listed once, and every table on
// the chain announced in the list (the host finds tables by what the plugin declares).
std::string check_capabilities(const loom_plugin_descriptor* d) {
  std::set<std::string> ids;
  for (size_t i = 0; d->capabilities != nullptr && d->capabilities[i] != nullptr; ++i) {
    if (i >= 256) return "descriptor lists an implausible number of capabilities";
    const char* id = d->capabilities[i];
    if (!valid_ext_id(id))
      return "capability '" + one_line(id, 60) +
             "' is not an id of the form name/version (\"loom.decode/1\")";
    if (!ids.insert(id).second) return "capability '" + std::string(id) + "' is listed twice";
  }
  size_t n = 0;
  for (const loom_ext* e = d->ext; e != nullptr; e = e->next) {
    if (++n > 256) return "the descriptor's ext chain is too long (a cycle?)";
    if (e->struct_size < LOOM_EXT_SIZE_V2)
      return "an extension on the descriptor's ext chain has struct_size " +
             std::to_string(e->struct_size) + ", smaller than its header";
    if (e->id == nullptr || ids.count(e->id) == 0)
      return "extension '" + one_line(e->id ? e->id : "(null)", 60) +
             "' on the descriptor's ext chain is not listed in its capabilities";
  }
  return "";
}

// The descriptor's one-line problem, or "".
std::string check_descriptor(const loom_plugin_descriptor* d) {
  if (d == nullptr)
    return "loom_plugin_entry returned NULL: the plugin does not support this host (Loom ABI " +
           abi_text(LOOM_ABI_MAJOR, LOOM_ABI_MINOR) + ")";
  if (d->struct_size < kVersionBytes)
    return "descriptor struct_size " + std::to_string(d->struct_size) + " is too small";
  if (d->abi_major != LOOM_ABI_MAJOR) return abi_mismatch(d->abi_major, d->abi_minor);
  if (d->struct_size < LOOM_PLUGIN_DESCRIPTOR_SIZE_V2)
    return "descriptor struct_size " + std::to_string(d->struct_size) +
           " is smaller than ABI 2.0's " + std::to_string(LOOM_PLUGIN_DESCRIPTOR_SIZE_V2);
  if (!valid_kind(raw_enum(d->kind)))
    return "unknown plugin kind " + std::to_string(raw_enum(d->kind));
  if (!valid_plugin_name(d->name))
    return d->name == nullptr || *d->name == '\0'
               ? std::string("descriptor has no name")
               : "invalid plugin name '" + one_line(d->name, 60) +
                     "' (letters, digits, '-', '_' and '.' only)";
  if (d->num_params > 0 && d->params == nullptr)
    return "descriptor lists " + std::to_string(d->num_params) + " parameters but params is NULL";
  if (d->num_params > 10000) return "descriptor lists an implausible number of parameters";
  std::set<std::string> seen;
  for (size_t i = 0; i < d->num_params; ++i) {
    std::string problem = check_param(d->params[i], i);
    if (!problem.empty()) return problem;
    if (!seen.insert(d->params[i].name).second)
      return "parameter '" + std::string(d->params[i].name) + "' is declared twice";
    if (std::strcmp(d->params[i].name, "plugin") == 0)
      return "parameter 'plugin' is reserved for the engine (it selects the plugin)";
  }
  std::string problem = check_capabilities(d);
  if (!problem.empty()) return problem;
  if (d->api == nullptr) return "descriptor has no function table (api is NULL)";
  size_t api_size = *static_cast<const size_t*>(d->api);  // every table starts with struct_size
  if (api_size < api_size_v2(d->kind))
    return kind_name(d->kind) + " function table struct_size " + std::to_string(api_size) +
           " is smaller than ABI 2.0's " + std::to_string(api_size_v2(d->kind));
  return "";
}

std::string str_or_empty(const char* s) { return s ? s : ""; }

void fill_info(PluginInfo& info, const fs::path& so, const loom_plugin_descriptor* d) {
  info.path = so;
  info.kind = d->kind;
  info.name = d->name;
  info.version = str_or_empty(d->version);
  info.vendor = str_or_empty(d->vendor);
  info.license = str_or_empty(d->license);
  info.description = str_or_empty(d->description);
  info.abi_major = d->abi_major;
  info.abi_minor = d->abi_minor;
  info.from_manifest = false;
  info.desc = d;
  info.capabilities.clear();
  for (size_t i = 0; d->capabilities != nullptr && d->capabilities[i] != nullptr; ++i)
    info.capabilities.emplace_back(d->capabilities[i]);
}

using Library = std::unique_ptr<boost::dll::shared_library>;

// Opens `so` and checks its descriptor. Returns "" with `lib` and `desc` set, or a reason.
std::string load_library(const fs::path& so, Library& lib, const loom_plugin_descriptor*& desc) {
  std::error_code ec;
  if (!fs::is_regular_file(so, ec)) return "not a regular file";
  if (!has_elf_header(so)) return "not a shared object (no ELF header)";
  try {
    lib = std::make_unique<boost::dll::shared_library>(
        so, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    return dlopen_reason(e.what(), so);
  }
  if (!lib->has(LOOM_PLUGIN_ENTRY_NAME))
    return "no " + std::string(LOOM_PLUGIN_ENTRY_NAME) + " symbol (not a Loom plugin)";
  loom_plugin_entry_fn entry =
      &lib->get<const loom_plugin_descriptor*(uint32_t, uint32_t)>(LOOM_PLUGIN_ENTRY_NAME);
  desc = entry(LOOM_ABI_MAJOR, LOOM_ABI_MINOR);
  if (desc == nullptr) {
    // A plugin of an older major answers only a host of its own major (its SDK's
    // LOOM_PLUGIN_ENTRY did so). Ask as each older major, only to name it in the refusal:
    // the descriptor of another major is never read past its version fields.
    for (uint32_t major = LOOM_ABI_MAJOR - 1; major >= 1; --major) {
      const loom_plugin_descriptor* old = entry(major, UINT32_MAX);
      if (old != nullptr && old->struct_size >= kVersionBytes && old->abi_major == major)
        return abi_mismatch(old->abi_major, old->abi_minor);
    }
  }
  std::string problem = check_descriptor(desc);
  if (problem.empty()) {
    // An accepted plugin stays mapped until the process exits, after the registry is gone:
    // its runtime (OpenMP thread pools, a BLAS it loaded) may still hold threads or memory
    // that unloading the code would pull out from under them.
    ::dlopen(so.c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  }
  return problem;
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

std::string abi_mismatch(uint64_t major, uint64_t minor) {
  std::string s = "built for Loom ABI " + abi_text(major, minor) + ", this host is " +
                  abi_text(LOOM_ABI_MAJOR, LOOM_ABI_MINOR);
  if (major < LOOM_ABI_MAJOR)
    return s + " (rebuild it against the Loom " + std::to_string(LOOM_ABI_MAJOR) + " SDK)";
  return s + " (it needs a newer Loom)";
}

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

std::string kind_name(loom_plugin_kind kind) {
  int k = static_cast<int>(kind);
  if (k >= 1 && k <= kNumKinds) return kKindNames[k];
  return "kind" + std::to_string(k);
}

std::optional<loom_plugin_kind> kind_from_name(const std::string& name) {
  for (int k = 1; k <= kNumKinds; ++k)
    if (name == kKindNames[k]) return static_cast<loom_plugin_kind>(k);
  return std::nullopt;
}

const std::vector<std::string>& section_of_kind() {
  // grad and schedule plugins share [parallel]: `data` selects the one, `schedule` the other.
  static const std::vector<std::string> sections = {
      "",         "backend",   "comm",      "model", "attention",
      "parallel", "optimizer", "tokenizer", "data",  "parallel"};
  return sections;
}

std::string selector_of_kind(loom_plugin_kind kind) {
  if (kind == LOOM_KIND_GRAD) return "data";
  if (kind == LOOM_KIND_SCHEDULE) return "schedule";
  return "plugin";
}

struct Registry::Impl {
  std::vector<fs::path> paths;
  std::vector<PluginInfo> plugins;
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

  void scan_library(const fs::path& so) {
    auto [gkind, gname] = guess_from_file(so);
    Library lib;
    const loom_plugin_descriptor* d = nullptr;
    std::string reason = load_library(so, lib, d);
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

  void scan_package(const fs::path& folder, bool load) {
    Manifest m;
    std::string reason = read_manifest(folder / "manifest.toml", m);
    fs::path so = m.file.empty() ? folder : folder / m.file;
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
    Library lib;
    const loom_plugin_descriptor* d = nullptr;
    reason = load_library(so, lib, d);
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

  void scan_dir(const fs::path& dir, bool load) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) return;
    std::vector<fs::path> entries;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
      entries.push_back(it->path());
    std::sort(entries.begin(), entries.end());  // deterministic: first in name order wins
    for (const fs::path& e : entries) {
      if (e.filename().string().starts_with(".")) continue;  // e.g. an install in progress
      if (fs::is_directory(e, ec)) {
        if (fs::exists(e / "manifest.toml", ec)) scan_package(e, load);
      } else if (e.extension() == ".so") {
        scan_library(e);
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
    if (reason.empty()) reason = load_library(info.path, lib, d);
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

void Registry::discover(bool load) {
  impl_->plugins.clear();
  impl_->refused.clear();
  for (const fs::path& dir : impl_->paths) impl_->scan_dir(dir, load);
  impl_->discovered = true;
}

const std::vector<PluginInfo>& Registry::plugins() const { return impl_->plugins; }
const std::vector<Refusal>& Registry::refused() const { return impl_->refused; }
const std::vector<fs::path>& Registry::search_paths() const { return impl_->paths; }

const PluginInfo& Registry::get(loom_plugin_kind kind, const std::string& name) {
  if (!impl_->discovered) discover(true);
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
  const std::string k = kind_name(kind);
  for (const Refusal& r : impl_->refused)
    if (r.kind == k && r.name == name)
      throw UsageError("plugin " + k + "/" + name + " refused: " + r.path.string() + ": " +
                       r.reason);
  std::vector<std::string> names;
  for (const PluginInfo& p : impl_->plugins)
    if (p.kind == kind) names.push_back(p.name);
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
  throw UsageError("no plugin " + k + "/" + name + ": no " + k + " plugins found (searched " +
                   dirs + "; set LOOM_PLUGIN_PATH)");
}

std::string probe_plugin(const fs::path& so, PluginInfo& out) {
  Library lib;
  const loom_plugin_descriptor* d = nullptr;
  std::string reason = load_library(so, lib, d);
  if (!reason.empty()) return one_line(reason);
  fill_info(out, so, d);
  out.desc = nullptr;  // the strings were copied; the library closes on return
  return "";
}

}  // namespace loom::engine
