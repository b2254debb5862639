// Loom layer library (loom/cpp/layers/decoder.hpp has the overview): the LM head.
#pragma once

#include <vector>

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

// decode.cpp: the next-token logits of generation, (B, vocab) f32 on the host, gathered from
// every tensor-parallel rank's vocabulary shard.
struct LogitsOut {
  Tensor logits, f32, gathered;  // (B, this rank's columns) in the compute dtype; f32 copies
  std::vector<float> host;
  // The (B, head.vocab) buffer the head writes this rank's logits into.
  View ensure(const Ctx& c, const LmHead& head, int64_t B);
  // out (B, V) host f32, V the real vocabulary, from what the head wrote.
  void to_host(const Ctx& c, const LmHead& head, int64_t B, int64_t V, float* out);
};

}  // namespace loom::layers
