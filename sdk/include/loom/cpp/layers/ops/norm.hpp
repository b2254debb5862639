// Loom layer library (loom/cpp/layers/decoder/decoder.hpp has the overview): LayerNorm / RMSNorm.
#pragma once

#include <string>

#include "loom/cpp/layers/core/params.hpp"

namespace loom::layers {

// norm.cpp
struct Norm {
  loom_norm_kind kind = LOOM_NORM_LAYER;
  double eps = 1e-5;
  DLTensor *w = nullptr, *dw = nullptr, *b = nullptr, *db = nullptr;  // b null: no bias

  static Norm make(const Options& o, ParamStore& ps, const std::string& prefix);
  void forward(const Ctx& c, DLTensor* out, DLTensor* mean, DLTensor* rstd,
               const DLTensor* inp) const;
  // dinp = (written); dw, db +=
  void backward(const Ctx& c, DLTensor* dinp, const DLTensor* dout, const DLTensor* inp,
                const DLTensor* mean, const DLTensor* rstd) const;
};

}  // namespace loom::layers
