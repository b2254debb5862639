// The smallest optimizer-kind plugin, with its own entry function: built for this ABI (to
// pack and install), for a future "ABI 3" (the host must refuse it), returning NULL,
// declaring an unknown kind, with a descriptor struct_size too small for ABI 2.0, listing
// a malformed capability id, chaining an extension it does not list, leaving a mandatory
// slot NULL (TINY_NULL_SLOT), returning a wild descriptor pointer (TINY_WILD), and writing
// a file into its working folder and HOME as it loads (TINY_TOUCH_CWD).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "loom/cpp/plugin.hpp"

#ifndef TINY_VERSION
#define TINY_VERSION "0.1.0"
#endif

namespace {

constexpr loom_param_spec kParams[] = {
    loom::param("beta", LOOM_PARAM_FLOAT, "0.9", "momentum", 0, 1),
};

// An optimizer table whose slots abort when called: the tiny plugin is packed, installed,
// listed and validated, never run. TINY_NULL_SLOT leaves `step` (slot 2) NULL, which the
// host must refuse at load.
[[noreturn]] void tiny_slot() {
  std::fputs("tiny plugin: a slot was called; it only validates\n", stderr);
  std::abort();
}
struct TinyApi {
  size_t struct_size;
  void* slots[16];
};
TinyApi make_api() {
  TinyApi api{sizeof(TinyApi), {}};
  for (void*& slot : api.slots) slot = reinterpret_cast<void*>(&tiny_slot);
#ifdef TINY_NULL_SLOT
  api.slots[2] = nullptr;
#endif
  return api;
}
const TinyApi kApi = make_api();

#ifdef TINY_TOUCH_CWD
// A library whose constructor writes into the working folder, HOME and the absolute folder
// TINY_TOUCH_ABSOLUTE names: what `loom install` runs when it probes a package, which must
// land in a scratch folder (the first two) or be refused by Landlock (the third).
__attribute__((constructor)) void touch_cwd() {
  const char* const dirs[] = {".", std::getenv("HOME"), std::getenv("TINY_TOUCH_ABSOLUTE")};
  for (const char* dir : dirs)
    if (dir)
      if (FILE* f = std::fopen((std::string(dir) + "/touched-by-plugin").c_str(), "w")) {
        std::fputs("the plugin's constructor ran here\n", f);
        std::fclose(f);
      }
}
#endif

#ifndef TINY_ABI_MAJOR
#define TINY_ABI_MAJOR LOOM_ABI_MAJOR
#endif

#ifdef TINY_BAD_CAPABILITY
const char* const kCapabilities[] = {"loom.decode", nullptr};  // no "/version"
#else
const char* const kCapabilities[] = {"loom.test-listed/1", nullptr};
#endif
#ifdef TINY_UNLISTED_EXT
const loom_ext kExt = {sizeof(loom_ext), "loom.test-unlisted/1", 0, nullptr};
#else
const loom_ext kExt = {sizeof(loom_ext), "loom.test-listed/1", 0, nullptr};
#endif

#ifndef TINY_NAME
#define TINY_NAME "tiny"
#endif
#ifdef TINY_BAD_KIND
#define TINY_KIND static_cast<loom_plugin_kind>(42)
#else
#define TINY_KIND LOOM_KIND_OPTIMIZER
#endif
#ifdef TINY_SMALL
#define TINY_SIZE offsetof(loom_plugin_descriptor, name)
#else
#define TINY_SIZE LOOM_PLUGIN_DESCRIPTOR_SIZE_V2
#endif

const loom_plugin_descriptor kDescriptor = {
    TINY_SIZE, TINY_ABI_MAJOR,          0,       TINY_KIND, TINY_NAME, TINY_VERSION,  "Loom tests",
    "MIT",     "a tiny test optimizer", kParams, 1,         &kApi,     kCapabilities, &kExt,
    nullptr};

}  // namespace

extern "C" LOOM_EXPORT const loom_plugin_descriptor* loom_plugin_entry(uint32_t host_major,
                                                                       uint32_t host_minor) {
  (void)host_major;
  (void)host_minor;
#if defined(TINY_RETURN_NULL)
  return nullptr;
#elif defined(TINY_WILD)
  return reinterpret_cast<const loom_plugin_descriptor*>(uintptr_t{0x10});  // reading it faults
#else
  return &kDescriptor;  // whatever the host: the host must check abi_major itself
#endif
}
