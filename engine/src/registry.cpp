// Plugin discovery and loading. Every library is checked before the engine trusts anything
// in it — ELF header, the entry symbol, the descriptor's size, ABI, kind, name and schema,
// the function table's size, and for packages the sha256 pinned by the manifest (before
// dlopen) — and refused with a one-line reason instead of crashing the host.
#define BOOST_DLL_USE_STD_FS
#include "registry.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/dll/shared_library.hpp>
#include <cctype>
#include <cmath>
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <system_error>

#include "errors.hpp"
#include "loom/loom.h"
#include "package.hpp"
#include "probe_room.hpp"
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

// A function-table slot the host calls without checking it for NULL: every slot of ABI 2.0
// but those documented as optional ("NULL: ..."). A table that leaves one NULL would crash
// the host at its first use, so the plugin is refused at load, naming the slot.
struct Slot {
  size_t offset;
  const char* name;
};
#define LOOM_SLOT(api, field) \
  Slot { offsetof(api, field), #field }

const std::vector<Slot>& mandatory_slots(loom_plugin_kind kind) {
  static const std::vector<Slot> kNone;
  static const std::vector<Slot> kBackend = {
      LOOM_SLOT(loom_backend_api, create),      LOOM_SLOT(loom_backend_api, destroy),
      LOOM_SLOT(loom_backend_api, get_info),    LOOM_SLOT(loom_backend_api, alloc_tensor),
      LOOM_SLOT(loom_backend_api, free_tensor), LOOM_SLOT(loom_backend_api, to_host),
      LOOM_SLOT(loom_backend_api, from_host),   LOOM_SLOT(loom_backend_api, synchronize),
      LOOM_SLOT(loom_backend_api, ops),         LOOM_SLOT(loom_backend_api, get_ext)};
  static const std::vector<Slot> kComm = {
      LOOM_SLOT(loom_comm_api, create),       LOOM_SLOT(loom_comm_api, destroy),
      LOOM_SLOT(loom_comm_api, world_rank),   LOOM_SLOT(loom_comm_api, world_size),
      LOOM_SLOT(loom_comm_api, group_create), LOOM_SLOT(loom_comm_api, group_destroy),
      LOOM_SLOT(loom_comm_api, group_rank),   LOOM_SLOT(loom_comm_api, group_size),
      LOOM_SLOT(loom_comm_api, all_reduce),   LOOM_SLOT(loom_comm_api, reduce_scatter),
      LOOM_SLOT(loom_comm_api, all_gather),   LOOM_SLOT(loom_comm_api, broadcast),
      LOOM_SLOT(loom_comm_api, all_to_all),   LOOM_SLOT(loom_comm_api, barrier),
      LOOM_SLOT(loom_comm_api, send),         LOOM_SLOT(loom_comm_api, recv)};
  // attention_requires is optional (NULL: the model requires nothing of attention).
  static const std::vector<Slot> kModel = {
      LOOM_SLOT(loom_model_api, create),          LOOM_SLOT(loom_model_api, destroy),
      LOOM_SLOT(loom_model_api, num_params),      LOOM_SLOT(loom_model_api, get_param),
      LOOM_SLOT(loom_model_api, init_params),     LOOM_SLOT(loom_model_api, zero_grad),
      LOOM_SLOT(loom_model_api, flops_per_token), LOOM_SLOT(loom_model_api, batch_spec),
      LOOM_SLOT(loom_model_api, stage_info),      LOOM_SLOT(loom_model_api, stage_forward),
      LOOM_SLOT(loom_model_api, stage_backward),  LOOM_SLOT(loom_model_api, finish_grads)};
  static const std::vector<Slot> kAttention = {
      LOOM_SLOT(loom_attention_api, create), LOOM_SLOT(loom_attention_api, destroy),
      LOOM_SLOT(loom_attention_api, forward), LOOM_SLOT(loom_attention_api, backward)};
  // shard_params, after_step and bytes_per_param are optional.
  static const std::vector<Slot> kGrad = {LOOM_SLOT(loom_grad_api, create),
                                          LOOM_SLOT(loom_grad_api, destroy),
                                          LOOM_SLOT(loom_grad_api, reduce)};
  static const std::vector<Slot> kSchedule = {LOOM_SLOT(loom_schedule_api, create),
                                              LOOM_SLOT(loom_schedule_api, destroy),
                                              LOOM_SLOT(loom_schedule_api, run)};
  static const std::vector<Slot> kOptimizer = {
      LOOM_SLOT(loom_optimizer_api, create), LOOM_SLOT(loom_optimizer_api, destroy),
      LOOM_SLOT(loom_optimizer_api, step), LOOM_SLOT(loom_optimizer_api, num_state),
      LOOM_SLOT(loom_optimizer_api, get_state)};
  static const std::vector<Slot> kTokenizer = {
      LOOM_SLOT(loom_tokenizer_api, create),     LOOM_SLOT(loom_tokenizer_api, destroy),
      LOOM_SLOT(loom_tokenizer_api, vocab_size), LOOM_SLOT(loom_tokenizer_api, eod_id),
      LOOM_SLOT(loom_tokenizer_api, encode),     LOOM_SLOT(loom_tokenizer_api, decode)};
  // cache_prefix is optional (NULL: the data has no home on disk).
  static const std::vector<Slot> kDataset = {
      LOOM_SLOT(loom_dataset_api, create), LOOM_SLOT(loom_dataset_api, destroy),
      LOOM_SLOT(loom_dataset_api, num_documents), LOOM_SLOT(loom_dataset_api, document)};
  switch (kind) {
    case LOOM_KIND_BACKEND:
      return kBackend;
    case LOOM_KIND_COMM:
      return kComm;
    case LOOM_KIND_MODEL:
      return kModel;
    case LOOM_KIND_ATTENTION:
      return kAttention;
    case LOOM_KIND_GRAD:
      return kGrad;
    case LOOM_KIND_SCHEDULE:
      return kSchedule;
    case LOOM_KIND_OPTIMIZER:
      return kOptimizer;
    case LOOM_KIND_TOKENIZER:
      return kTokenizer;
    case LOOM_KIND_DATASET:
      return kDataset;
  }
  return kNone;
}
#undef LOOM_SLOT

// "" or the first mandatory slot the table leaves NULL (its size was checked first).
std::string null_slot(loom_plugin_kind kind, const void* api) {
  for (const Slot& slot : mandatory_slots(kind)) {
    void* p = nullptr;
    std::memcpy(&p, static_cast<const char*>(api) + slot.offset, sizeof p);
    if (p == nullptr)
      return kind_name(kind) + " function table leaves mandatory slot '" + slot.name +
             "' NULL (the host would crash calling it)";
  }
  return "";
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
  return null_slot(d->kind, d->api);
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

// While a library is loaded in this process, a crash in its initialisers, its entry or its
// descriptor (a wild pointer) ends the command with a message naming it, not a bare 139.
class CrashGuard {
 public:
  explicit CrashGuard(const fs::path& so) {
    const std::string msg = "loom: error: plugin " + so.string() +
                            " crashed while loading (a wild pointer in its descriptor or "
                            "its initialisation); remove it from the plugin search path\n";
    std::snprintf(message_, sizeof message_, "%s", msg.c_str());
    struct sigaction sa {};
    sa.sa_handler = &CrashGuard::on_crash;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &sa, &saved_[i]);
  }
  ~CrashGuard() {
    for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &saved_[i], nullptr);
  }
  CrashGuard(const CrashGuard&) = delete;
  CrashGuard& operator=(const CrashGuard&) = delete;

 private:
  static constexpr std::array<int, 4> kSignals = {SIGSEGV, SIGBUS, SIGILL, SIGFPE};
  static void on_crash(int) {
    const ssize_t n = ::write(STDERR_FILENO, message_, std::strlen(message_));
    (void)n;
    ::_exit(2);
  }
  static inline char message_[4096] = {};
  std::array<struct sigaction, kSignals.size()> saved_{};
};

