// Loom layer library, the pre-norm block of GPT-2 and Llama:
//   out = x + attn(ln_1(x)); out += mlp(ln_2(out))
// The residual add before ln_2, and the residual gradient's adds after each norm's backward,
// ride on the norms (Norm::forward_residual, backward_residual: loom.norm-residual/1 where
// the backend lends it).
// Norms and residual adds run on this rank's Nl token rows (all N without sequence
// parallelism); the attention and MLP slots gather and reduce-scatter around them.
// The same block serves a mixture of experts (kMoeBlock): its MLP slot is then a MoeMlp
// ("<layer>.moe"), which takes the whole step (its losses' scale, the sequences).
#include "loom/cpp/layers/blocks/block.hpp"
#include "loom/cpp/layers/moe/moe.hpp"
#include "loom/cpp/layers/ops/attention_block.hpp"
#include "loom/cpp/layers/ops/mlp.hpp"
#include "loom/cpp/layers/ops/norm.hpp"
#include "loom/cpp/layers/ssm/mamba.hpp"

namespace loom::layers {
namespace {

// The MLP slot's calls, for each kind of MLP.
void ffn_forward(const Mlp& m, const Ctx& c, const Step& s, const DLTensor* x, LayerActs& a,
                 DLTensor* y) {
  m.forward(c, s.N(), x, a, y);
}
// A mixture of experts under sequence parallelism, as Megatron gathers the tokens around its
// dispatcher: each tensor rank gathers the (N/tp, C) shards of ln_2's output into the layers'
// shared (N, C) buffer, runs the MoE on all N tokens as tensor parallelism without SP does
// (the same tokens, routing and experts on every tensor rank), and keeps its own rows of the
// output. Backward gathers d(out)'s shards, runs the MoE's backward on all N rows (the input
// gathered again, as the dense MLP does) and keeps this rank's rows of dx: every tensor rank
// holds the whole dx, so nothing is summed, and the expert and router gradients are whole on
// each, as without SP.
View own_rows(const Ctx& c, const DLTensor* full, int64_t N, int64_t C) {
  const int64_t Nl = c.tp.local_rows(N);
  return view(full, {Nl, C}, c.tp.rank * Nl * C);
}
void ffn_forward(const MoeMlp& m, const Ctx& c, const Step& s, const DLTensor* x, LayerActs& a,
                 DLTensor* y) {
  if (!c.tp.sequence_parallel) return m.forward(c, s, x, a, y);
  const int64_t N = s.N(), C = x->shape[1];
  View xf = view(a.ln2_full, {N, C}), yf = view(c.sp->y_full.get(), {N, C});
  c.tp.all_gather(x, xf);
  m.forward(c, s, xf, a, yf);
  c.call(&loom_ops::copy, y, (const DLTensor*)own_rows(c, yf, N, C));
}
void ffn_backward(const Mlp& m, const Ctx& c, const Step& s, const DLTensor* x, const LayerActs& a,
                  const DLTensor* dy, DLTensor* dx, GradScratch& g) {
  m.backward(c, s.N(), x, a, dy, dx, g);
}
void ffn_backward(const MoeMlp& m, const Ctx& c, const Step& s, const DLTensor* x,
                  const LayerActs& a, const DLTensor* dy, DLTensor* dx, GradScratch&) {
  if (!c.tp.sequence_parallel) return m.backward(c, s, x, a, dy, dx);
  const int64_t N = s.N(), C = x->shape[1];
  View xf = view(a.ln2_full, {N, C}), dyf = view(c.sp->dy_full.get(), {N, C});
  View dxf = view(c.sp->dx_full.get(), {N, C});
  c.tp.all_gather(x, xf);
  c.tp.all_gather(dy, dyf);
  m.backward(c, s, xf, a, dyf, dxf);
  c.call(&loom_ops::copy, dx, (const DLTensor*)own_rows(c, dxf, N, C));
}

template <class Ffn>  // Mlp or MoeMlp
class PreNormBlock : public Block {
 public:
  PreNormBlock(const Options& o, ParamStore& ps, const std::string& p, const char* ffn)
      : ln_1(Norm::make(o, ps, p + ".ln_1")),
        attn(AttentionBlock::make(o, ps, p + ".attn")),
        ln_2(Norm::make(o, ps, p + ".ln_2")),
        mlp(Ffn::make(o, ps, p + ffn)) {}

