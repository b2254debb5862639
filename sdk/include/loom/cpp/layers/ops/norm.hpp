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
  // A block's residual add and this norm: sum = inp + residual (sum may alias either), then
  // forward of sum. One pass where the backend lends loom.norm-residual/1, else the add op
  // and forward: the same numbers.
  void forward_residual(const Ctx& c, DLTensor* out, DLTensor* mean, DLTensor* rstd, DLTensor* sum,
                        const DLTensor* inp, const DLTensor* residual) const;
  // dres += this norm's input gradient from dout (inp: the forward's sum); dw, db +=. One
  // pass where the backend lends loom.norm-residual/1, else backward into `scratch` (N,C)
  // and the add op: the same numbers.
  void backward_residual(const Ctx& c, DLTensor* dres, const DLTensor* dout, const DLTensor* inp,
                         const DLTensor* mean, const DLTensor* rstd, DLTensor* scratch) const;

 private:
  loom_norm_fwd_args fwd_args(DLTensor* out, DLTensor* mean, DLTensor* rstd,
                              const DLTensor* inp) const;
  loom_norm_bwd_args bwd_args(DLTensor* dinp, const DLTensor* dout, const DLTensor* inp,
                              const DLTensor* mean, const DLTensor* rstd) const;
};

}  // namespace loom::layers
