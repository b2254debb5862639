/* Loom SDK, ABI 2 — dataset plugins: a storage format read as documents of token ids.
 *
 * The host's sampler splits documents into train/valid/test, shuffles and packs them into
 * samples. A dataset that tokenises text gets the run's tokenizer from host.get_tokenizer.
 * Results are plugin-owned and valid until the next call on the same instance. */
#ifndef LOOM_DATASET_H
#define LOOM_DATASET_H

#include "loom/host.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_dataset loom_dataset;

/* Contract tags (common.h):
 *   create, destroy, num_documents, document, cache_prefix: owner, local, blocks */
typedef struct loom_dataset_api {
  size_t struct_size;
  loom_error* (*create)(const loom_host* host, const loom_config* cfg, loom_dataset** out);
  void (*destroy)(loom_dataset* ds); /* accepts NULL */
  int64_t (*num_documents)(loom_dataset* ds);
  /* Document i < num_documents as token ids, as the data holds them: an end-of-document
   * token is part of the data (Megatron's --append-eod), so a format without one (jsonl,
   * mock) appends the tokenizer's EOD itself when asked to. The host never inserts one. */
  loom_error* (*document)(loom_dataset* ds, int64_t i, const int32_t** ids, size_t* num_ids);
  /* A path prefix beside the data where the host may cache what it derives from it (the
   * sampler's index arrays: "<prefix>.<hash>.doc_idx.npy" ...), e.g. the indexed dataset's
   * own prefix; NULL when the data has no home on disk. Valid until destroy. */
  const char* (*cache_prefix)(loom_dataset* ds);
  /* --- ABI 2.0 ends here; append new slots below this line only. --- */
} loom_dataset_api;
#define LOOM_DATASET_API_SIZE_V2 LOOM_STRUCT_SIZE(loom_dataset_api, cache_prefix)

#ifdef __cplusplus
}
#endif
#endif /* LOOM_DATASET_H */
