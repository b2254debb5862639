// Loom layer library, LM head and loss. The padded rows of the (padded_vocab, C) weight cannot
// affect the loss: generation multiplies only the first `vocab` rows, and training's aligned
// buffer sets the padding's logits to -inf, so their probability and dlogits are exactly 0
// and the weight gradient keeps to the real rows. dlogits is computed in place over the logits
// buffer by the fused softmax_cross_entropy (see DecoderModel::run).
#include "loom/cpp/layers/ops/head.hpp"

#include <algorithm>
#include <limits>
#include <vector>

#include "loom/cpp/gemm_epilogue.hpp"

namespace loom::layers {

LmHead LmHead::make(const Options& o, ParamStore& ps, const Ctx& c) {
  LmHead h;
  Param& w = ps.at(o.tie_embeddings ? "wte" : "lm_head.weight");
  h.w = w.value.get();
  h.dw = w.grad_or_null();  // NULL when frozen (LoRA)
  h.shard = loom::tp::VocabShard::make(o.vocab, o.pad_vocab_to, c.tp);
  h.vocab = h.shard.real;
  h.cols = h.vocab;
  h.C = o.n_embd;
  return h;
}

// The mask is made once per head: f32 on the host, cast on the device (copy converts).
void LmHead::pad_logits(const Ctx& c) {
  if (vocab == 0 || shard.rows <= vocab) return;
  cols = shard.rows;
  std::vector<float> m((size_t)cols, 0.0f);
  std::fill(m.begin() + vocab, m.end(), -std::numeric_limits<float>::infinity());
  Tensor staged = c.alloc(loom_f32(), {cols});
  loom::check(c.host,
              c.be.api()->from_host(c.be.self(), staged.get(), m.data(), m.size() * sizeof(float)));
  mask = c.alloc({cols});
  c.call(&loom_ops::copy, mask.get(), (const DLTensor*)staged.get());
}

// With the padded width (ld == cols > vocab) the forward and the input gradient run over all
// `cols` columns: an odd extent along the vocabulary (GPT-2's 50,257) is the GEMMs' M or K,
// and the H200 profile measured those two head GEMMs 6-8x over their floor even with aligned
// rows, while the weight gradient (vocabulary as N) reached 70 % of it. The padding columns
// compute x W_pad^T and the mask turns them to -inf; their dlogits are then exactly 0, so they
// add nothing to dx, and the weight gradient keeps to the real rows: W_pad never changes.
void LmHead::forward(const Ctx& c, DLTensor* logits, int64_t ld, const DLTensor* x, int64_t n,
                     int64_t row_pitch, int64_t x_off) const {
  const bool padded = ld == cols && cols > vocab;
  // logits(n,cols) += mask: the padding columns -inf, the others unchanged (x + 0 = x); in
  // the GEMM's epilogue where the backend lends one, else a bias_add pass over the logits
  const bool fused = padded && (gemm_epilogue_kinds(c.be) & LOOM_EPILOGUE_BIAS);
  const loom_gemm_epilogue e = gemm_epilogue(LOOM_EPILOGUE_BIAS, mask.get(), nullptr);
  // logits(n, V or cols) = x(n,C) @ W[:V or :cols](.,C)^T, rows ld apart
  c.gemm(false, true, n, padded ? cols : vocab, C, {x, row_pitch, x_off}, {w, C}, logits, ld, 0,
         0.0, fused ? &e.base : nullptr);
  if (padded && !fused) loom::bias_add(c.be, logits, mask.get());
}

void LmHead::backward(const Ctx& c, DLTensor* dx, const DLTensor* dlogits, int64_t ld,
                      const DLTensor* x, int64_t n) const {
  const int64_t k = ld == cols && cols > vocab ? cols : vocab;
  // dW[:V](V,C) += dlogits(n,:V)^T @ x(n,C); in a split backward, at its W (dlogits and x
  // are the slot's, kept until then: views of them suffice)
  const View dl(dlogits, std::vector<int64_t>(dlogits->shape, dlogits->shape + dlogits->ndim));
  const View xv(x, std::vector<int64_t>(x->shape, x->shape + x->ndim));
  if (dw)
    loom::weight_grad(c.be, [this, &c, dl, xv, ld, n] {
      c.gemm(true, false, vocab, C, n, {dl, ld}, {xv, C}, dw, C, 0, 1.0);
    });
  // dx(n,C) = dlogits(n,:k) @ W[:k](k,C)   (the padding's dlogits are 0)
  c.gemm(false, false, n, C, k, {dlogits, ld}, {w, C}, dx, C, 0, 0.0);
}

}  // namespace loom::layers
