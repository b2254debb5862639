// Loom layer library, normalisation slot: LayerNorm (GPT-2) or RMSNorm (Llama) over the channels.
#include "loom/cpp/layers/ops/norm.hpp"

#include "loom/cpp/norm_residual.hpp"

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

loom_norm_fwd_args Norm::fwd_args(DLTensor* out, DLTensor* mean, DLTensor* rstd,
                                  const DLTensor* inp) const {
  return {LOOM_NORM_FWD_ARGS_SIZE_V2,
          kind,
          out,
          kind == LOOM_NORM_LAYER ? mean : nullptr,
          rstd,
          inp,
          w,
          b,
          eps,
          nullptr};
}

loom_norm_bwd_args Norm::bwd_args(DLTensor* dinp, const DLTensor* dout, const DLTensor* inp,
                                  const DLTensor* mean, const DLTensor* rstd) const {
  return {LOOM_NORM_BWD_ARGS_SIZE_V2,
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
}

// out(N,C) = norm(inp) * w (+ b); saves mean (layernorm only) and rstd (N) f32.
void Norm::forward(const Ctx& c, DLTensor* out, DLTensor* mean, DLTensor* rstd,
                   const DLTensor* inp) const {
  const loom_norm_fwd_args a = fwd_args(out, mean, rstd, inp);
  c.be.call(&loom_ops::norm_forward, &a);
}

// dinp (=) from dout; dw, db +=.
void Norm::backward(const Ctx& c, DLTensor* dinp, const DLTensor* dout, const DLTensor* inp,
                    const DLTensor* mean, const DLTensor* rstd) const {
  const loom_norm_bwd_args a = bwd_args(dinp, dout, inp, mean, rstd);
  c.be.call(&loom_ops::norm_backward, &a);
}

void Norm::forward_residual(const Ctx& c, DLTensor* out, DLTensor* mean, DLTensor* rstd,
                            DLTensor* sum, const DLTensor* inp, const DLTensor* residual) const {
  if (!lends_norm_residual(c.be)) {
    c.call(&loom_ops::add, sum, inp, residual);
    return forward(c, out, mean, rstd, sum);
  }
  const loom_norm_residual r = norm_residual(residual, sum);
  loom_norm_fwd_args a = fwd_args(out, mean, rstd, inp);
  a.ext = &r.base;
  c.be.call(&loom_ops::norm_forward, &a);
}

void Norm::backward_residual(const Ctx& c, DLTensor* dres, const DLTensor* dout,
                             const DLTensor* inp, const DLTensor* mean, const DLTensor* rstd,
                             DLTensor* scratch) const {
  if (!lends_norm_residual(c.be)) {
    backward(c, scratch, dout, inp, mean, rstd);
    c.call(&loom_ops::add, dres, (const DLTensor*)dres, (const DLTensor*)scratch);
    return;
  }
  const loom_norm_residual r = norm_residual(dres, nullptr);
  loom_norm_bwd_args a = bwd_args(dres, dout, inp, mean, rstd);
  a.ext = &r.base;
  c.be.call(&loom_ops::norm_backward, &a);
}

}  // namespace loom::layers
