// Loom SDK: a linear layer's three GEMMs in FP8 (issue 39; precision.fp8, model.h's
// loom.fp8-training/1) through the backend's loom.fp8/1 (fp8.h): each operand quantized,
// then one scaled GEMM. loom::tp::LocalLinear calls it where its weight carries one.
//
// Every GEMM takes its operands with k contiguous, the layout Hopper's FP8 tensor cores and
// cuBLASLt ask for (A (m, k), B (n, k), trans_b = 1), so the backward reads the transposed
// copies quantize makes beside the codes:
//   forward  y(n, out)  = x(n, in)     . W(out, in)^T     x e4m3, W e4m3
//   dgrad    dx(n, in)  = dy(n, out)   . (W^T)(in, out)^T dy e5m2 (hybrid) or e4m3
//   wgrad    dW(out,in) += (dy^T)(out,n) . (x^T)(in, n)^T k = the tokens
// Recipes: tensorwise scales each tensor by its own amax (current scaling); blockwise by
// DeepSeek-V3's tiles (activations and gradients 1x128 along k, so x^T and dy^T in 128x1
// tiles of x and dy; weights 128x128; power-of-two scales); delayed by the scales of the
// weight's Fp8History (below), which the model derives from the amax histories at each
// step's end. Nothing FP8 is kept between calls: the backward quantizes x and W again, which
// gives the forward's codes exactly (within a step a scale is a function of the tensor, or
// fixed), so no FP8 copy lives across the step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "loom/cpp/fp8_args.hpp"
#include "loom/cpp/tensor.hpp"
#include "loom/model.h"

namespace loom::tp {

// One operand in FP8: codes (and, where asked, its transpose's) with their scale inverses.
struct Fp8Operand {
  Tensor codes, scale, scale_inv, codes_t, scale_t, scale_inv_t;
  uint32_t scaling = LOOM_FP8_SCALE_TENSOR;
};

// Delayed scaling's state of one weight's linear layer (precision.fp8 = "delayed"): the amax
// histories and scales of its three tensors, f32 buffers of the model (checkpointed, and
// replicated over the tensor and data groups: the model reduces each step's amaxes over them
// with MAX before it derives the next scales, loom.fp8/1's delayed_update, so that every
// rank casts with the scale one rank would use).
struct Fp8History {
  enum Role : int64_t { kInput = 0, kWeight = 1, kGrad = 2 };
  View history;  // f32 (3, len): row = role; slot 0 gathers this step's amax
  View scale;    // f32 (3): the scales this step casts with
  int64_t len = 1;
  // Whether casts fold their amax into slot 0: off for a forward without gradients (an
  // evaluation), whose tensors are not the step's.
  std::shared_ptr<const bool> recording;
};

struct Fp8Linear {
  int32_t recipe = LOOM_FP8_RECIPE_TENSORWISE;
  bool hybrid = true;  // gradients e5m2
  int32_t margin = 0;
  std::shared_ptr<const Fp8History> delayed;  // the delayed recipe's state; else NULL

  DLDataType grad_format() const { return hybrid ? loom_e5m2() : loom_e4m3(); }

  // src (rows, cols), the layer's tensor `role`, quantized into `format` by the recipe; with
  // `transposed`, its transpose's codes too (and its own grid under the block scalings).
  Fp8Operand quantize(const Backend& be, const DLTensor* src, int64_t rows, int64_t cols,
                      DLDataType format, Fp8History::Role role, bool transposed) const {
    const bool weight = role == Fp8History::kWeight;
    const loom_fp8_api* api = find_fp8(loom_backend_ref{be.api(), be.self()});
    require(api != nullptr, "FP8 linear layers: the backend lends no " LOOM_EXT_FP8);
    Fp8Operand o;
    const bool blocks = recipe == LOOM_FP8_RECIPE_BLOCKWISE;
    o.scaling = !blocks  ? LOOM_FP8_SCALE_TENSOR
                : weight ? LOOM_FP8_SCALE_128X128
                         : LOOM_FP8_SCALE_1X128;
    const auto [gr, gc] = fp8_scale_grid(o.scaling, rows, cols);
    const bool delayed_scale = recipe == LOOM_FP8_RECIPE_DELAYED;
    o.codes = Tensor(be, format, {rows, cols});
    if (!delayed_scale) o.scale = Tensor(be, loom_f32(), {gr, gc});  // delayed: the history's
    o.scale_inv = Tensor(be, loom_f32(), {gr, gc});
    View in(src, {rows, cols});
    loom_fp8_quantize_args a{};
    a.struct_size = LOOM_FP8_QUANTIZE_ARGS_SIZE_V2_32;
    a.src = in.get();
    a.dst = o.codes;
    a.scaling = o.scaling;
    a.flags = LOOM_FP8_CURRENT | (blocks ? LOOM_FP8_POW2 : 0u);
    a.margin = margin;
    a.scale = o.scale;
    a.scale_inv = o.scale_inv;
    View scale, amax;  // delayed: the history's scale read, its amax slot folded into
    if (delayed_scale) {
      require(delayed != nullptr, "FP8 linear layers: delayed scaling without its state");
      scale = View(delayed->scale, {1}, role);
      a.flags = 0;
      a.scale = scale.get();
      if (*delayed->recording) {
        amax = View(delayed->history, {1}, role * delayed->len);
        a.amax = amax.get();
      }
    }
    if (transposed) {
      o.codes_t = Tensor(be, format, {cols, rows});
      a.dst_t = o.codes_t;
      if (blocks) {
        const auto [tr, tc] = fp8_scale_grid(o.scaling, cols, rows);
        o.scale_t = Tensor(be, loom_f32(), {tr, tc});
        o.scale_inv_t = Tensor(be, loom_f32(), {tr, tc});
        a.scale_t = o.scale_t;
        a.scale_inv_t = o.scale_inv_t;
      }
    }
    check(be.host(), api->quantize(be.self(), &a));
    return o;
  }

