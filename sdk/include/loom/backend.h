/* Loom SDK, ABI 2 — backend plugins: a device's memory and its kernel table (loom_ops).
 *
 * Conventions for every op:
 *  - tensors are compact row-major DLTensors on the backend's device; every floating
 *    tensor of one call has the same dtype (f32 always; a backend may also take f64 — the
 *    CPU backend does, for finite-difference tests — and reports others as UNIMPLEMENTED),
 *    except under mixed precision: activations, their gradients and the model's
 *    parameter values may be bf16 or f16 (the compute dtype, one per call), while parameter
 *    gradients (gemm's C when accumulating a weight gradient with beta = 1, dweight/dbias of
 *    the norms, dbias of bias_backward, dtable of embedding_backward) are f32 (Megatron's
 *    main grads);
 *    losses are f32; arithmetic accumulates in f32 whatever the storage dtype;
 *  - shapes are in the comments: N rows (tokens), C channels, V vocabulary, H hidden;
 *  - parameter gradients accumulate (+=); activation gradients are written (=);
 *  - saved statistics (mean, rstd, lse, vocab_ce stats) are f32, or the data dtype when
 *    that is f64;
 *  - ops may run asynchronously on the backend's stream; synchronize() waits;
 *  - optimizer updates are not ops: optimizer plugins bring their own kernels and run them
 *    on the backend's stream (loom.device-stream/1, below).
 * Thread contract: one instance is driven from one thread at a time. */
#ifndef LOOM_BACKEND_H
#define LOOM_BACKEND_H

#include "loom/device_totals.h" /* sums kept on the device: what two ops' args may carry */
#include "loom/fp8.h"           /* loom.fp8/1: FP8 tensors, their casts and GEMMs */
#include "loom/gemm_epilogue.h" /* loom.gemm-epilogue/1: what a gemm's args may carry */
#include "loom/host.h"
#include "loom/norm_residual.h" /* loom.norm-residual/1: what a norm's args may carry */
#include "loom/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_backend loom_backend; /* opaque, plugin-owned instance */

/* C(m,n) = alpha * op(A)(m,k) @ op(B)(k,n) + beta * C, row-major, `batch` times.
 * Matrix i of X starts `offset_x + i * stride_x` elements into X's buffer; ld* are the
 * row pitches (elements) of the matrices as stored. */
typedef struct loom_gemm_args {
  size_t struct_size;
  int trans_a, trans_b;
  int64_t m, n, k;
  double alpha, beta;
  const DLTensor* a;
  int64_t lda, stride_a, offset_a;
  const DLTensor* b;
  int64_t ldb, stride_b, offset_b;
  DLTensor* c;
  int64_t ldc, stride_c, offset_c;
  int64_t batch;       /* >= 1 */
  const loom_ext* ext; /* NULL */
} loom_gemm_args;
#define LOOM_GEMM_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_gemm_args, ext)

/* Grouped GEMM (ABI 2.5): one call for a mixture of experts' local experts. For each group
 * g < num_groups, C_g(m,n) = alpha * op(A_g)(m,k) @ op(B_g)(k,n) + beta * C_g, where m or k
 * is LOOM_GROUP_SIZE: group g's own extent sizes[g] (host memory, >= 0). An operand whose
 * stored rows are that extent is packed: the groups' matrices lie back to back along its
 * rows, group g from row sizes[0] + ... + sizes[g-1]. An operand of fixed shape is stacked:
 * group g's matrix starts g * rows * cols elements in. Every operand is compact row-major,
 * of the gemm's dtypes (C f32 when accumulating weight gradients under mixed precision).
 * So m = LOOM_GROUP_SIZE needs trans_a = 0 (A and C packed, B stacked), and
 * k = LOOM_GROUP_SIZE needs trans_a = 1 and trans_b = 0 (A and B packed, C stacked); n is
 * never the group size. A group of k = 0 sets its C_g to beta * C_g.
 * A mixture of experts' MLP, tokens X (sum of sizes, C) sorted by expert, weights W (E, F, C):
 *   forward  Y_g = X_g W_g^T   m = LOOM_GROUP_SIZE, n = F, k = C, trans_b = 1
 *   dX       dX_g = dY_g W_g   m = LOOM_GROUP_SIZE, n = C, k = F
 *   dW       dW_g += dY_g^T X_g   m = F, n = C, k = LOOM_GROUP_SIZE, trans_a = 1, beta = 1 */
