// Loom SDK C++ helpers for backend plugins: the loom_ops table built from plain kernels. A
// backend writes one function per op with positional arguments (the form its own
// mixed-precision staging re-enters, too) and lists them in a constexpr loom::OpsCalls;
// loom::OpsSlots<calls>::ops() is the whole table. Each slot that takes an args struct first
// applies the one refusal rule (loom::ops_args_refusal: NULL, older than ABI 2.0, an unknown
// required extension, a kind the backend lacks), then unpacks the struct into the kernel.
//
// A kind is implemented exactly when its kernel is given: a backend without RMSNorm leaves
// rmsnorm_forward/_backward NULL and norm_forward refuses LOOM_NORM_RMS by name; one without
// the gated RMSNorm refuses loom.norm-gate/1 as an unknown required extension, and one without
// ABI 2.22's Mamba-2 kernels refuses those ops ("no kernel"). Adding a kind to backend.h means
// one more pair of fields here and one branch in its slot, never a change to each backend's
// table. See backend/cpu for a backend written this way.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "loom/backend.h"
#include "loom/cpp/fp8_args.hpp"
#include "loom/cpp/gemm_epilogue.hpp"
#include "loom/cpp/grouped_gemm.hpp"
#include "loom/cpp/norm_residual.hpp"
#include "loom/cpp/plugin.hpp"
#include "loom/cpp/ssm_args.hpp"
#include "loom/cpp/tensor.hpp"

namespace loom {

struct OpsCalls {
  // The error for args refused with `why` (the backend's wording, e.g. "norm_forward: why").
  loom_error* (*refuse)(loom_backend* be, const char* op, const std::string& why);

  // Slots whose args are passed through whole (the struct is the kernel's natural argument).
  loom_error* (*gemm)(loom_backend* be, const loom_gemm_args* args);
  loom_error* (*sum_squares)(loom_backend* be, const loom_sum_squares_args* args);
  loom_error* (*softmax_forward)(loom_backend* be, const loom_softmax_args* args);

  // The four memory primitives are positional in the ABI too; they go into the table as is.
  decltype(loom_ops::fill) fill;
  decltype(loom_ops::copy) copy;
  decltype(loom_ops::add) add;
  decltype(loom_ops::axpby) axpby;

