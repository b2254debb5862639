// Loom layer library (loom/cpp/layers/decoder/decoder.hpp has the overview): one transformer layer
// as a slot filled from a spec.
#pragma once

#include <memory>
#include <string>

#include "loom/cpp/layers/core/acts.hpp"
#include "loom/cpp/layers/core/params.hpp"

namespace loom::layers {

// ----- blocks: one transformer layer, a slot of the decoder --------------------------------
class Block {
 public:
  virtual ~Block() = default;
  // out(Nl,C) = the layer of x(Nl,C); saves in `a` what backward needs. With a cache, the
  // new keys and values are appended (generation).
  virtual void forward(const Ctx& c, const Options& o, const Step& s, const DLTensor* x,
                       DLTensor* out, LayerActs& a, LayerCache* cache, int64_t cache_max) const = 0;
  // g.dres holds d(out) on entry and d(x) on return; parameter gradients +=. Scratch: g.dln
  // and g.dtmp (the attention and MLP backwards use neither's contents on entry).
  virtual void backward(const Ctx& c, const Options& o, const Step& s, const DLTensor* x,
                        const LayerActs& a, GradScratch& g) const = 0;
};

// A layer kind: its parameters (declared under "h.<l>" in checkpoint order) and its build.
struct BlockSpec {
  const char* name;
  void (*declare)(ParamDeclarer& d, const std::string& prefix);
  std::unique_ptr<Block> (*make)(const Options& o, ParamStore& ps, const std::string& prefix);
};

// GPT-2 and Llama: out = x + attn(ln_1(x)); out += mlp(ln_2(out)).
extern const BlockSpec kPreNormBlock;
// The original BERT's: h = ln_1(x + attn(x)); out = ln_2(h + mlp(h)) (post_norm_block.cpp).
extern const BlockSpec kPostNormBlock;
// The pre-norm block with a mixture of experts (moe/moe.hpp) as its MLP (pre_norm_block.cpp).
extern const BlockSpec kMoeBlock;
// A hybrid stack's layer of kind 'M' (Mamba-2), '*' (attention), '-' (MLP) or 'E' (MoE):
// out = x + mixer(norm(x)), parameters p.norm and p.mixer / p.attn / p.mlp / p.moe.
const BlockSpec& hybrid_block(char kind);

}  // namespace loom::layers
