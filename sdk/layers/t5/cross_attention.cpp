// Loom layer library, T5's cross-attention: the decoder's queries attend to the encoder output's
// keys and values, within the same batch row and only to that row's real encoder tokens.
//
// Training hands the attention plugin one call over the whole micro-batch: q (B,K,Hq,D) and
// k, v (B,T,Hkv,D), T != K and not causal, the rows' lengths as variable-length sequences
// (loom.attention-seqlens/1): row b is K queries at query row b*K and enc_len[b] keys at key
// row b*T. Generation keeps each slot's keys and values in a cache row and attends one
// sequence at a time over compact views, as the self-attention's cache does.
//
// Parameters (this rank's heads under tensor parallelism): xattn.q (Hq*D, C) and xattn.kv
// ([k; v] rows, 2*Hkv*D, C) column-parallel, xattn.c_proj (C, Hq*D) row-parallel.
#include <cmath>

#include "loom/cpp/layers/ops/linear.hpp"
#include "loom/cpp/layers/t5/t5.hpp"

namespace loom::layers {

void CrossActs::ensure(const Ctx& c, const Options& o, int64_t n_dec, int64_t n_enc) {
  if (n_dec <= nd && n_enc <= ne) return;
  const int64_t C = o.n_embd;
  const DLDataType st = c.stat_dtype();
  ln = c.alloc({n_dec, C});
  mean = c.alloc(st, {n_dec});
  rstd = c.alloc(st, {n_dec});
  q = c.alloc({n_dec, o.q_dim()});
  att = c.alloc({n_dec, o.q_dim()});
  lse = c.alloc(loom_f32(), {n_dec * o.hq()});
  k = c.alloc({n_enc, o.kv_dim()});
  v = c.alloc({n_enc, o.kv_dim()});
  res = c.alloc({n_dec, C});
  nd = n_dec;
  ne = n_enc;
}

CrossAttention CrossAttention::make(const Options& o, ParamStore& ps, const std::string& prefix) {
  CrossAttention a;
  a.n_head = o.hq();
  a.n_kv_head = o.hkv();
  a.head_dim = o.head_dim;
  a.q = make_linear(ps.at(prefix + ".q.weight"), &ps.at(prefix + ".q.bias"), 0, o.q_dim());
  Param& kv = ps.at(prefix + ".kv.weight");
  Param* kvb = &ps.at(prefix + ".kv.bias");
  a.k = make_linear(kv, kvb, 0, o.kv_dim());
  a.v = make_linear(kv, kvb, o.kv_dim(), o.kv_dim());
  a.o.lin =
      make_linear(ps.at(prefix + ".c_proj.weight"), &ps.at(prefix + ".c_proj.bias"), 0, o.n_embd);
  return a;
}

void CrossAttention::project_memory(const Ctx& c, const DLTensor* mem, int64_t ne, DLTensor* k,
                                    DLTensor* v) const {
  this->k.forward(c.be, k, mem, ne);
  this->v.forward(c.be, v, mem, ne);
}

namespace {

// The rows' lengths as the plugin's sequences: K queries each, back to back; enc_len[b] keys
// at key row b*T.
struct CrossSeqlens {
  std::vector<int32_t> cu_q, cu_k, at_k;
  loom_attention_seqlens ext{};
  explicit CrossSeqlens(const CrossStep& s) {
    cu_q.push_back(0);
    cu_k.push_back(0);
    for (int64_t b = 0; b < s.B; ++b) {
      cu_q.push_back((int32_t)((b + 1) * s.K));
      cu_k.push_back(cu_k.back() + s.enc_len[b]);
      at_k.push_back((int32_t)(b * s.T));
    }
    at_k.push_back((int32_t)(s.B * s.T));
    ext.base = {sizeof(loom_attention_seqlens), LOOM_EXT_ATTENTION_SEQLENS, LOOM_EXT_REQUIRED,
                nullptr};
    ext.num_seqs = s.B;
    ext.cu_seqlens_q = cu_q.data();
    ext.cu_seqlens_k = cu_k.data();
    ext.cu_seqlens_k_padded = at_k.data();
  }
};

}  // namespace

void CrossAttention::forward(const Ctx& c, const CrossStep& s, const DLTensor* x, const DLTensor* k,
                             const DLTensor* v, CrossActs& a, DLTensor* y, bool save_lse) const {
  const int64_t B = s.B, K = s.K, T = s.T, Nd = B * K, D = head_dim, Hq = n_head;
  const int64_t Hkv = n_kv_head, C = o.lin.out;
  View qv = view(a.q, {B, K, Hq, D}), out = view(a.att, {B, K, Hq, D});
  q.forward(c.be, qv.get(), x, Nd);
  if (!s.rows) {
    CrossSeqlens seq(s);
    View kv = view(k, {B, T, Hkv, D}), vv = view(v, {B, T, Hkv, D});
    View lse = view(a.lse, {B, Hq, K});
    attend(c, qv, kv, vv, out, save_lse ? lse.get() : nullptr, false, &seq.ext.base);
  } else {  // generation: slot rows[b]'s first enc_len[b] cached keys
    const int64_t kvrow = Hkv * D;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t S = s.enc_len[b], row = s.rows[b] * T * kvrow;
      View qb = view(a.q, {1, K, Hq, D}, b * K * Hq * D);
      View kb = view(k, {1, S, Hkv, D}, row), vb = view(v, {1, S, Hkv, D}, row);
      View ob = view(a.att, {1, K, Hq, D}, b * K * Hq * D);
      attend(c, qb, kb, vb, ob, nullptr, false, nullptr);
    }
  }
  View yv = view(y, {Nd, C});
  o.forward(c.be, c.tp, out, Nd, nullptr, yv.get());
}

void CrossAttention::backward(const Ctx& c, const CrossStep& s, const DLTensor* x,
                              const DLTensor* mem, const CrossActs& a, const DLTensor* dy,
                              DLTensor* dx, DLTensor* dmem, GradScratch& g) const {
  const int64_t B = s.B, K = s.K, T = s.T, Nd = B * K, Ne = B * T, D = head_dim;
  const int64_t Hq = n_head, Hkv = n_kv_head;
  View datt = view(g.dln, {B, K, Hq, D});
  o.backward(c.be, c.tp, dy, nullptr, a.att, Nd, datt);
  CrossSeqlens seq(s);
  View qv = view(a.q, {B, K, Hq, D}), out = view(a.att, {B, K, Hq, D});
  View kv = view(a.k, {B, T, Hkv, D}), vv = view(a.v, {B, T, Hkv, D});
  View lse = view(a.lse, {B, Hq, K});
  View dq = view(g.dq, {B, K, Hq, D}), dk = view(g.dk, {B, T, Hkv, D});
  View dv = view(g.dv, {B, T, Hkv, D});
  attend_backward(c, datt, qv, kv, vv, out, lse, dq, dk, dv, false, &seq.ext.base);
  // d(att) is consumed: dx may reuse its buffer. The query path's dx is this rank's heads'
  // part: summed over the tensor group here; d(mem) is summed once by the caller.
  View dq2 = view(g.dq, {Nd, n_head * D}), dk2 = view(g.dk, {Ne, Hkv * D});
  View dv2 = view(g.dv, {Ne, Hkv * D});
  q.backward(c.be, dx, false, dq2, x, Nd);
  loom::tp::CopyToTensorRegion::backward(c.tp, dx);
  k.backward(c.be, dmem, true, dk2, mem, Ne);
  v.backward(c.be, dmem, true, dv2, mem, Ne);
}

}  // namespace loom::layers
