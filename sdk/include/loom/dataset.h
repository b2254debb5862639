/* Loom SDK, ABI 2 — dataset plugins: a storage format read as documents of token ids.
 *
 * The host's sampler splits documents into train/valid/test, shuffles and packs them into
 * samples. A dataset that tokenises text gets the run's tokenizer from host.get_tokenizer.
 * Results are plugin-owned and valid until the next call on the same instance. */
#ifndef LOOM_DATASET_H
#define LOOM_DATASET_H

#include "loom/host.h"
#include "loom/model.h" /* loom_array_spec */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_dataset loom_dataset;

/* ABI 2.3: a dataset that makes whole samples itself, as Megatron's BERT and T5 datasets do
 * (sentence pairs, masking, padding), instead of the host cutting GPT samples of
 * seq_len + 1 tokens out of its documents. The host still splits the documents into
 * train/valid/test (data.split), blends datasets, deals samples to the data-parallel ranks
 * and counts what was consumed; the plugin decides what a sample holds. */
typedef struct loom_sample_index_args {
  size_t struct_size;
  int64_t doc_begin, doc_end; /* the split's documents: [doc_begin, doc_end) */
  int64_t seq_len;            /* train.seq_len: the T of the (B, T) arrays */
  int64_t num_samples;        /* samples wanted: the index may hold more, never fewer */
  uint32_t seed;              /* train.seed */
  const loom_ext* ext;        /* NULL */
} loom_sample_index_args;
#define LOOM_SAMPLE_INDEX_ARGS_SIZE_V2_3 LOOM_STRUCT_SIZE(loom_sample_index_args, ext)

/* Contract tags (common.h):
 *   create, destroy, num_documents, document, cache_prefix, sample_spec, build_samples,
 *      sample: owner, local, blocks */
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
  /* ABI 2.3, all three or none (NULL: the host makes GPT samples from the documents).
   * The arrays a micro-batch of this dataset's samples holds, named as a model's batch_spec
   * names them (shape LOOM_DIM_BATCH first), for the configuration alone: the host checks
   * them against the model's before it creates anything. */
  loom_error* (*sample_spec)(const loom_host* host, const loom_config* cfg, size_t* num,
                             const loom_array_spec** specs);
  /* Builds (or reads from a cache) the sample index of one split: *index names it in
   * sample(), *num_samples is its size (>= args->num_samples). */
  loom_error* (*build_samples)(loom_dataset* ds, const loom_sample_index_args* args, int64_t* index,
                               int64_t* num_samples);
  /* Writes sample i < num_samples of index `index` into arrays[k] for each entry k of
   * sample_spec, in its order: host memory of the entry's dtype and shape less the batch
   * dimension. A sample depends only on the data, the index's args and i, so every rank
   * that asks for it gets the same one. */
  loom_error* (*sample)(loom_dataset* ds, int64_t index, int64_t i, size_t num_arrays,
                        DLTensor* const* arrays);
} loom_dataset_api;
#define LOOM_DATASET_API_SIZE_V2 LOOM_STRUCT_SIZE(loom_dataset_api, cache_prefix)
#define LOOM_DATASET_API_SIZE_V2_3 LOOM_STRUCT_SIZE(loom_dataset_api, sample)

#ifdef __cplusplus
}
#endif
#endif /* LOOM_DATASET_H */
