/* Loom SDK, ABI 2 — attention plugins: the attention core for one backend.
 *
 * q(B,T,Hq,D), k and v (B,S,Hkv,D) with Hq a multiple of Hkv (grouped-query attention:
 * query head h reads kv head h / (Hq/Hkv)); out(B,T,Hq,D); lse(B,Hq,T) f32 saved by forward
 * for backward. With causal, query t (the last T of S positions) sees keys s <= t + S - T;
 * without, every key (bidirectional, and cross-attention with T != S).
 * Masks beyond that come as extensions on the args' `ext` chain, flagged LOOM_EXT_REQUIRED:
 * a plugin that does not list one in its capabilities never receives it (the host refuses
 * the call, naming both), and a plugin must refuse a required id it does not know.
 * Tensors live on the active backend's device. Instances may keep workspace between calls
 * but no state that depends on the order of calls. */
#ifndef LOOM_ATTENTION_H
#define LOOM_ATTENTION_H

#include "loom/host.h"
#include "loom/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_attention loom_attention;

typedef struct loom_attention_fwd_args {
  size_t struct_size;
  const DLTensor* q;
  const DLTensor* k;
  const DLTensor* v;
  DLTensor* out;
  DLTensor* lse; /* may be NULL when no backward follows (generation) */
  double scale;  /* usually 1/sqrt(D) */
  int causal;
  const loom_ext* ext; /* masks (loom_attention_window), NULL for none; borrowed for the call */
} loom_attention_fwd_args;
#define LOOM_ATTENTION_FWD_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_attention_fwd_args, ext)

typedef struct loom_attention_bwd_args {
  size_t struct_size;
  const DLTensor* dout;
  const DLTensor* q;
  const DLTensor* k;
  const DLTensor* v;
  const DLTensor* out;
  const DLTensor* lse;
  DLTensor* dq; /* written (=) */
  DLTensor* dk; /* written (=) */
  DLTensor* dv; /* written (=) */
  double scale;
  int causal;
  const loom_ext* ext; /* the forward's masks */
} loom_attention_bwd_args;
#define LOOM_ATTENTION_BWD_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_attention_bwd_args, ext)

/* Sliding-window attention (Mistral's sliding_window; Megatron's --window-size W-1,0): with
 * causal, query t at key position p = t + S - T sees keys p - window < s <= p, its last
 * `window` positions including itself. */
#define LOOM_EXT_ATTENTION_WINDOW "loom.attention-window/1"
typedef struct loom_attention_window {
  loom_ext base;  /* id LOOM_EXT_ATTENTION_WINDOW, flags LOOM_EXT_REQUIRED */
  int64_t window; /* >= 1 */
} loom_attention_window;
#define LOOM_ATTENTION_WINDOW_SIZE_V1 LOOM_STRUCT_SIZE(loom_attention_window, window)

/* Variable-length sequences (ABI 2.2): padded batches, packed sequences and cross-attention
 * with padding. The B*T query rows and the B*S key rows (q and k flattened over batch and
 * position) hold num_seqs sequences; sequence i is cu_seqlens_q[i+1] - cu_seqlens_q[i]
 * queries and cu_seqlens_k[i+1] - cu_seqlens_k[i] keys, FlashAttention's cumulative lengths.
 * It starts at query row cu_seqlens_q_padded[i] and key row cu_seqlens_k_padded[i]
 * (Transformer Engine's padded offsets; NULL: the same as the cumulative lengths, sequences
 * back to back). A sequence's queries attend to its own keys only: with causal, its query j
 * sees its keys j' <= j + Lk - Lq (bottom-right, as FlashAttention), and a window as above.
 * Each sequence lies within one batch row of q and the same row of k, Lq <= Lk when causal,
 * and Lk >= 1 when Lq >= 1; offsets increase, so no two sequences share a row. Query rows in
 * no sequence (padding) get out 0 and lse 0, and key rows in none get dk = dv = 0. All four
 * arrays are host memory, borrowed for the call. */
#define LOOM_EXT_ATTENTION_SEQLENS "loom.attention-seqlens/1"
typedef struct loom_attention_seqlens {
  loom_ext base; /* id LOOM_EXT_ATTENTION_SEQLENS, flags LOOM_EXT_REQUIRED */
  int64_t num_seqs;
  const int32_t* cu_seqlens_q;        /* num_seqs + 1, from 0 */
  const int32_t* cu_seqlens_k;        /* num_seqs + 1, from 0 */
  const int32_t* cu_seqlens_q_padded; /* num_seqs + 1 or NULL */
  const int32_t* cu_seqlens_k_padded; /* num_seqs + 1 or NULL */
} loom_attention_seqlens;
#define LOOM_ATTENTION_SEQLENS_SIZE_V1 LOOM_STRUCT_SIZE(loom_attention_seqlens, cu_seqlens_k_padded)