  loom_error* (*bias_add)(loom_backend* be, DLTensor* out, const DLTensor* bias);
  loom_error* (*bias_backward)(loom_backend* be, DLTensor* dbias, const DLTensor* dout);
  loom_error* (*embedding_forward)(loom_backend* be, DLTensor* out, const DLTensor* ids,
                                   const DLTensor* table, int accumulate);
  loom_error* (*embedding_backward)(loom_backend* be, DLTensor* dtable, const DLTensor* ids,
                                    const DLTensor* dout);
  // norm_forward/_backward by kind: LOOM_NORM_LAYER, LOOM_NORM_RMS.
  loom_error* (*layernorm_forward)(loom_backend* be, DLTensor* out, DLTensor* mean, DLTensor* rstd,
                                   const DLTensor* inp, const DLTensor* weight,
                                   const DLTensor* bias, double eps);
  loom_error* (*layernorm_backward)(loom_backend* be, DLTensor* dinp, DLTensor* dweight,
                                    DLTensor* dbias, const DLTensor* dout, const DLTensor* inp,
                                    const DLTensor* weight, const DLTensor* mean,
                                    const DLTensor* rstd);
  loom_error* (*rmsnorm_forward)(loom_backend* be, DLTensor* out, DLTensor* rstd,
                                 const DLTensor* inp, const DLTensor* weight, double eps);
  loom_error* (*rmsnorm_backward)(loom_backend* be, DLTensor* dinp, DLTensor* dweight,
                                  const DLTensor* dout, const DLTensor* inp, const DLTensor* weight,
                                  const DLTensor* rstd);
  // act_forward/_backward by kind: LOOM_ACT_GELU_TANH, LOOM_ACT_SWIGLU (LOOM_ACT_GELU and
  // LOOM_ACT_TANH at the end).
  loom_error* (*gelu_forward)(loom_backend* be, DLTensor* out, const DLTensor* inp);
  loom_error* (*gelu_backward)(loom_backend* be, DLTensor* dinp, const DLTensor* inp,
                               const DLTensor* dout);
  loom_error* (*swiglu_forward)(loom_backend* be, DLTensor* out, const DLTensor* inp);
  loom_error* (*swiglu_backward)(loom_backend* be, DLTensor* dinp, const DLTensor* inp,
                                 const DLTensor* dout);
  loom_error* (*softmax_backward)(loom_backend* be, DLTensor* ds, const DLTensor* p,
                                  const DLTensor* dp, double scale);
  loom_error* (*rope_forward)(loom_backend* be, DLTensor* x, int64_t pos_offset, double theta);
  loom_error* (*rope_backward)(loom_backend* be, DLTensor* dx, int64_t pos_offset, double theta);
  loom_error* (*softmax_cross_entropy)(loom_backend* be, DLTensor* losses, DLTensor* dlogits,
                                       const DLTensor* logits, const DLTensor* targets,
                                       double dloss);
  loom_error* (*vocab_ce_stats)(loom_backend* be, DLTensor* stats, const DLTensor* logits,
                                const DLTensor* targets, int64_t vocab_start);
  loom_error* (*vocab_ce_backward)(loom_backend* be, DLTensor* dlogits, const DLTensor* logits,
                                   const DLTensor* targets, int64_t vocab_start,
                                   const DLTensor* lse, double dloss);
  // ABI 2.3's activation kinds (NULL: refused by name): LOOM_ACT_GELU, LOOM_ACT_TANH.
  loom_error* (*gelu_erf_forward)(loom_backend* be, DLTensor* out, const DLTensor* inp);
  loom_error* (*gelu_erf_backward)(loom_backend* be, DLTensor* dinp, const DLTensor* inp,
                                   const DLTensor* dout);
  loom_error* (*tanh_forward)(loom_backend* be, DLTensor* out, const DLTensor* inp);
  loom_error* (*tanh_backward)(loom_backend* be, DLTensor* dinp, const DLTensor* inp,
                               const DLTensor* dout);
  // ABI 2.5's grouped GEMM, its args checked already (loom/cpp/grouped_gemm.hpp). NULL: every
  // group runs through `gemm` above, one call each.
  loom_error* (*grouped_gemm)(loom_backend* be, const loom_grouped_gemm_args* args);
  // ABI 2.17's loom.gemm-epilogue/1 (NULL: a gemm carrying one is refused by the rule), its
  // args checked already (loom::gemm_epilogue_refusal against `epilogue_kinds`). The
  // instance lends its loom_gemm_epilogues table through get_ext itself.
  loom_error* (*gemm_epilogue)(loom_backend* be, const loom_gemm_args* args,
                               const loom_gemm_epilogue* epilogue);
  uint32_t epilogue_kinds;
  // ABI 2.21's strided copy, its args checked already (loom::copy_strided_refusal). NULL: the
  // slot copies row by row through `copy`.
  loom_error* (*copy_strided)(loom_backend* be, DLTensor* dst, int64_t ld_dst, int64_t offset_dst,
                              const DLTensor* src, int64_t ld_src, int64_t offset_src, int64_t rows,
                              int64_t cols);
  // ABI 2.22's Mamba-2 ops, their shapes checked already (loom/cpp/ssm_args.hpp). NULL: the
  // slot refuses the op by name ("no kernel").
  loom_error* (*ssm_conv_forward)(loom_backend* be, DLTensor* out, const DLTensor* x,
                                  const DLTensor* weight, const DLTensor* bias, int silu,
                                  DLTensor* state);
  loom_error* (*ssm_conv_backward)(loom_backend* be, DLTensor* dx, DLTensor* dweight,
                                   DLTensor* dbias, const DLTensor* dout, const DLTensor* x,
                                   const DLTensor* weight, const DLTensor* bias, int silu);
  loom_error* (*ssm_scan_forward)(loom_backend* be, DLTensor* y, const DLTensor* x,
                                  const DLTensor* dt, const DLTensor* A_log, const DLTensor* B,
                                  const DLTensor* C, const DLTensor* D, const DLTensor* dt_bias,
                                  int64_t chunk, DLTensor* chunk_states, DLTensor* state);
  loom_error* (*ssm_scan_backward)(loom_backend* be, DLTensor* dx, DLTensor* ddt, DLTensor* dA_log,
                                   DLTensor* dB, DLTensor* dC, DLTensor* dD, DLTensor* ddt_bias,
                                   const DLTensor* dy, const DLTensor* x, const DLTensor* dt,
                                   const DLTensor* A_log, const DLTensor* B, const DLTensor* C,
                                   const DLTensor* D, const DLTensor* dt_bias, int64_t chunk,
                                   const DLTensor* chunk_states);
  // ABI 2.22's loom.norm-gate/1 on norm_forward/_backward, its args checked already
  // (loom::norm_gate_refusal). NULL: a norm carrying one is refused by the rule.
  loom_error* (*rmsnorm_gated_forward)(loom_backend* be, DLTensor* out, DLTensor* rstd,
                                       const DLTensor* inp, const DLTensor* gate,
                                       const DLTensor* weight, double eps, int64_t group_size);
  loom_error* (*rmsnorm_gated_backward)(loom_backend* be, DLTensor* dinp, DLTensor* dgate,
                                        DLTensor* dweight, const DLTensor* dout,
                                        const DLTensor* inp, const DLTensor* gate,
                                        const DLTensor* weight, const DLTensor* rstd,
                                        int64_t group_size);
  // ABI 2.22's loom.rope-freqs/1 on rope_forward/_backward (backward = 1 for the latter):
  // inv_freq has D/2 entries (checked). NULL: a rope carrying one is refused by the rule.
  loom_error* (*rope_freqs)(loom_backend* be, DLTensor* x, int64_t pos_offset,
                            const double* inv_freq, double scale, int backward);
  // ABI 2.24's activation kind (NULL: refused by name): LOOM_ACT_SQUARED_RELU.
  loom_error* (*squared_relu_forward)(loom_backend* be, DLTensor* out, const DLTensor* inp);
  loom_error* (*squared_relu_backward)(loom_backend* be, DLTensor* dinp, const DLTensor* inp,
                                       const DLTensor* dout);
  // ABI 2.27's loom.sum-squares-total/1 on sum_squares, its args checked already
  // (loom::sum_squares_total_refusal): the sum of x's squares into total (1) f64, enqueued.
  // NULL: a sum_squares carrying one is refused by the rule.
  loom_error* (*sum_squares_total)(loom_backend* be, const loom_sum_squares_args* args,
                                   DLTensor* total);
  // ABI 2.28's loom.ce-loss-total/1 on softmax_cross_entropy, its args checked already
  // (loom::ce_loss_total_refusal): the cross-entropy as without it, the losses' sum added
  // into total (1) f64 and, with dlogits, a NaN gradient row where a loss is not finite.
  // NULL: a softmax_cross_entropy carrying one is refused by the rule.
  loom_error* (*softmax_cross_entropy_total)(loom_backend* be, DLTensor* losses, DLTensor* dlogits,
                                             const DLTensor* logits, const DLTensor* targets,
                                             double dloss, DLTensor* total);
  // ABI 2.29's loom.norm-residual/1 on norm_forward/_backward, its args checked already (the
  // rule, the kind, loom::norm_residual_refusal): the norm's args as given, and the
  // extension. NULL: a norm carrying one is refused by the rule. The instance lends its
  // table through get_ext itself.
  loom_error* (*norm_residual_forward)(loom_backend* be, const loom_norm_fwd_args* args,
                                       const loom_norm_residual* residual);
  loom_error* (*norm_residual_backward)(loom_backend* be, const loom_norm_bwd_args* args,
                                        const loom_norm_residual* residual);
  // ABI 2.32's loom.fp8/1 on a gemm's chain, its args checked already (the plain gemm's
  // operand checks are the kernel's; loom::gemm_fp8_refusal against `fp8_scalings`). NULL: a
  // gemm carrying one is refused by the rule. The instance lends its loom_fp8_api table
  // (quantize, delayed_update) through get_ext itself.
  loom_error* (*gemm_fp8)(loom_backend* be, const loom_gemm_args* args, const loom_gemm_fp8* fp8);
  uint32_t fp8_scalings;
};

// What is wrong with `e`, an extension whose output `total` must be a (1) f64 tensor, beside
// the other extensions of `chain` ("" when nothing): total is not a (1) f64 tensor, or
// another required extension rides the chain. The caller has checked e's size (to read
// `total` at all).
inline std::string total_ext_refusal(const loom_ext* chain, const loom_ext* e,
                                     const DLTensor* total) {
  const std::string id = e->id ? e->id : "(no id)";
  if (total == nullptr || total->ndim != 1 || total->shape[0] != 1 ||
      !loom_dtype_eq(total->dtype, loom_f64()))
    return id + "'s total must be a (1) f64 tensor";
  return other_required_refusal(chain, e);
}

// What is wrong with a sum_squares carrying loom.sum-squares-total/1 `e` ("" when nothing):
// the extension is short, total is not a compact (1) f64 tensor, x is NULL, or another
// required extension rides the chain.
inline std::string sum_squares_total_refusal(const loom_sum_squares_args& a, const loom_ext* e) {
  if (e->struct_size < LOOM_SUM_SQUARES_TOTAL_SIZE_V1) return "loom.sum-squares-total/1 is short";
  if (a.n > 0 && a.x == nullptr) return "x is NULL";
  return total_ext_refusal(a.ext, e, reinterpret_cast<const loom_sum_squares_total*>(e)->total);
}

// The same for a softmax_cross_entropy carrying loom.ce-loss-total/1 `e` (its args are
// checked by the rule first).
inline std::string ce_loss_total_refusal(const loom_cross_entropy_args& a, const loom_ext* e) {
  if (e->struct_size < LOOM_CE_LOSS_TOTAL_SIZE_V1) return "loom.ce-loss-total/1 is short";
  return total_ext_refusal(a.ext, e, reinterpret_cast<const loom_ce_loss_total*>(e)->total);
}

// What is wrong with a copy_strided's blocks ("" when nothing): the dtypes differ, a size is
// negative, a stride is shorter than a row, a block leaves its tensor, or the two overlap.
inline std::string copy_strided_refusal(const loom_copy_strided_args& a) {
  if (!a.dst || !a.src) return "dst or src is NULL";
  if (!loom_dtype_eq(a.dst->dtype, a.src->dtype)) return "dst and src differ in dtype";
  if (a.rows < 0 || a.cols < 0 || a.offset_dst < 0 || a.offset_src < 0)
    return "a negative size or offset";
  if (a.rows == 0 || a.cols == 0) return "";
  if (a.ld_dst < a.cols || a.ld_src < a.cols) return "a stride is shorter than a row's cols";
  const int64_t end_dst = a.offset_dst + (a.rows - 1) * a.ld_dst + a.cols;
  const int64_t end_src = a.offset_src + (a.rows - 1) * a.ld_src + a.cols;
  if (end_dst > loom_tensor_numel(a.dst) || end_src > loom_tensor_numel(a.src))
    return "a block reaches past its tensor (" + std::to_string(end_dst) + " of " +
           std::to_string(loom_tensor_numel(a.dst)) + " elements of dst, " +
           std::to_string(end_src) + " of " + std::to_string(loom_tensor_numel(a.src)) + " of src)";
  const size_t e = loom_dtype_bytes(a.dst->dtype);
  const char* d0 = static_cast<const char*>(a.dst->data) + a.dst->byte_offset + a.offset_dst * e;
  const char* s0 = static_cast<const char*>(a.src->data) + a.src->byte_offset + a.offset_src * e;
  const char* d1 = d0 + (size_t)(end_dst - a.offset_dst) * e;
  const char* s1 = s0 + (size_t)(end_src - a.offset_src) * e;
  if (a.dst->data == a.src->data && d0 < s1 && s0 < d1) return "the blocks overlap";
  return "";
}

// What a backend that fills OpsCalls' optional slots lists in its descriptor (backend/cpu,
// backend/cuda): its device stream (loom.device-stream/1), the GEMM epilogues and the norms'
// residual add it lends, and the args extensions OpsSlots hands to those slots.
inline constexpr const char* kOpsCapabilities[] = {
    LOOM_EXT_DEVICE_STREAM,     LOOM_EXT_GEMM_EPILOGUE, LOOM_EXT_NORM_GATE,     LOOM_EXT_ROPE_FREQS,
    LOOM_EXT_SUM_SQUARES_TOTAL, LOOM_EXT_CE_LOSS_TOTAL, LOOM_EXT_NORM_RESIDUAL, nullptr};

// The list `ids` (NULL-ended) with `id` before its end.
template <size_t N>
constexpr std::array<const char*, N + 1> with_capability(const char* const (&ids)[N],
                                                         const char* id) {
  std::array<const char*, N + 1> out{};
  for (size_t i = 0; i + 1 < N; ++i) out[i] = ids[i];
  out[N - 1] = id;
  out[N] = nullptr;
  return out;
}
template <size_t N>
constexpr std::array<const char*, N + 1> with_capability(const std::array<const char*, N>& ids,
                                                         const char* id) {
  std::array<const char*, N + 1> out{};
  for (size_t i = 0; i + 1 < N; ++i) out[i] = ids[i];
  out[N - 1] = id;
  out[N] = nullptr;
  return out;
}
// And a backend that also lends loom.graph/1 (backend/cpu, backend/cuda): .data() is the list.
inline constexpr auto kOpsGraphCapabilities = with_capability(kOpsCapabilities, LOOM_EXT_GRAPH);
// And one that also takes FP8 (loom.fp8/1: backend/cpu).
inline constexpr auto kOpsFp8Capabilities = with_capability(kOpsGraphCapabilities, LOOM_EXT_FP8);

template <const OpsCalls& K>
struct OpsSlots {
  // Whether a kernel is given (a named function's address is never NULL, which a plain test
  // of K's field warns about once the backend gives one).
  template <class Fn>
  static bool has(Fn* fn) {
    return reinterpret_cast<const void*>(fn) != nullptr;
  }
  // Runs `run` when `a` passes the refusal rule, else answers K.refuse naming `op`.
  template <class Args, class Fn>
  static loom_error* call(loom_backend* be, const char* op, const Args* a, size_t want, Fn&& run) {
    const std::string why = ops_args_refusal(a, want);
    return why.empty() ? run() : K.refuse(be, op, why);
  }
  // The same for a struct with a kind: `have[i]` says whether kind `kinds[i]` has kernels.
  template <class Args, class Fn>
  static loom_error* call_kind(loom_backend* be, const char* op, const Args* a, size_t want,
                               int32_t kind0, bool have0, int32_t kind1, bool have1, Fn&& run) {
    std::string why = ops_args_refusal(a, want);
    if (why.empty() && !((a->kind == kind0 && have0) || (a->kind == kind1 && have1)))
      why = "args of an unknown kind (" + std::to_string(a->kind) + ")";
    return why.empty() ? run() : K.refuse(be, op, why);
  }

