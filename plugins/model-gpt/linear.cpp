// model/gpt linear layers: y(N,out) = x(N,in) W^T + b, W stored (out, in) — possibly a row
// slice [row0, row0+out) of a fused weight (the q/k/v parts of c_attn).
#include "gpt.hpp"

namespace gpt {

Linear Linear::make(Param& w, Param* b, int64_t row0, int64_t out) {
  Linear l;
  l.w = w.value.get();
  l.dw = w.grad.get();
  l.row0 = row0;
  l.out = out;
  l.in = w.shape[1];
  if (b) {
    l.has_bias = true;
    l.b = View(b->value.get(), {out}, row0);
    l.db = View(b->grad.get(), {out}, row0);
  }
  return l;
}

void Linear::forward(const Ctx& c, DLTensor* y, const DLTensor* x, int64_t n) const {
  // y(n,out) = x(n,in) @ W[row0:row0+out](out,in)^T
  c.gemm(false, true, n, out, in, {x, in}, {w, in, row0 * in}, y, out, 0, 0.0);
  if (has_bias) {
    View yv = view(y, {n, out});
    c.call(&loom_ops::bias_add, yv.get(), b.get());
  }
}

void Linear::backward(const Ctx& c, DLTensor* dx, bool accumulate_dx, const DLTensor* dy,
                      const DLTensor* x, int64_t n) const {
  // dW(out,in) += dy(n,out)^T @ x(n,in)
  c.gemm(true, false, out, in, n, {dy, out}, {x, in}, dw, in, row0 * in, 1.0);
  if (has_bias) {
    View dyv = view(dy, {n, out});
    c.call(&loom_ops::bias_backward, db.get(), dyv.get());
  }
  // dx(n,in) (+)= dy(n,out) @ W(out,in)
  if (dx)
    c.gemm(false, false, n, in, out, {dy, out}, {w, in, row0 * in}, dx, in, 0,
           accumulate_dx ? 1.0 : 0.0);
}

}  // namespace gpt