#define LOOM_GROUP_SIZE (-1)
typedef struct loom_grouped_gemm_args {
  size_t struct_size;
  int trans_a, trans_b;
  int64_t m, n, k; /* m or k is LOOM_GROUP_SIZE */
  int64_t num_groups;
  const int64_t* sizes; /* num_groups entries, host memory */
  double alpha, beta;
  const DLTensor* a;
  const DLTensor* b;
  DLTensor* c;
  const loom_ext* ext; /* NULL */
} loom_grouped_gemm_args;
#define LOOM_GROUPED_GEMM_ARGS_SIZE_V2_5 LOOM_STRUCT_SIZE(loom_grouped_gemm_args, ext)
/* Its name until 2.18, when size macros took the name of their minor (docs/abi2.md, "ABI
 * style"): kept for source compatibility, as 2.x is append-only. */
#define LOOM_GROUPED_GEMM_ARGS_SIZE_V1 LOOM_GROUPED_GEMM_ARGS_SIZE_V2_5

/* bias_add: out(N,C) += bias(C) on every row. */
typedef struct loom_bias_add_args {
  size_t struct_size;
  DLTensor* out;
  const DLTensor* bias;
  const loom_ext* ext; /* NULL */
} loom_bias_add_args;
#define LOOM_BIAS_ADD_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_bias_add_args, ext)

/* bias_backward: dbias(C) += the sum over rows of dout(N,C). */
typedef struct loom_bias_bwd_args {
  size_t struct_size;
  DLTensor* dbias;
  const DLTensor* dout;
  const loom_ext* ext; /* NULL */
} loom_bias_bwd_args;
#define LOOM_BIAS_BWD_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_bias_bwd_args, ext)

/* sum_squares: out[i] = the sum of x[i]'s squared elements, accumulated in double in an
 * order that depends only on x[i]'s size (so a run repeats to the bit). */
typedef struct loom_sum_squares_args {
  size_t struct_size;
  const DLTensor* const* x; /* n tensors of any float dtype; borrowed for the call */
  size_t n;
  double* out;         /* host double[n], written before the call returns */
  const loom_ext* ext; /* NULL */
} loom_sum_squares_args;
#define LOOM_SUM_SQUARES_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_sum_squares_args, ext)

/* loom.sum-squares-total/1 (ABI 2.27) on its ext chain: loom/device_totals.h. */

/* embedding_forward: out(N,C) = (or += when accumulate) table(V,C)[ids(N)]; ids i32, each
 * in [0,V). */
typedef struct loom_embedding_fwd_args {
  size_t struct_size;
  DLTensor* out;
  const DLTensor* ids;
  const DLTensor* table;
  int32_t accumulate;  /* 0: out =, 1: out += (a second embedding, such as positions) */
  const loom_ext* ext; /* NULL */
} loom_embedding_fwd_args;
#define LOOM_EMBEDDING_FWD_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_embedding_fwd_args, ext)

/* embedding_backward: dtable(V,C)[ids(N)] += dout(N,C). */
typedef struct loom_embedding_bwd_args {
  size_t struct_size;
  DLTensor* dtable;
  const DLTensor* ids;
  const DLTensor* dout;
  const loom_ext* ext; /* NULL */
} loom_embedding_bwd_args;
#define LOOM_EMBEDDING_BWD_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_embedding_bwd_args, ext)

/* Activations, by kind (a backend refuses a kind it does not know, by name):
 *   GELU_TANH: out = 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))) (GPT-2's form), out and
 *              inp of one shape;
 *   SWIGLU:    inp(N,2H) = [gate | up], out(N,H) = silu(gate) * up (Llama);
 *   GELU:      out = 0.5 x (1 + erf(x / sqrt 2)) (ABI 2.3: BERT's exact GELU);
 *   TANH:      out = tanh(x) (ABI 2.3: BERT's pooler);
 *   SQUARED_RELU: out = max(x, 0)^2 (ABI 2.24: Nemotron-H's and Primer's MLP, Megatron's
 *              --squared-relu). */
typedef enum loom_act_kind {
  LOOM_ACT_GELU_TANH = 0,
  LOOM_ACT_SWIGLU = 1,
  LOOM_ACT_GELU = 2,
  LOOM_ACT_TANH = 3,
  LOOM_ACT_SQUARED_RELU = 4
} loom_act_kind;

typedef struct loom_act_fwd_args {
  size_t struct_size;
  int32_t kind; /* a loom_act_kind */
  DLTensor* out;
  const DLTensor* inp;
  const loom_ext* ext; /* NULL */
} loom_act_fwd_args;
#define LOOM_ACT_FWD_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_act_fwd_args, ext)

/* dinp (inp's shape) = dout * act'(inp); dinp may alias inp or dout for the elementwise
 * kinds (all but SWIGLU). */
