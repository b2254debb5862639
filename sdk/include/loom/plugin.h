/* Loom SDK, ABI v1 — the one symbol every plugin exports and the descriptor it returns.
 *
 *   LOOM_EXPORT const loom_plugin_descriptor* loom_plugin_entry(uint32_t host_abi_major,
 *                                                               uint32_t host_abi_minor);
 *
 * The host passes the ABI it implements; the plugin returns its descriptor (static storage,
 * valid while the library is loaded) or NULL when it cannot work with that host. The host
 * refuses a descriptor whose abi_major differs from its own, whose kind is unknown, or whose
 * kind/name is already loaded. Calling the entry must have no side effects: `loom plugins`
 * calls it to list a library without creating anything. */
#ifndef LOOM_PLUGIN_H
#define LOOM_PLUGIN_H

#include "loom/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_PLUGIN_ENTRY_NAME "loom_plugin_entry"

typedef struct loom_plugin_descriptor {
  size_t struct_size;
  uint32_t abi_major; /* LOOM_ABI_MAJOR the plugin was built with */
  uint32_t abi_minor; /* LOOM_ABI_MINOR the plugin was built with */
  loom_plugin_kind kind;
  const char* name;    /* unique within its kind: "cpu", "gpt", "adamw" */
  const char* version; /* the plugin's own semantic version */
  const char* vendor;
  const char* license;           /* SPDX identifier */
  const char* description;       /* one line */
  const loom_param_spec* params; /* recipe keys of the plugin's section; static storage */
  size_t num_params;
  /* The kind's function table: const loom_backend_api* for LOOM_KIND_BACKEND,
   * const loom_model_api* for LOOM_KIND_MODEL, and so on (see the kind's header). */
  const void* api;
} loom_plugin_descriptor;
#define LOOM_PLUGIN_DESCRIPTOR_SIZE_V1 LOOM_STRUCT_SIZE(loom_plugin_descriptor, api)

typedef const loom_plugin_descriptor* (*loom_plugin_entry_fn)(uint32_t host_abi_major,
                                                              uint32_t host_abi_minor);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_PLUGIN_H */
