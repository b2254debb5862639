// Loom layer library, a mixture of experts as a block's MLP (see loom/cpp/layers/moe/moe.hpp):
// the router's GEMM, the routing on the host, the experts as grouped GEMMs over the tokens
// sorted by expert, and the weighted combine, all through backend ops so that the same code
// runs on any backend. Rows are gathered and scattered with the embedding ops (a table of
// activations indexed by token), and scaled or dotted per row with batched 1 x 1 GEMMs.
#include "loom/cpp/layers/moe/moe.hpp"

#include <algorithm>

#include "loom/cpp/layers/moe/expert_gemms.hpp"
#include "loom/cpp/layers/moe/row_ops.hpp"

namespace loom::layers {
namespace {

// Host row indices to a device i32 tensor.
void upload_rows(const Ctx& c, const std::vector<int32_t>& rows, const Tensor& t) {
  if (rows.empty()) return;
  View v = view(t, {(int64_t)rows.size()});
  loom::check(c.host, c.be.api()->from_host(c.be.self(), v.get(), rows.data(), rows.size() * 4));
}

}  // namespace

void update_expert_bias(const Ctx& c, Param& bias, const std::vector<int64_t>& load, double rate) {
  const int64_t E = (int64_t)load.size();
  std::vector<double> b, step((size_t)E, 0.0);
  download(c, bias.value.get(), E, b);
  update_expert_bias(load, rate, step.data());  // +-rate or 0 per expert
  // in the buffer's precision, as Megatron's fp32 expert_bias += sign * rate
  for (int64_t e = 0; e < E; ++e)
    b[(size_t)e] = c.dtype.bits == 64 ? b[(size_t)e] + step[(size_t)e]
                                      : (double)((float)b[(size_t)e] + (float)step[(size_t)e]);
  upload(c, b, bias.value.get());
}

void MoeActs::ensure(const Ctx& c, int64_t n_tokens, int64_t m_rows, int64_t E, int64_t C) {
  n = n_tokens;
  m = m_rows;
  if (n_tokens > cap_n) {
    logits_dev = c.alloc({n_tokens, E});
    dlog = c.alloc({n_tokens, E});
    cap_n = n_tokens;
  }
  if (m_rows > cap_m || !perm_dev) {
    const int64_t r = std::max<int64_t>(m_rows, 1);
    perm_dev = c.alloc(loom_i32(), {r});
    prob_dev = c.alloc({r});
    dprob = c.alloc({r});
    xp = c.alloc({r, C});
    ye = c.alloc({r, C});
    out = c.alloc({r, C});
    d1 = c.alloc({r, C});
    d2 = c.alloc({r, C});
    cap_m = r;
  }
}

void MoeActs::ensure_local(const Ctx& c, int64_t r_rows, int64_t C, int64_t fc_out, int64_t F) {
  r = r_rows;
  if (r_rows <= cap_r && eh) return;
  const int64_t rr = std::max<int64_t>(r_rows, 1);
  eh = c.alloc({rr, fc_out});
  ea = c.alloc({rr, F});
  edh = c.alloc({rr, fc_out});
  eda = c.alloc({rr, F});
  if (c.ep.size > 1) {
    lperm_dev = c.alloc(loom_i32(), {rr});
    linv_dev = c.alloc(loom_i32(), {rr});
    xr = c.alloc({rr, C});
    xl = c.alloc({rr, C});
    yl = c.alloc({rr, C});
    yr = c.alloc({rr, C});
  }
  cap_r = rr;
}

MoeMlp MoeMlp::make(const Options& o, ParamStore& ps, const std::string& p) {
  MoeMlp m;
  m.E = o.num_experts;
  m.C = o.n_embd;
  m.F = o.moe_ffn_hidden / o.etp;  // this tensor rank's columns of each expert
  m.fc_out = o.gated() ? 2 * m.F : m.F;
  m.split = o.etp > 1;
  m.act = o.act;
  m.cfg = o.moe_router;
  m.aux_coeff = o.moe_aux_coeff;
  m.z_coeff = o.moe_z_coeff;
  m.router = &ps.at(p + ".router.weight");
  if (o.moe_expert_bias) m.expert_bias = &ps.at(p + ".router.expert_bias");
  m.w1 = &ps.at(p + ".experts.c_fc.weight");
  m.w2 = &ps.at(p + ".experts.c_proj.weight");
  if (o.bias) {
    m.b1 = &ps.at(p + ".experts.c_fc.bias");
    m.b2 = &ps.at(p + ".experts.c_proj.bias");
  }
  if (o.moe_shared_hidden > 0) {
    m.S = o.moe_shared_hidden / o.etp;  // this tensor rank's columns
    m.s_fc_out = o.gated() ? 2 * m.S : m.S;
    m.s1 = &ps.at(p + ".shared.c_fc.weight");
    m.s2 = &ps.at(p + ".shared.c_proj.weight");
    if (o.bias) {
      m.sb1 = &ps.at(p + ".shared.c_fc.bias");
      m.sb2 = &ps.at(p + ".shared.c_proj.bias");
    }
    if (o.moe_shared_gate) m.sg = &ps.at(p + ".shared.gate.weight");
  }
  m.balancing = o.moe_balancing == "none"           ? Balancing::kNone
                : o.moe_balancing == "seq_aux_loss" ? Balancing::kPerSequence
                                                    : Balancing::kMicroBatch;
  return m;
}

void MoeMlp::forward(const Ctx& c, const Step& s, const DLTensor* x, LayerActs& a,
                     DLTensor* y) const {
  if (!a.moe) a.moe = std::make_shared<MoeActs>();
  MoeActs& m = *a.moe;
  const int64_t N = s.N(), K = cfg.topk;
  m.ensure(c, N, m.cap_m, E, C);
  // the router in the compute dtype, its logits to the host in float64
  View lg = view(m.logits_dev, {N, E});
  c.gemm(false, true, N, E, C, {x, C}, {router->value.get(), C}, lg.get(), E, 0, 0.0);
  download(c, lg, N * E, m.logits);
  std::vector<double> bias;
  if (expert_bias) download(c, expert_bias->value.get(), E, bias);
  m.routing = route(cfg, m.logits.data(), N, expert_bias ? bias.data() : nullptr);
  // the losses now, their gradients (scaled as the objective's terms) kept for backward
  m.dlogits.assign((size_t)(N * E), 0.0);
  // Under context parallelism this rank holds 1/cp of every sequence: each loss is its share
  // of the whole micro-batch's (the top-k counts summed over the context group).
  SplitTokens parts;
  parts.parts = c.cp.size;
  if (c.cp.size > 1) parts.sum = [&](std::vector<double>& f) { sum_over(c, c.cp, f); };
  a.moe_aux = balancing == Balancing::kNone
                  ? 0.0
                  : aux_loss(cfg, m.logits.data(), N, aux_coeff,
                             balancing == Balancing::kPerSequence ? s.T : 0, s.moe_grad_scale,
                             m.dlogits.data(), nullptr, &parts);
  a.moe_z = z_coeff > 0 ? z_loss(m.logits.data(), N, E, z_coeff, s.moe_grad_scale, m.dlogits.data(),
                                 c.cp.size)
                        : 0.0;
  // the kept choices grouped by expert, tokens in order within an expert
  m.counts.assign((size_t)E, 0);
  m.perm.clear();
  m.choice.clear();
  std::vector<double> prob;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t i = 0; i < N * K; ++i)
      if (m.routing.kept[(size_t)i] && m.routing.expert[(size_t)i] == e) {
        m.perm.push_back((int32_t)(i / K));
        m.choice.push_back(i);
        prob.push_back(m.routing.prob[(size_t)i]);
        ++m.counts[(size_t)e];
      }
  const int64_t M = (int64_t)m.perm.size();
  m.ensure(c, N, M, E, C);
  if (M > 0) {
    View pd = view(m.perm_dev, {M});
    loom::check(c.host, c.be.api()->from_host(c.be.self(), pd.get(), m.perm.data(), M * 4));
    upload(c, prob, m.prob_dev.get());
  }
  c.call(&loom_ops::fill, y, 0.0);
  if (S > 0) shared_forward(c, m, N, x, y);
  if (M == 0 && c.ep.size == 1) return;  // under EP other ranks' rows may still come
  View xp = view(m.xp, {M, C}), ye = view(m.ye, {M, C});
  if (M > 0) loom::embedding_forward(c.be, xp.get(), view(m.perm_dev, {M}), x, false);
  if (c.ep.size == 1) {
    m.ensure_local(c, M, C, fc_out, F);
    experts_forward(c, m, m.counts, M, xp, ye.get());
  } else {
    dispatch(c, m, xp);
    View xl = view(m.xl, {m.r, C}), yl = view(m.yl, {m.r, C});
    experts_forward(c, m, m.lcounts, m.r, xl, yl.get());
    combine(c, m, yl, ye.get());
  }
  if (M == 0) return;
  if (split) c.tp.all_reduce(ye.get());  // each tensor rank's columns' part of every row
  // y[n] += prob * ye[row] for every kept choice of n
  View out = view(m.out, {M, C});
  scale_rows(c, view(m.prob_dev, {M}), ye, out.get(), M, C);
  loom::embedding_backward(c.be, y, view(m.perm_dev, {M}), out);
}