typedef struct loom_act_bwd_args {
  size_t struct_size;
  int32_t kind; /* a loom_act_kind */
  DLTensor* dinp;
  const DLTensor* inp;
  const DLTensor* dout; /* out's shape */
  const loom_ext* ext;  /* NULL */
} loom_act_bwd_args;
#define LOOM_ACT_BWD_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_act_bwd_args, ext)

/* softmax_forward: row softmax of scale * s, in place: s(Bt,Tq,Tk) scores in,
 * probabilities out; lse(Bt,Tq) = logsumexp of the scaled, masked row (-inf for a row with
 * every column masked, whose probabilities are 0). Query row i sits at key position
 * p = i + (Tk - Tq) (queries are the last Tq of Tk positions). */
typedef struct loom_softmax_args {
  size_t struct_size;
  DLTensor* s;   /* in place */
  DLTensor* lse; /* may be NULL */
  double scale;
  int causal;          /* mask columns j > p */
  int64_t window;      /* > 0 (with causal): also mask columns j <= p - window, so a query
                          sees its last `window` positions, itself included (sliding window);
                          0 = off */
  const loom_ext* ext; /* NULL */
} loom_softmax_args;
#define LOOM_SOFTMAX_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_softmax_args, ext)

/* softmax_backward: ds(Bt,Tq,Tk) = scale * p * (dp - rowsum(p * dp)); ds may alias dp. */
typedef struct loom_softmax_bwd_args {
  size_t struct_size;
  DLTensor* ds;
  const DLTensor* p; /* the forward's probabilities */
  const DLTensor* dp;
  double scale;
  const loom_ext* ext; /* NULL */
} loom_softmax_bwd_args;
#define LOOM_SOFTMAX_BWD_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_softmax_bwd_args, ext)

/* Normalisation over the channels of inp(N,C), LayerNorm or RMSNorm (`kind`):
 *   LayerNorm: out = (inp - mean) * rstd * weight + bias (bias may be NULL), mean and rstd
 *              (N) saved;
 *   RMSNorm:   out = inp * rstd * weight, rstd = 1/sqrt(mean(inp^2) + eps) (N) saved; no
 *              mean, no bias (NULL). */
typedef enum loom_norm_kind { LOOM_NORM_LAYER = 0, LOOM_NORM_RMS = 1 } loom_norm_kind;

typedef struct loom_norm_fwd_args {
  size_t struct_size;
  int32_t kind;           /* a loom_norm_kind */
  DLTensor* out;          /* (N,C) */
  DLTensor* mean;         /* (N), LayerNorm only */
  DLTensor* rstd;         /* (N) */
  const DLTensor* inp;    /* (N,C) */
  const DLTensor* weight; /* (C) */
  const DLTensor* bias;   /* (C) or NULL */
  double eps;
  const loom_ext* ext; /* NULL */
} loom_norm_fwd_args;
#define LOOM_NORM_FWD_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_norm_fwd_args, ext)

/* dinp(N,C) =; dweight(C) +=; dbias(C) += (LayerNorm, may be NULL) */
typedef struct loom_norm_bwd_args {
  size_t struct_size;
  int32_t kind; /* a loom_norm_kind */
  DLTensor* dinp;
  DLTensor* dweight;
  DLTensor* dbias;
  const DLTensor* dout;
  const DLTensor* inp;
  const DLTensor* weight;
  const DLTensor* mean; /* LayerNorm only */
  const DLTensor* rstd;
  const loom_ext* ext; /* NULL */
} loom_norm_bwd_args;
#define LOOM_NORM_BWD_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_norm_bwd_args, ext)

/* Rotary embedding in place on x(B,T,H,D), rotate-half (GPT-NeoX/Llama) layout: pairs
 * (i, i + D/2) of position pos_offset + t turn by pos * theta^(-2i/D); frequency scaling
 * rides loom.rope-freqs/1 (below). */
typedef struct loom_rope_args {
  size_t struct_size;
  DLTensor* x; /* (B,T,H,D), in place: q or k forward, their gradients backward */
  int64_t pos_offset;
  double theta;
  const loom_ext* ext; /* NULL */
} loom_rope_args;
#define LOOM_ROPE_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_rope_args, ext)

/* loom.rope-freqs/1 (ABI 2.22), required, on a rope_forward/_backward chain: pair i turns
 * by pos * inv_freq[i] (theta unused), cos and sin both times `scale` (RoPE's frequency
 * scalings, Llama 3's and YaRN's with its attention factor, computed by the caller); backward
 * applies the transpose. inv_freq: num = D/2 doubles, host memory, borrowed for the call. */
