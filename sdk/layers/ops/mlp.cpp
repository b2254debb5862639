// Loom layer library, MLP slot: c_fc (column-parallel), GELU (tanh) or SwiGLU, c_proj
// (row-parallel). SwiGLU: c_fc.weight is (2F, C) with rows [gate; up]; a = silu(gate) * up
// (loom_ops). With tensor parallelism each rank holds its slice of gate and of up (blocks {F, F}),
// so its local rows are again [gate; up] and SwiGLU applies to the local columns unchanged.
#include "loom/cpp/layers/ops/mlp.hpp"

#include "loom/cpp/layers/ops/linear.hpp"

namespace loom::layers {

Mlp Mlp::make(const Options& o, ParamStore& ps, const std::string& prefix) {
  Mlp m;
  m.act = o.act;
  m.fc.parts = {make_linear(ps.at(prefix + ".c_fc.weight"),
                            o.bias ? &ps.at(prefix + ".c_fc.bias") : nullptr, 0, o.fc_out())};
  m.proj.lin = make_linear(ps.at(prefix + ".c_proj.weight"),
                           o.bias ? &ps.at(prefix + ".c_proj.bias") : nullptr, 0, o.n_embd);
  return m;
}

// Whether GPT-2's GELU rides on the two projections' GEMMs (loom.gemm-epilogue/1's
// BIAS_GELU into c_fc, DGELU into c_proj's input gradient): h and a come out of one GEMM, dh
// out of one, with no activation pass over them.
bool Mlp::gelu_in_gemms(const Backend& be) const {
  return act == LOOM_ACT_GELU_TANH && fc.parts.size() == 1 && !fc.parts[0].lora && !proj.lin.lora &&
         !fc.parts[0].fp8 && !proj.lin.fp8 && loom::tp::LocalLinear::gelu_fusable(be);
}

// y(nl,C) = c_proj(act(c_fc(x))); saves h = c_fc(x) and a = act(h) for the n tokens.
void Mlp::forward(const Ctx& c, int64_t n, const DLTensor* x, LayerActs& a, DLTensor* y) const {
  const int64_t F = proj.lin.in, C = proj.lin.out;
  View h = view(a.h, {n, fc.parts[0].out}), act = view(a.a, {n, F});
  View xf = view(a.ln2_full, {n, C}), yf = view(c.sp ? c.sp->y_full.get() : nullptr, {n, C});
  DLTensor* xfull = c.tp.sequence_parallel ? xf.get() : nullptr;
  if (gelu_in_gemms(c.be)) {
    fc.forward(c.be, c.tp, x, xfull, n, {act.get()}, h.get());
  } else {
    fc.forward(c.be, c.tp, x, xfull, n, {h.get()});
    loom::act_forward(c.be, this->act, act.get(), h);
  }
  proj.forward(c.be, c.tp, act, n, yf.get(), y);
}

// dx (=) = d(input of c_fc) from dy; parameter gradients +=.
void Mlp::backward(const Ctx& c, int64_t n, const DLTensor* x, const LayerActs& a,
                   const DLTensor* dy, DLTensor* dx, GradScratch& g) const {
  const int64_t F = proj.lin.in, C = proj.lin.out;
  const bool sp = c.tp.sequence_parallel;
  View h = view(a.h, {n, fc.parts[0].out}), act = view(a.a, {n, F});
  View dh = view(g.dh, {n, fc.parts[0].out}), da = view(g.da, {n, F});
  View xf = view(a.ln2_full, {n, C});
  View dyf = view(sp ? c.sp->dy_full.get() : nullptr, {n, C});
  View dxf = view(sp ? c.sp->dx_full.get() : nullptr, {n, C});
  if (a.recompute & LOOM_RECOMPUTE_MLP_ACT)  // a = act(h) again, into the shared scratch
    loom::act_forward(c.be, this->act, act.get(), h);
  if (gelu_in_gemms(c.be)) {
    proj.backward(c.be, c.tp, dy, dyf.get(), act, n, dh.get(), h.get());
  } else {
    proj.backward(c.be, c.tp, dy, dyf.get(), act, n, da);
    loom::act_backward(c.be, this->act, dh.get(), h, da);
  }
  if (sp) c.tp.all_gather(x, xf);  // the input again: layers share the gathered buffer
  fc.backward(c.be, c.tp, {dh.get()}, sp ? (const DLTensor*)xf : x, n, dx, dxf.get());
}

}  // namespace loom::layers
