// Loom layer library, embeddings: out(N,C) = wte[tokens] (+ wpe[positions] for learned positions)
// (+ tokentype[types] for BERT's segments).
// wte is (padded_vocab, C); token ids are checked against the real vocabulary, so the
// padded rows are never looked up and keep a zero gradient.
#include "loom/cpp/layers/ops/embedding.hpp"

namespace loom::layers {

Embedding Embedding::make(const Options& o, ParamStore& ps, const Ctx& c) {
  Embedding e;
  e.vp.shard = loom::tp::VocabShard::make(o.vocab, o.pad_vocab_to, c.tp);
  Param& wte = ps.at("wte");
  e.wte = wte.value.get();
  e.dwte = wte.grad_or_null();
  if (o.learned_positions()) {
    Param& wpe = ps.at("wpe");
    e.wpe = wpe.value.get();
    e.dwpe = wpe.grad_or_null();
  }
  if (o.num_tokentypes > 0) {
    Param& tte = ps.at("tokentype");
    e.tte = tte.value.get();
    e.dtte = tte.grad_or_null();
  }
  return e;
}

void Embedding::forward(const Ctx& c, DLTensor* out, const DLTensor* tokens,
                        const DLTensor* positions, const DLTensor* types) const {
  loom::embedding_forward(c.be, out, tokens, wte, false);
  if (wpe) loom::embedding_forward(c.be, out, positions, wpe, true);
  if (tte) loom::embedding_forward(c.be, out, types, tte, true);
}

// dwte[tokens] += dout; dwpe[positions] += dout.
void Embedding::backward(const Ctx& c, const DLTensor* dout, const DLTensor* tokens,
                         const DLTensor* positions, const DLTensor* types) const {
  if (dwte) loom::embedding_backward(c.be, dwte, tokens, dout);
  if (wpe && dwpe) loom::embedding_backward(c.be, dwpe, positions, dout);
  if (tte && dtte) loom::embedding_backward(c.be, dtte, types, dout);
}

}  // namespace loom::layers