#define LOOM_EXT_ROPE_FREQS "loom.rope-freqs/1"
typedef struct loom_rope_freqs {
  loom_ext base; /* id LOOM_EXT_ROPE_FREQS, flags LOOM_EXT_REQUIRED */
  const double* inv_freq;
  int64_t num;
  double scale; /* 1: a plain rotation */
} loom_rope_freqs;
#define LOOM_ROPE_FREQS_SIZE_V1 LOOM_STRUCT_SIZE(loom_rope_freqs, scale)

/* softmax_cross_entropy, fused softmax + cross-entropy:
 *   losses(N) = logsumexp(logits[n]) - logits[n, t[n]];
 *   when dlogits is not NULL: dlogits(N,V) = dloss * (softmax(logits[n]) - onehot(t[n])).
 * targets(N) i32; a target of -1 is ignored (loss 0, gradient 0). dlogits may alias
 * logits. */
typedef struct loom_cross_entropy_args {
  size_t struct_size;
  DLTensor* losses;  /* (N) f32 */
  DLTensor* dlogits; /* (N,V) or NULL (no gradient) */
  const DLTensor* logits;
  const DLTensor* targets;
  double dloss;
  const loom_ext* ext; /* NULL, or loom_ce_loss_total (ABI 2.28, loom/device_totals.h) */
} loom_cross_entropy_args;
#define LOOM_CROSS_ENTROPY_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_cross_entropy_args, ext)

/* loom.ce-loss-total/1 (ABI 2.28) on its ext chain: loom/device_totals.h. */

/* vocab_ce_stats, vocab-parallel cross-entropy's forward half. logits(N,Vl) hold vocabulary
 * ids [vocab_start, vocab_start+Vl) of this tensor-parallel rank; targets(N) i32 are global
 * ids (-1 ignored). stats(N,3) (f32; f64 with f64 logits): the local row max m,
 * sum exp(logit - m), and the target's logit (0 where the target is outside this slice or
 * ignored). The caller combines the ranks' stats into the global log-sum-exp. */
typedef struct loom_vocab_ce_stats_args {
  size_t struct_size;
  DLTensor* stats;
  const DLTensor* logits;
  const DLTensor* targets;
  int64_t vocab_start;
  const loom_ext* ext; /* NULL */
} loom_vocab_ce_stats_args;
#define LOOM_VOCAB_CE_STATS_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_vocab_ce_stats_args, ext)

/* vocab_ce_backward: dlogits(N,Vl) = dloss * (exp(logit - lse[n]) - onehot(target -
 * vocab_start)); rows with target -1 get 0. lse(N) is the global log-sum-exp (dtype as
 * stats). dlogits may alias logits. */
typedef struct loom_vocab_ce_bwd_args {
  size_t struct_size;
  DLTensor* dlogits;
  const DLTensor* logits;
  const DLTensor* targets;
  int64_t vocab_start;
  const DLTensor* lse;
  double dloss;
  const loom_ext* ext; /* NULL */
} loom_vocab_ce_bwd_args;
#define LOOM_VOCAB_CE_BWD_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_vocab_ce_bwd_args, ext)

/* copy_strided (ABI 2.21): a block of `rows` x `cols` elements between two row-strided
 * layouts of one dtype:
 *   dst[offset_dst + r * ld_dst + j] = src[offset_src + r * ld_src + j], r < rows, j < cols
 * (element offsets into each compact tensor's data). Each block lies within its tensor, the
 * strides hold the columns (ld >= cols), and the two blocks do not overlap. One head's slice
 * of q or k, MLA's latent beside its RoPE part: what a compact copy cannot reach. */
typedef struct loom_copy_strided_args {
  size_t struct_size;
  DLTensor* dst;
  int64_t ld_dst, offset_dst;
  const DLTensor* src;
  int64_t ld_src, offset_src;
  int64_t rows, cols;
  const loom_ext* ext; /* NULL */
} loom_copy_strided_args;
#define LOOM_COPY_STRIDED_ARGS_SIZE_V2_21 LOOM_STRUCT_SIZE(loom_copy_strided_args, ext)

/* ----- Mamba-2 (ABI 2.22): the state-space mixer's two kernels and its gated norm ---------
 * ssm_conv_forward: the causal depthwise convolution over time, each channel its own K taps:
 *   pre[b,t,c] = bias[c] + sum_{k<K} weight[c,k] * x[b, t - (K-1) + k, c]
 *   out = silu(pre) when `silu`, else pre
 * where x before t = 0 is 0, or state[b, K-1 + (t - (K-1) + k), c] when state is given.
 * x, out (B,T,C); weight (C,K); bias (C) or NULL (parameters: the compute dtype).
 * state (B,K-1,C) in x's dtype, or NULL: on entry the K-1 inputs before t = 0, on return the
 * last K-1 inputs (those before t = 0 still where T < K-1): generation's convolution state. */
