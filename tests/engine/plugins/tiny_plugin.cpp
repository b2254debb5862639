// The smallest optimizer-kind plugin, with its own entry function: built for ABI 1 (to
// pack and install), for "ABI 2" (the host must refuse it), returning NULL, declaring an
// unknown kind, and with a descriptor struct_size too small for ABI 1.0.
#include "loom/cpp/plugin.hpp"

#ifndef TINY_VERSION
#define TINY_VERSION "0.1.0"
#endif

namespace {

constexpr loom_param_spec kParams[] = {
    loom::param("beta", LOOM_PARAM_FLOAT, "0.9", "momentum", 0, 1),
};

struct TinyApi {
  size_t struct_size;
  void* slots[16];
};
const TinyApi kApi = {sizeof(TinyApi), {}};

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
#define TINY_SIZE LOOM_PLUGIN_DESCRIPTOR_SIZE_V1
#endif

const loom_plugin_descriptor kDescriptor = {
    TINY_SIZE, TINY_ABI_MAJOR,          0,       TINY_KIND, TINY_NAME, TINY_VERSION, "Loom tests",
    "MIT",     "a tiny test optimizer", kParams, 1,         &kApi};

}  // namespace

extern "C" LOOM_EXPORT const loom_plugin_descriptor* loom_plugin_entry(uint32_t host_major,
                                                                       uint32_t host_minor) {
  (void)host_major;
  (void)host_minor;
#ifdef TINY_RETURN_NULL
  return nullptr;
#else
  return &kDescriptor;  // whatever the host: the host must check abi_major itself
#endif
}
