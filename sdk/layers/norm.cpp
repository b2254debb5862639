// Loom layer library, normalisation slot: LayerNorm (GPT-2) or RMSNorm (Llama) over the channels.
#include "loom/cpp/layers/norm.hpp"

namespace loom::layers {

Norm Norm::make(const Options& o, ParamStore& ps, const std::string& prefix) {
  Norm n;
  n.rms = o.rmsnorm;
  n.eps = o.norm_eps;
  Param& w = ps.at(prefix + ".weight");
  n.w = w.value.get();
  n.dw = w.grad.get();
  if (!o.rmsnorm && o.bias) {
    Param& b = ps.at(prefix + ".bias");
    n.b = b.value.get();
    n.db = b.grad.get();
  }
  return n;
}

// out(N,C) = norm(inp) * w (+ b); saves mean (layernorm only) and rstd (N) f32.
void Norm::forward(const Ctx& c, DLTensor* out, DLTensor* mean, DLTensor* rstd,
                   const DLTensor* inp) const {
  if (rms)
    loom::rmsnorm_forward(c.be, out, rstd, inp, (const DLTensor*)w, eps);
  else
    loom::layernorm_forward(c.be, out, mean, rstd, inp, (const DLTensor*)w, (const DLTensor*)b,
                            eps);
}

// dinp (=) from dout; dw, db +=.
void Norm::backward(const Ctx& c, DLTensor* dinp, const DLTensor* dout, const DLTensor* inp,
                    const DLTensor* mean, const DLTensor* rstd) const {
  if (rms)
    loom::rmsnorm_backward(c.be, dinp, dw, dout, inp, (const DLTensor*)w, rstd);
  else
    loom::layernorm_backward(c.be, dinp, dw, db, dout, inp, (const DLTensor*)w, mean, rstd);
}

}  // namespace loom::layers
