// Loom layer library, multi-head latent attention's projections (loom/cpp/layers/ops/mla.hpp
// has the equations). Heads' slices move between layouts with ABI 2.21's copy_strided: q and
// k hold each head's [nope | rope] parts back to back, the up-projection's output each head's
// [k_nope | v].
#include "loom/cpp/layers/ops/mla.hpp"

#include "loom/cpp/layers/ops/attention_block.hpp"

namespace loom::layers {

void MlaScratch::ensure(const Ctx& c, const MlaDims& d, int64_t n) {
  if (n <= rows) return;
  kv = c.alloc({n, d.H * (d.dn + d.dv)});
  pe = c.alloc({n, d.H * d.dr});
  kpe = c.alloc({n, d.dr});
  dkpe = c.alloc({n, d.dr});
  dc = c.alloc({n, d.r});
  dc_in = c.alloc({n, d.r});
  dckv = c.alloc({n, d.r + d.dr});
  if (d.qr > 0) {
    dcq = c.alloc({n, d.qr});
    dcq_in = c.alloc({n, d.qr});
  }
  dout = c.alloc({n, d.H * d.dv});
  rows = n;
}

void MlaScratch::ensure_cache(const Ctx& c, const MlaDims& d, int64_t n) {
  if (n <= cache_rows) return;
  cache_k = c.alloc({n, d.H * d.dq()});
  cache_v = c.alloc({n, d.H * d.dq()});
  cache_lat = c.alloc({n, d.r});
  cache_kv = c.alloc({n, d.H * (d.dn + d.dv)});
  cache_rows = n;
}

void MlaProjections::rope_key_into_heads(const Ctx& c, DLTensor* k, const DLTensor* src, int64_t ld,
                                         int64_t at, int64_t rows) const {
  const int64_t dq = d.dq();
  for (int64_t h = 0; h < d.H; ++h)
    loom::copy_strided(c.be, k, d.H * dq, h * dq + d.dn, src, ld, at, rows, d.dr);
}

MlaProjections MlaProjections::make(const Options& o, ParamStore& ps, const std::string& p) {
  MlaProjections m;
  m.d = {o.hq(), o.qk_head_dim, o.qk_pos_dim, o.v_head_dim, o.kv_lora_rank, o.q_lora_rank};
  m.rotary = Rope::make(o, o.qk_pos_dim);
  m.query_scale = mla_query_scale(o);
  const MlaDims& d = m.d;
  auto whole = [&](const std::string& n) {
    Param& w = ps.at(n + ".weight");
    return make_linear(w, nullptr, 0, w.shape[0]);
  };
  if (d.qr > 0) {
    m.q_a = whole(p + ".q_a");
    m.q_a_norm = Norm::make(o, ps, p + ".q_a_norm");
    m.q_b = whole(p + ".q_b");
  } else {
    m.q_b = whole(p + ".q");
  }
  m.kv_a = whole(p + ".kv_a");
  m.kv_a_norm = Norm::make(o, ps, p + ".kv_a_norm");
  m.kv_b = whole(p + ".kv_b");
  return m;
}

void MlaProjections::forward(const Ctx& c, const Step& s, const DLTensor* x, LayerActs& a) const {
  const int64_t B = s.B, T = s.T, N = s.N(), H = d.H, dq = d.dq(), dr = d.dr, r = d.r;
  MlaScratch& sc = *c.mla;
  sc.ensure(c, d, N);
  // queries, each head [nope | rope] (rotated below)
  View q = view(a.q, {N, H * dq});
  if (d.qr > 0) {
    View cq_in = view(a.mla_cq_in, {N, d.qr}), cq = view(a.mla_cq, {N, d.qr});
    q_a.forward(c.be, cq_in, x, N);
    q_a_norm.forward(c, cq, view(a.mla_cq_mean, {N}), view(a.mla_cq_rstd, {N}), cq_in);
    q_b.forward(c.be, q, cq, N);
  } else {
    q_b.forward(c.be, q, x, N);
  }
  // the latent and the shared rotary key part; keys' nope parts and values from the latent
  View ckv = view(a.mla_ckv, {N, r + dr}), c_in = view(a.mla_c_in, {N, r});
  View lat = view(a.mla_c, {N, r}), kv = view(sc.kv, {N, H * (d.dn + d.dv)});
  kv_a.forward(c.be, ckv, x, N);
  loom::copy_strided(c.be, c_in, r, 0, ckv, r + dr, 0, N, r);
  kv_a_norm.forward(c, lat, view(a.mla_c_mean, {N}), view(a.mla_c_rstd, {N}), c_in);
  kv_b.forward(c.be, kv, lat, N);
  View k = view(a.k, {N * H * dq}), v = view(a.v, {N * H * dq});
  loom::copy_strided(c.be, k, dq, 0, kv, d.dn + d.dv, 0, N * H, d.dn);
  c.call(&loom_ops::fill, v.get(), 0.0);
  loom::copy_strided(c.be, v, dq, 0, kv, d.dn + d.dv, d.dn, N * H, d.dv);
  // decoupled RoPE: the key's part once, then into every head; each query head's in place
  View kpe = view(sc.kpe, {B, T, 1, dr}), qpe = view(sc.pe, {B, T, H, dr});
  loom::copy_strided(c.be, kpe, dr, 0, ckv, r + dr, r, N, dr);
  rope_at(c, s, kpe, rotary, false);
  rope_key_into_heads(c, k, kpe, dr, 0, N);
  loom::copy_strided(c.be, qpe, dr, 0, q, dq, d.dn, N * H, dr);
  rope_at(c, s, qpe, rotary, false);
  loom::copy_strided(c.be, q, dq, d.dn, qpe, dr, 0, N * H, dr);
  // YaRN's softmax scale (DeepSeek-V3): the scores times mscale^2, through the queries
  if (query_scale != 1.0) c.call(&loom_ops::axpby, q, 0.0, (const DLTensor*)q, query_scale);
}

void MlaProjections::backward(const Ctx& c, const Step& s, const DLTensor* x, const LayerActs& a,
                              DLTensor* dq_t, const DLTensor* dk, const DLTensor* dv,
                              DLTensor* dx) const {
  const int64_t B = s.B, T = s.T, N = s.N(), H = d.H, dq = d.dq(), dr = d.dr, r = d.r;
  MlaScratch& sc = *c.mla;
  // through the rotations: each query head's in place in dq, the key's summed over the heads
  View dqv = view(dq_t, {N, H * dq}), qpe = view(sc.pe, {B, T, H, dr});
  if (query_scale != 1.0)  // the queries' scale (forward's last step) first
    c.call(&loom_ops::axpby, dqv.get(), 0.0, (const DLTensor*)dqv, query_scale);
  loom::copy_strided(c.be, qpe, dr, 0, dqv, dq, d.dn, N * H, dr);
  rope_at(c, s, qpe, rotary, true);
  loom::copy_strided(c.be, dqv, dq, d.dn, qpe, dr, 0, N * H, dr);
  View dkpe = view(sc.dkpe, {B, T, 1, dr}), one = view(sc.kpe, {N, dr});
  c.call(&loom_ops::fill, dkpe.get(), 0.0);
  for (int64_t h = 0; h < H; ++h) {
    loom::copy_strided(c.be, one, dr, 0, dk, H * dq, h * dq + d.dn, N, dr);
    c.call(&loom_ops::add, dkpe.get(), (const DLTensor*)dkpe, (const DLTensor*)one);
  }
  rope_at(c, s, dkpe, rotary, true);
  // the up-projections: d[k_nope | v] per head, then d(latent) and d(cq), partial per rank
  View dkv = view(sc.kv, {N, H * (d.dn + d.dv)}), dc = view(sc.dc, {N, r});
  loom::copy_strided(c.be, dkv, d.dn + d.dv, 0, dk, dq, 0, N * H, d.dn);
  loom::copy_strided(c.be, dkv, d.dn + d.dv, d.dn, dv, dq, 0, N * H, d.dv);
  kv_b.backward(c.be, dc, false, dkv, view(a.mla_c, {N, r}), N);
  View dcq = view(sc.dcq, {N, d.qr});
  if (d.qr > 0)
    q_b.backward(c.be, dcq, false, dqv, view(a.mla_cq, {N, d.qr}), N);
  else
    q_b.backward(c.be, dx, false, dqv, x, N);
  // summed over the tensor group: what follows is whole on every rank
  c.tp.all_reduce(dc);
  c.tp.all_reduce(dkpe);
  if (d.qr > 0)
    c.tp.all_reduce(dcq);
  else
    c.tp.all_reduce(dx);
  // the latent's norm, then the down-projection from [d c_in | d k_pe]
  View dc_in = view(sc.dc_in, {N, r}), dckv = view(sc.dckv, {N, r + dr});
  kv_a_norm.backward(c, dc_in, dc, view(a.mla_c_in, {N, r}), view(a.mla_c_mean, {N}),
                     view(a.mla_c_rstd, {N}));
  loom::copy_strided(c.be, dckv, r + dr, 0, dc_in, r, 0, N, r);
  loom::copy_strided(c.be, dckv, r + dr, r, dkpe, dr, 0, N, dr);
  if (d.qr > 0) {
    View dcq_in = view(sc.dcq_in, {N, d.qr});
    q_a_norm.backward(c, dcq_in, dcq, view(a.mla_cq_in, {N, d.qr}), view(a.mla_cq_mean, {N}),
                      view(a.mla_cq_rstd, {N}));
    q_a.backward(c.be, dx, false, dcq_in, x, N);
  }
  kv_a.backward(c.be, dx, true, dckv, x, N);
}

void MlaProjections::cache_store(const Ctx& c, const LayerActs& a, DLTensor* cache, int64_t at,
                                 int64_t b, int64_t T, int64_t p) const {
  const int64_t r = d.r, dr = d.dr, w = r + dr;
  loom::copy_strided(c.be, cache, w, at + p * w, a.mla_c, r, b * T * r, T, r);
  loom::copy_strided(c.be, cache, w, at + p * w + r, c.mla->kpe, dr, b * T * dr, T, dr);
}

void MlaProjections::cache_keys(const Ctx& c, const DLTensor* cache, int64_t at, int64_t S, View& k,
                                View& v) const {
  const int64_t H = d.H, dq = d.dq(), r = d.r, dr = d.dr, w = r + dr;
  MlaScratch& sc = *c.mla;
  sc.ensure_cache(c, d, S);
  View lat = view(sc.cache_lat, {S, r}), kv = view(sc.cache_kv, {S, H * (d.dn + d.dv)});
  k = view(sc.cache_k, {1, S, H, dq});
  v = view(sc.cache_v, {1, S, H, dq});
  loom::copy_strided(c.be, lat, r, 0, cache, w, at, S, r);
  kv_b.forward(c.be, kv, lat, S);
  loom::copy_strided(c.be, k, dq, 0, kv, d.dn + d.dv, 0, S * H, d.dn);
  c.call(&loom_ops::fill, v.get(), 0.0);
  loom::copy_strided(c.be, v, dq, 0, kv, d.dn + d.dv, d.dn, S * H, d.dv);
  rope_key_into_heads(c, k, cache, w, at + r, S);
}

void MlaProjections::compact_output(const Ctx& c, int64_t N, const DLTensor* att,
                                    DLTensor* out) const {
  loom::copy_strided(c.be, out, d.dv, 0, att, d.dq(), 0, N * d.H, d.dv);
}

void MlaProjections::expand_output_grad(const Ctx& c, int64_t N, const DLTensor* dout,
                                        DLTensor* datt) const {
  c.call(&loom_ops::fill, datt, 0.0);
  loom::copy_strided(c.be, datt, d.dq(), 0, dout, d.dv, 0, N * d.H, d.dv);
}

}  // namespace loom::layers