  void forward(const Ctx& c, const Options& o, const Step& s, const DLTensor* x, DLTensor* out,
               LayerActs& a, LayerCache* cache, int64_t cache_max) const override {
    const int64_t N = s.N(), Nl = c.tp.local_rows(N), C = o.n_embd;
    View xv = view(x, {Nl, C}), ov = view(out, {Nl, C}), res2 = view(a.res2, {Nl, C});
    View ln1 = view(a.ln1, {Nl, C}), ln2 = view(a.ln2, {Nl, C});
    View m1 = view(a.ln1_mean, {Nl}), r1 = view(a.ln1_rstd, {Nl});
    View m2 = view(a.ln2_mean, {Nl}), r2 = view(a.ln2_rstd, {Nl});
    ln_1.forward(c, ln1, m1, r1, xv);
    attn.forward(c, s, ln1, a, res2, cache, cache_max);
    ln_2.forward_residual(c, ln2, m2, r2, res2, res2, xv);  // res2 += x, then ln_2 of it
    ffn_forward(mlp, c, s, ln2, a, ov);
    c.call(&loom_ops::add, ov.get(), (const DLTensor*)ov, (const DLTensor*)res2);
  }

  void backward(const Ctx& c, const Options& o, const Step& s, const DLTensor* x,
                const LayerActs& a, GradScratch& g) const override {
    const int64_t N = s.N(), Nl = c.tp.local_rows(N), C = o.n_embd;
    View xv = view(x, {Nl, C}), res2 = view(a.res2, {Nl, C});
    View ln1 = view(a.ln1, {Nl, C}), ln2 = view(a.ln2, {Nl, C});
    View m1 = view(a.ln1_mean, {Nl}), r1 = view(a.ln1_rstd, {Nl});
    View m2 = view(a.ln2_mean, {Nl}), r2 = view(a.ln2_rstd, {Nl});
    View dres = view(g.dres, {Nl, C}), dtmp = view(g.dtmp, {Nl, C}), dln = view(g.dln, {Nl, C});
    // Selective recompute of the norms: their outputs again from the kept inputs (the
    // statistics come out the same too), into the scratch every layer shares.
    const bool norms = a.recompute & LOOM_RECOMPUTE_LAYERNORM;
    // MLP half: dres = d(out) = d(res2) through the residual, plus through ln_2 and the MLP
    if (norms) ln_2.forward(c, ln2, m2, r2, res2);
    ffn_backward(mlp, c, s, ln2, a, dres, dln, g);
    ln_2.backward_residual(c, dres, dln, res2, m2, r2, dtmp);
    // attention half: dres = d(res2) -> d(x)
    if (norms) ln_1.forward(c, ln1, m1, r1, xv);
    attn.backward(c, s, ln1, a, dres, dln, g);
    ln_1.backward_residual(c, dres, dln, xv, m1, r1, dtmp);
  }

 private:
  Norm ln_1;
  AttentionBlock attn;
  Norm ln_2;
  Ffn mlp;
};

// A hybrid stack's layer (Megatron's HybridModel, hybrid_override_pattern): one sublayer,
// out = x + mixer(norm(x)), the mixer a Mamba-2 mixer, the attention, an MLP or a MoE. The
// norm's output and statistics sit in ln1 (attention and Mamba read their gathered input from
// ln1_full, the MLPs from ln2_full: under sequence parallelism both are the one shared
// buffer).
void mixer_forward(const MambaMixer& m, const Ctx& c, const Step& s, const DLTensor* x,
                   LayerActs& a, DLTensor* y, LayerCache* cache, int64_t) {
  m.forward(c, s, x, a, y, cache);
}
void mixer_forward(const AttentionBlock& m, const Ctx& c, const Step& s, const DLTensor* x,
                   LayerActs& a, DLTensor* y, LayerCache* cache, int64_t cache_max) {
  m.forward(c, s, x, a, y, cache, cache_max);
}
template <class Ffn>
void mixer_forward(const Ffn& m, const Ctx& c, const Step& s, const DLTensor* x, LayerActs& a,
                   DLTensor* y, LayerCache*, int64_t) {
  ffn_forward(m, c, s, x, a, y);
}
void mixer_backward(const MambaMixer& m, const Ctx& c, const Step& s, const DLTensor* x,
                    const LayerActs& a, const DLTensor* dy, DLTensor* dx, GradScratch& g) {
  m.backward(c, s, x, a, dy, dx, g);
}
void mixer_backward(const AttentionBlock& m, const Ctx& c, const Step& s, const DLTensor* x,
                    const LayerActs& a, const DLTensor* dy, DLTensor* dx, GradScratch& g) {
  m.backward(c, s, x, a, dy, dx, g);
}
template <class Ffn>
void mixer_backward(const Ffn& m, const Ctx& c, const Step& s, const DLTensor* x,
                    const LayerActs& a, const DLTensor* dy, DLTensor* dx, GradScratch& g) {
  ffn_backward(m, c, s, x, a, dy, dx, g);
}

template <class Mixer>  // MambaMixer, AttentionBlock, Mlp or MoeMlp
class HybridBlock : public Block {
 public:
  HybridBlock(const Options& o, ParamStore& ps, const std::string& p, const char* slot)
      : norm(Norm::make(o, ps, p + ".norm")), mixer(Mixer::make(o, ps, p + slot)) {}

