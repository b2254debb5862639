// Loom layer library, LM head and loss. The head multiplies only the first `vocab` rows of its
// (padded_vocab, C) weight: the padded logits are never computed (sliced before the loss),
// so they cannot affect the loss. dlogits is computed in place over the logits buffer by
// the fused softmax_cross_entropy (see DecoderModel::run).
#include "loom/cpp/layers/head.hpp"

namespace loom::layers {

LmHead LmHead::make(const Options& o, ParamStore& ps, const Ctx& c) {
  LmHead h;
  Param& w = ps.at(o.tie_embeddings ? "wte" : "lm_head.weight");
  h.w = w.value.get();
  h.dw = w.grad.get();
  h.shard = loom::tp::VocabShard::make(o.vocab, o.pad_vocab_to, c.tp);
  h.vocab = h.shard.real;
  h.C = o.n_embd;
  return h;
}

void LmHead::forward(const Ctx& c, DLTensor* logits, const DLTensor* x, int64_t n,
                     int64_t row_pitch, int64_t x_off) const {
  // logits(n,V) = x(n,C) @ W[:V](V,C)^T
  c.gemm(false, true, n, vocab, C, {x, row_pitch, x_off}, {w, C}, logits, vocab, 0, 0.0);
}

void LmHead::backward(const Ctx& c, DLTensor* dx, const DLTensor* dlogits, const DLTensor* x,
                      int64_t n) const {
  // dW[:V](V,C) += dlogits(n,V)^T @ x(n,C)
  c.gemm(true, false, vocab, C, n, {dlogits, vocab}, {x, C}, dw, C, 0, 1.0);
  // dx(n,C) = dlogits(n,V) @ W[:V](V,C)
  c.gemm(false, false, n, C, vocab, {dlogits, vocab}, {w, C}, dx, C, 0, 0.0);
}

}  // namespace loom::layers
