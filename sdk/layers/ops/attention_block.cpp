// Loom layer library, attention block: fused qkv projection (c_attn), optional QK-norm and RoPE,
// the attention core of the run's attention plugin, output projection (c_proj). Packed documents
// (Step::docs) restart RoPE at each document and reach the attention plugin as its variable-length
// sequences (loom.attention-seqlens/1), beside a sliding window when there is one.
//
// c_attn.weight is ((Hq + 2*Hkv)*D, C) with rows [q | k | v]; the three parts are computed
// by three gemms on row slices straight into compact q, k, v buffers, which is the layout
// the attention plugin takes, so nothing is copied. With tensor parallelism the weight is
// this rank's rows of each block (blocks {Hq*D, Hkv*D, Hkv*D}): its heads of q, k and v,
// column-parallel; c_proj is row-parallel over the same heads.
#include "loom/cpp/layers/ops/attention_block.hpp"

#include <cmath>

#include "loom/cpp/layers/ops/context_parallel.hpp"
#include "loom/cpp/layers/ops/linear.hpp"
#include "loom/cpp/layers/ops/mla.hpp"

namespace loom::layers {

namespace {

// The masks of one call: the window (when set) chained before the bias (when set, with its
// gradient when `grad`) and the packed documents.
struct Masks {
  loom_attention_window window{};
  loom_attention_bias bias{};
  const loom_ext* chain(const loom_attention_window& w, const loom_attention_seqlens* docs,
                        const AttentionBias* b, bool grad) {
    const loom_ext* next = docs ? &docs->base : nullptr;
    if (b && b->bias) {
      bias = {{sizeof(loom_attention_bias), LOOM_EXT_ATTENTION_BIAS, LOOM_EXT_REQUIRED, next},
              b->bias,
              grad ? b->dbias : nullptr};
      next = &bias.base;
    }
    if (w.window <= 0) return next;
    window = w;
    window.base.next = next;
    return &window.base;
  }
};

}  // namespace

void attend(const Ctx& c, const DLTensor* q, const DLTensor* k, const DLTensor* v, DLTensor* out,
            DLTensor* lse, bool causal, const loom_ext* ext) {
  loom_attention_fwd_args f{};
  f.struct_size = LOOM_ATTENTION_FWD_ARGS_SIZE_V2;
  f.q = q;
  f.k = k;
  f.v = v;
  f.out = out;
  f.lse = lse;
  f.scale = 1.0 / std::sqrt((double)q->shape[3]);
  f.causal = causal ? 1 : 0;
  f.ext = ext;
  loom::check(c.host, c.attn.api->forward(c.attn.self, &f));
}

void attend_backward(const Ctx& c, const DLTensor* dout, const DLTensor* q, const DLTensor* k,
                     const DLTensor* v, const DLTensor* out, const DLTensor* lse, DLTensor* dq,
                     DLTensor* dk, DLTensor* dv, bool causal, const loom_ext* ext) {
  loom_attention_bwd_args b{};
  b.struct_size = LOOM_ATTENTION_BWD_ARGS_SIZE_V2;
  b.dout = dout;
  b.q = q;
  b.k = k;
  b.v = v;
  b.out = out;
  b.lse = lse;
  b.dq = dq;
  b.dk = dk;
  b.dv = dv;
  b.scale = 1.0 / std::sqrt((double)q->shape[3]);
  b.causal = causal ? 1 : 0;
  b.ext = ext;
  loom::check(c.host, c.attn.api->backward(c.attn.self, &b));
}

AttentionBlock AttentionBlock::make(const Options& o, ParamStore& ps, const std::string& prefix) {
  AttentionBlock a;
  a.n_head = o.hq();
  a.n_kv_head = o.hkv();
  a.head_dim = o.head_dim;
  a.rope = o.rope;
  if (o.rope) a.rotary = Rope::make(o, o.head_dim);
  a.causal = o.causal();
  a.window = {
      {sizeof(loom_attention_window), LOOM_EXT_ATTENTION_WINDOW, LOOM_EXT_REQUIRED, nullptr},
      o.attention_window};
  if (o.mla) {
    a.mla = std::make_shared<const MlaProjections>(MlaProjections::make(o, ps, prefix));
  } else {
    Param& w = ps.at(prefix + ".c_attn.weight");
    Param* b = o.qkv_bias ? &ps.at(prefix + ".c_attn.bias") : nullptr;
    a.qkv.parts = {make_linear(w, b, 0, o.q_dim()), make_linear(w, b, o.q_dim(), o.kv_dim()),
                   make_linear(w, b, o.q_dim() + o.kv_dim(), o.kv_dim())};
  }
  a.o.lin = make_linear(ps.at(prefix + ".c_proj.weight"),
                        o.bias ? &ps.at(prefix + ".c_proj.bias") : nullptr, 0, o.n_embd);
  a.qk_norm = o.qk_norm;
  if (a.qk_norm) {
    a.q_norm = Norm::make(o, ps, prefix + ".q_norm");
    a.k_norm = Norm::make(o, ps, prefix + ".k_norm");
  }
  return a;
}

void AttentionBlock::forward(const Ctx& c, const Step& s, const DLTensor* x, LayerActs& a,
                             DLTensor* y, LayerCache* cache, int64_t cache_max) const {
  const int64_t B = s.B, T = s.T, N = s.N(), D = head_dim, Hq = n_head, Hkv = n_kv_head;
  View out = view(a.att, {B, T, Hq, D});
  const int64_t C = o.lin.out;
  if (mla)
    mla->forward(c, s, mla_input(c, x, a, N), a);
  else
    project(c, s, x, a);
  Masks masks;
  if (!cache) {
    core(c, s, a);
  } else {
    // Generation: append the new k/v at [p, p+T) of each sequence's cache row (p its
    // start), then let its T queries (the last T of S = p+T positions) attend to that row,
    // one sequence at a time so that every operand is a compact view.
    // MLA's cache rows hold each position's latent and rotated key part (cache->k's last
    // dimension), from which k and v are rebuilt for the attention.
    const int64_t kvrow = mla ? cache->k.get()->shape[2] : Hkv * D;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t row = s.row(b) * cache_max * kvrow, p = s.start(b), S = p + T;
      View kb, vb;
      if (mla) {
        mla->cache_store(c, a, cache->k.get(), row, b, T, p);
        mla->cache_keys(c, cache->k.get(), row, S, kb, vb);
      } else {
        View kdst = view(cache->k, {T, Hkv, D}, row + p * kvrow);
        View vdst = view(cache->v, {T, Hkv, D}, row + p * kvrow);
        View ksrc = view(a.k, {T, Hkv, D}, b * T * kvrow);
        View vsrc = view(a.v, {T, Hkv, D}, b * T * kvrow);
        c.call(&loom_ops::copy, kdst.get(), (const DLTensor*)ksrc);
        c.call(&loom_ops::copy, vdst.get(), (const DLTensor*)vsrc);
        kb = view(cache->k, {1, S, Hkv, D}, row);
        vb = view(cache->v, {1, S, Hkv, D}, row);
      }
      View qb = view(a.q, {1, T, Hq, D}, b * T * Hq * D);
      View ob = view(a.att, {1, T, Hq, D}, b * T * Hq * D);
      attend(c, qb, kb, vb, ob, nullptr, causal,
             masks.chain(window, s.docs, s.bias ? &s.bias[b] : nullptr, false));
    }
  }
  View yv = view(y, {c.tp.local_rows(N), C});
  View yf = view(c.sp ? c.sp->y_full.get() : nullptr, {N, C});
  if (mla) {  // c_proj reads each head's dv values of the padded output
    View o_in = view(a.mla_o, {N, o.lin.in});
    mla->compact_output(c, N, out, o_in);
    o.forward(c.be, c.tp, o_in, N, yf.get(), yv.get());
    return;
  }
  o.forward(c.be, c.tp, out, N, yf.get(), yv.get());
}

