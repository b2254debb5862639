// Loom SDK C++ helpers (header-only, plugin side of the ABI): exceptions turned into ABI
// errors at the boundary, typed config access, the export macro.
#pragma once

#include <cstddef>
#include <exception>
#include <initializer_list>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "loom/loom.h"

namespace loom {

// The exception a plugin throws; `guard` turns it into a loom_error with the same code.
class Error : public std::runtime_error {
 public:
  Error(loom_status code, const std::string& msg) : std::runtime_error(msg), code_(code) {}
  loom_status code() const noexcept { return code_; }

 private:
  loom_status code_;
};

inline void require(bool ok, const std::string& msg, loom_status code = LOOM_ERR_INVALID_ARGUMENT) {
  if (!ok) throw Error(code, msg);
}

// Throws when a C call returned an error (taking ownership of it).
inline void check(const loom_host* host, loom_error* err) {
  if (err == nullptr) return;
  loom_status code = host->error_code(err);
  std::string msg = host->error_message(err);
  host->error_free(err);
  throw Error(code, msg);
}

// Runs `fn` and converts any exception into a host-made error: the body of every
// boundary function, so nothing C++ escapes through the C ABI.
template <class Fn>
loom_error* guard(const loom_host* host, Fn&& fn) noexcept {
  try {
    fn();
    return nullptr;
  } catch (const Error& e) {
    return host->error_new(e.code(), e.what());
  } catch (const std::bad_alloc&) {
    return host->error_new(LOOM_ERR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return host->error_new(LOOM_ERR_INTERNAL, e.what());
  } catch (...) {
    return host->error_new(LOOM_ERR_INTERNAL, "unknown exception");
  }
}

// The refusal rule of ABI 2: an extension marked LOOM_EXT_REQUIRED on an args struct's
// chain whose id is not among `known` makes the call fail, naming the id, instead of being
// ignored. `who` starts the message ("attention/flash-cpu").
inline void require_known_exts(const loom_ext* chain, const std::vector<const char*>& known,
                               const std::string& who) {
  for (const loom_ext* e = chain; e != nullptr; e = e->next) {
    if ((e->flags & LOOM_EXT_REQUIRED) == 0) continue;
    bool found = false;
    for (const char* id : known) found = found || (e->id != nullptr && std::string(e->id) == id);
    if (!found)
      throw Error(LOOM_ERR_UNIMPLEMENTED, who + ": does not implement extension '" +
                                              std::string(e->id ? e->id : "(null)") +
                                              "', which the caller requires");
  }
}
inline void require_known_exts(const loom_ext* chain, std::initializer_list<const char*> known,
                               const std::string& who) {
  require_known_exts(chain, std::vector<const char*>(known), who);
}

// Typed access to the plugin's validated recipe section.
class Config {
 public:
  Config(const loom_host* host, const loom_config* cfg) : host_(host), cfg_(cfg) {}
  bool get_bool(const char* key) const {
    int v = 0;
    check(host_, host_->config_get_bool(cfg_, key, &v));
    return v != 0;
  }
  int64_t get_int(const char* key) const {
    int64_t v = 0;
    check(host_, host_->config_get_int(cfg_, key, &v));
    return v;
  }
  double get_float(const char* key) const {
    double v = 0;
    check(host_, host_->config_get_float(cfg_, key, &v));
    return v;
  }
  std::string get_string(const char* key) const {
    const char* v = nullptr;
    check(host_, host_->config_get_string(cfg_, key, &v));
    return v ? v : "";
  }

 private:
  const loom_host* host_;
  const loom_config* cfg_;
};

inline void log(const loom_host* host, loom_log_level level, const std::string& msg) {
  host->log(host->ctx, level, msg.c_str());
}

// Helpers to fill a static schema table.
constexpr loom_param_spec param(const char* name, loom_param_type type, const char* def,
                                const char* doc, double lo = 1, double hi = 0,
                                const char* choices = nullptr) {
  return loom_param_spec{LOOM_PARAM_SPEC_SIZE_V2, name, type, def, doc, lo, hi, choices};
}

// A plugin's descriptor by member name rather than by the position of fifteen fields:
//   const loom_plugin_descriptor kDescriptor = loom::describe_plugin({
//       .kind = LOOM_KIND_OPTIMIZER, .name = "adamw", .version = "0.1.0",
//       .vendor = "Example Inc.", .license = "Apache-2.0", .description = "AdamW ...",
//       .params = kSchema, .api = &kApi});
// Members in plugin.h's order (C++20 designated initializers keep it); what is left out is
// NULL/empty. struct_size is ABI 2.0's, or 2.15's when check_config is set, so a plugin
// sets no size macro itself.
// A schema table: a static array, or a pointer and a count. (Not std::span: this header is
// also read by nvcc in C++17.)
struct ParamList {
  const loom_param_spec* data = nullptr;
  size_t size = 0;
  constexpr ParamList() = default;
  constexpr ParamList(const loom_param_spec* p, size_t n) : data(n ? p : nullptr), size(n) {}
  template <size_t N>
  constexpr ParamList(const loom_param_spec (&table)[N]) : data(table), size(N) {}
};
// A plugin built with loom_add_plugin() (sdk/cmake/LoomPlugin.cmake) has its kind and name,
// and given VERSION, VENDOR and LICENSE its version, vendor and license, as compile
// definitions; LOOM_PLUGIN_IDENTITY then states all five as they are given where the library's
// file name (loom-<kind>-<name>.so) is made:
//   loom::describe_plugin({LOOM_PLUGIN_IDENTITY, .description = "AdamW ...", .api = &kApi});
#if defined(LOOM_PLUGIN_KIND) && defined(LOOM_PLUGIN_NAME) && defined(LOOM_PLUGIN_VERSION) && \
    defined(LOOM_PLUGIN_VENDOR) && defined(LOOM_PLUGIN_LICENSE)
#define LOOM_PLUGIN_IDENTITY                                                          \
  .kind = LOOM_PLUGIN_KIND, .name = LOOM_PLUGIN_NAME, .version = LOOM_PLUGIN_VERSION, \
  .vendor = LOOM_PLUGIN_VENDOR, .license = LOOM_PLUGIN_LICENSE
#endif
struct PluginDescription {
  loom_plugin_kind kind{};
  const char* name = nullptr;
  const char* version = nullptr;
  const char* vendor = nullptr;
  const char* license = nullptr;      // SPDX identifier
  const char* description = nullptr;  // one line
  ParamList params{};
  const void* api = nullptr;
  const char* const* capabilities = nullptr;  // NULL-terminated extension ids, or NULL
  const loom_ext* ext = nullptr;
  decltype(loom_plugin_descriptor::check_config) check_config = nullptr;
};
constexpr loom_plugin_descriptor describe_plugin(const PluginDescription& d) {
  return loom_plugin_descriptor{
      d.check_config ? LOOM_PLUGIN_DESCRIPTOR_SIZE_V2_15 : LOOM_PLUGIN_DESCRIPTOR_SIZE_V2,
      LOOM_ABI_MAJOR,
      LOOM_ABI_MINOR,
      d.kind,
      d.name,
      d.version,
      d.vendor,
      d.license,
      d.description,
      d.params.data,
      d.params.size,
      d.api,
      d.capabilities,
      d.ext,
      d.check_config};
}

// A backend's check of an ops args struct (backend.h): why it must be refused, or "" when it
// is usable. Refused: NULL, smaller than `want` (built against an older ABI), and a required
// extension on the chain (a backend built before that extension was defined must refuse it,
// ABI 2's rule: it never runs without it).
template <class Args>
std::string ops_args_refusal(const Args* a, size_t want) {
  if (a == nullptr) return "args NULL";
  if (a->struct_size < want)
    return "args older than ABI 2.0 (struct_size " + std::to_string(a->struct_size) + " < " +
           std::to_string(want) + ")";
  for (const loom_ext* e = a->ext; e != nullptr; e = e->next)
    if (e->flags & LOOM_EXT_REQUIRED)
      return std::string("unknown required extension ") + (e->id ? e->id : "(no id)");
  return {};
}

// The same rule beside an extension the caller knows: "unknown required extension <id>" for
// the first required extension on `chain` other than `known`, else "".
inline std::string other_required_refusal(const loom_ext* chain, const loom_ext* known) {
  for (const loom_ext* o = chain; o != nullptr; o = o->next)
    if (o != known && (o->flags & LOOM_EXT_REQUIRED))
      return std::string("unknown required extension ") + (o->id ? o->id : "(no id)");
  return {};
}

}  // namespace loom

// Defines the plugin's one exported symbol. `descriptor` is a static loom_plugin_descriptor.
// The entry refuses hosts of another ABI major (the host refuses the other way round).
#define LOOM_PLUGIN_ENTRY(descriptor)                                     \
  extern "C" LOOM_EXPORT const loom_plugin_descriptor* loom_plugin_entry( \
      uint32_t host_abi_major, uint32_t host_abi_minor) {                 \
    (void)host_abi_minor;                                                 \
    return host_abi_major == LOOM_ABI_MAJOR ? &(descriptor) : nullptr;    \
  }

// The descriptor and the entry of a plugin built with loom_add_plugin(), at file scope: the
// identity from the build (LOOM_PLUGIN_IDENTITY), the rest as describe_plugin's members.
//   LOOM_PLUGIN(.description = "AdamW ...", .params = kParams, .api = &kApi)
#ifdef LOOM_PLUGIN_IDENTITY
#define LOOM_PLUGIN(...)                                                                 \
  static const loom_plugin_descriptor loom_plugin_descriptor_ =                          \
      loom::describe_plugin(loom::PluginDescription{LOOM_PLUGIN_IDENTITY, __VA_ARGS__}); \
  LOOM_PLUGIN_ENTRY(loom_plugin_descriptor_)
#else
#define LOOM_PLUGIN(...)                                                                     \
  static_assert(false,                                                                       \
                "LOOM_PLUGIN takes kind, name, version, vendor and license from the build: " \
                "loom_add_plugin(... VERSION <v> VENDOR <who> LICENSE <spdx>)");
#endif
