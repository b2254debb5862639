// Loom SDK C++ helpers for loom.fp8/1 (fp8.h, ABI 2.32): the checks every backend applies to
// quantize, delayed_update and a gemm's FP8 extension (shapes and dtypes only: nothing here
// reads a tensor's data), and the caller's side: the instance's table and the extension to
// chain. The arithmetic is loom/cpp/fp8.hpp's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "loom/backend.h"
#include "loom/cpp/describe.hpp"
#include "loom/cpp/fp8.hpp"
#include "loom/cpp/tensor.hpp"

namespace loom {

// The instance's loom.fp8/1 table, or NULL for one without it.
inline const loom_fp8_api* find_fp8(const loom_backend_ref& be) {
  return backend_ext<loom_fp8_api>(be, LOOM_EXT_FP8, LOOM_FP8_API_SIZE_V1);
}

// Delayed scaling's state as a model's buffers name it (model.h's loom.fp8-training/1):
// "<w>.fp8_amax_history" and "<w>.fp8_scale" beside the weight "<w>.weight". Training state,
// not weights: a Hugging Face export leaves it out.
inline constexpr std::string_view kFp8HistorySuffix = ".fp8_amax_history";
inline constexpr std::string_view kFp8ScaleSuffix = ".fp8_scale";
inline bool is_fp8_state(std::string_view name) {
  auto ends = [&](std::string_view suffix) {  // (no ends_with: nvcc reads this file as C++17)
    return name.size() > suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends(kFp8HistorySuffix) || ends(kFp8ScaleSuffix);
}

// The format of an FP8 dtype (callers check loom_dtype_is_fp8 first).
LOOM_HOST_DEVICE inline Fp8Format fp8_format(DLDataType d) {
  return d.code == LOOM_DL_FLOAT8_E5M2 ? fp8_e5m2() : fp8_e4m3();
}

// The block edge of a scaling along rows and along columns (0: the whole extent).
constexpr int64_t kFp8Block = 128;
inline int64_t fp8_block_rows(uint32_t scaling) {
  return scaling == LOOM_FP8_SCALE_128X128 ? kFp8Block : scaling == LOOM_FP8_SCALE_1X128 ? 1 : 0;
}
inline int64_t fp8_block_cols(uint32_t scaling) {
  return scaling == LOOM_FP8_SCALE_TENSOR ? 0 : kFp8Block;
}
// The scale grid of a (rows, cols) matrix: {grid rows, grid cols}.
inline std::pair<int64_t, int64_t> fp8_scale_grid(uint32_t scaling, int64_t rows, int64_t cols) {
  const int64_t br = fp8_block_rows(scaling), bc = fp8_block_cols(scaling);
  return {br == 0 ? 1 : (rows + br - 1) / br, bc == 0 ? 1 : (cols + bc - 1) / bc};
}
inline const char* fp8_scaling_name(uint32_t scaling) {
  return scaling == LOOM_FP8_SCALE_TENSOR    ? "tensor"
         : scaling == LOOM_FP8_SCALE_1X128   ? "1x128"
         : scaling == LOOM_FP8_SCALE_128X128 ? "128x128"
                                             : "unknown";
}

namespace fp8_detail {
inline bool is_f32_vector(const DLTensor* t) {
  return t != nullptr && t->data != nullptr && loom_dtype_eq(t->dtype, loom_f32()) &&
         (t->strides == nullptr || t->ndim <= 1);
}
// Why `t` cannot be the scale grid of `scaling` over (rows, cols) ("" when it can).
inline std::string grid_refusal(const char* name, const DLTensor* t, uint32_t scaling, int64_t rows,
                                int64_t cols) {
  if (t == nullptr || t->data == nullptr || !loom_dtype_eq(t->dtype, loom_f32()) ||
      t->strides != nullptr)
    return std::string(name) + " must be a compact f32 tensor";
  const auto [gr, gc] = fp8_scale_grid(scaling, rows, cols);
  if (loom_tensor_numel(t) != gr * gc)
    return std::string(name) + " has " + std::to_string(loom_tensor_numel(t)) + " elements; the " +
           fp8_scaling_name(scaling) + " scaling of (" + std::to_string(rows) + "," +
           std::to_string(cols) + ") has " + std::to_string(gr) + " x " + std::to_string(gc);
  return "";
}
inline std::string scaling_refusal(uint32_t scaling, uint32_t scalings) {
  if (scaling > LOOM_FP8_SCALE_128X128 || !(scalings & (1u << scaling)))
    return "scaling " + std::to_string(scaling) + " (" + fp8_scaling_name(scaling) +
           ") is not one this backend takes";
  return "";
}
inline std::string no_ext(const loom_ext* ext) {
  for (const loom_ext* o = ext; o != nullptr; o = o->next)
    if (o->flags & LOOM_EXT_REQUIRED)
      return std::string("unknown required extension ") + (o->id ? o->id : "(no id)");
  return "";
}
}  // namespace fp8_detail

// Why quantize cannot run `a` on a backend taking `scalings` ("" when it can).
inline std::string fp8_quantize_refusal(const loom_fp8_quantize_args* a, uint32_t scalings) {
  using namespace fp8_detail;
  if (a == nullptr || a->struct_size < LOOM_FP8_QUANTIZE_ARGS_SIZE_V2_32)
    return "args are NULL or older than loom_fp8_quantize_args of ABI 2.32";
  if (std::string why = no_ext(a->ext); !why.empty()) return why;
  if (a->src == nullptr || a->dst == nullptr) return "src and dst are required";
  const DLDataType s = a->src->dtype;
  if (!(loom_dtype_eq(s, loom_f32()) || loom_dtype_eq(s, loom_bf16()) ||
        loom_dtype_eq(s, loom_f16())))
    return "src is " + dtype_str(s) + "; quantize takes f32, bf16 or f16";
  if (!loom_dtype_is_fp8(a->dst->dtype))
    return "dst is " + dtype_str(a->dst->dtype) + "; quantize writes e4m3 or e5m2";
  if (a->src->strides != nullptr || a->dst->strides != nullptr)
    return "src and dst must be compact";
  if (loom_tensor_numel(a->dst) != loom_tensor_numel(a->src))
    return "dst has " + std::to_string(loom_tensor_numel(a->dst)) + " elements, src " +
           std::to_string(loom_tensor_numel(a->src));
  if (std::string why = scaling_refusal(a->scaling, scalings); !why.empty()) return why;
  if ((a->flags & ~(LOOM_FP8_CURRENT | LOOM_FP8_POW2)) != 0)
    return "flags " + std::to_string(a->flags) + " hold a bit quantize does not know";
  if ((a->flags & LOOM_FP8_POW2) && !(a->flags & LOOM_FP8_CURRENT))
    return "LOOM_FP8_POW2 takes LOOM_FP8_CURRENT (it shapes a scale quantize makes)";
  if (a->margin < 0) return "margin must be >= 0";
  const bool matrix = a->scaling != LOOM_FP8_SCALE_TENSOR || a->dst_t != nullptr;
  if (matrix && a->src->ndim != 2)
    return "block scaling and dst_t take a 2-D src, not " + shape_str(a->src);
  const int64_t rows = matrix ? a->src->shape[0] : 1;
  const int64_t cols = matrix ? a->src->shape[1] : loom_tensor_numel(a->src);
  if (a->scaling != LOOM_FP8_SCALE_TENSOR && !(a->flags & LOOM_FP8_CURRENT))
    return std::string("the ") + fp8_scaling_name(a->scaling) +
           " scaling takes LOOM_FP8_CURRENT (blocks have no history)";
  const bool blocks = a->scaling != LOOM_FP8_SCALE_TENSOR;
  if (a->dst_t != nullptr) {
    if (!loom_dtype_eq(a->dst_t->dtype, a->dst->dtype) || a->dst_t->strides != nullptr ||
        a->dst_t->ndim != 2 || a->dst_t->shape[0] != cols || a->dst_t->shape[1] != rows)
      return "dst_t must be a compact (" + std::to_string(cols) + "," + std::to_string(rows) +
             ") tensor of dst's dtype, not " + dtype_str(a->dst_t->dtype) + " " +
             shape_str(a->dst_t);
    if (blocks) {
      if (std::string why = grid_refusal("scale_t", a->scale_t, a->scaling, cols, rows);
          !why.empty())
        return why + " (dst_t's own grid under a block scaling)";
      if (a->scale_inv_t != nullptr)
        if (std::string why = grid_refusal("scale_inv_t", a->scale_inv_t, a->scaling, cols, rows);
            !why.empty())
          return why;
    }
  }
  if ((!blocks || a->dst_t == nullptr) && (a->scale_t != nullptr || a->scale_inv_t != nullptr))
    return "scale_t and scale_inv_t belong to dst_t under a block scaling; here they must be NULL";
  if (std::string why = grid_refusal("scale", a->scale, a->scaling, rows, cols); !why.empty())
    return why;
  if (a->scale_inv != nullptr)
    if (std::string why = grid_refusal("scale_inv", a->scale_inv, a->scaling, rows, cols);
        !why.empty())
      return why;
  if (a->amax != nullptr && (!is_f32_vector(a->amax) || loom_tensor_numel(a->amax) != 1))
    return "amax must be an f32 tensor of one element";
  return "";
}

// Why delayed_update cannot run `a` ("" when it can).
inline std::string fp8_update_refusal(const loom_fp8_update_args* a) {
  using namespace fp8_detail;
  if (a == nullptr || a->struct_size < LOOM_FP8_UPDATE_ARGS_SIZE_V2_32)
    return "args are NULL or older than loom_fp8_update_args of ABI 2.32";
  if (std::string why = no_ext(a->ext); !why.empty()) return why;
  if (!loom_dtype_is_fp8(a->format))
    return "format is " + dtype_str(a->format) + ", not e4m3 or e5m2";
  if ((a->flags & ~LOOM_FP8_MOST_RECENT) != 0)
    return "flags " + std::to_string(a->flags) + " hold a bit delayed_update does not know";
  if (a->margin < 0) return "margin must be >= 0";
  const DLTensor* h = a->history;
  if (h == nullptr || h->data == nullptr || !loom_dtype_eq(h->dtype, loom_f32()) ||
      h->strides != nullptr || h->ndim != 2 || h->shape[1] < 1)
    return "history must be a compact f32 (n, len) tensor with len >= 1";
  const int64_t n = h->shape[0];
  if (!is_f32_vector(a->scale) || loom_tensor_numel(a->scale) != n)
    return "scale must be an f32 tensor of n = " + std::to_string(n) + " elements";
  if (a->scale_inv != nullptr &&
      (!is_f32_vector(a->scale_inv) || loom_tensor_numel(a->scale_inv) != n))
    return "scale_inv must be an f32 tensor of n = " + std::to_string(n) + " elements";
  return "";
}

// Why the FP8 extension `e` on `g`'s chain cannot run on a backend taking `scalings` ("" when
// it can). The operands' extents against their ld and offsets are the plain gemm's checks.
inline std::string gemm_fp8_refusal(const loom_gemm_args& g, const loom_ext* e, uint32_t scalings) {
  using namespace fp8_detail;
  if (e->struct_size < LOOM_GEMM_FP8_SIZE_V1)
    return "the " LOOM_EXT_FP8 " extension is smaller than its version 1";
  for (const loom_ext* o = g.ext; o != nullptr; o = o->next)
    if (o != e && (o->flags & LOOM_EXT_REQUIRED))
      return std::string("extension ") + (o->id ? o->id : "(no id)") + " is not taken beside " +
             LOOM_EXT_FP8;
  const auto& x = *reinterpret_cast<const loom_gemm_fp8*>(e);
  if (g.batch != 1) return LOOM_EXT_FP8 " takes batch = 1, not " + std::to_string(g.batch);
  if (g.a == nullptr || g.b == nullptr || g.c == nullptr) return "a, b and c are required";
  if (!loom_dtype_is_fp8(g.a->dtype) || !loom_dtype_is_fp8(g.b->dtype))
    return "a is " + dtype_str(g.a->dtype) + ", b " + dtype_str(g.b->dtype) +
           "; " LOOM_EXT_FP8 " takes e4m3 or e5m2 operands";
  if (g.a->dtype.code == LOOM_DL_FLOAT8_E5M2 && g.b->dtype.code == LOOM_DL_FLOAT8_E5M2)
    return "a and b are both e5m2 (no FP8 GEMM takes that pair)";
  const DLDataType c = g.c->dtype;
  if (!(loom_dtype_eq(c, loom_f32()) || loom_dtype_eq(c, loom_bf16()) ||
        loom_dtype_eq(c, loom_f16())))
    return "c is " + dtype_str(c) + "; an FP8 GEMM writes f32, bf16 or f16";
  for (uint32_t s : {x.a_scaling, x.b_scaling})
    if (std::string why = scaling_refusal(s, scalings); !why.empty()) return why;
  const int64_t ar = g.trans_a ? g.k : g.m, ac = g.trans_a ? g.m : g.k;
  const int64_t br = g.trans_b ? g.n : g.k, bc = g.trans_b ? g.k : g.n;
  if (std::string why = grid_refusal("a_scale_inv", x.a_scale_inv, x.a_scaling, ar, ac);
      !why.empty())
    return why;
  return grid_refusal("b_scale_inv", x.b_scale_inv, x.b_scaling, br, bc);
}

// The args extension to chain on a loom_gemm_args.
inline loom_gemm_fp8 gemm_fp8(const DLTensor* a_scale_inv, uint32_t a_scaling,
                              const DLTensor* b_scale_inv, uint32_t b_scaling) {
  loom_gemm_fp8 e{};
  e.base = {sizeof(loom_gemm_fp8), LOOM_EXT_FP8, LOOM_EXT_REQUIRED, nullptr};
  e.a_scale_inv = a_scale_inv;
  e.b_scale_inv = b_scale_inv;
  e.a_scaling = a_scaling;
  e.b_scaling = b_scaling;
  return e;
}

}  // namespace loom
