// Loom layer library (loom/cpp/layers/decoder/decoder.hpp has the overview): token (and learned
// position) embeddings.
#pragma once

#include "loom/cpp/layers/core/params.hpp"

namespace loom::layers {

// embedding.cpp: tokens (and learned positions) into the residual stream. With tensor
// parallelism wte holds this rank's vocabulary rows (loom::tp::VocabParallelEmbedding);
// learned positions are added after the reduction, to this rank's token rows.
struct Embedding {
  DLTensor *wte = nullptr, *dwte = nullptr, *wpe = nullptr, *dwpe = nullptr;  // wpe: learned
  DLTensor *tte = nullptr, *dtte = nullptr;  // BERT's token types (segments), or none
  loom::tp::VocabParallelEmbedding vp;

  static Embedding make(const Options& o, ParamStore& ps, const Ctx& c);
  // Single-rank (and generation) lookup: out(N,C) = wte[tokens] + wpe[positions]
  // (+ tte[types] when the model has token types).
  void forward(const Ctx& c, DLTensor* out, const DLTensor* tokens, const DLTensor* positions,
               const DLTensor* types = nullptr) const;
  void backward(const Ctx& c, const DLTensor* dout, const DLTensor* tokens,
                const DLTensor* positions, const DLTensor* types = nullptr) const;
};

}  // namespace loom::layers
