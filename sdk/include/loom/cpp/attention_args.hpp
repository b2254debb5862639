// Loom SDK C++ helpers for attention plugins: the shape checks of attention.h's contract,
// written once. q (B,T,Hq,D); k and v (B,S,Hkv,D) with Hq a multiple of Hkv; out (and dout,
// dq) like q; dk and dv like k; T <= S. Messages start with the plugin's name ("attention/
// flash-cpu: k and v shapes differ"). Device, dtype and layout rules differ between plugins,
// so each checks those itself. attention_masks reads the masks on the args' ext chain (a
// sliding window, variable-length sequences) into one description every plugin that
// implements them shares.
#pragma once

#include <string>
#include <vector>

#include "loom/attention.h"
#include "loom/cpp/plugin.hpp"
#include "loom/tensor.h"

namespace loom {

struct AttentionDims {
  int64_t B = 0, T = 0, S = 0, Hq = 0, Hkv = 0, D = 0;
  int64_t G = 0;  // query heads per kv head (Hq / Hkv)
};

// q, k, v and `out` (the forward's out, or the backward's dout: `out_name` says which).
// T <= S is required with causal only: cross-attention (not causal) may have T > S.
inline AttentionDims attention_dims(const std::string& who, const DLTensor* q, const DLTensor* k,
                                    const DLTensor* v, const DLTensor* out,
                                    const char* out_name = "out", bool causal = true) {
  const std::string w = who + ": ";
  require(q && k && v && out, w + "q, k, v and " + out_name + " are required");
  require(q->ndim == 4 && k->ndim == 4 && v->ndim == 4 && out->ndim == 4,
          w + "q, k, v, " + out_name + " must be 4-d (B,T,H,D)");
  AttentionDims d;
  d.B = q->shape[0], d.T = q->shape[1], d.S = k->shape[1];
  d.Hq = q->shape[2], d.Hkv = k->shape[2], d.D = q->shape[3];
  for (int i = 0; i < 4; ++i) {
    require(k->shape[i] == v->shape[i], w + "k and v shapes differ");
    require(out->shape[i] == q->shape[i], w + out_name + " shape != q shape");
  }
  require(k->shape[0] == d.B && k->shape[3] == d.D, w + "k/v batch or head dim differs from q");
  require(d.Hkv > 0 && d.Hq % d.Hkv == 0, w + "Hq (" + std::to_string(d.Hq) +
                                              ") must be a multiple of Hkv (" +
                                              std::to_string(d.Hkv) + ")");
  require(!causal || d.T <= d.S, w + "more queries than keys (T > S) with causal attention");
  d.G = d.Hq / d.Hkv;
  return d;
}

// A backward's gradients: dq like q, dk and dv like k.
inline void attention_grads(const std::string& who, const DLTensor* q, const DLTensor* k,
                            const DLTensor* dq, const DLTensor* dk, const DLTensor* dv) {
  require(dq && dk && dv, who + ": dq, dk and dv are required");
  require(dq->ndim == 4 && dk->ndim == 4 && dv->ndim == 4, who + ": dq, dk, dv must be 4-d");
  for (int i = 0; i < 4; ++i)
    require(
        dq->shape[i] == q->shape[i] && dk->shape[i] == k->shape[i] && dv->shape[i] == k->shape[i],
        who + ": gradient shapes must match q (dq) and k (dk, dv)");
}

// The log-sum-exp the forward saves: (B,Hq,T) values.
inline void attention_lse(const std::string& who, const DLTensor* lse, const AttentionDims& d) {
  require(lse != nullptr, who + ": lse is required");
  require(loom_tensor_numel(lse) == d.B * d.Hq * d.T,
          who + ": lse must hold B*Hq*T values (B,Hq,T)");
}

namespace detail {
inline int64_t window_of(const std::string& who, const loom_ext* ext, int causal) {
  const loom_ext* e = loom_ext_find(ext, LOOM_EXT_ATTENTION_WINDOW);
  if (e == nullptr) return 0;
  require(e->struct_size >= LOOM_ATTENTION_WINDOW_SIZE_V1,
          who + ": the " LOOM_EXT_ATTENTION_WINDOW " extension is smaller than its version 1");
  const int64_t w = reinterpret_cast<const loom_attention_window*>(e)->window;
  require(w >= 1, who + ": window = " + std::to_string(w) + ", expected >= 1");
  require(causal != 0, who + ": a sliding window needs causal attention");
  return w;
}
}  // namespace detail

// The sliding window the args' ext chain asks for (0: none), for a plugin that implements
// LOOM_EXT_ATTENTION_WINDOW (and lists it in its capabilities) and no other mask. Any other
// required extension is refused, naming it. A plugin without masks calls
// require_known_exts(args.ext, {}, who) instead.
inline int64_t attention_window(const std::string& who, const loom_ext* ext, int causal) {
  require_known_exts(ext, {LOOM_EXT_ATTENTION_WINDOW}, who);
  return detail::window_of(who, ext, causal);
}

// One sequence of loom.attention-seqlens/1, in the (B,T) and (B,S) layout: batch row b,
// queries [t0, t0 + nq) and keys [s0, s0 + nk) of that row.
struct AttentionSeq {
  int64_t b, t0, nq, s0, nk;
};

struct AttentionMasks {
  int64_t window = 0;              // > 0: sliding window (loom.attention-window/1)
  bool varlen = false;             // the sequences below replace the whole rows
  std::vector<AttentionSeq> seqs;  // loom.attention-seqlens/1, sequences with queries only
  // loom.attention-bias/1 (only for a plugin that asks for it): (Hq, T, S) in q's dtype, and
  // its gradient (f32, f64 for f64 q), which may be NULL
  const DLTensor* bias = nullptr;
  DLTensor* dbias = nullptr;
  // loom.attention-partial/1 (only for a plugin that asks for it): out and lse are a merge
  bool partial = false;
};

namespace detail {
// The bias on the chain, checked against the shapes; `q` gives the dtype.
inline void bias_of(const std::string& who, const loom_ext* ext, const AttentionDims& d,
                    const DLTensor* q, AttentionMasks& m) {
  const loom_ext* e = loom_ext_find(ext, LOOM_EXT_ATTENTION_BIAS);
  if (e == nullptr) return;
  const std::string w = who + ": " LOOM_EXT_ATTENTION_BIAS ": ";
  require(e->struct_size >= LOOM_ATTENTION_BIAS_SIZE_V1, w + "smaller than its version 1");
  const auto& x = *reinterpret_cast<const loom_attention_bias*>(e);
  auto shaped = [&](const DLTensor* t) {
    return t->ndim == 3 && t->shape[0] == d.Hq && t->shape[1] == d.T && t->shape[2] == d.S;
  };
  std::string want("(");  // appended: GCC 12 misreads "lit" + std::string (-Wrestrict)
  want.append(std::to_string(d.Hq)).append(", ").append(std::to_string(d.T));
  want.append(", ").append(std::to_string(d.S)).append(")");
  require(x.bias != nullptr && shaped(x.bias) && loom_dtype_eq(x.bias->dtype, q->dtype),
          w + "bias must be (Hq, T, S) = " + want + " in the dtype of q");
  const DLDataType g = q->dtype.bits == 64 ? loom_f64() : loom_f32();
  require(x.dbias == nullptr || (shaped(x.dbias) && loom_dtype_eq(x.dbias->dtype, g)),
          w + "dbias must be " + want + ", " + (g.bits == 64 ? "f64" : "f32"));
  m.bias = x.bias;
  m.dbias = x.dbias;
}
}  // namespace detail

// Every mask on the args' chain, checked against the shapes, for a plugin that implements
// both LOOM_EXT_ATTENTION_WINDOW and LOOM_EXT_ATTENTION_SEQLENS. Any other required
// extension is refused, naming it.
// `q` (given by a plugin that implements LOOM_EXT_ATTENTION_BIAS too): the bias is read and
// checked into the masks; without it a bias is refused like any unknown extension.
// `partial` (a plugin with merge, ABI 2.7): loom.attention-partial/1 is known and read.
inline AttentionMasks attention_masks(const std::string& who, const loom_ext* ext, int causal,
                                      const AttentionDims& d, const DLTensor* q = nullptr,
                                      bool partial = false) {
  std::vector<const char*> known = {LOOM_EXT_ATTENTION_WINDOW, LOOM_EXT_ATTENTION_SEQLENS};
  if (q) known.push_back(LOOM_EXT_ATTENTION_BIAS);
  if (partial) known.push_back(LOOM_EXT_ATTENTION_PARTIAL);
  require_known_exts(ext, known, who);
  AttentionMasks m;
  m.partial = partial && loom_ext_find(ext, LOOM_EXT_ATTENTION_PARTIAL) != nullptr;
  m.window = detail::window_of(who, ext, causal);
  if (q) detail::bias_of(who, ext, d, q, m);
  const loom_ext* e = loom_ext_find(ext, LOOM_EXT_ATTENTION_SEQLENS);
  if (e == nullptr) {
    require(!causal || d.T <= d.S, who + ": more queries than keys (T > S) with causal attention");
    return m;
  }
  const std::string w = who + ": " LOOM_EXT_ATTENTION_SEQLENS ": ";
  require(e->struct_size >= LOOM_ATTENTION_SEQLENS_SIZE_V1, w + "smaller than its version 1");
  const auto& x = *reinterpret_cast<const loom_attention_seqlens*>(e);
  require(x.num_seqs >= 0 && x.cu_seqlens_q && x.cu_seqlens_k,
          w + "num_seqs must be >= 0 and cu_seqlens_q, cu_seqlens_k set");
  m.varlen = true;
  int64_t q_end = 0, k_end = 0;  // rows before these are taken by earlier sequences
  for (int64_t i = 0; i < x.num_seqs; ++i) {
    const std::string at = w + "sequence " + std::to_string(i) + ": ";
    const int64_t nq = int64_t(x.cu_seqlens_q[i + 1]) - x.cu_seqlens_q[i];
    const int64_t nk = int64_t(x.cu_seqlens_k[i + 1]) - x.cu_seqlens_k[i];
    const int64_t q0 = x.cu_seqlens_q_padded ? x.cu_seqlens_q_padded[i] : x.cu_seqlens_q[i];
    const int64_t k0 = x.cu_seqlens_k_padded ? x.cu_seqlens_k_padded[i] : x.cu_seqlens_k[i];
    require(nq >= 0 && nk >= 0, at + "cumulative lengths decrease");
    require(q0 >= q_end && k0 >= k_end, at + "starts before the previous sequence ends");
    require(q0 + nq <= d.B * d.T && k0 + nk <= d.B * d.S,
            at + "ends past the " + std::to_string(d.B * d.T) + " query or " +
                std::to_string(d.B * d.S) + " key rows");
    q_end = q0 + nq, k_end = k0 + nk;
    if (nq == 0) continue;
    const int64_t b = q0 / d.T;
    require((q0 + nq - 1) / d.T == b, at + "its queries cross a batch row");
    require(nk >= 1 && k0 / d.S == b && (k0 + nk - 1) / d.S == b,
            at + "its keys must be at least one, in the same batch row as its queries");
    require(!causal || nq <= nk, at + std::to_string(nq) + " queries but " + std::to_string(nk) +
                                     " keys with causal attention");
    m.seqs.push_back({b, q0 - b * d.T, nq, k0 - b * d.S, nk});
  }
  return m;
}

}  // namespace loom
