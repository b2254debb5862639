/* Loom SDK, ABI 2 — common definitions shared by every plugin kind.
 *
 * Contract for every header in this folder:
 *  - pure C11; only C types cross the boundary (no C++, no exceptions, no STL);
 *  - every struct that crosses starts with `size_t struct_size`; a callee accepts any
 *    size >= the 2.0 size (the LOOM_*_SIZE_V2 macros) and reads the fields of later minors
 *    only when LOOM_HAS_FIELD says they are there. A size macro is named for the minor that
 *    brought its last field: _V2 (2.0), _V2_<minor> (appended, or a new struct, in 2.<minor>);
 *    _V1 only for an extension's first layout (a struct that starts with loom_ext base).
 *    Other names stay as aliases, for source compatibility (docs/abi2.md, "ABI style");
 *  - within a major, structs and function tables only grow at the end: 2.x is append-only.
 *    A plugin built for another major is refused by the host, naming both;
 *  - a caller never relies on a callee silently ignoring what it does not know. Optional
 *    behaviour is an extension with an id ("loom.decode/1"); a plugin lists the ids it
 *    implements in its descriptor's `capabilities`, and the host refuses a run that needs
 *    an id the plugin does not list, naming both. An extension on a chain marked
 *    LOOM_EXT_REQUIRED whose id the callee does not know makes the callee fail with
 *    LOOM_ERR_UNIMPLEMENTED naming the id: it never falls back;
 *  - a function returning `loom_error*` returns NULL on success; a non-NULL error was made
 *    by the host (loom_host.error_new) and is owned by whoever receives it, who frees it
 *    with loom_host.error_free;
 *  - pointers are borrowed for the call unless the comment says who owns them;
 *  - every table (and every struct holding a callback) opens with a comment "Contract
 *    tags" that lists each of its slots once as "slot, ...: thread, scope, progress":
 *      thread    any        any thread, concurrently (the callee synchronises);
 *                owner      one thread at a time per instance; separate instances are
 *                           independent and may be used from separate threads at once;
 *      scope     local      this rank alone;
 *                COLLECTIVE(g)  every rank of group g calls it, in the same order;
 *                PAIR(g)    two ranks of group g, one sending and one receiving;
 *      progress  blocks     returns when its work is done;
 *                stream     enqueues on the backend's device stream when there is one
 *                           (loom.device-stream/1; for comm, args.stream) and returns;
 *                           blocks where there is none (the CPU);
 *                starts     returns with the work in flight; a later call (wait)
 *                           completes it.
 *    tests/abi/test_contract.cpp checks that every slot has its tags; the conformance
 *    suites check the tags they can observe.
 */
#ifndef LOOM_COMMON_H
#define LOOM_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_ABI_MAJOR 2
#define LOOM_ABI_MINOR 32

/* Size of a struct up to and including `last_field`: what `struct_size` holds for the
 * version of the struct whose last field is `last_field`. */
#define LOOM_STRUCT_SIZE(type, last_field) \
  (offsetof(type, last_field) + sizeof(((type*)0)->last_field))

/* True when a struct of reported size `size` carries `field`. */
#define LOOM_HAS_FIELD(ptr, type, field) ((ptr)->struct_size >= LOOM_STRUCT_SIZE(type, field))

/* The header of every extension: a struct that starts with a loom_ext and is found by id on
 * a chain (a plugin descriptor's `ext`, or an args struct's `ext`). An id is a name, a
 * slash and a version: "loom.decode/1". A new version of an extension is a new id. */
typedef struct loom_ext {
  size_t struct_size;          /* of the whole extension struct, not just this header */
  const char* id;              /* static storage */
  uint32_t flags;              /* LOOM_EXT_REQUIRED */
  const struct loom_ext* next; /* NULL ends the chain */
} loom_ext;
#define LOOM_EXT_SIZE_V2 LOOM_STRUCT_SIZE(loom_ext, next)

/* On an args struct's chain: the callee must understand this extension or refuse the call
 * with LOOM_ERR_UNIMPLEMENTED naming the id (a mask it cannot apply, for instance). */
#define LOOM_EXT_REQUIRED 1u

/* The first extension on `chain` with this id, or NULL. */
static inline const loom_ext* loom_ext_find(const loom_ext* chain, const char* id) {
  for (; chain != NULL; chain = chain->next)
    if (chain->id != NULL && strcmp(chain->id, id) == 0) return chain;
  return NULL;
}

#if defined(_WIN32)
#define LOOM_EXPORT __declspec(dllexport)
#else
#define LOOM_EXPORT __attribute__((visibility("default")))
#endif

typedef enum loom_status {
  LOOM_OK = 0,
  LOOM_ERR_INVALID_ARGUMENT = 1, /* bad shape, dtype, value or config */
  LOOM_ERR_UNIMPLEMENTED = 2,    /* this plugin does not support the request */
  LOOM_ERR_OUT_OF_MEMORY = 3,
  LOOM_ERR_IO = 4,      /* file missing, truncated or unreadable */
  LOOM_ERR_INTERNAL = 5 /* a bug: an invariant did not hold */
} loom_status;

/* Opaque error object, made and freed by the host. */
typedef struct loom_error loom_error;

typedef enum loom_plugin_kind {
  LOOM_KIND_BACKEND = 1,
  LOOM_KIND_COMM = 2,
  LOOM_KIND_MODEL = 3,
  LOOM_KIND_ATTENTION = 4,
  LOOM_KIND_GRAD = 5, /* the data-parallel gradient strategy (recipe parallel.data) */
  LOOM_KIND_OPTIMIZER = 6,
  LOOM_KIND_TOKENIZER = 7,
  LOOM_KIND_DATASET = 8,
  LOOM_KIND_SCHEDULE = 9 /* the pipeline schedule (recipe parallel.schedule) */
} loom_plugin_kind;

typedef enum loom_param_type {
  LOOM_PARAM_BOOL = 1,
  LOOM_PARAM_INT = 2,
  LOOM_PARAM_FLOAT = 3,
  LOOM_PARAM_STRING = 4
} loom_param_type;

/* One recipe key a plugin accepts, in the [section] the plugin is selected by. */
typedef struct loom_param_spec {
  size_t struct_size;
  const char* name; /* key name, static storage */
  loom_param_type type;
  const char* default_value; /* TOML literal text ("0.1", "true", "gelu"); NULL = required */
  const char* doc;           /* one line, static storage */
  double min_value;          /* numeric range, inclusive; ignored when min > max */
  double max_value;
  const char* choices; /* strings only: "a|b|c", or NULL for any string */
} loom_param_spec;
#define LOOM_PARAM_SPEC_SIZE_V2 LOOM_STRUCT_SIZE(loom_param_spec, choices)

/* Opaque, read-only view of the plugin's recipe section, validated and with defaults
 * filled by the host before the plugin is created. Read it with loom_host.config_get_*. */
typedef struct loom_config loom_config;

#ifdef __cplusplus
}
#endif
#endif /* LOOM_COMMON_H */
