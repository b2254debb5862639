// Loom layer library (loom/cpp/layers/decoder/decoder.hpp has the overview): the LM head.
#pragma once

#include <vector>

#include "loom/cpp/layers/core/params.hpp"

namespace loom::layers {

// head.cpp: the LM head over the real vocabulary and the fused softmax cross-entropy.
// Padding: only the real rows of the (padded_vocab, C) head (of this rank's shard) are
// multiplied, so the padded logits never exist and cannot affect the loss; their rows get
// zero gradient.
struct LmHead {
  const DLTensor* w = nullptr;  // wte (tied) or lm_head.weight, (padded_vocab/tp, C)
  DLTensor* dw = nullptr;
  int64_t vocab = 0, C = 0;  // vocab: the real rows of this rank's shard
  loom::tp::VocabShard shard;
  // The row width of the training logits: `vocab`, or after pad_logits this rank's padded
  // shard width, so that every row of bf16 logits starts 16-byte aligned. An odd width such
  // as GPT-2's 50,257 sends the head's three GEMMs down cuBLASLt's unaligned kernels (the
  // step profile measured them 6x slower than the layers' on an H200). `mask` (cols: 0, then
  // -inf) sets the padding columns to -inf after the product, so the softmax gives them
  // nothing and their dlogits are exactly 0.
  int64_t cols = 0;
  Tensor mask;

  static LmHead make(const Options& o, ParamStore& ps, const Ctx& c);
  void pad_logits(const Ctx& c);
  // logits(n, vocab) = x(n,C) W[:vocab]^T, logits rows `ld` apart, x rows `row_pitch` elements
  // apart from `x_off`; with ld == cols > vocab, all cols columns, the padding then set to -inf
  void forward(const Ctx& c, DLTensor* logits, int64_t ld, const DLTensor* x, int64_t n,
               int64_t row_pitch, int64_t x_off) const;
  // dW[:vocab] += dlogits[:, :vocab]^T x; dx(n,C) = dlogits[:, :k] W[:k], k = cols with
  // ld == cols > vocab (the padding's dlogits are 0), else vocab (dlogits rows `ld` apart)
  void backward(const Ctx& c, DLTensor* dx, const DLTensor* dlogits, int64_t ld, const DLTensor* x,
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
