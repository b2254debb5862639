// The backend table plugins get while train.timers is on (step_timer.hpp): the backend's own
// slots, each op inside a StepTimer::Scope of its kind with the work it must do at least
// (FLOPs of the matrix products, bytes of every tensor read and written once).
//
// GEMMs are sorted by their transposes, as the layer library and Megatron's linear layers
// issue them: Y = X W^T (trans_b) is a forward, dX = dY W (neither) an input gradient, and
// dW += dY^T X (trans_a) a weight gradient.
#include <algorithm>
#include <cstring>

#include "session/step_timer.hpp"

namespace loom::engine {
namespace {

// The backend's own table: static storage of its library, which stays loaded for the process,
// so a plugin that kept the timed table past the timer still reaches the backend.
const loom_ops* g_raw = nullptr;
loom_ops g_timed{};

double elem(const DLTensor* t) { return t ? (double)loom_dtype_bytes(t->dtype) : 0.0; }

TimeKind gemm_kind(int trans_a, int trans_b) {
  return trans_a ? TimeKind::gemm_wgrad : trans_b ? TimeKind::gemm_fwd : TimeKind::gemm_dgrad;
}

loom_error* gemm(loom_backend* be, const loom_gemm_args* a) {
  if (a == nullptr) return g_raw->gemm(be, a);
  const double m = (double)a->m, n = (double)a->n, k = (double)a->k, b = (double)a->batch;
  const Work w{2 * m * n * k * b, b * (m * k * elem(a->a) + k * n * elem(a->b) +
                                       m * n * elem(a->c) * (a->beta != 0 ? 2 : 1))};
  StepTimer::Scope s(gemm_kind(a->trans_a, a->trans_b), w);
  return g_raw->gemm(be, a);
}

loom_error* grouped_gemm(loom_backend* be, const loom_grouped_gemm_args* a) {
  if (a == nullptr) return g_raw->grouped_gemm(be, a);
  double rows = 0;
  for (int64_t g = 0; g < a->num_groups && a->sizes; ++g) rows += (double)a->sizes[g];
  // The group extent summed over the groups: sum_g 2 m_g n k or sum_g 2 m n k_g.
  const double m = a->m == LOOM_GROUP_SIZE ? rows : (double)a->m;
  const double k = a->k == LOOM_GROUP_SIZE ? rows : (double)a->k;
  const Work w{2 * m * (double)a->n * k, tensor_bytes(a->a) + tensor_bytes(a->b) +
                                             tensor_bytes(a->c) * (a->beta != 0 ? 2 : 1)};
  StepTimer::Scope s(gemm_kind(a->trans_a, a->trans_b), w);
  return g_raw->grouped_gemm(be, a);
}

// An args slot of one kind whose bytes `W` counts.
template <class Args, loom_error* (*const loom_ops::*Slot)(loom_backend*, const Args*), TimeKind K,
          double (*W)(const Args&)>
loom_error* timed(loom_backend* be, const Args* a) {
  StepTimer::Scope s(K, Work{0, a ? W(*a) : 0});
  return (g_raw->*Slot)(be, a);
}

double w_bias_add(const loom_bias_add_args& a) {
  return 2 * tensor_bytes(a.out) + tensor_bytes(a.bias);
}
double w_bias_bwd(const loom_bias_bwd_args& a) {
  return tensor_bytes(a.dout) + 2 * tensor_bytes(a.dbias);
}
double w_ssq(const loom_sum_squares_args& a) {
  double b = 0;
  for (size_t i = 0; i < a.n && a.x; ++i) b += tensor_bytes(a.x[i]);
  return b;
}
double w_emb_fwd(const loom_embedding_fwd_args& a) {
  return tensor_bytes(a.out) * (a.accumulate ? 3 : 2) +
         tensor_bytes(a.ids);  // rows read, out written
}
double w_emb_bwd(const loom_embedding_bwd_args& a) {
  return 3 * tensor_bytes(a.dout) + tensor_bytes(a.ids);
}
// A norm carrying loom.norm-residual/1 also reads the residual, and the forward writes the sum.
double residual_bytes(const loom_ext* chain) {
  const loom_ext* e = loom_ext_find(chain, LOOM_EXT_NORM_RESIDUAL);
  if (e == nullptr || e->struct_size < LOOM_NORM_RESIDUAL_SIZE_V1) return 0;
  const auto* r = reinterpret_cast<const loom_norm_residual*>(e);
  return tensor_bytes(r->residual) + tensor_bytes(r->sum);
}
double w_norm_fwd(const loom_norm_fwd_args& a) {
  return tensor_bytes(a.out) + tensor_bytes(a.mean) + tensor_bytes(a.rstd) + tensor_bytes(a.inp) +
         tensor_bytes(a.weight) + tensor_bytes(a.bias) + residual_bytes(a.ext);
}
double w_norm_bwd(const loom_norm_bwd_args& a) {
  return tensor_bytes(a.dinp) + 2 * tensor_bytes(a.dweight) + 2 * tensor_bytes(a.dbias) +
         tensor_bytes(a.dout) + tensor_bytes(a.inp) + tensor_bytes(a.weight) +
         tensor_bytes(a.mean) + tensor_bytes(a.rstd) + residual_bytes(a.ext);
}
double w_act_fwd(const loom_act_fwd_args& a) { return tensor_bytes(a.out) + tensor_bytes(a.inp); }
double w_act_bwd(const loom_act_bwd_args& a) {
  return tensor_bytes(a.dinp) + tensor_bytes(a.inp) + tensor_bytes(a.dout);
}
double w_softmax(const loom_softmax_args& a) { return 2 * tensor_bytes(a.s) + tensor_bytes(a.lse); }
double w_softmax_bwd(const loom_softmax_bwd_args& a) {
  return tensor_bytes(a.ds) + tensor_bytes(a.p) + tensor_bytes(a.dp);
}
double w_rope(const loom_rope_args& a) { return 2 * tensor_bytes(a.x); }
double w_ce(const loom_cross_entropy_args& a) {
  return tensor_bytes(a.losses) + tensor_bytes(a.dlogits) + tensor_bytes(a.logits) +
         tensor_bytes(a.targets);
}
double w_ce_stats(const loom_vocab_ce_stats_args& a) {
  return tensor_bytes(a.stats) + tensor_bytes(a.logits) + tensor_bytes(a.targets);
}
double w_ce_bwd(const loom_vocab_ce_bwd_args& a) {
  return tensor_bytes(a.dlogits) + tensor_bytes(a.logits) + tensor_bytes(a.targets) +
         tensor_bytes(a.lse);
}

// A strided copy reads and writes its block.
double w_copy_strided(const loom_copy_strided_args& a) {
  return a.dst ? 2.0 * (double)(a.rows * a.cols) * (double)loom_dtype_bytes(a.dst->dtype) : 0.0;
}

// Mamba-2 (ABI 2.22). The convolution reads and writes its tensors once (the taps stay in
// cache). The scan's floor is a chunked scan's (SSD) matrix products: per step and head, its
// causal half of the chunk's L x (N + P) products and the 2 N P of the state's, forward; the
// backward twice that, as a linear layer's. Bytes: every tensor once, the chunk states too.
double w_conv_fwd(const loom_ssm_conv_args& a) {
  return tensor_bytes(a.out) + tensor_bytes(a.x) + tensor_bytes(a.weight) + tensor_bytes(a.bias) +
         2 * tensor_bytes(a.state);
}
double w_conv_bwd(const loom_ssm_conv_bwd_args& a) {
  return tensor_bytes(a.dx) + 2 * tensor_bytes(a.dweight) + 2 * tensor_bytes(a.dbias) +
         tensor_bytes(a.dout) + tensor_bytes(a.x) + tensor_bytes(a.weight) + tensor_bytes(a.bias);
}
template <class Args>
double scan_flops(const Args& a) {
  if (a.x == nullptr || a.B == nullptr || a.x->ndim != 4 || a.B->ndim != 4) return 0;
  const double b = (double)a.x->shape[0], T = (double)a.x->shape[1], H = (double)a.x->shape[2];
  const double P = (double)a.x->shape[3], N = (double)a.B->shape[3];
  const double L = std::min(T, (double)std::max<int64_t>(a.chunk, 1));
  return 2 * b * H * T * (L * (N + P) / 2 + 2 * N * P);
}
double scan_inputs_bytes(const DLTensor* x, const DLTensor* dt, const DLTensor* B,
                         const DLTensor* C) {
  return tensor_bytes(x) + tensor_bytes(dt) + tensor_bytes(B) + tensor_bytes(C);
}
loom_error* ssm_scan_forward(loom_backend* be, const loom_ssm_scan_args* a) {
  if (a == nullptr) return g_raw->ssm_scan_forward(be, a);
  const Work w{scan_flops(*a), tensor_bytes(a->y) + scan_inputs_bytes(a->x, a->dt, a->B, a->C) +
                                   tensor_bytes(a->chunk_states) + 2 * tensor_bytes(a->state)};
  StepTimer::Scope s(TimeKind::ssm, w);
  return g_raw->ssm_scan_forward(be, a);
}
loom_error* ssm_scan_backward(loom_backend* be, const loom_ssm_scan_bwd_args* a) {
  if (a == nullptr) return g_raw->ssm_scan_backward(be, a);
  const Work w{2 * scan_flops(*a),
               tensor_bytes(a->dy) + scan_inputs_bytes(a->x, a->dt, a->B, a->C) +
                   scan_inputs_bytes(a->dx, a->ddt, a->dB, a->dC) + tensor_bytes(a->chunk_states)};
  StepTimer::Scope s(TimeKind::ssm, w);
  return g_raw->ssm_scan_backward(be, a);
}

// The positional slots (fill, copy, add, axpby): elementwise passes.
loom_error* fill(loom_backend* be, DLTensor* t, double v) {
  StepTimer::Scope s(TimeKind::elementwise, Work{0, tensor_bytes(t)});
  return g_raw->fill(be, t, v);
}
loom_error* copy(loom_backend* be, DLTensor* dst, const DLTensor* src) {
  StepTimer::Scope s(TimeKind::elementwise, Work{0, tensor_bytes(dst) + tensor_bytes(src)});
  return g_raw->copy(be, dst, src);
}
loom_error* add(loom_backend* be, DLTensor* out, const DLTensor* a, const DLTensor* b) {
  StepTimer::Scope s(TimeKind::elementwise,
                     Work{0, tensor_bytes(out) + tensor_bytes(a) + tensor_bytes(b)});
  return g_raw->add(be, out, a, b);
}
loom_error* axpby(loom_backend* be, DLTensor* y, double alpha, const DLTensor* x, double beta) {
  StepTimer::Scope s(TimeKind::elementwise,
                     Work{0, tensor_bytes(y) * (beta != 0 ? 2 : 1) + tensor_bytes(x)});
  return g_raw->axpby(be, y, alpha, x, beta);
}

// Host <-> device copies (the backend table's own slots, not ops).
const loom_backend_api* g_raw_api = nullptr;
loom_error* to_host(loom_backend* be, const DLTensor* src, void* dst, size_t bytes) {
  StepTimer::Scope s(TimeKind::transfer, Work{0, (double)bytes});
  return g_raw_api->to_host(be, src, dst, bytes);
}
loom_error* from_host(loom_backend* be, DLTensor* dst, const void* src, size_t bytes) {
  StepTimer::Scope s(TimeKind::transfer, Work{0, (double)bytes});
  return g_raw_api->from_host(be, dst, src, bytes);
}

void build_timed_ops(const loom_ops* raw) {
  g_raw = raw;
  // The sizes and any slot not listed below pass straight through (an older backend's
  // shorter table leaves the rest NULL).
  g_timed = loom_ops{};
  std::memcpy(&g_timed, raw, std::min(raw->struct_size, sizeof g_timed));
  using O = loom_ops;
  using K = TimeKind;
  g_timed.gemm = gemm;
  g_timed.bias_add = timed<loom_bias_add_args, &O::bias_add, K::bias, w_bias_add>;
  g_timed.bias_backward = timed<loom_bias_bwd_args, &O::bias_backward, K::bias, w_bias_bwd>;
  g_timed.fill = fill;
  g_timed.copy = copy;
  g_timed.add = add;
  g_timed.axpby = axpby;
  g_timed.sum_squares = timed<loom_sum_squares_args, &O::sum_squares, K::grad_norm, w_ssq>;
  g_timed.embedding_forward =
      timed<loom_embedding_fwd_args, &O::embedding_forward, K::embedding, w_emb_fwd>;
  g_timed.embedding_backward =
      timed<loom_embedding_bwd_args, &O::embedding_backward, K::embedding, w_emb_bwd>;
  g_timed.norm_forward = timed<loom_norm_fwd_args, &O::norm_forward, K::norm, w_norm_fwd>;
  g_timed.norm_backward = timed<loom_norm_bwd_args, &O::norm_backward, K::norm, w_norm_bwd>;
  g_timed.act_forward = timed<loom_act_fwd_args, &O::act_forward, K::activation, w_act_fwd>;
  g_timed.act_backward = timed<loom_act_bwd_args, &O::act_backward, K::activation, w_act_bwd>;
  g_timed.softmax_forward = timed<loom_softmax_args, &O::softmax_forward, K::softmax, w_softmax>;
  g_timed.softmax_backward =
      timed<loom_softmax_bwd_args, &O::softmax_backward, K::softmax, w_softmax_bwd>;
  g_timed.rope_forward = timed<loom_rope_args, &O::rope_forward, K::rope, w_rope>;
  g_timed.rope_backward = timed<loom_rope_args, &O::rope_backward, K::rope, w_rope>;
  g_timed.softmax_cross_entropy =
      timed<loom_cross_entropy_args, &O::softmax_cross_entropy, K::loss, w_ce>;
  g_timed.vocab_ce_stats = timed<loom_vocab_ce_stats_args, &O::vocab_ce_stats, K::loss, w_ce_stats>;
  g_timed.vocab_ce_backward =
      timed<loom_vocab_ce_bwd_args, &O::vocab_ce_backward, K::loss, w_ce_bwd>;
  if (raw->struct_size >= LOOM_OPS_SIZE_V2_5 && raw->grouped_gemm)
    g_timed.grouped_gemm = grouped_gemm;
  if (raw->struct_size >= LOOM_OPS_SIZE_V2_21 && raw->copy_strided)
    g_timed.copy_strided =
        timed<loom_copy_strided_args, &O::copy_strided, K::elementwise, w_copy_strided>;
  if (raw->struct_size >= LOOM_OPS_SIZE_V2_22) {
    if (raw->ssm_conv_forward)
      g_timed.ssm_conv_forward =
          timed<loom_ssm_conv_args, &O::ssm_conv_forward, K::ssm, w_conv_fwd>;
    if (raw->ssm_conv_backward)
      g_timed.ssm_conv_backward =
          timed<loom_ssm_conv_bwd_args, &O::ssm_conv_backward, K::ssm, w_conv_bwd>;
    if (raw->ssm_scan_forward) g_timed.ssm_scan_forward = ssm_scan_forward;
    if (raw->ssm_scan_backward) g_timed.ssm_scan_backward = ssm_scan_backward;
  }
}

}  // namespace

// Static storage, as a backend's own table is: plugins keep the pointer for their lifetime.
loom_backend_api g_timed_api{};

loom_backend_ref StepTimer::timed_backend() const {
  if (g_raw_api != be_.api) {
    build_timed_ops(be_.api->ops);
    g_raw_api = be_.api;
    g_timed_api = loom_backend_api{};
    std::memcpy(&g_timed_api, be_.api, std::min(be_.api->struct_size, sizeof g_timed_api));
    g_timed_api.ops = &g_timed;
    g_timed_api.to_host = to_host;
    g_timed_api.from_host = from_host;
  }
  return {&g_timed_api, be_.self};
}

}  // namespace loom::engine