  static loom_error* gemm(loom_backend* be, const loom_gemm_args* a) {
    if (const loom_ext* f = has(K.gemm_fp8) && a && a->struct_size >= LOOM_GEMM_ARGS_SIZE_V2
                                ? loom_ext_find(a->ext, LOOM_EXT_FP8)
                                : nullptr) {
      const std::string why = gemm_fp8_refusal(*a, f, K.fp8_scalings);
      if (!why.empty()) return K.refuse(be, "gemm", why);
      return K.gemm_fp8(be, a, reinterpret_cast<const loom_gemm_fp8*>(f));
    }
    const loom_ext* e = K.gemm_epilogue && a && a->struct_size >= LOOM_GEMM_ARGS_SIZE_V2
                            ? loom_ext_find(a->ext, LOOM_EXT_GEMM_EPILOGUE)
                            : nullptr;
    if (e == nullptr)  // no epilogue, or a backend without: the rule refuses a required one
      return call(be, "gemm", a, LOOM_GEMM_ARGS_SIZE_V2, [&] { return K.gemm(be, a); });
    const std::string why = gemm_epilogue_refusal(*a, e, K.epilogue_kinds);
    if (!why.empty()) return K.refuse(be, "gemm", why);
    return K.gemm_epilogue(be, a, reinterpret_cast<const loom_gemm_epilogue*>(e));
  }
  static loom_error* sum_squares(loom_backend* be, const loom_sum_squares_args* a) {
    const loom_ext* e =
        has(K.sum_squares_total) && a && a->struct_size >= LOOM_SUM_SQUARES_ARGS_SIZE_V2
            ? loom_ext_find(a->ext, LOOM_EXT_SUM_SQUARES_TOTAL)
            : nullptr;
    if (e == nullptr)  // none, or a backend without: the rule refuses a required one
      return call(be, "sum_squares", a, LOOM_SUM_SQUARES_ARGS_SIZE_V2,
                  [&] { return K.sum_squares(be, a); });
    const std::string why = sum_squares_total_refusal(*a, e);
    if (!why.empty()) return K.refuse(be, "sum_squares", why);
    return K.sum_squares_total(be, a, reinterpret_cast<const loom_sum_squares_total*>(e)->total);
  }
  static loom_error* softmax_forward(loom_backend* be, const loom_softmax_args* a) {
    return call(be, "softmax_forward", a, LOOM_SOFTMAX_ARGS_SIZE_V2,
                [&] { return K.softmax_forward(be, a); });
  }
  static loom_error* bias_add(loom_backend* be, const loom_bias_add_args* a) {
    return call(be, "bias_add", a, LOOM_BIAS_ADD_ARGS_SIZE_V2,
                [&] { return K.bias_add(be, a->out, a->bias); });
  }
  static loom_error* bias_backward(loom_backend* be, const loom_bias_bwd_args* a) {
    return call(be, "bias_backward", a, LOOM_BIAS_BWD_ARGS_SIZE_V2,
                [&] { return K.bias_backward(be, a->dbias, a->dout); });
  }
  static loom_error* embedding_forward(loom_backend* be, const loom_embedding_fwd_args* a) {
    return call(be, "embedding_forward", a, LOOM_EMBEDDING_FWD_ARGS_SIZE_V2,
                [&] { return K.embedding_forward(be, a->out, a->ids, a->table, a->accumulate); });
  }
  static loom_error* embedding_backward(loom_backend* be, const loom_embedding_bwd_args* a) {
    return call(be, "embedding_backward", a, LOOM_EMBEDDING_BWD_ARGS_SIZE_V2,
                [&] { return K.embedding_backward(be, a->dtable, a->ids, a->dout); });
  }
  // loom.norm-gate/1 on a norm's chain, when the backend gives gated kernels (else NULL, and
  // the rule refuses the required extension as unknown).
  template <class Args, class Kernel>
  static const loom_ext* norm_gate(const Args* a, size_t want, Kernel* k) {
    return has(k) && a && a->struct_size >= want ? loom_ext_find(a->ext, LOOM_EXT_NORM_GATE)
                                                 : nullptr;
  }
  // loom.norm-residual/1 on a norm's chain, when the backend gives its kernels (else NULL,
  // and the rule refuses the required extension as unknown).
  template <class Args, class Kernel>
  static const loom_ext* norm_residual_ext(const Args* a, size_t want, Kernel* k) {
    return has(k) && a && a->struct_size >= want ? loom_ext_find(a->ext, LOOM_EXT_NORM_RESIDUAL)
                                                 : nullptr;
  }
  // Runs kernel k for a norm carrying it (`e`), once its check and the kind pass.
  template <class Args, class Kernel>
  static loom_error* norm_residual(loom_backend* be, const char* op, const Args* a,
                                   const loom_ext* e, Kernel* k, bool backward) {
    std::string why = norm_residual_refusal(a->ext, e, a->inp, backward);
    if (why.empty() && a->kind != LOOM_NORM_LAYER && a->kind != LOOM_NORM_RMS)
      why = "args of an unknown kind (" + std::to_string(a->kind) + ")";
    return why.empty() ? k(be, a, reinterpret_cast<const loom_norm_residual*>(e))
                       : K.refuse(be, op, why);
  }
  static loom_error* norm_forward(loom_backend* be, const loom_norm_fwd_args* a) {
    if (const loom_ext* e =
            norm_residual_ext(a, LOOM_NORM_FWD_ARGS_SIZE_V2, K.norm_residual_forward))
      return norm_residual(be, "norm_forward", a, e, K.norm_residual_forward, false);
    if (const loom_ext* e = norm_gate(a, LOOM_NORM_FWD_ARGS_SIZE_V2, K.rmsnorm_gated_forward)) {
      const std::string why = norm_gate_refusal(a->kind, a->ext, e, a->inp, false);
      if (!why.empty()) return K.refuse(be, "norm_forward", why);
      const auto* g = reinterpret_cast<const loom_norm_gate*>(e);
      return K.rmsnorm_gated_forward(be, a->out, a->rstd, a->inp, g->gate, a->weight, a->eps,
                                     g->group_size);
    }
    return call_kind(be, "norm_forward", a, LOOM_NORM_FWD_ARGS_SIZE_V2, LOOM_NORM_LAYER,
                     K.layernorm_forward != nullptr, LOOM_NORM_RMS, K.rmsnorm_forward != nullptr,
                     [&] {
                       if (a->kind == LOOM_NORM_RMS)
                         return K.rmsnorm_forward(be, a->out, a->rstd, a->inp, a->weight, a->eps);
                       return K.layernorm_forward(be, a->out, a->mean, a->rstd, a->inp, a->weight,
                                                  a->bias, a->eps);
                     });
  }
  static loom_error* norm_backward(loom_backend* be, const loom_norm_bwd_args* a) {
    if (const loom_ext* e =
            norm_residual_ext(a, LOOM_NORM_BWD_ARGS_SIZE_V2, K.norm_residual_backward))
      return norm_residual(be, "norm_backward", a, e, K.norm_residual_backward, true);
    if (const loom_ext* e = norm_gate(a, LOOM_NORM_BWD_ARGS_SIZE_V2, K.rmsnorm_gated_backward)) {
      const std::string why = norm_gate_refusal(a->kind, a->ext, e, a->inp, true);
      if (!why.empty()) return K.refuse(be, "norm_backward", why);
      const auto* g = reinterpret_cast<const loom_norm_gate*>(e);
      return K.rmsnorm_gated_backward(be, a->dinp, g->dgate, a->dweight, a->dout, a->inp, g->gate,
                                      a->weight, a->rstd, g->group_size);
    }
    return call_kind(
        be, "norm_backward", a, LOOM_NORM_BWD_ARGS_SIZE_V2, LOOM_NORM_LAYER,
        K.layernorm_backward != nullptr, LOOM_NORM_RMS, K.rmsnorm_backward != nullptr, [&] {
          if (a->kind == LOOM_NORM_RMS)
            return K.rmsnorm_backward(be, a->dinp, a->dweight, a->dout, a->inp, a->weight, a->rstd);
          return K.layernorm_backward(be, a->dinp, a->dweight, a->dbias, a->dout, a->inp, a->weight,
                                      a->mean, a->rstd);
        });
  }
  // Activations by kind; each kind is implemented exactly when its kernel is given.
  static loom_error* act_forward(loom_backend* be, const loom_act_fwd_args* a) {
    std::string why = ops_args_refusal(a, LOOM_ACT_FWD_ARGS_SIZE_V2);
    auto* k = !why.empty()                       ? nullptr
              : a->kind == LOOM_ACT_GELU_TANH    ? K.gelu_forward
              : a->kind == LOOM_ACT_SWIGLU       ? K.swiglu_forward
              : a->kind == LOOM_ACT_GELU         ? K.gelu_erf_forward
              : a->kind == LOOM_ACT_TANH         ? K.tanh_forward
              : a->kind == LOOM_ACT_SQUARED_RELU ? K.squared_relu_forward
                                                 : nullptr;
    if (why.empty() && k == nullptr)
      why = "args of an unknown kind (" + std::to_string(a->kind) + ")";
    return why.empty() ? k(be, a->out, a->inp) : K.refuse(be, "act_forward", why);
  }
  static loom_error* act_backward(loom_backend* be, const loom_act_bwd_args* a) {
    std::string why = ops_args_refusal(a, LOOM_ACT_BWD_ARGS_SIZE_V2);
    auto* k = !why.empty()                       ? nullptr
              : a->kind == LOOM_ACT_GELU_TANH    ? K.gelu_backward
              : a->kind == LOOM_ACT_SWIGLU       ? K.swiglu_backward
              : a->kind == LOOM_ACT_GELU         ? K.gelu_erf_backward
              : a->kind == LOOM_ACT_TANH         ? K.tanh_backward
              : a->kind == LOOM_ACT_SQUARED_RELU ? K.squared_relu_backward
                                                 : nullptr;
    if (why.empty() && k == nullptr)
      why = "args of an unknown kind (" + std::to_string(a->kind) + ")";
    return why.empty() ? k(be, a->dinp, a->inp, a->dout) : K.refuse(be, "act_backward", why);
  }
  static loom_error* softmax_backward(loom_backend* be, const loom_softmax_bwd_args* a) {
    return call(be, "softmax_backward", a, LOOM_SOFTMAX_BWD_ARGS_SIZE_V2,
                [&] { return K.softmax_backward(be, a->ds, a->p, a->dp, a->scale); });
  }
  // A rope with loom.rope-freqs/1 when the backend gives its kernel (else the rule refuses
  // the required extension as unknown): its table must hold one frequency per pair.
  static loom_error* rope(loom_backend* be, const loom_rope_args* a, bool backward) {
    const char* op = backward ? "rope_backward" : "rope_forward";
    const loom_ext* e = has(K.rope_freqs) && a && a->struct_size >= LOOM_ROPE_ARGS_SIZE_V2
                            ? loom_ext_find(a->ext, LOOM_EXT_ROPE_FREQS)
                            : nullptr;
    if (e == nullptr)
      return call(be, op, a, LOOM_ROPE_ARGS_SIZE_V2, [&] {
        return backward ? K.rope_backward(be, a->x, a->pos_offset, a->theta)
                        : K.rope_forward(be, a->x, a->pos_offset, a->theta);
      });
    const auto* f = reinterpret_cast<const loom_rope_freqs*>(e);
    std::string why = other_required_refusal(a->ext, e);
    if (why.empty() && (e->struct_size < LOOM_ROPE_FREQS_SIZE_V1 || !f->inv_freq || !a->x ||
                        a->x->ndim != 4 || 2 * f->num != a->x->shape[3]))
      why = std::string(LOOM_EXT_ROPE_FREQS) + " needs one frequency per pair of x's last " +
            "dimension (num = D/2) and its inv_freq table";
    if (!why.empty()) return K.refuse(be, op, why);
    return K.rope_freqs(be, a->x, a->pos_offset, f->inv_freq, f->scale, backward ? 1 : 0);
  }
  static loom_error* rope_forward(loom_backend* be, const loom_rope_args* a) {
    return rope(be, a, false);
  }
  static loom_error* rope_backward(loom_backend* be, const loom_rope_args* a) {
    return rope(be, a, true);
  }
  static loom_error* softmax_cross_entropy(loom_backend* be, const loom_cross_entropy_args* a) {
    const loom_ext* e =
        has(K.softmax_cross_entropy_total) && a && a->struct_size >= LOOM_CROSS_ENTROPY_ARGS_SIZE_V2
            ? loom_ext_find(a->ext, LOOM_EXT_CE_LOSS_TOTAL)
            : nullptr;
    if (e == nullptr)  // none, or a backend without: the rule refuses a required one
      return call(be, "softmax_cross_entropy", a, LOOM_CROSS_ENTROPY_ARGS_SIZE_V2, [&] {
        return K.softmax_cross_entropy(be, a->losses, a->dlogits, a->logits, a->targets, a->dloss);
      });
    const std::string why = ce_loss_total_refusal(*a, e);
    if (!why.empty()) return K.refuse(be, "softmax_cross_entropy", why);
    return K.softmax_cross_entropy_total(be, a->losses, a->dlogits, a->logits, a->targets, a->dloss,
                                         reinterpret_cast<const loom_ce_loss_total*>(e)->total);
  }
  static loom_error* vocab_ce_stats(loom_backend* be, const loom_vocab_ce_stats_args* a) {
    return call(be, "vocab_ce_stats", a, LOOM_VOCAB_CE_STATS_ARGS_SIZE_V2, [&] {
      return K.vocab_ce_stats(be, a->stats, a->logits, a->targets, a->vocab_start);
    });
  }
  static loom_error* vocab_ce_backward(loom_backend* be, const loom_vocab_ce_bwd_args* a) {
    return call(be, "vocab_ce_backward", a, LOOM_VOCAB_CE_BWD_ARGS_SIZE_V2, [&] {
      return K.vocab_ce_backward(be, a->dlogits, a->logits, a->targets, a->vocab_start, a->lse,
                                 a->dloss);
    });
  }

