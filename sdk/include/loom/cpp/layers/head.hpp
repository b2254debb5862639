// Loom layer library (loom/cpp/layers/decoder.hpp has the overview): the LM head.
#pragma once

#include "loom/cpp/layers/params.hpp"

namespace loom::layers {

// loss.cpp: the LM head over the real vocabulary and the fused softmax cross-entropy.
// Padding: only the real rows of the (padded_vocab, C) head (of this rank's shard) are
// multiplied, so the padded logits never exist and cannot affect the loss; their rows get
// zero gradient.
struct LmHead {
  const DLTensor* w = nullptr;  // wte (tied) or lm_head.weight, (padded_vocab/tp, C)
  DLTensor* dw = nullptr;
  int64_t vocab = 0, C = 0;  // vocab: the real rows of this rank's shard
  loom::tp::VocabShard shard;

  static LmHead make(const Options& o, ParamStore& ps, const Ctx& c);
  // logits(n, vocab) = x(n,C) W[:vocab]^T; x rows `row_pitch` elements apart from `x_off`
  void forward(const Ctx& c, DLTensor* logits, const DLTensor* x, int64_t n, int64_t row_pitch,
               int64_t x_off) const;
  // dx(n,C) = dlogits W[:vocab]; dW[:vocab] += dlogits^T x
  void backward(const Ctx& c, DLTensor* dx, const DLTensor* dlogits, const DLTensor* x,
                int64_t n) const;
};

}  // namespace loom::layers
