// Loom SDK C++ helpers for ABI 2.22's Mamba-2 ops (backend.h): the shape checks every backend
// applies to loom_ssm_conv_args, loom_ssm_scan_args, their backward args and the
// loom.norm-gate/1 extension, and the scan's dimensions read from its tensors. loom::OpsSlots
// runs them before a kernel, so the kernels take their shapes as given; dtypes, devices and
// the layout in memory stay the backend's to check (its mixed-precision rules are its own).
// Each refusal names the tensor, the shape it has and the shape it should have, with the
// letters of backend.h's comments: "dt has shape (2,11,3), expected (B,T,H) = (2,11,4)".
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "loom/backend.h"
#include "loom/cpp/describe.hpp"
#include "loom/cpp/plugin.hpp"

namespace loom {

// The selective scan's extents: x (batch,T,H,P), B and C (batch,T,G,N), `chunks` chunks of
// `chunk` steps (the last one shorter when chunk does not divide T).
struct SsmScanDims {
  int64_t batch, T, H, P, G, N, chunk, chunks;
};
// Read from x and B as given (check them with ssm_scan_refusal first).
inline SsmScanDims ssm_scan_dims(const DLTensor* x, const DLTensor* B, int64_t chunk) {
  const int64_t T = x->shape[1];
  return {x->shape[0], T,           x->shape[2], x->shape[3],
          B->shape[2], B->shape[3], chunk,       chunk > 0 ? (T + chunk - 1) / chunk : 0};
}

namespace detail {

// "" when t's shape is `want`, else why: "<name> has shape (..), expected <letters> = (..)".
inline std::string ssm_shape(const char* name, const DLTensor* t, const char* letters,
                             std::initializer_list<int64_t> want) {
  if (t == nullptr) return std::string(name) + " is NULL";
  bool same = t->ndim == (int)want.size();
  for (int d = 0; same && d < t->ndim; ++d) same = t->shape[d] == want.begin()[d];
  if (same) return {};
  std::string w = "(";
  for (int64_t v : want) {
    if (w.size() > 1) w += ',';
    w += std::to_string(v);
  }
  return std::string(name) + " has shape " + shape_str(t) + ", expected " + letters + " = " + w +
         ")";
}

// The first of `whys` that is not "".
inline std::string first_refusal(std::initializer_list<std::string> whys) {
  for (const std::string& w : whys)
    if (!w.empty()) return w;
  return {};
}

// x (B,T,C) and weight (C,K), the convolution's own extents, before the rest is compared.
inline std::string ssm_conv_extents(const DLTensor* x, const DLTensor* weight) {
  if (x == nullptr || weight == nullptr) return "x and weight must be given";
  if (x->ndim != 3) return "x has shape " + shape_str(x) + ", expected (B,T,C)";
  if (weight->ndim != 2 || weight->shape[0] != x->shape[2] || weight->shape[1] < 1)
    return "weight has shape " + shape_str(weight) +
           ", expected (C,K) with C = " + std::to_string(x->shape[2]) +
           " (x's channels) and K >= 1 taps";
  return {};
}

// The scan's inputs, shared by forward and backward: x (B,T,H,P), B and C (B,T,G,N) with G
// dividing H, dt (B,T,H), A_log, D, dt_bias (H), chunk > 0.
template <class Args>
std::string ssm_scan_inputs(const Args& a) {
  if (!a.x || !a.B) return "x and B must be given";
  if (a.x->ndim != 4) return "x has shape " + shape_str(a.x) + ", expected (B,T,H,P)";
  const int64_t b = a.x->shape[0], T = a.x->shape[1], H = a.x->shape[2];
  if (a.B->ndim != 4 || a.B->shape[0] != b || a.B->shape[1] != T || a.B->shape[2] < 1 ||
      H % a.B->shape[2] != 0)
    return "B has shape " + shape_str(a.B) + ", expected (B,T,G,N) with B = " + std::to_string(b) +
           ", T = " + std::to_string(T) + " and G dividing H = " + std::to_string(H);
  if (a.chunk <= 0) return "chunk = " + std::to_string(a.chunk) + " must be > 0";
  const SsmScanDims d = ssm_scan_dims(a.x, a.B, a.chunk);
  return first_refusal({ssm_shape("C", a.C, "(B,T,G,N)", {b, T, d.G, d.N}),
                        ssm_shape("dt", a.dt, "(B,T,H)", {b, T, H}),
                        ssm_shape("A_log", a.A_log, "(H)", {H}), ssm_shape("D", a.D, "(H)", {H}),
                        ssm_shape("dt_bias", a.dt_bias, "(H)", {H})});
}

}  // namespace detail

// Why ssm_conv_forward's args cannot run ("" when they can): shapes only.
inline std::string ssm_conv_refusal(const loom_ssm_conv_args& a) {
  const std::string why = detail::ssm_conv_extents(a.x, a.weight);
  if (!why.empty()) return why;
  const int64_t b = a.x->shape[0], T = a.x->shape[1], C = a.x->shape[2], K = a.weight->shape[1];
  return detail::first_refusal(
      {detail::ssm_shape("out", a.out, "(B,T,C)", {b, T, C}),
       a.bias ? detail::ssm_shape("bias", a.bias, "(C)", {C}) : "",
       a.state ? detail::ssm_shape("state", a.state, "(B,K-1,C)", {b, K - 1, C}) : ""});
}

// Why ssm_conv_backward's args cannot run ("" when they can): shapes only.
inline std::string ssm_conv_bwd_refusal(const loom_ssm_conv_bwd_args& a) {
  const std::string why = detail::ssm_conv_extents(a.x, a.weight);
  if (!why.empty()) return why;
  const int64_t b = a.x->shape[0], T = a.x->shape[1], C = a.x->shape[2], K = a.weight->shape[1];
  return detail::first_refusal({detail::ssm_shape("dout", a.dout, "(B,T,C)", {b, T, C}),
                                detail::ssm_shape("dx", a.dx, "(B,T,C)", {b, T, C}),
                                detail::ssm_shape("dweight", a.dweight, "(C,K)", {C, K}),
                                a.bias ? detail::ssm_shape("bias", a.bias, "(C)", {C}) : "",
                                a.dbias ? detail::ssm_shape("dbias", a.dbias, "(C)", {C}) : ""});
}

// Why ssm_scan_forward's args cannot run ("" when they can): shapes only.
inline std::string ssm_scan_refusal(const loom_ssm_scan_args& a) {
  const std::string why = detail::ssm_scan_inputs(a);
  if (!why.empty()) return why;
  const SsmScanDims d = ssm_scan_dims(a.x, a.B, a.chunk);
  return detail::first_refusal(
      {detail::ssm_shape("y", a.y, "(B,T,H,P)", {d.batch, d.T, d.H, d.P}),
       a.chunk_states ? detail::ssm_shape("chunk_states", a.chunk_states, "(B,ceil(T/chunk),H,P,N)",
                                          {d.batch, d.chunks, d.H, d.P, d.N})
                      : "",
       a.state ? detail::ssm_shape("state", a.state, "(B,H,P,N)", {d.batch, d.H, d.P, d.N}) : ""});
}

// Why ssm_scan_backward's args cannot run ("" when they can): shapes only; chunk_states is
// required (each chunk's states are recomputed from it).
inline std::string ssm_scan_bwd_refusal(const loom_ssm_scan_bwd_args& a) {
  const std::string why = detail::ssm_scan_inputs(a);
  if (!why.empty()) return why;
  const SsmScanDims d = ssm_scan_dims(a.x, a.B, a.chunk);
  const std::initializer_list<int64_t> x_shape = {d.batch, d.T, d.H, d.P};
  const std::initializer_list<int64_t> bc_shape = {d.batch, d.T, d.G, d.N};
  return detail::first_refusal(
      {detail::ssm_shape("dy", a.dy, "(B,T,H,P)", x_shape),
       detail::ssm_shape("dx", a.dx, "(B,T,H,P)", x_shape),
       detail::ssm_shape("ddt", a.ddt, "(B,T,H)", {d.batch, d.T, d.H}),
       detail::ssm_shape("dB", a.dB, "(B,T,G,N)", bc_shape),
       detail::ssm_shape("dC", a.dC, "(B,T,G,N)", bc_shape),
       detail::ssm_shape("dA_log", a.dA_log, "(H)", {d.H}),
       detail::ssm_shape("dD", a.dD, "(H)", {d.H}),
       detail::ssm_shape("ddt_bias", a.ddt_bias, "(H)", {d.H}),
       detail::ssm_shape("chunk_states", a.chunk_states, "(B,ceil(T/chunk),H,P,N)",
                         {d.batch, d.chunks, d.H, d.P, d.N})});
}

// Why loom.norm-gate/1 (`e`, found on the chain `ext` of a norm of `kind` over `inp`)
// cannot run ("" when it can): kind LOOM_NORM_RMS, group_size dividing C, gate (and in
// backward dgate) of inp's shape. Another required extension on the chain is refused as any
// unknown one is.
inline std::string norm_gate_refusal(int32_t kind, const loom_ext* ext, const loom_ext* e,
                                     const DLTensor* inp, bool backward) {
  if (e->struct_size < LOOM_NORM_GATE_SIZE_V1)
    return "the " LOOM_EXT_NORM_GATE " extension is smaller than its version 1";
  if (std::string why = other_required_refusal(ext, e); !why.empty()) return why;
  if (kind != LOOM_NORM_RMS)
    return LOOM_EXT_NORM_GATE " takes kind LOOM_NORM_RMS (" + std::to_string(LOOM_NORM_RMS) +
           "), not " + std::to_string(kind);
  if (inp == nullptr || inp->ndim < 1) return "inp must be given, with at least one dimension";
  const auto& g = *reinterpret_cast<const loom_norm_gate*>(e);
  const int64_t C = inp->shape[inp->ndim - 1];
  if (g.group_size <= 0 || C % g.group_size != 0)
    return "group_size = " + std::to_string(g.group_size) + " does not divide inp's " +
           std::to_string(C) + " channels";
  return detail::first_refusal({shape_like_refusal("gate", g.gate, "inp", inp),
                                backward ? shape_like_refusal("dgate", g.dgate, "inp", inp) : ""});
}

}  // namespace loom