  static loom_error* grouped_gemm(loom_backend* be, const loom_grouped_gemm_args* a) {
    std::string why = ops_args_refusal(a, LOOM_GROUPED_GEMM_ARGS_SIZE_V2_5);
    if (why.empty()) why = grouped_gemm_refusal(*a);
    if (!why.empty()) return K.refuse(be, "grouped_gemm", why);
    if (K.grouped_gemm) return K.grouped_gemm(be, a);
    for (const loom_gemm_args& g : grouped_gemm_calls(*a))
      if (loom_error* e = K.gemm(be, &g)) return e;
    return nullptr;
  }

  static loom_error* copy_strided(loom_backend* be, const loom_copy_strided_args* a) {
    std::string why = ops_args_refusal(a, LOOM_COPY_STRIDED_ARGS_SIZE_V2_21);
    if (why.empty()) why = copy_strided_refusal(*a);
    if (!why.empty()) return K.refuse(be, "copy_strided", why);
    if (a->rows == 0 || a->cols == 0) return nullptr;
    if (has(K.copy_strided))
      return K.copy_strided(be, a->dst, a->ld_dst, a->offset_dst, a->src, a->ld_src, a->offset_src,
                            a->rows, a->cols);
    for (int64_t r = 0; r < a->rows; ++r) {
      View d(a->dst, {a->cols}, a->offset_dst + r * a->ld_dst);
      View s(a->src, {a->cols}, a->offset_src + r * a->ld_src);
      if (loom_error* e = K.copy(be, d.get(), s)) return e;
    }
    return nullptr;
  }

