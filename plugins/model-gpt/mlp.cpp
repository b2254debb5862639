// model/gpt MLP slot: c_fc, GELU (tanh) or SwiGLU, c_proj.
// SwiGLU: c_fc.weight is (2F, C) with rows [gate; up]; a = silu(gate) * up (loom_ops).
#include "gpt.hpp"

namespace gpt {

Mlp Mlp::make(const Options& o, ParamStore& ps, const std::string& prefix) {
  Mlp m;
  m.swiglu = o.swiglu;
  m.fc = Linear::make(ps.at(prefix + ".c_fc.weight"),
                      o.bias ? &ps.at(prefix + ".c_fc.bias") : nullptr, 0, o.fc_out());
  m.proj = Linear::make(ps.at(prefix + ".c_proj.weight"),
                        o.bias ? &ps.at(prefix + ".c_proj.bias") : nullptr, 0, o.n_embd);
  return m;
}

// y(n,C) = c_proj(act(c_fc(x))); saves h = c_fc(x) and a = act(h).
void Mlp::forward(const Ctx& c, int64_t n, const DLTensor* x, LayerActs& a, DLTensor* y) const {
  View h = view(a.h, {n, fc.out}), act = view(a.a, {n, proj.in});
  fc.forward(c, h, x, n);
  if (swiglu)
    c.call(&loom_ops::swiglu_forward, act.get(), (const DLTensor*)h);
  else
    c.call(&loom_ops::gelu_forward, act.get(), (const DLTensor*)h);
  proj.forward(c, y, act, n);
}

// dx (=) = d(input of c_fc) from dy; parameter gradients +=.
void Mlp::backward(const Ctx& c, int64_t n, const DLTensor* x, const LayerActs& a,
                   const DLTensor* dy, DLTensor* dx, GradScratch& g) const {
  View h = view(a.h, {n, fc.out}), act = view(a.a, {n, proj.in});
  View dh = view(g.dh, {n, fc.out}), da = view(g.da, {n, proj.in});
  proj.backward(c, da, false, dy, act, n);
  if (swiglu)
    c.call(&loom_ops::swiglu_backward, dh.get(), (const DLTensor*)h, (const DLTensor*)da);
  else
    c.call(&loom_ops::gelu_backward, dh.get(), (const DLTensor*)h, (const DLTensor*)da);
  fc.backward(c, dx, false, dh, x, n);
}

}  // namespace gpt
