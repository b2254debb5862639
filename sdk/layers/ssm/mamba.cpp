// Loom layer library, Mamba-2's mixer (ssm/mamba.hpp has the equations). The convolution, the
// scan and the gated norm are backend ops (ABI 2.22); in_proj's three outputs land in three
// buffers (one column-parallel linear with three parts), and the convolution's output is cut
// into x, B and C with strided copies, so every op sees compact tensors.
#include "loom/cpp/layers/ssm/mamba.hpp"

#include "loom/cpp/layers/ops/linear.hpp"

namespace loom::layers {

MambaMixer MambaMixer::make(const Options& o, ParamStore& ps, const std::string& prefix) {
  MambaMixer m;
  m.H = o.m_heads();
  m.P = o.mamba_head_dim;
  m.G = o.m_groups();
  m.S = o.mamba_state;
  m.chunk = o.mamba_chunk;
  m.eps = o.norm_eps;
  Param& w = ps.at(prefix + ".in_proj.weight");
  Param* b = o.bias ? &ps.at(prefix + ".in_proj.bias") : nullptr;
  m.in_proj.parts = {make_linear(w, b, 0, m.di()), make_linear(w, b, m.di(), m.cd()),
                     make_linear(w, b, m.di() + m.cd(), m.H)};
  m.out_proj.lin = make_linear(ps.at(prefix + ".out_proj.weight"),
                               o.bias ? &ps.at(prefix + ".out_proj.bias") : nullptr, 0, o.n_embd);
  auto take = [&](const char* name, View& value, View& grad) {
    Param& p = ps.at(prefix + name);
    value = p.value;
    grad = p.grad;
  };
  take(".conv1d.weight", m.conv_w, m.conv_dw);
  take(".conv1d.bias", m.conv_b, m.conv_db);
  take(".dt_bias", m.dt_bias, m.ddt_bias);
  take(".A_log", m.A_log, m.dA_log);
  take(".D", m.D, m.dD);
  take(".norm.weight", m.norm_w, m.norm_dw);
  return m;
}

namespace {
// x (n, di), B and C (n, G*S) out of the convolution's (n, cd) rows, or back (pack).
void split_xbc(const Ctx& c, const MambaMixer& m, int64_t n, DLTensor* xbc, DLTensor* x,
               DLTensor* B, DLTensor* C, bool pack) {
  const int64_t cd = m.cd(), di = m.di(), gs = m.gs();
  if (pack) {
    loom::copy_strided(c.be, xbc, cd, 0, x, di, 0, n, di);
    loom::copy_strided(c.be, xbc, cd, di, B, gs, 0, n, gs);
    loom::copy_strided(c.be, xbc, cd, di + gs, C, gs, 0, n, gs);
    return;
  }
  loom::copy_strided(c.be, x, di, 0, xbc, cd, 0, n, di);
  loom::copy_strided(c.be, B, gs, 0, xbc, cd, di, n, gs);
  loom::copy_strided(c.be, C, gs, 0, xbc, cd, di + gs, n, gs);
}

// The scan's state before each chunk, for the step's B sequences of T tokens: grown here, as
// its size follows the step's shape rather than its token count.
std::vector<int64_t> states_shape(const MambaMixer& m, const Step& s) {
  return {s.B, (s.T + m.chunk - 1) / m.chunk, m.H, m.P, m.S};
}
View chunk_states(const Ctx& c, const MambaMixer& m, const Step& s, LayerActs& a) {
  const std::vector<int64_t> shape = states_shape(m, s);
  const int64_t need = shape[0] * shape[1] * m.H * m.P * m.S;
  if (!a.m_states || loom_tensor_numel(a.m_states.get()) < need)
    a.m_states = c.alloc(c.stat_dtype(), {need});
  return view(a.m_states, shape);
}
}  // namespace

// y(Nl,C) = out_proj(norm(scan(conv(in_proj(x))))).
void MambaMixer::forward(const Ctx& c, const Step& s, const DLTensor* x, LayerActs& a, DLTensor* y,
                         LayerCache* cache) const {
  loom::require(s.docs == nullptr,
                "model/gpt: a Mamba layer over packed documents would carry its state from one "
                "document into the next; Mamba hybrids train on whole rows for now "
                "(data.reset_position_ids / packed sequences off)",
                LOOM_ERR_UNIMPLEMENTED);
  const int64_t n = s.N(), B = s.B, T = s.T, C = out_proj.lin.out;
  const bool sp = c.tp.sequence_parallel;
  View z = view(a.m_z, {n, di()}), xin = view(a.m_xbc_in, {n, cd()}), dt = view(a.m_dt, {n, H});
  View xf = view(a.ln1_full, {n, C});
  in_proj.forward(c.be, c.tp, x, sp ? xf.get() : nullptr, n, {z.get(), xin.get(), dt.get()});
  if (cache) {
    forward_cached(c, s, a, *cache);
  } else {
    View xbc = view(a.m_xbc, {B, T, cd()});
    loom::ssm_conv_forward(c.be, xbc.get(), view(a.m_xbc_in, {B, T, cd()}), conv_w, conv_b, true,
                           nullptr);
    split_xbc(c, *this, n, xbc, a.m_x.get(), a.m_B.get(), a.m_C.get(), false);
    View st = chunk_states(c, *this, s, a);
    loom::ssm_scan_forward(c.be, view(a.m_y, {B, T, H, P}).get(), view(a.m_x, {B, T, H, P}),
                           view(a.m_dt, {B, T, H}), A_log, view(a.m_B, {B, T, G, S}),
                           view(a.m_C, {B, T, G, S}), D, dt_bias, chunk, st.get(), nullptr);
  }
  View yn = view(a.m_yn, {n, di()});
  loom::gated_rmsnorm_forward(c.be, yn.get(), view(a.m_rstd, {n * G}).get(), view(a.m_y, {n, di()}),
                              z, norm_w, eps, di() / G);
  View yf = view(c.sp ? c.sp->y_full.get() : nullptr, {n, C});
  out_proj.forward(c.be, c.tp, yn, n, yf.get(), y);
}

// Generation: each sequence b continues from cache row s.row(b)'s convolution inputs and scan
// state; one at position 0 starts from zero (a new sequence in a reused row).
void MambaMixer::forward_cached(const Ctx& c, const Step& s, LayerActs& a,
                                LayerCache& cache) const {
  const int64_t T = s.T, K1 = cache.k ? cache.k.get()->shape[1] : 0;
  for (int64_t b = 0; b < s.B; ++b) {
    const int64_t row = s.row(b);
    View conv_state = view(cache.k, {1, K1, cd()}, row * K1 * cd());
    View state = view(cache.v, {1, H, P, S}, row * H * P * S);
    if (s.start(b) == 0) {
      if (K1 > 0) c.call(&loom_ops::fill, conv_state.get(), 0.0);
      c.call(&loom_ops::fill, state.get(), 0.0);
    }
    loom::ssm_conv_forward(c.be, view(a.m_xbc, {1, T, cd()}, b * T * cd()).get(),
                           view(a.m_xbc_in, {1, T, cd()}, b * T * cd()), conv_w, conv_b, true,
                           K1 > 0 ? conv_state.get() : nullptr);
  }
  split_xbc(c, *this, s.N(), a.m_xbc.get(), a.m_x.get(), a.m_B.get(), a.m_C.get(), false);
  for (int64_t b = 0; b < s.B; ++b) {
    View state = view(cache.v, {1, H, P, S}, s.row(b) * H * P * S);
    loom::ssm_scan_forward(
        c.be, view(a.m_y, {1, T, H, P}, b * T * di()).get(),
        view(a.m_x, {1, T, H, P}, b * T * di()), view(a.m_dt, {1, T, H}, b * T * H), A_log,
        view(a.m_B, {1, T, G, S}, b * T * gs()), view(a.m_C, {1, T, G, S}, b * T * gs()), D,
        dt_bias, chunk, nullptr, state.get());
  }
}

// dx (=) from dy: out_proj, the gated norm, the scan, the convolution and in_proj backwards.
void MambaMixer::backward(const Ctx& c, const Step& s, const DLTensor* x, const LayerActs& a,
                          const DLTensor* dy, DLTensor* dx, GradScratch& g) const {
  const int64_t n = s.N(), B = s.B, T = s.T, C = out_proj.lin.out;
  const bool sp = c.tp.sequence_parallel;
  View dyn = view(g.m_dyn, {n, di()});
  View dyf = view(sp ? c.sp->dy_full.get() : nullptr, {n, C});
  out_proj.backward(c.be, c.tp, dy, dyf.get(), view(a.m_yn, {n, di()}), n, dyn);
  View dys = view(g.m_dy, {n, di()}), dz = view(g.m_dz, {n, di()});
  loom::gated_rmsnorm_backward(c.be, dys.get(), dz.get(), norm_dw.get(), dyn,
                               view(a.m_y, {n, di()}), view(a.m_z, {n, di()}), norm_w,
                               view(a.m_rstd, {n * G}), di() / G);
  View ddt = view(g.m_ddt, {B, T, H});
  loom::ssm_scan_backward(c.be, view(g.m_dx, {B, T, H, P}).get(), ddt.get(), dA_log.get(),
                          view(g.m_dB, {B, T, G, S}).get(), view(g.m_dC, {B, T, G, S}).get(),
                          dD.get(), ddt_bias.get(), view(g.m_dy, {B, T, H, P}),
                          view(a.m_x, {B, T, H, P}), view(a.m_dt, {B, T, H}), A_log,
                          view(a.m_B, {B, T, G, S}), view(a.m_C, {B, T, G, S}), D, dt_bias, chunk,
                          view(a.m_states, states_shape(*this, s)));
  View dxbc = view(g.m_dxbc, {B, T, cd()}), dxin = view(g.m_dxbc_in, {B, T, cd()});
  split_xbc(c, *this, n, dxbc, g.m_dx.get(), g.m_dB.get(), g.m_dC.get(), true);
  loom::ssm_conv_backward(c.be, dxin.get(), conv_dw.get(), conv_db.get(), dxbc,
                          view(a.m_xbc_in, {B, T, cd()}), conv_w, conv_b, true);
  View xf = view(a.ln1_full, {n, C});
  if (sp) c.tp.all_gather(x, xf);  // the input again: layers share the gathered buffer
  View dxf = view(sp ? c.sp->dx_full.get() : nullptr, {n, C});
  in_proj.backward(c.be, c.tp, {view(g.m_dz, {n, di()}), view(g.m_dxbc_in, {n, cd()}), ddt},
                   sp ? (const DLTensor*)xf : x, n, dx, dxf.get());
}

}  // namespace loom::layers