  // ABI 2.22's Mamba-2 ops: the args rule, a kernel given, the shapes (`refusal`, from
  // loom/cpp/ssm_args.hpp), then `run`.
  template <class Args, class Kernel, class Fn>
  static loom_error* call_ssm(loom_backend* be, const char* op, const Args* a, size_t want,
                              Kernel* k, std::string (*refusal)(const Args&), Fn&& run) {
    std::string why = ops_args_refusal(a, want);
    if (why.empty() && !has(k))
      why = "no kernel: this backend does not implement ABI 2.22's Mamba-2 ops";
    if (why.empty()) why = refusal(*a);
    return why.empty() ? run() : K.refuse(be, op, why);
  }
  static loom_error* ssm_conv_forward(loom_backend* be, const loom_ssm_conv_args* a) {
    return call_ssm(be, "ssm_conv_forward", a, LOOM_SSM_CONV_ARGS_SIZE_V2_22, K.ssm_conv_forward,
                    ssm_conv_refusal, [&] {
                      return K.ssm_conv_forward(be, a->out, a->x, a->weight, a->bias, a->silu,
                                                a->state);
                    });
  }
  static loom_error* ssm_conv_backward(loom_backend* be, const loom_ssm_conv_bwd_args* a) {
    return call_ssm(be, "ssm_conv_backward", a, LOOM_SSM_CONV_BWD_ARGS_SIZE_V2_22,
                    K.ssm_conv_backward, ssm_conv_bwd_refusal, [&] {
                      return K.ssm_conv_backward(be, a->dx, a->dweight, a->dbias, a->dout, a->x,
                                                 a->weight, a->bias, a->silu);
                    });
  }
  static loom_error* ssm_scan_forward(loom_backend* be, const loom_ssm_scan_args* a) {
    return call_ssm(be, "ssm_scan_forward", a, LOOM_SSM_SCAN_ARGS_SIZE_V2_22, K.ssm_scan_forward,
                    ssm_scan_refusal, [&] {
                      return K.ssm_scan_forward(be, a->y, a->x, a->dt, a->A_log, a->B, a->C, a->D,
                                                a->dt_bias, a->chunk, a->chunk_states, a->state);
                    });
  }
  static loom_error* ssm_scan_backward(loom_backend* be, const loom_ssm_scan_bwd_args* a) {
    return call_ssm(be, "ssm_scan_backward", a, LOOM_SSM_SCAN_BWD_ARGS_SIZE_V2_22,
                    K.ssm_scan_backward, ssm_scan_bwd_refusal, [&] {
                      return K.ssm_scan_backward(be, a->dx, a->ddt, a->dA_log, a->dB, a->dC, a->dD,
                                                 a->ddt_bias, a->dy, a->x, a->dt, a->A_log, a->B,
                                                 a->C, a->D, a->dt_bias, a->chunk, a->chunk_states);
                    });
  }

  // The whole loom_ops table.
  static constexpr loom_ops ops() {
    return loom_ops{LOOM_OPS_SIZE_V2_22,
                    gemm,
                    bias_add,
                    bias_backward,
                    K.fill,
                    K.copy,
                    K.add,
                    K.axpby,
                    sum_squares,
                    embedding_forward,
                    embedding_backward,
                    norm_forward,
                    norm_backward,
                    act_forward,
                    act_backward,
                    softmax_forward,
                    softmax_backward,
                    rope_forward,
                    rope_backward,
                    softmax_cross_entropy,
                    vocab_ce_stats,
                    vocab_ce_backward,
                    grouped_gemm,
                    copy_strided,
                    ssm_conv_forward,
                    ssm_conv_backward,
                    ssm_scan_forward,
                    ssm_scan_backward};
  }
};

}  // namespace loom
