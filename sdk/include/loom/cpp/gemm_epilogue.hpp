// Loom SDK C++ helpers for loom.gemm-epilogue/1 (gemm_epilogue.h, ABI 2.17 and 2.23): the check
// every backend applies to the args extension, the views of C and A that its kinds touch, and
// the caller's side: whether an instance's gemm takes a kind, and the extension to chain.
#pragma once

#include <cstdint>
#include <string>

#include "loom/backend.h"
#include "loom/cpp/tensor.hpp"

namespace loom {

// Why the epilogue `e` on `g`'s chain cannot run on a backend implementing `kinds` ("" when
// it can). Another required extension on the chain is refused as any unknown one is.
inline std::string gemm_epilogue_refusal(const loom_gemm_args& g, const loom_ext* e,
                                         uint32_t kinds) {
  if (e->struct_size < LOOM_GEMM_EPILOGUE_SIZE_V1)
    return "the " LOOM_EXT_GEMM_EPILOGUE " extension is smaller than its version 1";
  for (const loom_ext* o = g.ext; o != nullptr; o = o->next)
    if (o != e && (o->flags & LOOM_EXT_REQUIRED))
      return std::string("unknown required extension ") + (o->id ? o->id : "(no id)");
  const auto& x = *reinterpret_cast<const loom_gemm_epilogue*>(e);
  const uint32_t known =
      LOOM_EPILOGUE_BIAS | LOOM_EPILOGUE_BGRAD | LOOM_EPILOGUE_BIAS_GELU | LOOM_EPILOGUE_DGELU;
  if ((x.kind & known) == 0 || (x.kind & (x.kind - 1)) != 0 || !(kinds & x.kind))
    return "epilogue kind " + std::to_string(x.kind) + " is not one this backend implements";
  if (g.batch != 1) return "an epilogue takes batch = 1, not " + std::to_string(g.batch);
  const std::string compact =
      "(ldc = n = " + std::to_string(g.n) + ", not " + std::to_string(g.ldc) + ")";
  if (x.kind == LOOM_EPILOGUE_BGRAD) {
    if (x.dbias == nullptr || loom_tensor_numel(x.dbias) != g.m)
      return "the bias-gradient epilogue needs dbias of m = " + std::to_string(g.m) + " elements";
    if (!g.trans_a || g.lda != g.m)
      return "the bias-gradient epilogue needs A stored (k, m) compact: trans_a = 1 and lda = m";
    return {};
  }
  const bool gelu = x.kind != LOOM_EPILOGUE_BIAS;
  const char* name = x.kind == LOOM_EPILOGUE_BIAS        ? "the bias epilogue"
                     : x.kind == LOOM_EPILOGUE_BIAS_GELU ? "the bias+GELU epilogue"
                                                         : "the GELU-gradient epilogue";
  const bool needs_bias =
      x.kind == LOOM_EPILOGUE_BIAS || (x.kind == LOOM_EPILOGUE_BIAS_GELU && x.bias != nullptr);
  if (needs_bias && (x.bias == nullptr || loom_tensor_numel(x.bias) != g.n))
    return std::string(name) + " needs bias of n = " + std::to_string(g.n) + " elements";
  if (g.ldc != g.n) return std::string(name) + " needs C's rows compact " + compact;
  if (!gelu) return {};
  if (e->struct_size < LOOM_GEMM_EPILOGUE_SIZE_V2_23 || x.aux == nullptr)
    return std::string(name) + " needs aux (ABI 2.23's field)";
  if (loom_tensor_numel(x.aux) != g.m * g.n || !loom_dtype_eq(x.aux->dtype, g.c->dtype))
    return std::string(name) + " needs aux of m x n = " + std::to_string(g.m * g.n) +
           " elements of C's dtype";
  if (g.beta != 0.0) return std::string(name) + " needs beta = 0";
  return {};
}

// C (m, n) and A as stored (k, m), as tensors of their own: what bias_add and bias_backward
// take when a backend runs an epilogue as a second pass.
inline View epilogue_c(const loom_gemm_args& g) { return View(g.c, {g.m, g.n}, g.offset_c); }
inline View epilogue_a(const loom_gemm_args& g) { return View(g.a, {g.k, g.m}, g.offset_a); }

// A backend's own positional kernels, which an epilogue run as separate passes calls.
template <class Gemm, class BiasAdd, class BiasBackward, class GeluForward, class GeluBackward>
struct EpiloguePasses {
  Gemm gemm;
  BiasAdd bias_add;
  BiasBackward bias_backward;
  GeluForward gelu_forward;    // (be, out, inp)
  GeluBackward gelu_backward;  // (be, dinp, inp, dout): in place (dinp = dout) allowed
};
template <class... K>
EpiloguePasses(K...) -> EpiloguePasses<K...>;

// The epilogue as separate passes: the plain GEMM (into aux for BIAS_GELU), then bias_add,
// bias_backward, the GELU or its gradient in place. What a backend without a fused path runs
// (backend/cpu always; backend/cuda where cuBLASLt cannot fuse): the layers' result without
// the extension, to the bit.
template <class P>
loom_error* gemm_epilogue_two_passes(loom_backend* be, const loom_gemm_args& g,
                                     const loom_gemm_epilogue& e, const P& k) {
  loom_gemm_args plain = g;
  plain.ext = nullptr;
  if (e.kind == LOOM_EPILOGUE_BIAS_GELU) {
    plain.c = e.aux;
    plain.offset_c = 0;
  }
  if (loom_error* err = k.gemm(be, &plain)) return err;
  View c = epilogue_c(g);
  if (e.kind == LOOM_EPILOGUE_BIAS) return k.bias_add(be, c.get(), e.bias);
  if (e.kind == LOOM_EPILOGUE_BGRAD) {
    View a = epilogue_a(g);
    return k.bias_backward(be, e.dbias, a.get());
  }
  View aux(e.aux, {g.m, g.n});
  if (e.kind == LOOM_EPILOGUE_DGELU) return k.gelu_backward(be, c.get(), aux.get(), c.get());
  if (e.bias != nullptr)
    if (loom_error* err = k.bias_add(be, aux.get(), e.bias)) return err;
  return k.gelu_forward(be, c.get(), aux.get());
}

// The kinds this instance's gemm takes (0 when it lends no loom.gemm-epilogue/1 table).
inline uint32_t gemm_epilogue_kinds(const Backend& be) {
  const loom_backend_api* api = be.api();
  if (!api || api->struct_size < LOOM_BACKEND_API_SIZE_V2 || !api->get_ext) return 0;
  const loom_ext* e = api->get_ext(be.self(), LOOM_EXT_GEMM_EPILOGUE);
  if (e == nullptr || e->struct_size < LOOM_GEMM_EPILOGUES_SIZE_V1) return 0;
  return reinterpret_cast<const loom_gemm_epilogues*>(e)->kinds;
}

// The args extension for `kind`, to chain on a loom_gemm_args.
inline loom_gemm_epilogue gemm_epilogue(uint32_t kind, const DLTensor* bias, DLTensor* dbias,
                                        DLTensor* aux = nullptr) {
  loom_gemm_epilogue e{};
  e.base = {sizeof(loom_gemm_epilogue), LOOM_EXT_GEMM_EPILOGUE, LOOM_EXT_REQUIRED, nullptr};
  e.kind = kind;
  e.bias = bias;
  e.dbias = dbias;
  e.aux = aux;
  return e;
}

}  // namespace loom
