// Loom layer library (loom/cpp/layers/decoder/decoder.hpp has the overview): what one layer saves
// for its backward, the shared gradient scratch, the step shape and the KV cache.
#pragma once

#include <memory>

#include "loom/attention.h"
#include "loom/cpp/layers/core/options.hpp"

namespace loom::layers {

// Activations of one layer, saved by forward for backward. Capacity `rows` tokens; with
// sequence parallelism the norms and residuals hold this rank's N/tp rows, and ln1_full,
// ln2_full, the gathered (N,C) inputs of the column-parallel projections, alias one buffer
// of the model's that backward gathers again. Heads and MLP columns are this rank's (local
// extents).
struct MoeActs;

struct LayerActs {
  Tensor ln1, ln1_mean, ln1_rstd;  // (Nl,C), (Nl), (Nl)
  Tensor ln1_full, ln2_full;       // (N,C), sequence parallelism only: shared, see above
  Tensor q, k, v;                  // (B,T,Hq,D), (B,T,Hkv,D) x2, after RoPE
  // QK-norm only: q and k as projected (the norms' inputs), and their statistics per head
  Tensor q_in, k_in;                          // (B,T,Hq,D), (B,T,Hkv,D)
  Tensor qn_mean, qn_rstd, kn_mean, kn_rstd;  // (N*Hq), (N*Hkv)
  // Multi-head latent attention only (ops/mla.hpp): the query latent before and after its
  // norm (N, q_lora_rank) and its statistics; the down-projection (N, kv_lora_rank + rope
  // dim), its latent before and after the norm (N, kv_lora_rank) and statistics; the values'
  // compact (N, H*v_head_dim) attention output, c_proj's input.
  Tensor mla_cq_in, mla_cq, mla_cq_mean, mla_cq_rstd;
  Tensor mla_ckv, mla_c_in, mla_c, mla_c_mean, mla_c_rstd;
  Tensor mla_o;
  // A Mamba-2 layer (ssm/mamba.hpp), this rank's heads: in_proj's z (N, di), x|B|C (N, cd)
  // and dt (N, H); the convolution's output (N, cd) and its x, B, C apart (N, di), (N, G*S)
  // x2; the scan's output y (N, di), the gated norm's output (N, di) and rstd (N*G); the
  // scan's state before each chunk (B, chunks, H, P, S), grown by the mixer to the step's
  // shape.
  Tensor m_z, m_xbc_in, m_dt, m_xbc, m_x, m_B, m_C, m_y, m_yn, m_rstd, m_states;
  Tensor att, lse;  // (B,T,Hq,D) attention output, (B,Hq,T) f32
  Tensor res2;      // (N,C) residual after the attention half
  Tensor ln2, ln2_mean, ln2_rstd;
  Tensor h, a;  // (N, fc_out) MLP pre-activation, (N, F) post-activation
  // A MoE layer's routing and expert rows (moe.hpp), and its balancing and z losses of the
  // last forward.
  std::shared_ptr<MoeActs> moe;
  double moe_aux = 0.0, moe_z = 0.0;
  int64_t rows = 0;
  // Selective recompute (LOOM_RECOMPUTE_* module bits): the modules' tensors (att and lse,
  // a, ln1 and ln2) alias one scratch set that every layer shares, and backward refills
  // them from what the layer keeps before it reads them.
  uint32_t recompute = 0;
  // Allocates for `rows` tokens; the `modules` tensors borrowed from `shared` (allocated).
  // modules_only (shared NULL): the shared set itself, only the modules' tensors.
  void ensure(const Ctx& c, const Options& o, int64_t rows, uint32_t modules = 0,
              const LayerActs* shared = nullptr, bool modules_only = false);
};

// Gradient scratch shared by all layers during backward.
struct GradScratch {
  Tensor dres;  // (Nl,C) gradient of the residual stream, flows down the stack
  Tensor dtmp;  // (N,C) a norm's input gradient, before it joins dres
  Tensor dln;   // (N,C) gradient of a norm's output; also the attention output's
  Tensor dq, dk, dv;
  Tensor dq_in, dk_in;  // QK-norm only: the gradients of the norms' inputs
  Tensor dh, da;        // (N, fc_out), (N, F)
  // A Mamba-2 layer's: the gradients of in_proj's three outputs, of the convolution's output,
  // of its x, B, C apart, of the scan's output and of the norm's.
  Tensor m_dz, m_dxbc_in, m_ddt, m_dxbc, m_dx, m_dB, m_dC, m_dy, m_dyn;
  int64_t rows = 0;
  void ensure(const Ctx& c, const Options& o, int64_t rows);
};

// An additive bias on one attention call's scores (T5's relative position bias), passed to
// the attention plugin as loom.attention-bias/1: (Hq, T, S) over this rank's heads, and its
// gradient, which the backwards of every layer sharing it add to.
struct AttentionBias {
  const DLTensor* bias = nullptr;
  DLTensor* dbias = nullptr;
};

// The shape of one forward call: B sequences of T new tokens at positions [pos0, pos0 + T).
// Generation with continuous batching gives each sequence its own start (pos[b]) and KV
// cache row (rows[b]); NULL means pos0 and row b.
struct Step {
  int64_t B = 0, T = 0, pos0 = 0;
  const int64_t* pos = nullptr;   // (B) host
  const int64_t* rows = nullptr;  // (B) host
  // Packed documents (the micro-batch's positions array), back to back over the B*T
  // tokens: attention stays within each, and RoPE restarts at each. NULL: whole rows.
  const loom_attention_seqlens* docs = nullptr;
  // A bias on the scores: one for the call, or with `rows` (generation) one per sequence.
  const AttentionBias* bias = nullptr;
  // What the objective's gradient carries per unit of a MoE layer's losses (the host's loss
  // scale times the terms' weight); 0 outside training.
  double moe_grad_scale = 0.0;
  int64_t N() const { return B * T; }
  int64_t start(int64_t b) const { return pos ? pos[b] : pos0; }
  int64_t row(int64_t b) const { return rows ? rows[b] : b; }
};

// KV cache of one layer for generation: (B, max_len, Hkv, D) each; with multi-head latent
// attention k alone, (B, max_len, kv_lora_rank + rope dim): the compressed cache (mla.hpp).
struct LayerCache {
  Tensor k, v;
};

}  // namespace loom::layers