typedef struct loom_ssm_conv_args {
  size_t struct_size;
  DLTensor* out;
  const DLTensor *x, *weight, *bias;
  int32_t silu;
  DLTensor* state;
  const loom_ext* ext; /* NULL */
} loom_ssm_conv_args;
#define LOOM_SSM_CONV_ARGS_SIZE_V2_22 LOOM_STRUCT_SIZE(loom_ssm_conv_args, ext)

/* ssm_conv_backward, from zero history (training): dx (B,T,C) =; dweight (C,K) +=; dbias (C)
 * += (NULL when the forward had no bias); the pre-activation recomputed from x. */
typedef struct loom_ssm_conv_bwd_args {
  size_t struct_size;
  DLTensor *dx, *dweight, *dbias;
  const DLTensor *dout, *x, *weight, *bias;
  int32_t silu;
  const loom_ext* ext; /* NULL */
} loom_ssm_conv_bwd_args;
#define LOOM_SSM_CONV_BWD_ARGS_SIZE_V2_22 LOOM_STRUCT_SIZE(loom_ssm_conv_bwd_args, ext)

/* ssm_scan_forward, Mamba-2's selective scan (SSD). H heads of P channels in G groups of H/G
 * heads (head h reads group g = h / (H/G)'s B and C), a state of N per channel:
 *   dt_t = softplus(dt[b,t,h] + dt_bias[h]),  A = -exp(A_log[h])
 *   S_t (P,N) = exp(dt_t A) S_{t-1} + dt_t x_t B_t^T   x_t = x[b,t,h,:], B_t = B[b,t,g,:]
 *   y[b,t,h,:] = S_t C_t + D[h] x_t                    C_t = C[b,t,g,:]
 * S_{-1} = 0, or state's. x, y (B,T,H,P); dt (B,T,H); B, C (B,T,G,N); A_log, dt_bias, D (H).
 * chunk > 0: the chunk length. chunk_states (B, ceil(T/chunk), H, P, N), f32 (f64 with f64
 * data), or NULL: the state before each chunk, what backward starts each chunk from (the
 * states a chunked scan hands from chunk to chunk).
 * state (B,H,P,N) (as chunk_states) or NULL: on entry S_{-1}, on return S_{T-1}
 * (generation). */
typedef struct loom_ssm_scan_args {
  size_t struct_size;
  DLTensor* y;
  const DLTensor *x, *dt, *A_log, *B, *C, *D, *dt_bias;
  int64_t chunk;
  DLTensor* chunk_states;
  DLTensor* state;
  const loom_ext* ext; /* NULL */
} loom_ssm_scan_args;
#define LOOM_SSM_SCAN_ARGS_SIZE_V2_22 LOOM_STRUCT_SIZE(loom_ssm_scan_args, ext)

/* ssm_scan_backward, from S_{-1} = 0 (training), given the forward's chunk_states (same
 * chunk): dx, ddt, dB, dC (their inputs' shapes) =; dA_log, dD, ddt_bias (H) +=. */
typedef struct loom_ssm_scan_bwd_args {
  size_t struct_size;
  DLTensor *dx, *ddt, *dA_log, *dB, *dC, *dD, *ddt_bias;
  const DLTensor *dy, *x, *dt, *A_log, *B, *C, *D, *dt_bias;
  int64_t chunk;
  const DLTensor* chunk_states;
  const loom_ext* ext; /* NULL */
} loom_ssm_scan_bwd_args;
#define LOOM_SSM_SCAN_BWD_ARGS_SIZE_V2_22 LOOM_STRUCT_SIZE(loom_ssm_scan_bwd_args, ext)

/* loom.norm-gate/1 (ABI 2.22), on a norm_forward or norm_backward chain (flags
 * LOOM_EXT_REQUIRED, kind LOOM_NORM_RMS): Mamba-2's gated RMSNorm (norm_before_gate off).
 *   g = inp * silu(gate);  out = g * rstd * weight, over groups of group_size channels:
 *   rstd (N * C / group_size) = 1/sqrt(mean over the group of g^2 + eps)
 * group_size divides C (C: one group). Backward also writes dgate (N,C) =; its rstd is the
 * forward's, and g is recomputed from inp and gate. */