// fn(e, rows of expert e as a (count, cols) view of t, expert e's (cols) slice of the (E,
// cols) per-expert tensor w) for every expert with rows.
template <class Fn>
static void each_expert(const std::vector<int64_t>& counts, const DLTensor* t, DLTensor* w,
                        int64_t cols, Fn&& fn) {
  int64_t r0 = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    if (counts[e] > 0) {
      View rows = view(t, {counts[e], cols}, r0 * cols);
      View we = view(w, {cols}, (int64_t)e * cols);
      fn(rows, we);
    }
    r0 += counts[e];
  }
}
// out (rows, cols) += the bias (E, cols) of each expert over its rows.
static void add_expert_bias(const Ctx& c, const std::vector<int64_t>& counts, Param* b,
                            const DLTensor* out, int64_t cols) {
  each_expert(counts, out, b->value.get(), cols,
              [&](View& rows, View& be) { loom::bias_add(c.be, rows.get(), be); });
}
// dbias (E, cols) += scale * the column sums of each expert's rows of dout.
static void expert_bias_backward(const Ctx& c, const std::vector<int64_t>& counts, Param* b,
                                 const DLTensor* dout, int64_t cols, double scale) {
  if (scale == 1.0) {
    each_expert(counts, dout, b->grad.get(), cols,
                [&](View& rows, View& db) { loom::bias_backward(c.be, db.get(), rows); });
    return;
  }
  Tensor sums = c.alloc(c.grad_dtype(), b->shape);
  c.call(&loom_ops::fill, sums.get(), 0.0);
  each_expert(counts, dout, sums.get(), cols,
              [&](View& rows, View& db) { loom::bias_backward(c.be, db.get(), rows); });
  c.call(&loom_ops::axpby, b->grad.get(), scale, (const DLTensor*)sums.get(), 1.0);
}

