// Loom SDK C++ helpers for attention plugins: the shape checks of attention.h's contract,
// written once. q (B,T,Hq,D); k and v (B,S,Hkv,D) with Hq a multiple of Hkv; out (and dout,
// dq) like q; dk and dv like k; T <= S. Messages start with the plugin's name ("attention/
// flash-cpu: k and v shapes differ"). Device, dtype and layout rules differ between plugins,
// so each checks those itself.
#pragma once

#include <string>

#include "loom/attention.h"
#include "loom/cpp/plugin.hpp"
#include "loom/tensor.h"

namespace loom {

struct AttentionDims {
  int64_t B = 0, T = 0, S = 0, Hq = 0, Hkv = 0, D = 0;
  int64_t G = 0;  // query heads per kv head (Hq / Hkv)
};

// q, k, v and `out` (the forward's out, or the backward's dout: `out_name` says which).
inline AttentionDims attention_dims(const std::string& who, const DLTensor* q, const DLTensor* k,
                                    const DLTensor* v, const DLTensor* out,
                                    const char* out_name = "out") {
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
  require(d.T <= d.S, w + "more queries than keys (T > S)");
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

// The sliding window the args' ext chain asks for (0: none), for a plugin that implements
// LOOM_EXT_ATTENTION_WINDOW (and lists it in its capabilities). Any other required
// extension is refused, naming it. A plugin without windows calls
// require_known_exts(args.ext, {}, who) instead.
inline int64_t attention_window(const std::string& who, const loom_ext* ext, int causal) {
  require_known_exts(ext, {LOOM_EXT_ATTENTION_WINDOW}, who);
  const loom_ext* e = loom_ext_find(ext, LOOM_EXT_ATTENTION_WINDOW);
  if (e == nullptr) return 0;
  require(e->struct_size >= LOOM_ATTENTION_WINDOW_SIZE_V1,
          who + ": the " LOOM_EXT_ATTENTION_WINDOW " extension is smaller than its version 1");
  const int64_t w = reinterpret_cast<const loom_attention_window*>(e)->window;
  require(w >= 1, who + ": window = " + std::to_string(w) + ", expected >= 1");
  require(causal != 0, who + ": a sliding window needs causal attention");
  return w;
}

}  // namespace loom