#define LOOM_EXT_NORM_GATE "loom.norm-gate/1"
typedef struct loom_norm_gate {
  loom_ext base;        /* id LOOM_EXT_NORM_GATE, flags LOOM_EXT_REQUIRED */
  const DLTensor* gate; /* (N,C) */
  DLTensor* dgate;      /* backward: (N,C) =; forward: NULL */
  int64_t group_size;
} loom_norm_gate;
#define LOOM_NORM_GATE_SIZE_V1 LOOM_STRUCT_SIZE(loom_norm_gate, group_size)

/* The op table. Every slot that may grow takes one args struct (above): a backend refuses
 * args that are NULL, older than its ABI (struct_size), of an unknown kind, or that carry a
 * required extension it does not know (loom/cpp/plugin.hpp's usable_ops_args). The four
 * memory primitives fill, copy, add and axpby keep positional arguments: their meaning is
 * fixed, and a variant is a new slot, never a new field (2.21's copy_strided). */

/* Contract tags (common.h):
 *   gemm, bias_add, bias_backward, fill, copy, add, axpby, embedding_forward, embedding_backward,
 *      norm_forward, norm_backward, act_forward, act_backward, softmax_forward, softmax_backward,
 *      rope_forward, rope_backward, softmax_cross_entropy, vocab_ce_stats, vocab_ce_backward,
 *      grouped_gemm, copy_strided, ssm_conv_forward, ssm_conv_backward, ssm_scan_forward,
 *      ssm_scan_backward: owner, local, stream
 *   sum_squares: owner, local, blocks */

typedef struct loom_ops {
  size_t struct_size;
  /* --- linear algebra ---------------------------------------------------------- */
  loom_error* (*gemm)(loom_backend* be, const loom_gemm_args* args);
  loom_error* (*bias_add)(loom_backend* be, const loom_bias_add_args* args);
  loom_error* (*bias_backward)(loom_backend* be, const loom_bias_bwd_args* args);

  /* --- elementwise (positional: see above) ------------------------------------- */
  loom_error* (*fill)(loom_backend* be, DLTensor* t, double value);
  /* dst = src, converting dtype when they differ (f32 <-> bf16/f16/f64): the cast op */
  loom_error* (*copy)(loom_backend* be, DLTensor* dst, const DLTensor* src);
  /* out = a + b (same shape; out may alias a or b) */
  loom_error* (*add)(loom_backend* be, DLTensor* out, const DLTensor* a, const DLTensor* b);
  /* y = alpha * x + beta * y */
  loom_error* (*axpby)(loom_backend* be, DLTensor* y, double alpha, const DLTensor* x, double beta);
  /* Sums of squares of many tensors in one call (loom_sum_squares_args): one device read
   * for the gradient norm of a whole model. Synchronous, unless loom.sum-squares-total/1
   * keeps the sum on the device (then it enqueues). */
  loom_error* (*sum_squares)(loom_backend* be, const loom_sum_squares_args* args);

  /* --- embedding ---------------------------------------------------------------- */
  loom_error* (*embedding_forward)(loom_backend* be, const loom_embedding_fwd_args* args);
  loom_error* (*embedding_backward)(loom_backend* be, const loom_embedding_bwd_args* args);

  /* --- normalisation (LayerNorm and RMSNorm, loom_norm_fwd_args / loom_norm_bwd_args) --- */
  loom_error* (*norm_forward)(loom_backend* be, const loom_norm_fwd_args* args);
  loom_error* (*norm_backward)(loom_backend* be, const loom_norm_bwd_args* args);

  /* --- activations (GELU, SwiGLU by kind: loom_act_fwd_args / loom_act_bwd_args) --- */
  loom_error* (*act_forward)(loom_backend* be, const loom_act_fwd_args* args);
  loom_error* (*act_backward)(loom_backend* be, const loom_act_bwd_args* args);

  /* --- attention pieces ---------------------------------------------------------- */
  /* Row softmax of attention scores, in place (loom_softmax_args), and its gradient. */
  loom_error* (*softmax_forward)(loom_backend* be, const loom_softmax_args* args);
  loom_error* (*softmax_backward)(loom_backend* be, const loom_softmax_bwd_args* args);
  /* Rotary embedding (loom_rope_args), in place; backward applies the inverse rotation to
   * a gradient (the transpose of the forward's linear map). */
  loom_error* (*rope_forward)(loom_backend* be, const loom_rope_args* args);
  loom_error* (*rope_backward)(loom_backend* be, const loom_rope_args* args);

  /* --- loss ------------------------------------------------------------------------ */
  loom_error* (*softmax_cross_entropy)(loom_backend* be, const loom_cross_entropy_args* args);
  loom_error* (*vocab_ce_stats)(loom_backend* be, const loom_vocab_ce_stats_args* args);
  loom_error* (*vocab_ce_backward)(loom_backend* be, const loom_vocab_ce_bwd_args* args);
  /* --- ABI 2.0 ends here; append new slots below this line only. --- */
  /* ABI 2.5: a mixture of experts' GEMMs, one call for every local expert (above). */
  loom_error* (*grouped_gemm)(loom_backend* be, const loom_grouped_gemm_args* args);
  /* --- ABI 2.5 ends here; append new slots below this line only. --- */
  /* ABI 2.21: the strided copy (above). */
  loom_error* (*copy_strided)(loom_backend* be, const loom_copy_strided_args* args);
  /* --- ABI 2.21 ends here; append new slots below this line only. --- */
  /* ABI 2.22: Mamba-2's convolution and selective scan (above). */
  loom_error* (*ssm_conv_forward)(loom_backend* be, const loom_ssm_conv_args* args);
  loom_error* (*ssm_conv_backward)(loom_backend* be, const loom_ssm_conv_bwd_args* args);
  loom_error* (*ssm_scan_forward)(loom_backend* be, const loom_ssm_scan_args* args);
  loom_error* (*ssm_scan_backward)(loom_backend* be, const loom_ssm_scan_bwd_args* args);
  /* --- ABI 2.22 ends here; append new slots below this line only. --- */
} loom_ops;
#define LOOM_OPS_SIZE_V2 LOOM_STRUCT_SIZE(loom_ops, vocab_ce_backward)
#define LOOM_OPS_SIZE_V2_5 LOOM_STRUCT_SIZE(loom_ops, grouped_gemm)
#define LOOM_OPS_SIZE_V2_21 LOOM_STRUCT_SIZE(loom_ops, copy_strided)
#define LOOM_OPS_SIZE_V2_22 LOOM_STRUCT_SIZE(loom_ops, ssm_scan_backward)

