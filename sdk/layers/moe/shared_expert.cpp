// Loom layer library, a mixture of experts' shared expert (see loom/cpp/layers/moe/moe.hpp):
// an MLP every token goes through beside its routed experts (DeepSeek's, Qwen2-MoE's), and,
// with moe_shared_expert_gate, its output scaled per token by sigmoid(x . shared.gate):
//   h = x W1^T (+ b1); a = act(h); z = a W2^T (+ b2)   shared.c_fc, shared.c_proj
//   g = sigmoid(x wg^T) (N)                          shared.gate.weight (1, C)
//   y += g * z   (gateless: y += z)
// The gate's logits go to the host in float64 as the router's do, so that its sigmoid and
// derivative are computed alike on every backend. Under expert tensor parallelism (split) the
// shared expert is split over the tensor group as a dense MLP is (W1's gate;up rows, W2's
// columns): z is summed over the group before its bias and the gate, and so is the MLP's part
// of dx in backward.
#include <cmath>

#include "loom/cpp/layers/moe/expert_gemms.hpp"
#include "loom/cpp/layers/moe/moe.hpp"
#include "loom/cpp/layers/moe/row_ops.hpp"

namespace loom::layers {

void MoeMlp::shared_forward(const Ctx& c, MoeActs& m, int64_t N, const DLTensor* x,
                            DLTensor* y) const {
  if (!m.sh || m.sh.get()->shape[0] < N) {
    m.sh = c.alloc({N, s_fc_out});
    m.sa = c.alloc({N, S});
    m.dsh = c.alloc({N, s_fc_out});
    m.dsa = c.alloc({N, S});
    if (sg || split) {
      m.sz = c.alloc({N, C});
      m.dsz = c.alloc({N, C});
    }
    if (sg) m.sgl = c.alloc({N});
  }
  View h = view(m.sh, {N, s_fc_out}), av = view(m.sa, {N, S});
  dense_linear_forward(c, *s1, x, N, h.get(), 0.0);
  if (sb1) loom::bias_add(c.be, h.get(), sb1->value.get());
  loom::act_forward(c.be, act, av.get(), h);
  if (!sg && !split) {
    dense_linear_forward(c, *s2, av, N, y, 1.0);
    if (sb2) loom::bias_add(c.be, y, sb2->value.get());
    return;
  }
  View z = view(m.sz, {N, C}), gz = view(m.dsz, {N, C}), gl = view(m.sgl, {N});
  dense_linear_forward(c, *s2, av, N, z.get(), 0.0);
  if (split) c.tp.all_reduce(z.get());  // each tensor rank's columns' part
  if (sb2) loom::bias_add(c.be, z.get(), sb2->value.get());
  if (!sg) {
    c.call(&loom_ops::add, y, (const DLTensor*)y, (const DLTensor*)z);
    return;
  }
  c.gemm(false, true, N, 1, C, {x, C}, {sg->value.get(), C}, gl.get(), 1, 0, 0.0);
  download(c, gl, N, m.gate);
  for (double& g : m.gate) g = 1.0 / (1.0 + std::exp(-g));
  upload(c, m.gate, gl.get());  // from here m.sgl holds g
  scale_rows(c, gl, z, gz.get(), N, C);
  c.call(&loom_ops::add, y, (const DLTensor*)y, (const DLTensor*)gz);
}

// The shared expert's parameter gradients from dy (N,C); dx (N,C) += its input gradient.
void MoeMlp::shared_backward(const Ctx& c, MoeActs& m, int64_t N, const DLTensor* x,
                             const DLTensor* dy, DLTensor* dx) const {
  View h = view(m.sh, {N, s_fc_out}), av = view(m.sa, {N, S});
  View dh = view(m.dsh, {N, s_fc_out}), da = view(m.dsa, {N, S});
  using T = const DLTensor*;
  View dyv(dy, {N, C}), xv(x, {N, C});
  if (sg) {  // dz = g * dy; d(logit) = (dy . z) g (1 - g) through the gate, into m.sgl
    View z = view(m.sz, {N, C}), dz = view(m.dsz, {N, C}), gl = view(m.sgl, {N});
    scale_rows(c, gl, dyv, dz.get(), N, C);
    row_dots(c, dyv, z, gl.get(), N, C);
    std::vector<double> dlogit;
    download(c, gl, N, dlogit);
    for (int64_t n = 0; n < N; ++n) {
      const double g = m.gate[(size_t)n];
      dlogit[(size_t)n] *= g * (1.0 - g);
    }
    upload(c, dlogit, gl.get());
    param_grad(
        c,
        [=, this](const Ctx& k, T d, T xi) {
          k.gemm(true, false, 1, C, N, {d, 1}, {xi, C}, sg->grad.get(), C, 0, 1.0);
        },
        (T)gl.get(), (T)xv.get());
    c.gemm(false, false, N, C, 1, {gl, 1}, {sg->value.get(), C}, dx, C, 0, 1.0);
    dyv = dz;  // the rest as without a gate, from dz
  }
  param_grad(
      c,
      [=, this](const Ctx& k, T d, T a) {
        if (sb2) loom::bias_backward(k.be, sb2->grad.get(), d);
        dense_linear_backward_weight(k, *s2, d, a, N);
      },
      (T)dyv.get(), (T)av.get());
  dense_linear_backward_data(c, *s2, dyv, N, da.get(), 0.0);
  loom::act_backward(c.be, act, dh.get(), h, da);
  param_grad(
      c,
      [=, this](const Ctx& k, T d, T xi) {
        if (sb1) loom::bias_backward(k.be, sb1->grad.get(), d);
        dense_linear_backward_weight(k, *s1, d, xi, N);
      },
      (T)dh.get(), (T)xv.get());
  if (!split) {
    dense_linear_backward_data(c, *s1, dh, N, dx, 1.0);
    return;
  }
  // this rank's columns' part of the MLP's dx, summed over the group (dz's buffer is free)
  View part = view(m.dsz, {N, C});
  dense_linear_backward_data(c, *s1, dh, N, part.get(), 0.0);
  c.tp.all_reduce(part.get());
  c.call(&loom_ops::add, dx, (const DLTensor*)dx, (const DLTensor*)part);
}

}  // namespace loom::layers
