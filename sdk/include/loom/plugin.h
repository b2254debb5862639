/* Loom SDK, ABI 2 — the one symbol every plugin exports and the descriptor it returns.
 *
 *   LOOM_EXPORT const loom_plugin_descriptor* loom_plugin_entry(uint32_t host_abi_major,
 *                                                               uint32_t host_abi_minor);
 *
 * The host passes the ABI it implements; the plugin returns its descriptor (static storage,
 * valid while the library is loaded) or NULL when it cannot work with that host. The host
 * refuses a descriptor whose abi_major differs from its own, whose kind is unknown, or whose
 * kind/name is already loaded. When the entry returns NULL the host may call it again with
 * an older major, only to name the plugin's ABI in its refusal. Calling the entry must have
 * no side effects: `loom plugins` calls it to list a library without creating anything. */
#ifndef LOOM_PLUGIN_H
#define LOOM_PLUGIN_H

#include "loom/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_PLUGIN_ENTRY_NAME "loom_plugin_entry"

struct loom_host;
struct loom_parallel_layout;

/* Contract tags (common.h):
 *   check_config: any, local, blocks */
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
  /* The extension ids the plugin implements, NULL-terminated ("loom.decode/1"), or NULL
   * for none. The host refuses a run that needs an id a plugin does not list. */
  const char* const* capabilities;
  /* The function tables of the listed capabilities that have slots (loom_decode_ext for
   * "loom.decode/1"), chained; every id on it is also in `capabilities`. NULL for none. */
  const loom_ext* ext;
  /* --- ABI 2.0 ends here; append new fields below this line only. --- */
  /* ABI 2.15: checks the plugin's recipe section against itself and the run, as create would,
   * without allocating, reading files or talking to other ranks, so that `loom validate`
   * refuses every configuration error before anything runs (exit 2). Whatever create refuses
   * for a configuration reason, this refuses too, with the same message; every error it
   * returns is the recipe's. `layout`: one rank's place in the layout (validate asks once per
   * pipeline stage and virtual chunk). `create_args`: what create will get after the config,
   * as the kind's create-args struct (loom_model_create_args for a model, vocab_size 0 where
   * validate does not know the tokenizer's), or NULL for a kind whose create takes none. The
   * host table offers the error, log and config slots only (ctx NULL). NULL slot: nothing is
   * checked beyond the schema. Read it only when struct_size covers it. */
  loom_error* (*check_config)(const struct loom_host* host, const loom_config* cfg,
                              const struct loom_parallel_layout* layout, const void* create_args);
  /* --- ABI 2.15 ends here; append new fields below this line only. --- */
} loom_plugin_descriptor;
#define LOOM_PLUGIN_DESCRIPTOR_SIZE_V2 LOOM_STRUCT_SIZE(loom_plugin_descriptor, ext)
#define LOOM_PLUGIN_DESCRIPTOR_SIZE_V2_15 LOOM_STRUCT_SIZE(loom_plugin_descriptor, check_config)

typedef const loom_plugin_descriptor* (*loom_plugin_entry_fn)(uint32_t host_abi_major,
                                                              uint32_t host_abi_minor);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_PLUGIN_H */