// h = x W1_e^T + b1_e; a = act(h); y = a W2_e^T + b2_e, each local expert's rows at once.
void MoeMlp::experts_forward(const Ctx& c, MoeActs& m, const std::vector<int64_t>& counts,
                             int64_t R, const DLTensor* x, DLTensor* y) const {
  if (R == 0) return;
  View h = view(m.eh, {R, fc_out}), av = view(m.ea, {R, F});
  expert_linear_forward(c, counts, *w1, x, h.get());
  if (b1) add_expert_bias(c, counts, b1, h, fc_out);
  loom::act_forward(c.be, act, av.get(), h);
  expert_linear_forward(c, counts, *w2, av, y);
  if (b2 && (!split || c.tp.rank == 0)) add_expert_bias(c, counts, b2, y, C);  // once
}

// From dy: the local experts' parameter gradients (scaled by 1/EP, moe.hpp) and dx (=).
void MoeMlp::experts_backward(const Ctx& c, MoeActs& m, const std::vector<int64_t>& counts,
                              int64_t R, const DLTensor* x, const DLTensor* dy,
                              DLTensor* dx) const {
  if (R == 0) return;
  const double g = 1.0 / (double)c.ep.size;
  View h = view(m.eh, {R, fc_out}), av = view(m.ea, {R, F});
  View da = view(m.eda, {R, F}), dh = view(m.edh, {R, fc_out});
  using T = const DLTensor*;
  const std::vector<int64_t> n = counts;  // what a deferred W reads, by value
  if (b2)
    param_grad(
        c, [=, this](const Ctx& k, T d) { expert_bias_backward(k, n, b2, d, C, g); }, dy);
  param_grad(
      c, [=, this](const Ctx& k, T d, T a) { expert_linear_backward_weight(k, n, *w2, d, a, g); },
      dy, (T)av.get());
  expert_linear_backward_data(c, counts, *w2, dy, da.get());
  loom::act_backward(c.be, act, dh.get(), h, da);
  if (b1)
    param_grad(
        c, [=, this](const Ctx& k, T d) { expert_bias_backward(k, n, b1, d, fc_out, g); },
        (T)dh.get());
  param_grad(
      c, [=, this](const Ctx& k, T d, T xi) { expert_linear_backward_weight(k, n, *w1, d, xi, g); },
      (T)dh.get(), x);
  expert_linear_backward_data(c, counts, *w1, dh, dx);
}