// MLA's input: x, or under sequence parallelism every rank's rows of it gathered (its
// down-projections run whole on every rank, on all N rows).
const DLTensor* AttentionBlock::mla_input(const Ctx& c, const DLTensor* x, const LayerActs& a,
                                          int64_t N) const {
  if (!c.tp.sequence_parallel) return x;
  View xf = view(a.ln1_full, {N, o.lin.out});
  c.tp.all_gather(x, xf);
  return a.ln1_full.get();
}

// MLA's projections backward. Its input gradient comes out whole on every tensor rank (the
// heads' partial latent gradients are summed before the down-projections), so under sequence
// parallelism each rank keeps its own rows of it: no reduce-scatter.
void AttentionBlock::mla_backward(const Ctx& c, const Step& s, const DLTensor* x,
                                  const LayerActs& a, DLTensor* dq, const DLTensor* dk,
                                  const DLTensor* dv, DLTensor* dx) const {
  if (!c.tp.sequence_parallel) return mla->backward(c, s, x, a, dq, dk, dv, dx);
  const int64_t N = s.N(), C = o.lin.out, rows = c.tp.local_rows(N);
  View dxf = view(c.sp->dx_full, {N, C});
  mla->backward(c, s, mla_input(c, x, a, N), a, dq, dk, dv, dxf);
  View mine = view(c.sp->dx_full, {rows, C}, c.tp.rank * rows * C);
  c.call(&loom_ops::copy, dx, (const DLTensor*)mine);
}

