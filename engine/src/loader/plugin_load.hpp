// Loading a plugin library: the checks before and around dlopen (ELF header, entry symbol,
// descriptor), a crash while loading turned into a message naming the library, and the
// same load in a child process, so that `loom plugins` and `loom install` run none of an
// untrusted library's code in their own process.
#pragma once

#define BOOST_DLL_USE_STD_FS
#include <boost/dll/shared_library.hpp>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "loader/registry.hpp"

namespace loom::engine {

using Library = std::unique_ptr<boost::dll::shared_library>;

// "loom-backend-cpu.so" -> {"backend", "cpu"}; best effort for naming refusals.
std::pair<std::string, std::string> guess_from_file(const std::filesystem::path& so);
// `info` from a checked descriptor of the library at `so` (info.desc = d).
void fill_info(PluginInfo& info, const std::filesystem::path& so, const loom_plugin_descriptor* d);
// Opens `so` and checks its descriptor, a crash meanwhile ending the process with a message
// naming the library. Returns "" with `lib` and `desc` set, or the reason it is refused.
std::string load_guarded(const std::filesystem::path& so, Library& lib,
                         const loom_plugin_descriptor*& desc);

// What a child process found probing a library: a reason, or the descriptor's fields. kind < 0:
// no child could be started (probe in this process instead).
struct ProbeReport {
  std::string reason;
  int kind = 0;
  std::string name, version, vendor, license, description;
  uint32_t abi_major = 0, abi_minor = 0;
};
// Loads `so` in a child process and reports what the load found there. A library whose
// loading crashes, or takes over `seconds`, takes only the child down: the report says so.
ProbeReport probe_in_child(const std::filesystem::path& so, unsigned seconds = 60);

}  // namespace loom::engine