// Megatron's all-to-all dispatcher. Every rank learns every rank's rows per expert (one sum
// over the group), sends each expert's rows to its rank and orders what it receives by local
// expert, then by source rank: the grouped GEMMs see each local expert's rows together.
void MoeMlp::dispatch(const Ctx& c, MoeActs& m, const DLTensor* xp) const {
  const int P = c.ep.size;
  const int64_t El = E / P, e0 = c.ep.rank * El, M = m.m;
  std::vector<double> all((size_t)(P * E), 0.0);  // (P, E): rows of rank i for expert e
  for (int64_t e = 0; e < E; ++e) all[(size_t)(c.ep.rank * E + e)] = (double)m.counts[(size_t)e];
  sum_over(c, c.ep, all);
  auto rows = [&](int64_t i, int64_t le) { return (int64_t)all[(size_t)(i * E + e0 + le)]; };
  m.send.assign((size_t)P, 0);
  m.recv.assign((size_t)P, 0);
  m.lcounts.assign((size_t)El, 0);
  for (int64_t e = 0; e < E; ++e) m.send[(size_t)(e / El)] += m.counts[(size_t)e];
  std::vector<int64_t> start((size_t)P, 0);  // of rank i's rows in the received block
  int64_t R = 0;
  for (int64_t i = 0; i < P; ++i) {
    start[(size_t)i] = R;
    for (int64_t le = 0; le < El; ++le) {
      m.recv[(size_t)i] += rows(i, le);
      m.lcounts[(size_t)le] += rows(i, le);
    }
    R += m.recv[(size_t)i];
  }
  m.lperm.clear();
  for (int64_t le = 0; le < El; ++le)
    for (int64_t i = 0; i < P; ++i) {
      int64_t at = start[(size_t)i];
      for (int64_t l = 0; l < le; ++l) at += rows(i, l);
      for (int64_t k = 0; k < rows(i, le); ++k) m.lperm.push_back((int32_t)(at + k));
    }
  m.linv.assign((size_t)R, 0);
  for (int64_t r = 0; r < R; ++r) m.linv[(size_t)m.lperm[(size_t)r]] = (int32_t)r;
  m.ensure_local(c, R, C, fc_out, F);
  upload_rows(c, m.lperm, m.lperm_dev);
  upload_rows(c, m.linv, m.linv_dev);
  View in = view(xp, {M, C}), xr = view(m.xr, {R, C});
  loom::check(c.host, loom::comm_all_to_all_v(c.ep.comm, c.ep.group, in, xr.get(), m.send.data(),
                                              m.recv.data(), c.ep.stream));
  if (R > 0)
    loom::embedding_forward(c.be, view(m.xl, {R, C}).get(), view(m.lperm_dev, {R}), xr, false);
}

