/* Loom SDK, ABI 2 — the host services table.
 *
 * The host hands this table to every plugin instance it creates. It is how a plugin reaches
 * the rest of the run: errors, logging, its validated recipe section, the active backend,
 * attention, tokenizer and comm plugins, and seeded RNG streams. The table and everything
 * it points to stay valid until the plugin instance is destroyed. All functions are
 * thread-safe unless noted. */
#ifndef LOOM_HOST_H
#define LOOM_HOST_H

#include "loom/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_host_context loom_host_context; /* opaque, host-owned */

/* Instances and tables of the other kinds, as the host hands them out. */
struct loom_backend_api;
struct loom_backend;
struct loom_attention_api;
struct loom_attention;
struct loom_tokenizer_api;
struct loom_tokenizer;
struct loom_comm_api;
struct loom_comm;
struct loom_comm_group;

typedef struct loom_backend_ref {
  const struct loom_backend_api* api;
  struct loom_backend* self;
} loom_backend_ref;
typedef struct loom_attention_ref {
  const struct loom_attention_api* api;
  struct loom_attention* self;
} loom_attention_ref;
typedef struct loom_tokenizer_ref {
  const struct loom_tokenizer_api* api;
  struct loom_tokenizer* self;
} loom_tokenizer_ref;
typedef struct loom_comm_ref {
  const struct loom_comm_api* api;
  struct loom_comm* self;
} loom_comm_ref;

/* The run's parallel layout. Ranks are laid out as Megatron-Core does, tensor
 * fastest, then context, data, pipeline: world rank = tp + TP*(cp + CP*(dp + DP*pp)).
 * Expert groups are carved from the data x context ranks. */
typedef struct loom_parallel_layout {
  size_t struct_size;
  int32_t world;
  int32_t tensor, context, data, pipeline, expert, virtual_stages; /* degrees */
  int32_t tensor_rank, context_rank, data_rank, pipeline_rank, expert_rank;
  int32_t sequence_parallel; /* norm/dropout regions sharded over the tensor group */
  /* --- ABI 2.0 ends here; append new fields below this line only. --- */
  /* ABI 2.8: context parallelism's attention (parallel.cp_comm_type): LOOM_CP_P2P, ring
   * attention over send/recv; LOOM_CP_A2A, all-to-all of heads for tokens (Ulysses) */
  int32_t cp_comm_type;
  /* ABI 2.9: expert tensor parallelism (parallel.expert_tensor, Megatron's
   * --expert-tensor-parallel-size): 1, every expert whole on each tensor rank; or `tensor`,
   * each expert's MLP split over the tensor group as a dense MLP is (fc columns, proj rows) */
  int32_t expert_tensor;
} loom_parallel_layout;
#define LOOM_PARALLEL_LAYOUT_SIZE_V2 LOOM_STRUCT_SIZE(loom_parallel_layout, sequence_parallel)
#define LOOM_PARALLEL_LAYOUT_SIZE_V2_8 LOOM_STRUCT_SIZE(loom_parallel_layout, cp_comm_type)
#define LOOM_PARALLEL_LAYOUT_SIZE_V2_9 LOOM_STRUCT_SIZE(loom_parallel_layout, expert_tensor)
#define LOOM_CP_P2P 0
#define LOOM_CP_A2A 1

