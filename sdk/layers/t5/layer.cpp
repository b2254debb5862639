// Loom layer library, T5's decoder layer (pre-norm, as Megatron's T5):
//   h = x + self_attn(ln_1(x))       causal over the decoder's tokens
//   h = h + cross_attn(ln_x(h), mem) the encoder output's keys and values
//   out = h + mlp(ln_2(h))
// All Nd decoder rows on every tensor-parallel rank (no sequence parallelism).
#include "loom/cpp/layers/t5/t5.hpp"

namespace loom::layers {

T5DecoderLayer::T5DecoderLayer(const Options& o, ParamStore& ps, const std::string& p)
    : ln_1_(Norm::make(o, ps, p + ".ln_1")),
      attn_(AttentionBlock::make(o, ps, p + ".attn")),
      ln_x_(Norm::make(o, ps, p + ".ln_x")),
      xattn_(CrossAttention::make(o, ps, p + ".xattn")),
      ln_2_(Norm::make(o, ps, p + ".ln_2")),
      mlp_(Mlp::make(o, ps, p + ".mlp")) {}

void T5DecoderLayer::declare(ParamDeclarer& d, const std::string& p) {
  const Options& o = d.o;
  const int64_t D = o.head_dim;
  d.norm(p + ".ln_1");
  d.attention(p + ".attn");
  d.norm(p + ".ln_x");
  d.column(p + ".xattn.q", {o.n_head * D}, o.n_embd, d.std, o.bias);
  d.column(p + ".xattn.kv", {o.n_kv_head * D, o.n_kv_head * D}, o.n_embd, d.std, o.bias);
  d.row(p + ".xattn.c_proj", o.n_embd, o.n_head * D, d.proj_std);
  d.norm(p + ".ln_2");
  d.mlp(p + ".mlp");
}

void T5DecoderLayer::forward(const Ctx& c, const Options& o, const Step& s, const CrossStep& cs,
                             const DLTensor* x, const DLTensor* xk, const DLTensor* xv,
                             DLTensor* out, LayerActs& a, CrossActs& xa, LayerCache* cache,
                             int64_t cache_max) const {
  const int64_t N = s.N(), C = o.n_embd;
  View xx = view(x, {N, C}), ov = view(out, {N, C}), res2 = view(a.res2, {N, C});
  View ln1 = view(a.ln1, {N, C}), ln2 = view(a.ln2, {N, C}), lnx = view(xa.ln, {N, C});
  View res3 = view(xa.res, {N, C});
  ln_1_.forward(c, ln1, view(a.ln1_mean, {N}), view(a.ln1_rstd, {N}), xx);
  attn_.forward(c, s, ln1, a, res2, cache, cache_max);
  ln_x_.forward_residual(c, lnx, view(xa.mean, {N}), view(xa.rstd, {N}), res2, res2, xx);
  xattn_.forward(c, cs, lnx, xk, xv, xa, res3, cache == nullptr);
  ln_2_.forward_residual(c, ln2, view(a.ln2_mean, {N}), view(a.ln2_rstd, {N}), res3, res3, res2);
  mlp_.forward(c, N, ln2, a, ov);
  c.call(&loom_ops::add, ov.get(), (const DLTensor*)ov, (const DLTensor*)res3);
}

void T5DecoderLayer::backward(const Ctx& c, const Options& o, const Step& s, const CrossStep& cs,
                              const DLTensor* x, const DLTensor* mem, const LayerActs& a,
                              const CrossActs& xa, DLTensor* dmem, GradScratch& g) const {
  const int64_t N = s.N(), C = o.n_embd;
  View xx = view(x, {N, C}), res2 = view(a.res2, {N, C}), res3 = view(xa.res, {N, C});
  View ln1 = view(a.ln1, {N, C}), ln2 = view(a.ln2, {N, C}), lnx = view(xa.ln, {N, C});
  View dres = view(g.dres, {N, C}), dtmp = view(g.dtmp, {N, C}), dln = view(g.dln, {N, C});
  // MLP: dres = d(out) = d(res3) through the residual, plus through ln_2 and the MLP
  mlp_.backward(c, N, ln2, a, dres, dln, g);
  ln_2_.backward_residual(c, dres, dln, res3, view(a.ln2_mean, {N}), view(a.ln2_rstd, {N}), dtmp);
  // cross-attention: dres = d(res3) -> d(res2); d(mem) accumulates
  xattn_.backward(c, cs, lnx, mem, xa, dres, dln, dmem, g);
  ln_x_.backward_residual(c, dres, dln, res2, view(xa.mean, {N}), view(xa.rstd, {N}), dtmp);
  // self-attention: dres = d(res2) -> d(x)
  attn_.backward(c, s, ln1, a, dres, dln, g);
  ln_1_.backward_residual(c, dres, dln, xx, view(a.ln1_mean, {N}), view(a.ln1_rstd, {N}), dtmp);
}

}  // namespace loom::layers
