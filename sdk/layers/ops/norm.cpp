// Loom layer library, normalisation slot: LayerNorm (GPT-2) or RMSNorm (Llama) over the channels.
#include "loom/cpp/layers/ops/norm.hpp"

namespace loom::layers {

Norm Norm::make(const Options& o, ParamStore& ps, const std::string& prefix) {
  Norm n;
  n.kind = o.norm;
  n.eps = o.norm_eps;
  Param& w = ps.at(prefix + ".weight");
  n.w = w.value.get();
  n.dw = w.grad.get();
  if (o.norm_mean() && o.bias) {
    Param& b = ps.at(prefix + ".bias");
    n.b = b.value.get();
    n.db = b.grad.get();
  }
  return n;
}

// out(N,C) = norm(inp) * w (+ b); saves mean (layernorm only) and rstd (N) f32.
void Norm::forward(const Ctx& c, DLTensor* out, DLTensor* mean, DLTensor* rstd,
                   const DLTensor* inp) const {
  const loom_norm_fwd_args a{LOOM_NORM_FWD_ARGS_SIZE_V2,
                             kind,
                             out,
                             kind == LOOM_NORM_LAYER ? mean : nullptr,
                             rstd,
                             inp,
                             w,
                             b,
                             eps,
                             nullptr};
  c.be.call(&loom_ops::norm_forward, &a);
}

// dinp (=) from dout; dw, db +=.
void Norm::backward(const Ctx& c, DLTensor* dinp, const DLTensor* dout, const DLTensor* inp,
                    const DLTensor* mean, const DLTensor* rstd) const {
  const loom_norm_bwd_args a{LOOM_NORM_BWD_ARGS_SIZE_V2,
                             kind,
                             dinp,
                             dw,
                             db,
                             dout,
                             inp,
                             w,
                             kind == LOOM_NORM_LAYER ? mean : nullptr,
                             rstd,
                             nullptr};
  c.be.call(&loom_ops::norm_backward, &a);
}

}  // namespace loom::layers