  void forward(const Ctx& c, const Options& o, const Step& s, const DLTensor* x, DLTensor* out,
               LayerActs& a, LayerCache* cache, int64_t cache_max) const override {
    const int64_t Nl = c.tp.local_rows(s.N()), C = o.n_embd;
    View xv = view(x, {Nl, C}), ov = view(out, {Nl, C}), ln = view(a.ln1, {Nl, C});
    View m = view(a.ln1_mean, {Nl}), r = view(a.ln1_rstd, {Nl});
    norm.forward(c, ln, m, r, xv);
    mixer_forward(mixer, c, s, ln, a, ov, cache, cache_max);
    c.call(&loom_ops::add, ov.get(), (const DLTensor*)ov, (const DLTensor*)xv);
  }

  void backward(const Ctx& c, const Options& o, const Step& s, const DLTensor* x,
                const LayerActs& a, GradScratch& g) const override {
    const int64_t Nl = c.tp.local_rows(s.N()), C = o.n_embd;
    View xv = view(x, {Nl, C}), ln = view(a.ln1, {Nl, C});
    View m = view(a.ln1_mean, {Nl}), r = view(a.ln1_rstd, {Nl});
    View dres = view(g.dres, {Nl, C}), dtmp = view(g.dtmp, {Nl, C}), dln = view(g.dln, {Nl, C});
    if (a.recompute & LOOM_RECOMPUTE_LAYERNORM) norm.forward(c, ln, m, r, xv);
    mixer_backward(mixer, c, s, ln, a, dres, dln, g);
    norm.backward_residual(c, dres, dln, xv, m, r, dtmp);
  }

 private:
  Norm norm;
  Mixer mixer;
};

template <class Mixer>
std::unique_ptr<Block> make_hybrid(const Options& o, ParamStore& ps, const std::string& p,
                                   const char* slot) {
  return std::make_unique<HybridBlock<Mixer>>(o, ps, p, slot);
}

}  // namespace

const BlockSpec kPreNormBlock = {
    "pre-norm",
    [](ParamDeclarer& d, const std::string& p) {
      d.norm(p + ".ln_1");
      d.attention(p + ".attn");
      d.norm(p + ".ln_2");
      d.mlp(p + ".mlp");
    },
    [](const Options& o, ParamStore& ps, const std::string& p) -> std::unique_ptr<Block> {
      return std::make_unique<PreNormBlock<Mlp>>(o, ps, p, ".mlp");
    }};

// Without sequence parallelism (refused for MoE models), so every rank holds all N rows.
const BlockSpec kMoeBlock = {
    "moe",
    [](ParamDeclarer& d, const std::string& p) {
      d.norm(p + ".ln_1");
      d.attention(p + ".attn");
      d.norm(p + ".ln_2");
      d.moe(p + ".moe");
    },
    [](const Options& o, ParamStore& ps, const std::string& p) -> std::unique_ptr<Block> {
      return std::make_unique<PreNormBlock<MoeMlp>>(o, ps, p, ".moe");
    }};

const BlockSpec kHybridMamba = {"hybrid-mamba",
                                [](ParamDeclarer& d, const std::string& p) {
                                  d.norm(p + ".norm");
                                  d.mamba(p + ".mixer");
                                },
                                [](const Options& o, ParamStore& ps, const std::string& p) {
                                  return make_hybrid<MambaMixer>(o, ps, p, ".mixer");
                                }};
const BlockSpec kHybridAttention = {"hybrid-attention",
                                    [](ParamDeclarer& d, const std::string& p) {
                                      d.norm(p + ".norm");
                                      d.attention(p + ".attn");
                                    },
                                    [](const Options& o, ParamStore& ps, const std::string& p) {
                                      return make_hybrid<AttentionBlock>(o, ps, p, ".attn");
                                    }};
const BlockSpec kHybridMlp = {"hybrid-mlp",
                              [](ParamDeclarer& d, const std::string& p) {
                                d.norm(p + ".norm");
                                d.mlp(p + ".mlp");
                              },
                              [](const Options& o, ParamStore& ps, const std::string& p) {
                                return make_hybrid<Mlp>(o, ps, p, ".mlp");
                              }};
const BlockSpec kHybridMoe = {"hybrid-moe",
                              [](ParamDeclarer& d, const std::string& p) {
                                d.norm(p + ".norm");
                                d.moe(p + ".moe");
                              },
                              [](const Options& o, ParamStore& ps, const std::string& p) {
                                return make_hybrid<MoeMlp>(o, ps, p, ".moe");
                              }};

const BlockSpec& hybrid_block(char kind) {
  switch (kind) {
    case 'M':
      return kHybridMamba;
    case '*':
      return kHybridAttention;
    case '-':
      return kHybridMlp;
    default:
      return kHybridMoe;
  }
}

}  // namespace loom::layers