  // c(m, n) = alpha A(m, k) B(n, k)^T + beta c, A and B one operand's codes each (`ta`/`tb`:
  // the transposed copy); c's rows at pitch ldc from offset offc.
  static void gemm(const Backend& be, int64_t m, int64_t n, int64_t k, const Fp8Operand& a, bool ta,
                   const Fp8Operand& b, bool tb, DLTensor* c, int64_t ldc, int64_t offc,
                   double beta, double alpha = 1.0) {
    const bool tblk_a = ta && a.scaling != LOOM_FP8_SCALE_TENSOR;
    const bool tblk_b = tb && b.scaling != LOOM_FP8_SCALE_TENSOR;
    loom_gemm_fp8 e = gemm_fp8(tblk_a ? a.scale_inv_t.get() : a.scale_inv.get(), a.scaling,
                               tblk_b ? b.scale_inv_t.get() : b.scale_inv.get(), b.scaling);
    gemm_scaled(be, false, true, m, n, k, alpha, ta ? a.codes_t.get() : a.codes.get(), k, 0,
                tb ? b.codes_t.get() : b.codes.get(), k, 0, c, ldc, offc, beta, &e.base);
  }

  // y(n, out) (= or, with beta 1, +=) x(n, in) W[row0 : row0 + out]^T (no bias: the caller
  // adds it).
  void forward(const Backend& be, DLTensor* y, const DLTensor* x, int64_t n, const DLTensor* w,
               int64_t row0, int64_t out, int64_t in, double beta = 0.0) const {
    View wv(w, {out, in}, row0 * in);
    const Fp8Operand qx = quantize(be, x, n, in, loom_e4m3(), Fp8History::kInput, false);
    const Fp8Operand qw = quantize(be, wv.get(), out, in, loom_e4m3(), Fp8History::kWeight, false);
    gemm(be, n, out, in, qx, false, qw, false, y, out, 0, beta);
  }
  // dx(n, in) (= or += with accumulate) = dy(n, out) W[row0 : row0 + out].
  void backward_data(const Backend& be, DLTensor* dx, bool accumulate, const DLTensor* dy,
                     int64_t n, const DLTensor* w, int64_t row0, int64_t out, int64_t in) const {
    View wv(w, {out, in}, row0 * in);
    const Fp8Operand qd = quantize(be, dy, n, out, grad_format(), Fp8History::kGrad, false);
    const Fp8Operand qw = quantize(be, wv.get(), out, in, loom_e4m3(), Fp8History::kWeight, true);
    gemm(be, n, in, out, qd, false, qw, true, dx, in, 0, accumulate ? 1.0 : 0.0);
  }
  // dW[row0 : row0 + out] (out, in) += alpha dy(n, out)^T x(n, in).
  void backward_weight(const Backend& be, DLTensor* dw, const DLTensor* dy, const DLTensor* x,
                       int64_t n, int64_t row0, int64_t out, int64_t in, double alpha = 1.0) const {
    const Fp8Operand qd = quantize(be, dy, n, out, grad_format(), Fp8History::kGrad, true);
    const Fp8Operand qx = quantize(be, x, n, in, loom_e4m3(), Fp8History::kInput, true);
    gemm(be, out, in, n, qd, true, qx, true, dw, in, row0 * in, 1.0, alpha);
  }
};

}  // namespace loom::tp
