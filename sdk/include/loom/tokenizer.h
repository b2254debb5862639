/* Loom SDK, ABI 2 — tokenizer plugins: text <-> token ids.
 *
 * Results are plugin-owned and valid until the next call on the same instance; one
 * instance is used from one thread at a time. */
#ifndef LOOM_TOKENIZER_H
#define LOOM_TOKENIZER_H

#include "loom/host.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_tokenizer loom_tokenizer;

/* Contract tags (common.h):
 *   create, destroy, vocab_size, eod_id, encode, decode: owner, local, blocks */
typedef struct loom_tokenizer_api {
  size_t struct_size;
  loom_error* (*create)(const loom_host* host, const loom_config* cfg, loom_tokenizer** out);
  void (*destroy)(loom_tokenizer* tok); /* accepts NULL */
  int64_t (*vocab_size)(loom_tokenizer* tok);
  /* id of the end-of-document token, or -1 when the tokenizer has none */
  int64_t (*eod_id)(loom_tokenizer* tok);
  loom_error* (*encode)(loom_tokenizer* tok, const char* text, size_t len, const int32_t** ids,
                        size_t* num_ids);
  loom_error* (*decode)(loom_tokenizer* tok, const int32_t* ids, size_t num_ids, const char** text,
                        size_t* len);
  /* --- ABI 2.0 ends here; append new slots below this line only. --- */
} loom_tokenizer_api;
#define LOOM_TOKENIZER_API_SIZE_V2 LOOM_STRUCT_SIZE(loom_tokenizer_api, decode)

#ifdef __cplusplus
}
#endif
#endif /* LOOM_TOKENIZER_H */