typedef struct loom_backend_info {
  size_t struct_size;
  const char* device_name; /* "cpu: Intel Xeon (AVX-512), OpenBLAS SkylakeX, 2 threads" */
  DLDevice device;
  double peak_gflops; /* fp32 GEMM rate used as the MFU denominator */
  size_t mem_in_use;  /* bytes allocated through this backend now */
  size_t mem_peak;    /* and at most since creation */
  /* --- ABI 2.0 ends here; append new fields below this line only. --- */
  /* ABI 2.11: the device's memory in bytes (the GPU's; the host's physical memory for the
   * CPU), or 0 when unknown: what `loom validate --memory` sets the estimate against. */
  size_t mem_total;
  /* --- ABI 2.11 ends here; append new fields below this line only. --- */
  /* ABI 2.16: counters since create, for the step profile (train.timers): kernels launched
   * by the ops (a library call such as one cuBLASLt matmul counts one), host waits on the
   * device (stream and event synchronisations, blocking copies) and device allocations that
   * reached the driver (a caching allocator's reuse is not one). 0 where nothing is counted:
   * backend/cpu launches nothing and never waits. */
  uint64_t kernel_launches;
  uint64_t host_syncs;
  uint64_t device_mallocs;
} loom_backend_info;
#define LOOM_BACKEND_INFO_SIZE_V2 LOOM_STRUCT_SIZE(loom_backend_info, mem_peak)
#define LOOM_BACKEND_INFO_SIZE_V2_11 LOOM_STRUCT_SIZE(loom_backend_info, mem_total)
#define LOOM_BACKEND_INFO_SIZE_V2_16 LOOM_STRUCT_SIZE(loom_backend_info, device_mallocs)

/* ----- loom.device-stream/1 ------------------------------------------------------------
 * The backend instance's device and stream, for plugins that bring their own device code (an
 * optimizer's update, an attention kernel, a collective library): they enqueue on `stream`
 * and never synchronise the device, so their work stays ordered with the backend's ops and
 * the host does not wait. backend/cpu provides it too, with a NULL stream (work is done when
 * a call returns) and NULL events, so that a plugin has one code path. Reached through the
 * backend table's get_ext; the backend lists the id in its descriptor's capabilities. */
#define LOOM_EXT_DEVICE_STREAM "loom.device-stream/1"
/* Contract tags (common.h):
 *   event_record, event_wait, event_free, timer_record, timer_free, read_start: owner, local,
 *      stream
 *   event_sync, timer_elapsed, read_finish: owner, local, blocks */
