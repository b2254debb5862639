// Loom layer library, a mixture of experts' GEMMs (see loom/cpp/layers/moe/expert_gemms.hpp).
#include "loom/cpp/layers/moe/expert_gemms.hpp"

namespace loom::layers {
namespace {

// One grouped GEMM over the experts' rows (backend.h's grouped_gemm).
void grouped(const Ctx& c, const std::vector<int64_t>& sizes, bool ta, bool tb, int64_t m,
             int64_t n, int64_t k, double beta, const DLTensor* a, const DLTensor* b, DLTensor* out,
             double alpha = 1.0) {
  loom_grouped_gemm_args g{};
  g.struct_size = LOOM_GROUPED_GEMM_ARGS_SIZE_V2_5;
  g.trans_a = ta;
  g.trans_b = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  g.num_groups = (int64_t)sizes.size();
  g.sizes = sizes.data();
  g.alpha = alpha;
  g.beta = beta;
  g.a = a;
  g.b = b;
  g.c = out;
  c.call(&loom_ops::grouped_gemm, &g);
}

// fn(expert, its FP8 GEMMs, its first row, its rows) for each local expert with rows.
template <class Fn>
void each_fp8_expert(const std::vector<int64_t>& counts, const Param& w, Fn fn) {
  require(counts.size() == w.fp8_experts.size(),
          "loom layers: " + w.name + " has FP8 GEMMs for " + std::to_string(w.fp8_experts.size()) +
              " experts, the rows " + std::to_string(counts.size()));
  int64_t r0 = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    if (counts[e] > 0) fn((int64_t)e, *w.fp8_experts[e], r0, counts[e]);
    r0 += counts[e];
  }
}

}  // namespace

void expert_linear_forward(const Ctx& c, const std::vector<int64_t>& counts, const Param& w,
                           const DLTensor* x, DLTensor* y) {
  const int64_t out = w.shape[1], in = w.shape[2];
  if (w.fp8_experts.empty())
    return grouped(c, counts, false, true, LOOM_GROUP_SIZE, out, in, 0.0, x, w.value, y);
  each_fp8_expert(counts, w, [&](int64_t e, const loom::tp::Fp8Linear& f, int64_t r0, int64_t n) {
    View xe(x, {n, in}, r0 * in), ye(y, {n, out}, r0 * out);
    f.forward(c.be, ye, xe, n, w.value, e * out, out, in);
  });
}

void expert_linear_backward_data(const Ctx& c, const std::vector<int64_t>& counts, const Param& w,
                                 const DLTensor* dy, DLTensor* dx) {
  const int64_t out = w.shape[1], in = w.shape[2];
  if (w.fp8_experts.empty())
    return grouped(c, counts, false, false, LOOM_GROUP_SIZE, in, out, 0.0, dy, w.value, dx);
  each_fp8_expert(counts, w, [&](int64_t e, const loom::tp::Fp8Linear& f, int64_t r0, int64_t n) {
    View de(dy, {n, out}, r0 * out), xe(dx, {n, in}, r0 * in);
    f.backward_data(c.be, xe, false, de, n, w.value, e * out, out, in);
  });
}

void expert_linear_backward_weight(const Ctx& c, const std::vector<int64_t>& counts, Param& w,
                                   const DLTensor* dy, const DLTensor* x, double alpha) {
  const int64_t out = w.shape[1], in = w.shape[2];
  if (w.fp8_experts.empty())
    return grouped(c, counts, true, false, out, in, LOOM_GROUP_SIZE, 1.0, dy, x, w.grad, alpha);
  View dw(w.grad, {w.shape[0] * out, in});  // the experts' rows, one after another
  each_fp8_expert(counts, w, [&](int64_t e, const loom::tp::Fp8Linear& f, int64_t r0, int64_t n) {
    View de(dy, {n, out}, r0 * out), xe(x, {n, in}, r0 * in);
    f.backward_weight(c.be, dw, de, xe, n, e * out, out, in, alpha);
  });
}

void dense_linear_forward(const Ctx& c, const Param& w, const DLTensor* x, int64_t n, DLTensor* y,
                          double beta) {
  const int64_t out = w.shape[0], in = w.shape[1];
  if (w.fp8) return w.fp8->forward(c.be, y, x, n, w.value, 0, out, in, beta);
  c.gemm(false, true, n, out, in, {x, in}, {w.value, in}, y, out, 0, beta);
}

void dense_linear_backward_data(const Ctx& c, const Param& w, const DLTensor* dy, int64_t n,
                                DLTensor* dx, double beta) {
  const int64_t out = w.shape[0], in = w.shape[1];
  if (w.fp8) return w.fp8->backward_data(c.be, dx, beta != 0.0, dy, n, w.value, 0, out, in);
  c.gemm(false, false, n, in, out, {dy, out}, {w.value, in}, dx, in, 0, beta);
}

void dense_linear_backward_weight(const Ctx& c, Param& w, const DLTensor* dy, const DLTensor* x,
                                  int64_t n) {
  const int64_t out = w.shape[0], in = w.shape[1];
  if (w.fp8) return w.fp8->backward_weight(c.be, w.grad, dy, x, n, 0, out, in);
  c.gemm(true, false, out, in, n, {dy, out}, {x, in}, w.grad, in, 0, 1.0);
}

}  // namespace loom::layers