// q, k, v from x through c_attn, each head's q and k normalised (QK-norm) and rotated.
void AttentionBlock::project(const Ctx& c, const Step& s, const DLTensor* x, LayerActs& a) const {
  const int64_t B = s.B, T = s.T, N = s.N(), D = head_dim, Hq = n_head, Hkv = n_kv_head;
  View qv = view(a.q, {B, T, Hq, D}), kv = view(a.k, {B, T, Hkv, D});
  View vv = view(a.v, {B, T, Hkv, D});
  View xf = view(a.ln1_full, {N, o.lin.out});
  // With QK-norm the projections land in q_in, k_in and the norms write q, k: each head's
  // D values a row of (N*H, D).
  View qp = view(qk_norm ? a.q_in : a.q, {B, T, Hq, D});
  View kp = view(qk_norm ? a.k_in : a.k, {B, T, Hkv, D});
  qkv.forward(c.be, c.tp, x, c.tp.sequence_parallel ? xf.get() : nullptr, N,
              {qp.get(), kp.get(), vv.get()});
  if (qk_norm) {
    q_norm.forward(c, view(a.q, {N * Hq, D}), view(a.qn_mean, {N * Hq}), view(a.qn_rstd, {N * Hq}),
                   view(a.q_in, {N * Hq, D}));
    k_norm.forward(c, view(a.k, {N * Hkv, D}), view(a.kn_mean, {N * Hkv}),
                   view(a.kn_rstd, {N * Hkv}), view(a.k_in, {N * Hkv, D}));
  }
  if (rope) {
    rope_at(c, s, qv.get(), rotary, false);
    rope_at(c, s, kv.get(), rotary, false);
  }
}

void AttentionBlock::core(const Ctx& c, const Step& s, const LayerActs& a) const {
  const int64_t B = s.B, T = s.T, D = head_dim, Hq = n_head, Hkv = n_kv_head;
  View qv = view(a.q, {B, T, Hq, D}), kv = view(a.k, {B, T, Hkv, D});
  View vv = view(a.v, {B, T, Hkv, D}), out = view(a.att, {B, T, Hq, D});
  View lse = view(a.lse, {B, Hq, T});
  Masks masks;
  if (c.cp.size > 1 && c.cp_a2a)
    a2a_attention_forward(c, qv, kv, vv, out, lse);
  else if (c.cp.size > 1)
    ring_attention_forward(c, qv, kv, vv, out, lse);
  else
    attend(c, qv, kv, vv, out, lse, causal, masks.chain(window, s.docs, s.bias, false));
}