/* An additive bias on the scores (ABI 2.4): T5's relative position bias (Megatron-Core's
 * attention_bias, Transformer Engine's post_scale_bias). Query t scores key s as
 * scale * q_t . k_s + bias[h, t, s], h the query head, t and s counted from the first query and
 * key of the sequence (of the batch row, or of the variable-length sequence), before the
 * causal mask and the window. bias (Hq, T, S) in the dtype of q, shared by every batch row;
 * with variable-length sequences a sequence of Lq queries and Lk keys reads its [0, Lq) x
 * [0, Lk) corner. Backward adds the gradient of the biased scores, summed over the batch
 * rows and sequences, to dbias (Hq, T, S; f32, or f64 for f64 q); forward ignores dbias,
 * and backward may be given NULL when the bias is constant. Both device memory, borrowed. */
#define LOOM_EXT_ATTENTION_BIAS "loom.attention-bias/1"
typedef struct loom_attention_bias {
  loom_ext base; /* id LOOM_EXT_ATTENTION_BIAS, flags LOOM_EXT_REQUIRED */
  const DLTensor* bias;
  DLTensor* dbias;
} loom_attention_bias;
#define LOOM_ATTENTION_BIAS_SIZE_V1 LOOM_STRUCT_SIZE(loom_attention_bias, dbias)

/* Partial attention (ABI 2.7; context parallelism's ring): the keys of a query are split
 * over several forward calls, whose (out, lse) pairs `merge` combines into the attention over
 * all of them. On a backward call this extension says that `out` and `lse` are such a merged
 * result, not this call's own: P = exp(scale * q . k - lse) over this call's keys, and dq, dk,
 * dv are their share of the merged attention's gradients (dq summed over the calls by the
 * caller). lse then carries the precision of the data: f64 with f64 q, so that P is exact.
 * A plugin lists it exactly when its table has `merge`. */
#define LOOM_EXT_ATTENTION_PARTIAL "loom.attention-partial/1"
typedef struct loom_attention_partial {
  loom_ext base; /* id LOOM_EXT_ATTENTION_PARTIAL, flags LOOM_EXT_REQUIRED */
} loom_attention_partial;
#define LOOM_ATTENTION_PARTIAL_SIZE_V1 sizeof(loom_attention_partial)

/* merge's arguments (ABI 2.7): folds part (the attention of queries over other keys) into
 * out and lse: lse' = log(exp(lse) + exp(part_lse)), out' = exp(lse - lse') out +
 * exp(part_lse - lse') part_out, row by row. Part row i is row row0 + i of out; the other rows
 * of out are left alone. A row of lse -inf (no key yet) takes part's as it is. */
typedef struct loom_attention_merge_args {
  size_t struct_size;
  DLTensor* out;            /* (B,T,Hq,D), updated */
  DLTensor* lse;            /* (B,Hq,T) f32, or f64 with f64 out; updated */
  const DLTensor* part_out; /* (B,Tp,Hq,D), out's dtype */
  const DLTensor* part_lse; /* (B,Hq,Tp), lse's dtype */
  int64_t row0;             /* 0 <= row0, row0 + Tp <= T */
  const loom_ext* ext;      /* NULL */
} loom_attention_merge_args;
#define LOOM_ATTENTION_MERGE_ARGS_SIZE_V2_7 LOOM_STRUCT_SIZE(loom_attention_merge_args, ext)
/* Its name until 2.18, when size macros took the name of their minor (docs/abi2.md, "ABI
 * style"): kept for source compatibility, as 2.x is append-only. */
#define LOOM_ATTENTION_MERGE_ARGS_SIZE_V1 LOOM_ATTENTION_MERGE_ARGS_SIZE_V2_7

/* Contract tags (common.h):
 *   create, destroy: owner, local, blocks
 *   forward, backward, merge: owner, local, stream */
typedef struct loom_attention_api {
  size_t struct_size;
  loom_error* (*create)(const loom_host* host, const loom_config* cfg, loom_attention** out);
  void (*destroy)(loom_attention* att); /* accepts NULL */
  /* Enqueued on the backend's stream (flash-cuda and cudnn; no device synchronisation);
   * done on return on the CPU. */
  loom_error* (*forward)(loom_attention* att, const loom_attention_fwd_args* args);
  loom_error* (*backward)(loom_attention* att, const loom_attention_bwd_args* args);
  /* --- ABI 2.0 ends here; append new slots below this line only. --- */
  /* ABI 2.7: partial attention's merge (above); NULL when the plugin has none, and then it
   * does not list loom.attention-partial/1 either. */
  loom_error* (*merge)(loom_attention* att, const loom_attention_merge_args* args);
  /* --- ABI 2.7 ends here; append new slots below this line only. --- */
} loom_attention_api;
#define LOOM_ATTENTION_API_SIZE_V2 LOOM_STRUCT_SIZE(loom_attention_api, backward)
#define LOOM_ATTENTION_API_SIZE_V2_7 LOOM_STRUCT_SIZE(loom_attention_api, merge)

#ifdef __cplusplus
}
#endif
#endif /* LOOM_ATTENTION_H */
