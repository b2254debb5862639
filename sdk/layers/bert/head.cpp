// Loom layer library, BERT's heads (Megatron's BertLMHead, Pooler and binary head); see
// loom/cpp/layers/bert/bert.hpp.
#include <algorithm>
#include <vector>

#include "loom/cpp/layers/bert/bert.hpp"

namespace loom::layers {

void BertActs::ensure(const Ctx& c, int64_t N, int64_t B, int64_t C, int64_t K, bool lm) {
  if ((!lm || (h && h.numel() >= N * C)) && pre && pre.numel() >= B * C && blogits.numel() >= B * K)
    return;
  const DLDataType st = c.stat_dtype();
  if (lm) {  // the LM head's transform (not the classifier's)
    h = c.alloc({N, C}), g = c.alloc({N, C}), n = c.alloc({N, C}), dn = c.alloc({N, C});
    n_mean = c.alloc(st, {N}), n_rstd = c.alloc(st, {N});
  }
  pre = c.alloc({B, C}), pooled = c.alloc({B, C}), dpooled = c.alloc({B, C});
  blogits = c.alloc({B, K}), blosses = c.alloc(st, {B}), labels = c.alloc(loom_i32(), {B});
}

BertHead BertHead::make(const Options& o, ParamStore& ps, int64_t real_vocab) {
  BertHead b;
  b.C = o.n_embd;
  b.act = o.act;
  if (o.classifier) {  // the pooler and the classifier only
    b.has_binary = true;
    b.classes = o.num_classes;
    b.pooler = make_linear(ps.at("pooler.dense.weight"), &ps.at("pooler.dense.bias"), 0, o.n_embd);
    b.binary = make_linear(ps.at("classifier.weight"), &ps.at("classifier.bias"), 0, b.classes);
    return b;
  }
  b.dense = make_linear(ps.at("lm_head.dense.weight"), &ps.at("lm_head.dense.bias"), 0, o.n_embd);
  b.norm = Norm::make(o, ps, "lm_head.norm");
  Param& bias = ps.at("lm_head.bias");
  b.bias = View(bias.value.get(), {real_vocab});
  b.dbias = View(bias.grad.get(), {real_vocab});
  b.has_binary = o.binary_head;
  if (b.has_binary) {
    b.pooler = make_linear(ps.at("pooler.dense.weight"), &ps.at("pooler.dense.bias"), 0, o.n_embd);
    b.binary = make_linear(ps.at("binary_head.weight"), &ps.at("binary_head.bias"), 0, 2);
  }
  return b;
}

void BertHead::transform_forward(const Ctx& c, BertActs& a, const DLTensor* x, int64_t N) const {
  View h = view(a.h, {N, C}), g = view(a.g, {N, C}), n = view(a.n, {N, C});
  View mean = view(a.n_mean, {N}), rstd = view(a.n_rstd, {N});
  dense.forward(c.be, h, x, N);
  loom::act_forward(c.be, act, g.get(), h);
  norm.forward(c, n, mean, rstd, g);
}

void BertHead::transform_backward(const Ctx& c, BertActs& a, const DLTensor* x, DLTensor* dx,
                                  int64_t N) const {
  View h = view(a.h, {N, C}), g = view(a.g, {N, C}), dn = view(a.dn, {N, C});
  View mean = view(a.n_mean, {N}), rstd = view(a.n_rstd, {N}), d = view(dx, {N, C});
  norm.backward(c, d, dn, g, mean, rstd);         // dx = d(g), dx as scratch
  loom::act_backward(c.be, act, dn.get(), h, d);  // dn = d(h)
  dense.backward(c.be, d, false, dn, x, N);       // dx = d(x)
}

double BertHead::binary_forward(const Ctx& c, BertActs& a, const DLTensor* x, int64_t B, int64_t T,
                                bool grad, double dloss, const int32_t* labels_host,
                                double* correct) const {
  View pre = view(a.pre, {B, C}), pooled = view(a.pooled, {B, C});
  View logits = view(a.blogits, {B, classes}), losses = view(a.blosses, {B});
  View labels = view(a.labels, {B});
  // pre(B,C) = x[CLS](B,C) Wp^T: the [CLS] rows are T rows apart
  c.gemm(false, true, B, C, C, {x, T * C}, {pooler.w, C}, pre, C, 0, 0.0);
  loom::bias_add(c.be, pre.get(), pooler.b);
  loom::act_forward(c.be, LOOM_ACT_TANH, pooled.get(), pre);
  binary.forward(c.be, logits, pooled, B);
  if (correct) {  // argmax before the loss turns the logits into their gradient
    std::vector<double> l((size_t)(B * classes));
    if (c.dtype.bits == 64) {
      loom::check(c.host, c.be.api()->to_host(c.be.self(), logits, l.data(), l.size() * 8));
    } else {
      Tensor wide = c.alloc(loom_f32(), {B, classes});
      c.call(&loom_ops::copy, wide.get(), (const DLTensor*)logits);
      std::vector<float> f(l.size());
      loom::check(c.host, c.be.api()->to_host(c.be.self(), wide.get(), f.data(), f.size() * 4));
      l.assign(f.begin(), f.end());
    }
    *correct = 0;
    for (int64_t b = 0; b < B; ++b) {
      const double* row = l.data() + b * classes;
      *correct += std::max_element(row, row + classes) - row == labels_host[b];
    }
  }
  loom::softmax_cross_entropy(c.be, losses.get(), grad ? logits.get() : nullptr, logits, labels,
                              dloss);
  std::vector<double> host(B);
  if (c.stat_dtype().bits == 64) {
    loom::check(c.host, c.be.api()->to_host(c.be.self(), losses, host.data(), B * sizeof(double)));
  } else {
    std::vector<float> f(B);
    loom::check(c.host, c.be.api()->to_host(c.be.self(), losses, f.data(), B * sizeof(float)));
    host.assign(f.begin(), f.end());
  }
  double sum = 0;
  for (double l : host) sum += l;
  return sum;
}

void BertHead::binary_backward(const Ctx& c, BertActs& a, const DLTensor* x, DLTensor* dx,
                               int64_t B, int64_t T) const {
  View pre = view(a.pre, {B, C}), pooled = view(a.pooled, {B, C});
  View dpooled = view(a.dpooled, {B, C}), dlogits = view(a.blogits, {B, classes});
  binary.backward(c.be, dpooled, false, dlogits, pooled, B);
  loom::act_backward(c.be, LOOM_ACT_TANH, dpooled.get(), pre, dpooled);  // d(pre), in place
  // dWp += d(pre)^T x[CLS]; dbp += colsum d(pre); dx[CLS] += d(pre) Wp
  c.gemm(true, false, C, C, B, {dpooled, C}, {x, T * C}, pooler.dw, C, 0, 1.0);
  loom::bias_backward(c.be, pooler.db.get(), dpooled);
  c.gemm(false, false, B, C, C, {dpooled, C}, {pooler.w, C}, dx, T * C, 0, 1.0);
}

}  // namespace loom::layers
