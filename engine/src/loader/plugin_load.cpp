// Loading plugin libraries (plugin_load.hpp) and registry.hpp's probe_plugin and
// probe_plugin_isolated.
#include "loader/plugin_load.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <system_error>
#include <vector>

#include "base/errors.hpp"
#include "loader/plugin_check.hpp"
#include "loader/probe_room.hpp"
#include "loom/loom.h"

namespace fs = std::filesystem;

namespace loom::engine {

namespace {

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

std::string str_or_empty(const char* s) { return s ? s : ""; }

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

}  // namespace

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

std::string load_guarded(const fs::path& so, Library& lib, const loom_plugin_descriptor*& desc) {
  CrashGuard guard(so);
  return load_library(so, lib, desc);
}

// Loads `so` in a child process and reports what load_library found there. A library whose
// loading crashes, or takes over `seconds`, takes only the child down: the report says so.
ProbeReport probe_in_child(const fs::path& so, unsigned seconds) {
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
    // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on one long
    // chain of operator+ starting from a literal once this function is inlined here.
    std::string report;
    if (out.empty()) {
      const std::string fields[] = {std::to_string(raw_enum(d->kind)),
                                    one_line(d->name, 200),
                                    one_line(str_or_empty(d->version), 200),
                                    one_line(str_or_empty(d->vendor), 200),
                                    one_line(str_or_empty(d->license), 200),
                                    one_line(str_or_empty(d->description), 2000),
                                    std::to_string(d->abi_major),
                                    std::to_string(d->abi_minor)};
      report = "\n";
      for (const std::string& f : fields) report.append(f).append("\n");
    } else {
      report.append("R").append(one_line(out, 2000)).append("\n");
    }
    out = std::move(report);
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

}  // namespace loom::engine
