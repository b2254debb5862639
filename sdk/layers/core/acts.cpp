// Loom layer library: the buffers a layer saves for its backward (LayerActs) and the gradient
// scratch the backwards share (GradScratch), grown to the largest micro-batch seen.
#include "loom/cpp/layers/core/acts.hpp"

#include <algorithm>
#include <vector>

namespace loom::layers {

// ----- buffers -----------------------------------------------------------------------------
namespace {
// Rows of this rank's part of n tokens: n/tp (rounded up: capacity) with sequence parallelism.
int64_t local_capacity(const Ctx& c, int64_t n) {
  return c.tp.sequence_parallel ? (n + c.tp.size - 1) / c.tp.size : n;
}
}  // namespace

void LayerActs::ensure(const Ctx& c, const Options& o, int64_t n, uint32_t modules,
                       const LayerActs* shared, bool modules_only) {
  if (n <= rows) return;
  const int64_t C = o.n_embd, nl = local_capacity(c, n);
  const DLDataType st = c.stat_dtype();
  recompute = shared ? modules : 0;
  // t: its own buffer; or the shared set's (a recomputed module's, `from` the shared tensor);
  // or, building the shared set itself (modules_only), nothing outside the modules.
  auto put = [&](Tensor& t, uint32_t module, std::vector<int64_t> shape, DLDataType dt,
                 Tensor LayerActs::*field) {
    if (recompute & module)
      t = Tensor::borrow((shared->*field).get());
    else if (!modules_only || (modules & module))
      t = c.alloc(dt, std::move(shape));
  };
  put(ln1, LOOM_RECOMPUTE_LAYERNORM, {nl, C}, c.dtype, &LayerActs::ln1);
  put(ln2, LOOM_RECOMPUTE_LAYERNORM, {nl, C}, c.dtype, &LayerActs::ln2);
  if (c.tp.sequence_parallel && !modules_only) {
    // The gathered inputs of the column-parallel projections: one buffer all layers share
    // (SpScratch::x_full), re-gathered from the kept shard in backward, so that a layer
    // keeps its norm activations at 1/tp of the tokens, as Megatron's sequence parallelism.
    const bool shared_full = c.sp && c.sp->x_full && c.sp->x_full.get()->shape[0] >= n;
    ln1_full = shared_full ? Tensor::borrow(c.sp->x_full.get()) : c.alloc({n, C});
    ln2_full = shared_full ? Tensor::borrow(c.sp->x_full.get()) : c.alloc({n, C});
  }
  if (o.norm_mean()) {
    put(ln1_mean, 0, {nl}, st, nullptr);
    put(ln2_mean, 0, {nl}, st, nullptr);
  }
  put(ln1_rstd, 0, {nl}, st, nullptr);
  put(ln2_rstd, 0, {nl}, st, nullptr);
  put(q, 0, {n, o.q_dim()}, c.dtype, nullptr);
  put(k, 0, {n, o.kv_dim()}, c.dtype, nullptr);
  put(v, 0, {n, o.kv_dim()}, c.dtype, nullptr);
  if (o.qk_norm) {
    put(q_in, 0, {n, o.q_dim()}, c.dtype, nullptr);
    put(k_in, 0, {n, o.kv_dim()}, c.dtype, nullptr);
    if (o.norm_mean()) {
      put(qn_mean, 0, {n * o.hq()}, st, nullptr);
      put(kn_mean, 0, {n * o.hkv()}, st, nullptr);
    }
    put(qn_rstd, 0, {n * o.hq()}, st, nullptr);
    put(kn_rstd, 0, {n * o.hkv()}, st, nullptr);
  }
  if (o.mla) {
    const int64_t qr = o.q_lora_rank, r = o.kv_lora_rank;
    if (qr > 0) {
      put(mla_cq_in, 0, {n, qr}, c.dtype, nullptr);
      put(mla_cq, 0, {n, qr}, c.dtype, nullptr);
      if (o.norm_mean()) put(mla_cq_mean, 0, {n}, st, nullptr);
      put(mla_cq_rstd, 0, {n}, st, nullptr);
    }
    put(mla_ckv, 0, {n, r + o.qk_pos_dim}, c.dtype, nullptr);
    put(mla_c_in, 0, {n, r}, c.dtype, nullptr);
    put(mla_c, 0, {n, r}, c.dtype, nullptr);
    if (o.norm_mean()) put(mla_c_mean, 0, {n}, st, nullptr);
    put(mla_c_rstd, 0, {n}, st, nullptr);
    put(mla_o, 0, {n, o.hq() * o.v_head_dim}, c.dtype, nullptr);
  }
  if (o.has_kind('M')) {
    const int64_t di = o.m_inner(), cd = o.m_conv_dim(), gs = o.m_groups() * o.mamba_state;
    put(m_z, 0, {n, di}, c.dtype, nullptr);
    put(m_xbc_in, 0, {n, cd}, c.dtype, nullptr);
    put(m_dt, 0, {n, o.m_heads()}, c.dtype, nullptr);
    put(m_xbc, 0, {n, cd}, c.dtype, nullptr);
    put(m_x, 0, {n, di}, c.dtype, nullptr);
    put(m_B, 0, {n, gs}, c.dtype, nullptr);
    put(m_C, 0, {n, gs}, c.dtype, nullptr);
    put(m_y, 0, {n, di}, c.dtype, nullptr);
    put(m_yn, 0, {n, di}, c.dtype, nullptr);
    put(m_rstd, 0, {n * o.m_groups()}, st, nullptr);
  }
  put(att, LOOM_RECOMPUTE_CORE_ATTN, {n, o.q_dim()}, c.dtype, &LayerActs::att);
  // f32 as attention.h has it; in f64 runs under context parallelism f64, since the ring's
  // backward computes its probabilities from the merged lse (loom.attention-partial/1)
  put(lse, LOOM_RECOMPUTE_CORE_ATTN, {n * o.hq()}, c.cp.size > 1 ? st : loom_f32(),
      &LayerActs::lse);
  put(res2, 0, {nl, C}, c.dtype, nullptr);
  put(h, 0, {n, o.fc_out()}, c.dtype, nullptr);
  put(a, LOOM_RECOMPUTE_MLP_ACT, {n, o.ffn()}, c.dtype, &LayerActs::a);
  rows = n;
}

void GradScratch::ensure(const Ctx& c, const Options& o, int64_t n) {
  if (n <= rows) return;
  const int64_t nl = local_capacity(c, n);
  dres = c.alloc({nl, o.n_embd});
  dtmp = c.alloc({nl, o.n_embd});
  dln = c.alloc({n, std::max(o.n_embd, o.q_dim())});
  dq = c.alloc({n, o.q_dim()});
  dk = c.alloc({n, o.kv_dim()});
  dv = c.alloc({n, o.kv_dim()});
  if (o.qk_norm) {
    dq_in = c.alloc({n, o.q_dim()});
    dk_in = c.alloc({n, o.kv_dim()});
  }
  dh = c.alloc({n, o.fc_out()});
  da = c.alloc({n, o.ffn()});
  if (o.has_kind('M')) {
    const int64_t di = o.m_inner(), cd = o.m_conv_dim(), gs = o.m_groups() * o.mamba_state;
    for (Tensor* t : {&m_dz, &m_dx, &m_dy, &m_dyn}) *t = c.alloc({n, di});
    for (Tensor* t : {&m_dxbc_in, &m_dxbc}) *t = c.alloc({n, cd});
    for (Tensor* t : {&m_dB, &m_dC}) *t = c.alloc({n, gs});
    m_ddt = c.alloc({n, o.m_heads()});
  }
  rows = n;
}

}  // namespace loom::layers
