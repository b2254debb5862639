// Loom layer library, linear layers: y(N,out) = x(N,in) W^T + b, W stored (out, in) — possibly a
// row slice [row0, row0+out) of a fused weight (the q/k/v parts of c_attn). The gemms are
// loom::tp::LocalLinear's; the tensor-parallel wrappers around them live in the SDK.
#include "loom/cpp/layers/ops/linear.hpp"

namespace loom::layers {

Linear make_linear(Param& w, Param* b, int64_t row0, int64_t out) {
  Linear l;
  l.w = w.value.get();
  l.dw = w.grad_or_null();  // NULL when frozen: no weight gradient
  l.lora = w.lora;
  l.fp8 = w.fp8;
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

}  // namespace loom::layers