void AttentionBlock::backward(const Ctx& c, const Step& s, const DLTensor* x, const LayerActs& a,
                              const DLTensor* dy, DLTensor* dx, GradScratch& g) const {
  const int64_t B = s.B, T = s.T, N = s.N(), D = head_dim, Hq = n_head, Hkv = n_kv_head;
  const int64_t C = o.lin.out;
  const bool sp = c.tp.sequence_parallel;
  if (a.recompute & LOOM_RECOMPUTE_CORE_ATTN) core(c, s, a);  // att and lse, shared scratch
  View datt = view(g.dln, {B, T, Hq, D});
  View dyf = view(sp ? c.sp->dy_full.get() : nullptr, {N, C});
  if (mla) {  // c_proj's input gradient is each head's dv values; the padding's is zero
    View dout = view(c.mla->dout, {N, o.lin.in});
    o.backward(c.be, c.tp, dy, dyf.get(), view(a.mla_o, {N, o.lin.in}), N, dout);
    mla->expand_output_grad(c, N, dout, datt);
  } else {
    o.backward(c.be, c.tp, dy, dyf.get(), a.att, N, datt);
  }
  View qv = view(a.q, {B, T, Hq, D}), kv = view(a.k, {B, T, Hkv, D});
  View vv = view(a.v, {B, T, Hkv, D}), out = view(a.att, {B, T, Hq, D});
  View lse = view(a.lse, {B, Hq, T});
  View dq = view(g.dq, {B, T, Hq, D}), dk = view(g.dk, {B, T, Hkv, D});
  View dv = view(g.dv, {B, T, Hkv, D});
  Masks masks;
  if (c.cp.size > 1 && c.cp_a2a)
    a2a_attention_backward(c, datt, qv, kv, vv, out, lse, dq, dk, dv);
  else if (c.cp.size > 1)
    ring_attention_backward(c, datt, qv, kv, vv, out, lse, dq, dk, dv);
  else
    attend_backward(c, datt, qv, kv, vv, out, lse, dq, dk, dv, causal,
                    masks.chain(window, s.docs, s.bias, true));
  if (mla) return mla_backward(c, s, x, a, dq, dk, dv, dx);
  if (rope) {  // gradients w.r.t. the q, k before rotation
    rope_at(c, s, dq.get(), rotary, true);
    rope_at(c, s, dk.get(), rotary, true);
  }
  View dqp = dq, dkp = dk;  // the projections' output gradients
  if (qk_norm) {            // through the norms: dq_in, dk_in (=); their weights' +=
    dqp = view(g.dq_in, {B, T, Hq, D});
    dkp = view(g.dk_in, {B, T, Hkv, D});
    q_norm.backward(c, view(g.dq_in, {N * Hq, D}), view(g.dq, {N * Hq, D}),
                    view(a.q_in, {N * Hq, D}), view(a.qn_mean, {N * Hq}),
                    view(a.qn_rstd, {N * Hq}));
    k_norm.backward(c, view(g.dk_in, {N * Hkv, D}), view(g.dk, {N * Hkv, D}),
                    view(a.k_in, {N * Hkv, D}), view(a.kn_mean, {N * Hkv}),
                    view(a.kn_rstd, {N * Hkv}));
  }
  // d(att) is consumed; dx may reuse its buffer (g.dln) from here on.
  View xf = view(a.ln1_full, {N, C});
  if (sp) c.tp.all_gather(x, xf);  // the input again: layers share the gathered buffer
  View dxf = view(sp ? c.sp->dx_full.get() : nullptr, {N, C});
  qkv.backward(c.be, c.tp, {dqp.get(), dkp.get(), dv.get()}, sp ? (const DLTensor*)xf : x, N, dx,
               dxf.get());
}

}  // namespace loom::layers
