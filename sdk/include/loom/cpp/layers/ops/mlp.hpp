// Loom layer library (loom/cpp/layers/decoder/decoder.hpp has the overview): the MLP (GELU or
// SwiGLU).
#pragma once

#include <string>

#include "loom/cpp/layers/core/acts.hpp"
#include "loom/cpp/layers/core/params.hpp"

namespace loom::layers {

// mlp.cpp
struct Mlp {
  loom::tp::ColumnParallelLinear fc;
  loom::tp::RowParallelLinear proj;
  loom_act_kind act = LOOM_ACT_GELU_TANH;  // the backend activation between the two

  static Mlp make(const Options& o, ParamStore& ps, const std::string& prefix);
  bool gelu_in_gemms(const Backend& be) const;
  void forward(const Ctx& c, int64_t n, const DLTensor* x, LayerActs& a, DLTensor* y) const;
  void backward(const Ctx& c, int64_t n, const DLTensor* x, const LayerActs& a, const DLTensor* dy,
                DLTensor* dx, GradScratch& g) const;
};

}  // namespace loom::layers
