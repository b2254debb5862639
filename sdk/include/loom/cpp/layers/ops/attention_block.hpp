// Loom layer library (loom/cpp/layers/decoder/decoder.hpp has the overview): the attention block
// (fused qkv, RoPE, the attention plugin, output projection).
#pragma once

#include <memory>
#include <string>

#include "loom/cpp/layers/core/acts.hpp"
#include "loom/cpp/layers/core/params.hpp"
#include "loom/cpp/layers/ops/norm.hpp"
#include "loom/cpp/layers/ops/rope.hpp"

namespace loom::layers {

// attention_block.cpp: one call of the run's attention plugin, scaled by 1/sqrt(D): q, out
// (B,T,Hq,D), k, v (B,S,Hkv,D), lse (B,Hq,T) f32 or NULL (generation); ext: the masks.
void attend(const Ctx& c, const DLTensor* q, const DLTensor* k, const DLTensor* v, DLTensor* out,
            DLTensor* lse, bool causal, const loom_ext* ext);
// Its backward: dq, dk, dv (=) from dout (B,T,Hq,D).
void attend_backward(const Ctx& c, const DLTensor* dout, const DLTensor* q, const DLTensor* k,
                     const DLTensor* v, const DLTensor* out, const DLTensor* lse, DLTensor* dq,
                     DLTensor* dk, DLTensor* dv, bool causal, const loom_ext* ext);

struct MlaProjections;  // mla.hpp

struct AttentionBlock {
  loom::tp::ColumnParallelLinear qkv;  // parts q, k, v: this rank's heads
  loom::tp::RowParallelLinear o;
  int64_t n_head = 0, n_kv_head = 0, head_dim = 0;  // local heads
  bool rope = false;
  bool causal = true;  // false: bidirectional (BERT)
  Rope rotary;         // its frequencies (theta's, or a long-context scaling's)
  // Sliding window, asked of the attention plugin as a required extension (0 = none).
  loom_attention_window window{};
  // QK-norm (Qwen3): each head's q and k normalised over D before RoPE.
  bool qk_norm = false;
  Norm q_norm, k_norm;
  // Multi-head latent attention (mla.hpp) in place of c_attn, or NULL.
  std::shared_ptr<const MlaProjections> mla;

  static AttentionBlock make(const Options& o, ParamStore& ps, const std::string& prefix);
  // y(Nl,C) = attention block of x(Nl,C) (the ln_1 output); saves q, k, v, att, lse in a.
  // With a cache, the new k/v are appended at positions [pos0, pos0+T) and the queries
  // attend to the cache (generation; no lse saved).
  void forward(const Ctx& c, const Step& s, const DLTensor* x, LayerActs& a, DLTensor* y,
               LayerCache* cache, int64_t cache_max) const;
  // dx (=) from dy; parameter gradients +=. Uses g.dln as scratch for d(att).
  void backward(const Ctx& c, const Step& s, const DLTensor* x, const LayerActs& a,
                const DLTensor* dy, DLTensor* dx, GradScratch& g) const;

 private:
  // q, k, v from c_attn (with QK-norm and RoPE) into a.q, a.k, a.v.
  void project(const Ctx& c, const Step& s, const DLTensor* x, LayerActs& a) const;
  // The attention core of training: a.att and a.lse from a.q, a.k, a.v (after RoPE), by
  // the attention plugin, or round the context group. Backward calls it again when the
  // core is recomputed (LOOM_RECOMPUTE_CORE_ATTN): the same call, so the same bits.
  void core(const Ctx& c, const Step& s, const LayerActs& a) const;
  // Multi-head latent attention's input (gathered under sequence parallelism) and its
  // projections' backward, dx this rank's rows.
  const DLTensor* mla_input(const Ctx& c, const DLTensor* x, const LayerActs& a, int64_t N) const;
  void mla_backward(const Ctx& c, const Step& s, const DLTensor* x, const LayerActs& a,
                    DLTensor* dq, const DLTensor* dk, const DLTensor* dv, DLTensor* dx) const;
};

}  // namespace loom::layers