/* Process groups of this rank, for the comm from get_comm. */
typedef enum loom_group_kind {
  LOOM_GROUP_WORLD = 0,
  LOOM_GROUP_TENSOR = 1,       /* same context, data, pipeline coordinates */
  LOOM_GROUP_CONTEXT = 2,      /* same tensor, data, pipeline */
  LOOM_GROUP_DATA = 3,         /* same tensor, context, pipeline: gradient replicas */
  LOOM_GROUP_PIPELINE = 4,     /* same tensor, context, data; ordered by stage */
  LOOM_GROUP_DATA_CONTEXT = 5, /* data x context: where gradients are averaged */
  LOOM_GROUP_MODEL = 6,        /* tensor x pipeline (x context): one model replica */
  LOOM_GROUP_EMBEDDING = 7,    /* first and last pipeline stage (tied embeddings); a rank
                                * on neither stage is alone in its group */
  LOOM_GROUP_EXPERT = 8,       /* expert-parallel ranks, carved from data x context */
  /* ABI 2.6: the replicas of one expert-parallel rank's experts (same tensor, pipeline and
   * expert rank): where expert gradients are averaged and expert optimizer state sharded */
  LOOM_GROUP_EXPERT_DATA = 9
} loom_group_kind;

typedef enum loom_log_level {
  LOOM_LOG_DEBUG = 0,
  LOOM_LOG_INFO = 1,
  LOOM_LOG_WARN = 2,
  LOOM_LOG_ERROR = 3
} loom_log_level;

/* Contract tags (common.h):
 *   error_new, error_code, error_message, error_free, log: any, local, blocks
 *   config_get_bool, config_get_int, config_get_float, config_get_string, get_backend,
 *      get_attention, get_tokenizer, get_comm, rng_seed, get_layout, get_group: owner, local,
 *      blocks */
typedef struct loom_host {
  size_t struct_size;
  uint32_t abi_major;
  uint32_t abi_minor;
  loom_host_context* ctx; /* first argument of the functions below that take one */

  /* Errors. error_new copies `message`; the receiver of an error frees it. */
  loom_error* (*error_new)(loom_status code, const char* message);
  loom_status (*error_code)(const loom_error* err);
  const char* (*error_message)(const loom_error* err); /* valid until error_free */
  void (*error_free)(loom_error* err);                 /* accepts NULL */

  /* Logging, prefixed by the host with the rank and the plugin's kind/name. */
  void (*log)(loom_host_context* ctx, loom_log_level level, const char* message);

  /* The plugin's own recipe section, validated against its schema, defaults filled.
   * Asking for a key the schema does not declare, or with another type, is an error.
   * Strings returned are host-owned and valid until the instance is destroyed. */
  loom_error* (*config_get_bool)(const loom_config* cfg, const char* key, int* out);
  loom_error* (*config_get_int)(const loom_config* cfg, const char* key, int64_t* out);
  loom_error* (*config_get_float)(const loom_config* cfg, const char* key, double* out);
  loom_error* (*config_get_string)(const loom_config* cfg, const char* key, const char** out);

  /* The run's active plugins; an error when the recipe selects none of that kind. */
  loom_error* (*get_backend)(loom_host_context* ctx, loom_backend_ref* out);
  loom_error* (*get_attention)(loom_host_context* ctx, loom_attention_ref* out);
  loom_error* (*get_tokenizer)(loom_host_context* ctx, loom_tokenizer_ref* out);
  loom_error* (*get_comm)(loom_host_context* ctx, loom_comm_ref* out);

  /* A 64-bit seed for the named stream, derived from the recipe's train.seed, so every
   * plugin that asks for "init" or "dropout" gets the same value on every rank and run. */
  uint64_t (*rng_seed)(loom_host_context* ctx, const char* stream);

  /* The parallel layout (caller sets out->struct_size; the host fills the fields that size
   * holds) and this rank's groups.
   * A group handle is valid for the run and belongs to the host. */
  loom_error* (*get_layout)(loom_host_context* ctx, loom_parallel_layout* out);
  loom_error* (*get_group)(loom_host_context* ctx, loom_group_kind kind,
                           struct loom_comm_group** out);
  /* --- ABI 2.0 ends here; append new slots below this line only. --- */
} loom_host;
#define LOOM_HOST_SIZE_V2 LOOM_STRUCT_SIZE(loom_host, get_group)

#ifdef __cplusplus
}
#endif
#endif /* LOOM_HOST_H */
