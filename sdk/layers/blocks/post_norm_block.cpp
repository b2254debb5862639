// Loom layer library, the post-norm block of the original BERT (and Hugging Face's
// BertLayer):
//   r1 = x + attn(x); h = ln_1(r1); r2 = h + mlp(h); out = ln_2(r2)
// Norms and residual adds run on this rank's Nl token rows (all N without sequence
// parallelism); the attention and MLP slots gather and reduce-scatter around them. The
// activations it keeps: a.res2 = r1, a.ln1 = h (the MLP's input), a.ln2 = r2.
#include "loom/cpp/layers/blocks/block.hpp"
#include "loom/cpp/layers/ops/attention_block.hpp"
#include "loom/cpp/layers/ops/mlp.hpp"
#include "loom/cpp/layers/ops/norm.hpp"

namespace loom::layers {
namespace {

class PostNormBlock : public Block {
 public:
  PostNormBlock(const Options& o, ParamStore& ps, const std::string& p)
      : attn(AttentionBlock::make(o, ps, p + ".attn")),
        ln_1(Norm::make(o, ps, p + ".ln_1")),
        mlp(Mlp::make(o, ps, p + ".mlp")),
        ln_2(Norm::make(o, ps, p + ".ln_2")) {}

  void forward(const Ctx& c, const Options& o, const Step& s, const DLTensor* x, DLTensor* out,
               LayerActs& a, LayerCache* cache, int64_t cache_max) const override {
    const int64_t N = s.N(), Nl = c.tp.local_rows(N), C = o.n_embd;
    View xv = view(x, {Nl, C}), ov = view(out, {Nl, C}), r1 = view(a.res2, {Nl, C});
    View h = view(a.ln1, {Nl, C}), r2 = view(a.ln2, {Nl, C});
    View m1 = view(a.ln1_mean, {Nl}), s1 = view(a.ln1_rstd, {Nl});
    View m2 = view(a.ln2_mean, {Nl}), s2 = view(a.ln2_rstd, {Nl});
    attn.forward(c, s, xv, a, r1, cache, cache_max);
    ln_1.forward_residual(c, h, m1, s1, r1, r1, xv);  // r1 += x, then ln_1 of it
    mlp.forward(c, N, h, a, r2);
    ln_2.forward_residual(c, ov, m2, s2, r2, r2, h);  // r2 += h, then ln_2 of it
  }

  // g.dres = d(out) in, d(x) out.
  void backward(const Ctx& c, const Options& o, const Step& s, const DLTensor* x,
                const LayerActs& a, GradScratch& g) const override {
    const int64_t N = s.N(), Nl = c.tp.local_rows(N), C = o.n_embd;
    View xv = view(x, {Nl, C}), r1 = view(a.res2, {Nl, C});
    View h = view(a.ln1, {Nl, C}), r2 = view(a.ln2, {Nl, C});
    View m1 = view(a.ln1_mean, {Nl}), s1 = view(a.ln1_rstd, {Nl});
    View m2 = view(a.ln2_mean, {Nl}), s2 = view(a.ln2_rstd, {Nl});
    View dres = view(g.dres, {Nl, C}), dtmp = view(g.dtmp, {Nl, C}), dln = view(g.dln, {Nl, C});
    ln_2.backward(c, dtmp, dres, r2, m2, s2);  // dtmp = d(r2)
    mlp.backward(c, N, h, a, dtmp, dln, g);    // dln = d(h) through the MLP
    c.call(&loom_ops::add, dln.get(), (const DLTensor*)dln, (const DLTensor*)dtmp);
    ln_1.backward(c, dtmp, dln, r1, m1, s1);   // dtmp = d(r1)
    attn.backward(c, s, xv, a, dtmp, dln, g);  // dln = d(x) through the attention
    c.call(&loom_ops::add, dres.get(), (const DLTensor*)dln, (const DLTensor*)dtmp);
  }

 private:
  AttentionBlock attn;
  Norm ln_1;
  Mlp mlp;
  Norm ln_2;
};

}  // namespace

const BlockSpec kPostNormBlock = {
    "post-norm",
    [](ParamDeclarer& d, const std::string& p) {
      d.norm(p + ".ln_1");
      d.attention(p + ".attn");
      d.norm(p + ".ln_2");
      d.mlp(p + ".mlp");
    },
    [](const Options& o, ParamStore& ps, const std::string& p) -> std::unique_ptr<Block> {
      return std::make_unique<PostNormBlock>(o, ps, p);
    }};

}  // namespace loom::layers