std::string load_guarded(const fs::path& so, Library& lib, const loom_plugin_descriptor*& desc) {
  CrashGuard guard(so);
  return load_library(so, lib, desc);
}

// What a child process found probing a library: a reason, or the descriptor's fields.
struct ProbeReport {
  std::string reason;
  int kind = 0;
  std::string name, version, vendor, license, description;
  uint32_t abi_major = 0, abi_minor = 0;
};

// Loads `so` in a child process and reports what load_library found there. A library whose
// loading crashes, or takes over `seconds`, takes only the child down: the report says so.
ProbeReport probe_in_child(const fs::path& so, unsigned seconds = 60) {
  ProbeReport report;
  int fds[2];
  if (::pipe(fds) != 0) {  // no probe possible: the caller loads it guarded
    report.reason = "";
    report.kind = -1;
    return report;
  }
  std::fflush(nullptr);
  const fs::path lib_path = fs::absolute(so);  // the child leaves this folder
  const ProbeRoom room;
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    report.kind = -1;
    return report;
  }
  if (pid == 0) {  // the child: load, write the findings, and leave without cleanup
    ::close(fds[0]);
    // The library's crash is the report: the default action of each fatal signal (a
    // sanitizer's handler would print pages and end with another signal), and whatever the
    // library prints goes nowhere.
    for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) std::signal(sig, SIG_DFL);
    if (const int null = ::open("/dev/null", O_WRONLY); null >= 0) {
      ::dup2(null, STDOUT_FILENO);
      ::dup2(null, STDERR_FILENO);
      ::close(null);
    }
    ::alarm(seconds);
    room.enter();
    Library lib;
    const loom_plugin_descriptor* d = nullptr;
    std::string out = load_library(lib_path, lib, d);
    if (out.empty())
      out = "\n" + std::to_string(raw_enum(d->kind)) + "\n" + one_line(d->name, 200) + "\n" +
            one_line(str_or_empty(d->version), 200) + "\n" +
            one_line(str_or_empty(d->vendor), 200) + "\n" +
            one_line(str_or_empty(d->license), 200) + "\n" +
            one_line(str_or_empty(d->description), 2000) + "\n" + std::to_string(d->abi_major) +
            "\n" + std::to_string(d->abi_minor) + "\n";
    else
      out = "R" + one_line(out, 2000) + "\n";
    for (size_t done = 0; done < out.size();) {
      const ssize_t n = ::write(fds[1], out.data() + done, out.size() - done);
      if (n <= 0) break;
      done += (size_t)n;
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    text.append(buf, (size_t)n);
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    report.reason = sig == SIGALRM ? "did not finish loading within " + std::to_string(seconds) +
                                         " s (probed in a child process)"
                                   : "crashed while loading (signal " + std::to_string(sig) + ", " +
                                         strsignal(sig) +
                                         "; probed in a child process): a wild pointer in its "
                                         "descriptor or its initialisation";
    return report;
  }
  if (text.empty()) {
    report.reason = "its probe exited with status " +
                    std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) +
                    " before reporting (it calls exit while loading)";
    return report;
  }
  if (text[0] == 'R') {
    report.reason = text.substr(1, text.find('\n') - 1);
    return report;
  }
  std::vector<std::string> lines;
  for (size_t at = 1; at < text.size();) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    lines.push_back(text.substr(at, nl - at));
    at = nl + 1;
  }
  if (lines.size() < 8) {
    report.reason = "its probe reported garbage";
    return report;
  }
  report.kind = std::atoi(lines[0].c_str());
  report.name = lines[1];
  report.version = lines[2];
  report.vendor = lines[3];
  report.license = lines[4];
  report.description = lines[5];
  report.abi_major = (uint32_t)std::strtoul(lines[6].c_str(), nullptr, 10);
  report.abi_minor = (uint32_t)std::strtoul(lines[7].c_str(), nullptr, 10);
  return report;
}

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

std::string probe_plugin(const fs::path& so, PluginInfo& out) {
  Library lib;
  const loom_plugin_descriptor* d = nullptr;
  std::string reason = load_guarded(so, lib, d);
  if (!reason.empty()) return one_line(reason);
  fill_info(out, so, d);
  out.desc = nullptr;  // the strings were copied; the library closes on return
  return "";
}

std::string probe_plugin_isolated(const fs::path& so, PluginInfo& out) {
  const ProbeReport probe = probe_in_child(so);
  if (probe.kind < 0) return probe_plugin(so, out);  // no child process: in this one, guarded
  if (!probe.reason.empty()) return probe.reason;
  out = PluginInfo{};
  out.path = so;
  out.kind = static_cast<loom_plugin_kind>(probe.kind);
  out.name = probe.name;
  out.version = probe.version;
  out.vendor = probe.vendor;
  out.license = probe.license;
  out.description = probe.description;
  out.abi_major = probe.abi_major;
  out.abi_minor = probe.abi_minor;
  return "";
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
