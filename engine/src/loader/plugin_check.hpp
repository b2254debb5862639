// Plugin descriptors as the registry checks them before trusting anything in one: the
// version fields, kind, name, schema, capabilities and the function table's size and
// mandatory slots (each kind's ABI 2.0 table). registry.cpp and plugin_load.cpp use these;
// the kind names and abi_mismatch are registry.hpp's.
#pragma once

#include <cstddef>
#include <cstring>
#include <string>

#include "loom/plugin.h"

namespace loom::engine {

// The descriptor's first fields, the same in every major: enough to read its ABI version.
constexpr size_t kVersionBytes = LOOM_STRUCT_SIZE(loom_plugin_descriptor, abi_minor);

// An enum field as the integer the plugin stored: reading an out-of-range value through the
// enum type would be undefined behaviour, and plugins are untrusted.
template <class E>
int raw_enum(const E& field) {
  static_assert(sizeof(E) == sizeof(int));
  int v = 0;
  std::memcpy(&v, &field, sizeof v);
  return v;
}

// A kind the host knows (LOOM_KIND_BACKEND .. LOOM_KIND_SCHEDULE), read with raw_enum.
bool valid_kind(int k);
// Letters, digits, '-', '_' and '.' only (a plugin name is part of file names and keys).
bool valid_plugin_name(const char* s);
// "" or the one-line reason a descriptor (already version-checked) is refused.
std::string check_descriptor(const loom_plugin_descriptor* d);

}  // namespace loom::engine
