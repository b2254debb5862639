// A plugin exactly as the ABI 1.1 SDK built it, to prove that a 2.x host refuses it with
// both majors named. The 1.1 descriptor's layout is written out here because the SDK
// headers have moved on; LOOM_PLUGIN_ENTRY of 1.1 answered a host of major 1 only.
#include <cstddef>
#include <cstdint>

namespace {

constexpr uint32_t kOldMajor = 1, kOldMinor = 1;

// loom_plugin_descriptor as of ABI 1.1 (88 bytes on LP64).
struct DescriptorV1 {
  size_t struct_size;
  uint32_t abi_major, abi_minor;
  int kind;  // loom_plugin_kind: 6 = optimizer
  const char* name;
  const char* version;
  const char* vendor;
  const char* license;
  const char* description;
  const void* params;
  size_t num_params;
  const void* api;
};

struct OldApi {
  size_t struct_size;
  void* slots[8];
};
const OldApi kApi = {sizeof(OldApi), {}};

const DescriptorV1 kDescriptor = {
    sizeof(DescriptorV1),        kOldMajor, kOldMinor, 6,    "old", "0.9.0", "Loom tests", "MIT",
    "built against the 1.1 SDK", nullptr,   0,         &kApi};

}  // namespace

extern "C" __attribute__((visibility("default"))) const DescriptorV1* loom_plugin_entry(
    uint32_t host_abi_major, uint32_t host_abi_minor) {
  (void)host_abi_minor;
  return host_abi_major == kOldMajor ? &kDescriptor : nullptr;
}
