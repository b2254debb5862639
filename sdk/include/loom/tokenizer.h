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
 *   create, destroy, vocab_size, eod_id, encode, decode, token_to_id, id_to_token: owner,
 *      local, blocks */
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
  /* ABI 2.3 (both NULL for a tokenizer without a vocabulary of strings). The id of the
   * vocabulary entry spelled exactly `token` (len bytes, taken as stored, not encoded:
   * "[MASK]", "##ing"), or -1 when there is none. */
  int64_t (*token_to_id)(loom_tokenizer* tok, const char* token, size_t len);
  /* The vocabulary entry of id as stored ("##ing" for a WordPiece continuation),
   * plugin-owned; LOOM_ERR_INVALID_ARGUMENT outside [0, vocab_size). */
  loom_error* (*id_to_token)(loom_tokenizer* tok, int32_t id, const char** token, size_t* len);
} loom_tokenizer_api;
#define LOOM_TOKENIZER_API_SIZE_V2 LOOM_STRUCT_SIZE(loom_tokenizer_api, decode)
#define LOOM_TOKENIZER_API_SIZE_V2_3 LOOM_STRUCT_SIZE(loom_tokenizer_api, id_to_token)

#ifdef __cplusplus
}
#endif
#endif /* LOOM_TOKENIZER_H */
