// model/gptj: an example out-of-tree Loom model plugin. GPT-J's parallel block,
//   out = x + attn(ln_1(x)) + mlp(ln_1(x))
// (one norm feeds the attention and the MLP side by side), on the Loom layer library
// (Loom::layers): the norms, the attention block, the MLP, the embedding, the head, the
// stages, tensor/sequence/pipeline parallelism and KV-cache decoding all come from there.
// GPT-J itself also rotates only part of each head (rotary_dim); this block rotates all.
#include "loom/cpp/layers/decoder/model_plugin.hpp"

namespace {

using namespace loom::layers;

class ParallelBlock : public Block {
 public:
  ParallelBlock(const Options& o, ParamStore& ps, const std::string& p)
      : ln_1_(Norm::make(o, ps, p + ".ln_1")),
        attn_(AttentionBlock::make(o, ps, p + ".attn")),
        mlp_(Mlp::make(o, ps, p + ".mlp")) {}

  // x, out: (Nl, C), this rank's token rows. a.res2 keeps the attention's output.
  void forward(const Ctx& c, const Options& o, const Step& s, const DLTensor* x, DLTensor* out,
               LayerActs& a, LayerCache* cache, int64_t cache_max) const override {
    const int64_t N = s.N(), Nl = c.tp.local_rows(N), C = o.n_embd;
    View xv = view(x, {Nl, C}), ov = view(out, {Nl, C}), att = view(a.res2, {Nl, C});
    View ln = view(a.ln1, {Nl, C}), mean = view(a.ln1_mean, {Nl}), rstd = view(a.ln1_rstd, {Nl});
    ln_1_.forward(c, ln, mean, rstd, xv);
    attn_.forward(c, s, ln, a, att, cache, cache_max);  // att = attn(ln)
    mlp_.forward(c, N, ln, a, ov);                      // out = mlp(ln)
    c.call(&loom_ops::add, ov.get(), (const DLTensor*)ov, (const DLTensor*)att);
    c.call(&loom_ops::add, ov.get(), (const DLTensor*)ov, (const DLTensor*)xv);
  }

  // g.dres = d(out) on entry, d(x) on return: d(x) = d(out) + ln_1'(d(ln)), where d(ln) is
  // the sum of what the MLP and the attention send back.
  void backward(const Ctx& c, const Options& o, const Step& s, const DLTensor* x,
                const LayerActs& a, GradScratch& g) const override {
    const int64_t N = s.N(), Nl = c.tp.local_rows(N), C = o.n_embd;
    View xv = view(x, {Nl, C}), ln = view(a.ln1, {Nl, C});
    View mean = view(a.ln1_mean, {Nl}), rstd = view(a.ln1_rstd, {Nl});
    View dres = view(g.dres, {Nl, C}), dtmp = view(g.dtmp, {Nl, C}), dln = view(g.dln, {Nl, C});
    mlp_.backward(c, N, ln, a, dres, dln, g);  // dln = d(ln) through the MLP
    c.call(&loom_ops::copy, dtmp.get(), (const DLTensor*)dln);
    attn_.backward(c, s, ln, a, dres, dln, g);  // dln = d(ln) through the attention
    c.call(&loom_ops::add, dln.get(), (const DLTensor*)dln, (const DLTensor*)dtmp);
    ln_1_.backward(c, dtmp, dln, xv, mean, rstd);
    c.call(&loom_ops::add, dres.get(), (const DLTensor*)dres, (const DLTensor*)dtmp);
  }

 private:
  Norm ln_1_;
  AttentionBlock attn_;
  Mlp mlp_;
};

// Parameters of layer p, in checkpoint order: h.<l>.ln_1, .attn.c_attn/.c_proj, .mlp.c_fc/.c_proj
const BlockSpec kParallelBlock = {
    "parallel",
    [](ParamDeclarer& d, const std::string& p) {
      d.norm(p + ".ln_1");
      d.attention(p + ".attn");
      d.mlp(p + ".mlp");
    },
    [](const Options& o, ParamStore& ps, const std::string& p) -> std::unique_ptr<Block> {
      return std::make_unique<ParallelBlock>(o, ps, p);
    }};

loom_error* create(const loom_host* host, const loom_config* cfg,
                   const loom_model_create_args* args, loom_model** out) {
  return create_decoder(host, cfg, args, kParallelBlock, "model/gptj", out);
}

const loom_model_api kApi = decoder_api(create);

}  // namespace

LOOM_PLUGIN(
        .description =
            "GPT-J-style decoder: attention and MLP in parallel from one norm (Loom layer library)",
        .params = {kTransformerSchema, static_cast<size_t>(kTransformerSchemaSize)}, .api = &kApi,
        .capabilities = kDecoderCapabilities, .ext = &kDecoderDecode.base)
