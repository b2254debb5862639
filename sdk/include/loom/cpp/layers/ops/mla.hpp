// Loom layer library (loom/cpp/layers/decoder/decoder.hpp has the overview): DeepSeek's
// multi-head latent attention, the projections around the attention core (mla.cpp).
// AttentionBlock runs the core, the KV cache and c_proj as for any attention; these make its
// q, k, v and take their gradients back.
//
//   cq = norm(x W_qa^T)                     q_a (qr, C), q_a_norm      (q_lora_rank > 0)
//   q  = cq W_qb^T  or  x W_q^T             q_b (H*dq, qr) / q (H*dq, C), dq = dn + dr
//   [c_in | k_pe] = x W_kva^T               kv_a (r + dr, C)
//   c  = norm(c_in)                         kv_a_norm (r)
//   [k_nope | v] per head = c W_kvb^T       kv_b (H*(dn + dv), r)
//   q_h = [q_nope_h | rope(q_pe_h)], k_h = [k_nope_h | rope(k_pe)]    (k_pe shared by heads)
//   v_h padded with zeros to dq: every attention plugin takes one head size, and the padded
//   columns of the output are zero; c_proj reads the first dv of each head (LayerActs::mla_o).
// The attention is scaled by 1/sqrt(dq), as DeepSeek's softmax_scale.
//
// Tensor parallelism: q_b (or q), kv_b and c_proj split by heads; q_a, kv_a and the norms
// whole on every rank, fed the same input. The column-parallel up-projections' input
// gradients (d cq, d c, and d k_pe summed over this rank's heads) are partial per rank and are
// summed over the tensor group before the norms' and down-projections' backward, so their
// weight gradients and dx come out whole on every rank, as Megatron's MLASelfAttention has it.
// Sequence parallelism is refused (options.cpp). Generation keeps the compressed cache (the
// latent and the rotated key part per position, DeepSeek's) and rebuilds k and v from it.
#pragma once

#include <string>

#include "loom/cpp/layers/core/acts.hpp"
#include "loom/cpp/layers/core/params.hpp"
#include "loom/cpp/layers/ops/linear.hpp"
#include "loom/cpp/layers/ops/norm.hpp"
#include "loom/cpp/layers/ops/rope.hpp"

namespace loom::layers {

// The sizes on this rank: H local heads.
struct MlaDims {
  int64_t H = 0, dn = 0, dr = 0, dv = 0, r = 0, qr = 0;
  int64_t dq() const { return dn + dr; }
};

// Scratch every layer shares (Ctx::mla, DecoderModel's), grown to the rows asked: the
// up-projection's output and its gradient (N, H*(dn+dv)), the rotated parts (N, H*dr) and
// (N, dr), the latents' gradients, c_proj's compact input gradient (N, H*dv).
struct MlaScratch {
  Tensor kv, pe, kpe, dkpe, dc, dc_in, dckv, dcq, dcq_in, dout;
  int64_t rows = 0;
  void ensure(const Ctx& c, const MlaDims& d, int64_t n);
  // Generation: one cache row's keys and values rebuilt from its latents, (S, H, dq) each,
  // and the latents compact (S, r), for up to cache_rows positions.
  Tensor cache_k, cache_v, cache_lat, cache_kv;
  int64_t cache_rows = 0;
  void ensure_cache(const Ctx& c, const MlaDims& d, int64_t n);
};

struct MlaProjections {
  MlaDims d;
  Rope rotary;                  // the rotated part's frequencies
  double query_scale = 1.0;     // YaRN's mscale^2 on the softmax, applied to the queries
  Linear q_a, q_b, kv_a, kv_b;  // q_b: q_b, or q without a query latent
  Norm q_a_norm, kv_a_norm;

  static MlaProjections make(const Options& o, ParamStore& ps, const std::string& prefix);
  // a.q, a.k, a.v (B,T,H,dq) from x (N,C), ready for the attention core; keeps the latents.
  void forward(const Ctx& c, const Step& s, const DLTensor* x, LayerActs& a) const;
  // From dq, dk, dv (B,T,H,dq, as the attention core's backward leaves them; dq is reused):
  // the parameters' gradients +=, dx (N,C) =.
  void backward(const Ctx& c, const Step& s, const DLTensor* x, const LayerActs& a, DLTensor* dq,
                const DLTensor* dk, const DLTensor* dv, DLTensor* dx) const;
  // Generation with the compressed cache: each position keeps its normalised key/value latent
  // and its rotated key part, (r + dr) values, instead of every head's k and v. cache_store
  // writes sequence b's T new positions at [p, p+T) of the cache row starting at element
  // `at` (after forward made them); cache_keys rebuilds that row's S positions' k and v
  // (1,S,H,dq) through kv_b, into the shared scratch.
  void cache_store(const Ctx& c, const LayerActs& a, DLTensor* cache, int64_t at, int64_t b,
                   int64_t T, int64_t p) const;
  void cache_keys(const Ctx& c, const DLTensor* cache, int64_t at, int64_t S, View& k,
                  View& v) const;
  // The attention output (B,T,H,dq) to c_proj's input (N, H*dv), and back (zeros in the
  // padding).
  void compact_output(const Ctx& c, int64_t N, const DLTensor* att, DLTensor* out) const;
  void expand_output_grad(const Ctx& c, int64_t N, const DLTensor* dout, DLTensor* datt) const;

 private:
  // k (rows, H, dq): each head's rotary slot from `rows` rows of src's rotated key part, the
  // part every head shares (row i at src's element at + i * ld).
  void rope_key_into_heads(const Ctx& c, DLTensor* k, const DLTensor* src, int64_t ld, int64_t at,
                           int64_t rows) const;
};

}  // namespace loom::layers