// The experts' rows yl (local-expert order) back to the ranks their tokens came from: ye.
void MoeMlp::combine(const Ctx& c, MoeActs& m, const DLTensor* yl, DLTensor* ye) const {
  const int64_t R = m.r, M = m.m;
  View yr = view(m.yr, {R, C}), out = view(ye, {M, C});
  if (R > 0) loom::embedding_forward(c.be, yr.get(), view(m.linv_dev, {R}), yl, false);
  loom::check(c.host, loom::comm_all_to_all_v(c.ep.comm, c.ep.group, yr, out.get(), m.recv.data(),
                                              m.send.data(), c.ep.stream));
}

void MoeMlp::backward(const Ctx& c, const Step& s, const DLTensor* x, const LayerActs& a,
                      const DLTensor* dy, DLTensor* dx) const {
  MoeActs& m = *a.moe;
  const int64_t N = s.N(), M = m.m, K = cfg.topk;
  c.call(&loom_ops::fill, dx, 0.0);
  if (S > 0) shared_backward(c, m, N, x, dy, dx);
  std::vector<double> dprob((size_t)(N * K), 0.0);
  View perm = view(m.perm_dev, {M}), d1 = view(m.d1, {M, C}), d2 = view(m.d2, {M, C});
  if (M > 0) {
    View ye = view(m.ye, {M, C}), dp = view(m.dprob, {M});
    loom::embedding_forward(c.be, d1.get(), perm, dy, false);  // d(out) rows = dy[perm]
    row_dots(c, d1, ye, dp.get(), M, C);                       // d(prob) = d(out) . ye
    std::vector<double> dpm;
    download(c, dp, M, dpm);
    for (int64_t r = 0; r < M; ++r) dprob[(size_t)m.choice[(size_t)r]] = dpm[(size_t)r];
    scale_rows(c, view(m.prob_dev, {M}), d1, d2.get(), M, C);  // d(ye) = prob * d(out)
  }
  if (c.ep.size == 1) {
    experts_backward(c, m, m.counts, M, view(m.xp, {M, C}), d2, d1.get());
  } else {  // d(ye) to the experts' ranks, d(xp) back (the dispatcher's transpose)
    const int64_t R = m.r;
    View dyr = view(m.yr, {R, C}), dyl = view(m.yl, {R, C}), dxl = view(m.xr, {R, C});
    loom::check(c.host, loom::comm_all_to_all_v(c.ep.comm, c.ep.group, d2, dyr.get(), m.send.data(),
                                                m.recv.data(), c.ep.stream));
    if (R > 0) loom::embedding_forward(c.be, dyl.get(), view(m.lperm_dev, {R}), dyr, false);
    experts_backward(c, m, m.lcounts, R, view(m.xl, {R, C}), dyl, dxl.get());
    combine(c, m, dxl, d1.get());
  }
  if (M > 0 && split) c.tp.all_reduce(d1.get());            // d(xp): a part per rank
  if (M > 0) loom::embedding_backward(c.be, dx, perm, d1);  // dx[perm] += d(xp)
  // the router: the combine weights' gradient and the losses' (from the forward)
  std::vector<double> dlogits = m.dlogits;
  route_backward(cfg, m.routing, m.logits.data(), dprob.data(), dlogits.data());
  View dl = view(m.dlog, {N, E});
  upload(c, dlogits, dl.get());
  c.gemm(false, false, N, C, E, {dl, E}, {router->value.get(), C}, dx, C, 0, 1.0);
  View xv(x, {N, C});
  param_grad(
      c,
      [=, this](const Ctx& k, const DLTensor* d, const DLTensor* xi) {
        k.gemm(true, false, E, C, N, {d, E}, {xi, C}, router->grad.get(), C, 0, 1.0);
      },
      (const DLTensor*)dl.get(), (const DLTensor*)xv.get());
}

}  // namespace loom::layers
