// Loom layer library, embeddings: out(N,C) = wte[tokens] (+ wpe[positions] for learned positions).
// wte is (padded_vocab, C); token ids are checked against the real vocabulary, so the
// padded rows are never looked up and keep a zero gradient.
#include "loom/cpp/layers/embedding.hpp"

namespace loom::layers {

Embedding Embedding::make(const Options& o, ParamStore& ps, const Ctx& c) {
  Embedding e;
  e.vp.shard = loom::tp::VocabShard::make(o.vocab, o.pad_vocab_to, c.tp);
  Param& wte = ps.at("wte");
  e.wte = wte.value.get();
  e.dwte = wte.grad.get();
  if (!o.rope) {
    Param& wpe = ps.at("wpe");
    e.wpe = wpe.value.get();
    e.dwpe = wpe.grad.get();
  }
  return e;
}

void Embedding::forward(const Ctx& c, DLTensor* out, const DLTensor* tokens,
                        const DLTensor* positions) const {
  c.call(&loom_ops::embedding_forward, out, tokens, (const DLTensor*)wte, 0);
  if (wpe) c.call(&loom_ops::embedding_forward, out, positions, (const DLTensor*)wpe, 1);
}

// dwte[tokens] += dout; dwpe[positions] += dout.
void Embedding::backward(const Ctx& c, const DLTensor* dout, const DLTensor* tokens,
                         const DLTensor* positions) const {
  c.call(&loom_ops::embedding_backward, dwte, tokens, dout);
  if (wpe) c.call(&loom_ops::embedding_backward, dwpe, positions, dout);
}

}  // namespace loom::layers