typedef struct loom_device_stream {
  loom_ext base; /* id LOOM_EXT_DEVICE_STREAM; base.struct_size = sizeof the whole table */
  DLDevice device;
  void* stream; /* cudaStream_t on CUDA; NULL on the CPU */
  /* *event (out; free it with event_free): a mark at the stream's current end. NULL on the
   * CPU, where everything before is already done. */
  loom_error* (*event_record)(loom_backend* be, void** event);
  /* The stream waits for `event` (recorded on another stream): the host does not block. */
  loom_error* (*event_wait)(loom_backend* be, void* event);
  /* The host blocks until `event` has passed. */
  loom_error* (*event_sync)(loom_backend* be, void* event);
  void (*event_free)(loom_backend* be, void* event); /* accepts NULL */
  /* --- loom.device-stream/1 ends here; append new slots below this line only. --- */
  /* ABI 2.16: timing marks, for the step profile (train.timers). timer_record: *mark (out;
   * free it with timer_free) at the stream's current end, holding the time the device reaches
   * it; timer_elapsed: the milliseconds from `start` to `end`, blocking until `end` has
   * passed. On the CPU a mark holds the host clock at the call, when all work before it is
   * done. A table shorter than LOOM_DEVICE_STREAM_SIZE_V2_16 (base.struct_size) has none. */
  loom_error* (*timer_record)(loom_backend* be, void** mark);
  loom_error* (*timer_elapsed)(loom_backend* be, void* start, void* end, double* ms);
  void (*timer_free)(loom_backend* be, void* mark); /* accepts NULL */
  /* ABI 2.27: a read that waits for its own copy, not for the stream. read_start enqueues a
   * copy of the compact tensor `src` into host memory of the backend's and returns with it in
   * flight (*read, out); read_finish blocks until that copy has landed (not for work
   * enqueued after read_start), copies `bytes` (src's size) to dst and frees the read. So
   * the host learns a value computed early in a step (the gradient norm) while the step's
   * later work (the update) still runs. On the CPU read_start copies at once. A table
   * shorter than LOOM_DEVICE_STREAM_SIZE_V2_27 has neither. */
  loom_error* (*read_start)(loom_backend* be, const DLTensor* src, void** read);
  loom_error* (*read_finish)(loom_backend* be, void* read, void* dst, size_t bytes);
} loom_device_stream;
#define LOOM_DEVICE_STREAM_SIZE_V1 LOOM_STRUCT_SIZE(loom_device_stream, event_free)
#define LOOM_DEVICE_STREAM_SIZE_V2_16 LOOM_STRUCT_SIZE(loom_device_stream, timer_free)
#define LOOM_DEVICE_STREAM_SIZE_V2_27 LOOM_STRUCT_SIZE(loom_device_stream, read_finish)

/* Contract tags (common.h):
 *   create, destroy, get_info, alloc_tensor, free_tensor, to_host, from_host, synchronize, get_ext:
 *      owner, local, blocks */
typedef struct loom_backend_api {
  size_t struct_size;
  loom_error* (*create)(const loom_host* host, const loom_config* cfg, loom_backend** out);
  void (*destroy)(loom_backend* be); /* accepts NULL */
  /* Fills `out` (caller sets out->struct_size); strings valid until destroy. */
  loom_error* (*get_info)(loom_backend* be, loom_backend_info* out);
  /* A new zero-filled compact tensor; free it with free_tensor. */
  loom_error* (*alloc_tensor)(loom_backend* be, DLDataType dtype, int ndim, const int64_t* shape,
                              DLTensor** out);
  void (*free_tensor)(loom_backend* be, DLTensor* t); /* accepts NULL */
  /* Copies between host memory and a device tensor: `bytes` must equal the tensor's.
   * Blocks: the host memory is ready (to_host) or reusable (from_host) on return. */
  loom_error* (*to_host)(loom_backend* be, const DLTensor* src, void* dst, size_t bytes);
  loom_error* (*from_host)(loom_backend* be, DLTensor* dst, const void* src, size_t bytes);
  loom_error* (*synchronize)(loom_backend* be);
  const loom_ops* ops; /* static storage */
  /* The instance's table of capability `id` (one its descriptor lists, such as
   * LOOM_EXT_DEVICE_STREAM), valid until destroy; NULL for an id it does not implement. */
  const loom_ext* (*get_ext)(loom_backend* be, const char* id);
  /* --- ABI 2.0 ends here; append new slots below this line only. --- */
} loom_backend_api;
#define LOOM_BACKEND_API_SIZE_V2 LOOM_STRUCT_SIZE(loom_backend_api, get_ext)

#ifdef __cplusplus
}
#endif
#endif /* LOOM_BACKEND_H */
