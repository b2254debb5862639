// loom.fp8/1's table on the CPU (fp8.h): FP8 emulated to the bit of loom/cpp/fp8.hpp.
//   quantize:       dst(rows, cols) e4m3/e5m2 = encode(f32(src * scale)), a scale per tensor or
//                   per block; under LOOM_FP8_CURRENT the scale is made from the block's amax;
//                   dst_t (cols, rows) the transpose's codes
//   delayed_update: scale(n), history(n, len): the next scales from each row's amaxes, the roll
// The scaled GEMM is kernels_linear.cpp's (op_gemm_fp8). Every result here is a max or one
// rounding per element, so it does not depend on the thread count.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu_backend.hpp"
#include "loom/cpp/fp8_args.hpp"
#include "mixed.hpp"

namespace loom_cpu {
namespace {

// src's values in f32: the tensor itself, or a converted copy of a bf16/f16 one.
const float* f32_values(const DLTensor* src, std::vector<float>& copy, int nt) {
  if (is_f32(src->dtype)) return data_of<const float>(src);
  copy.resize(static_cast<size_t>(loom_tensor_numel(src)));
  half_to_f32(src->dtype, data_of<const uint16_t>(src), copy.data(), loom_tensor_numel(src), nt);
  return copy.data();
}

// max |x| over a block of a (rows x cols) row-major matrix; fmax passes over NaN.
float block_amax(const float* x, int64_t cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  float m = 0.0f;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c) m = std::fmax(m, std::fabs(x[r * cols + c]));
  return m;
}

// One (rows, cols) matrix x quantized into `dst` under `scaling`: each block's amax into
// amaxes (grid order), its scale made there (current) or read from `scale`, then every code.
void quantize_matrix(const float* x, int64_t rows, int64_t cols, const loom::Fp8Format& f,
                     uint32_t scaling, uint32_t flags, int32_t margin, float* scale, uint8_t* dst,
                     std::vector<float>& amaxes, int nt) {
  const auto [gr, gc] = loom::fp8_scale_grid(scaling, rows, cols);
  const int64_t br = loom::fp8_block_rows(scaling) ? loom::fp8_block_rows(scaling) : rows;
  const int64_t bc = loom::fp8_block_cols(scaling) ? loom::fp8_block_cols(scaling) : cols;
  const bool current = (flags & LOOM_FP8_CURRENT) != 0, pow2 = (flags & LOOM_FP8_POW2) != 0;
  amaxes.assign(static_cast<size_t>(gr * gc), 0.0f);
#pragma omp parallel for num_threads(nt) schedule(static) if (rows * cols >= kParallelMin)
  for (int64_t blk = 0; blk < gr * gc; ++blk) {
    const int64_t i = blk / gc, j = blk % gc;
    amaxes[blk] = block_amax(x, cols, i * br, std::min(rows, (i + 1) * br), j * bc,
                             std::min(cols, (j + 1) * bc));
    if (current) scale[blk] = loom::fp8_scale(f, amaxes[blk], margin, pow2);
  }
#pragma omp parallel for num_threads(nt) schedule(static) if (rows * cols >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* srow = scale + (r / br) * gc;
    for (int64_t c = 0; c < cols; ++c)
      dst[r * cols + c] = loom::fp8_quantize(f, x[r * cols + c], srow[c / bc]);
  }
}

void write_inverse(DLTensor* inv, const float* scale) {
  if (inv == nullptr) return;
  float* out = data_of<float>(inv);
  for (int64_t i = 0, n = loom_tensor_numel(inv); i < n; ++i) out[i] = 1.0f / scale[i];
}

}  // namespace

loom_error* op_fp8_quantize(loom_backend* be, const loom_fp8_quantize_args* args) noexcept {
  return run_op(be, "quantize", [&](loom_backend& b) {
    Check ck{"quantize"};
    if (std::string why = loom::fp8_quantize_refusal(args, kFp8Scalings); !why.empty())
      ck.fail(why);
    const loom_fp8_quantize_args& a = *args;
    for (const auto& [name, t] : {std::pair<const char*, const DLTensor*>{"src", a.src},
                                  {"dst", a.dst},
                                  {"dst_t", a.dst_t},
                                  {"scale", a.scale},
                                  {"scale_inv", a.scale_inv},
                                  {"amax", a.amax},
                                  {"scale_t", a.scale_t},
                                  {"scale_inv_t", a.scale_inv_t}})
      if (t != nullptr) ck.tensor(name, t);
    std::vector<float> copy, amaxes;
    const float* x = f32_values(a.src, copy, b.threads);
    const loom::Fp8Format f = loom::fp8_format(a.dst->dtype);
    const bool matrix = a.scaling != LOOM_FP8_SCALE_TENSOR || a.dst_t != nullptr;
    const int64_t rows = matrix ? a.src->shape[0] : 1;
    const int64_t cols = matrix ? a.src->shape[1] : loom_tensor_numel(a.src);
    float* scale = data_of<float>(a.scale);
    uint8_t* dst = data_of<uint8_t>(a.dst);
    quantize_matrix(x, rows, cols, f, a.scaling, a.flags, a.margin, scale, dst, amaxes, b.threads);
    write_inverse(a.scale_inv, scale);
    if (a.amax != nullptr) {
      float* m = data_of<float>(a.amax);
      for (float v : amaxes) *m = std::fmax(*m, v);
    }
    if (a.dst_t == nullptr) return;
    uint8_t* t = data_of<uint8_t>(a.dst_t);
    if (a.scaling == LOOM_FP8_SCALE_TENSOR) {  // the same codes, transposed
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = dst[r * cols + c];
      return;
    }
    std::vector<float> xt(static_cast<size_t>(rows * cols));  // src^T, quantized on its own
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) xt[(size_t)(c * rows + r)] = x[r * cols + c];
    float* scale_t = data_of<float>(a.scale_t);
    quantize_matrix(xt.data(), cols, rows, f, a.scaling, a.flags, a.margin, scale_t, t, amaxes,
                    b.threads);
    write_inverse(a.scale_inv_t, scale_t);
  });
}

loom_error* op_fp8_delayed_update(loom_backend* be, const loom_fp8_update_args* args) noexcept {
  return run_op(be, "delayed_update", [&](loom_backend&) {
    Check ck{"delayed_update"};
    if (std::string why = loom::fp8_update_refusal(args); !why.empty()) ck.fail(why);
    const loom_fp8_update_args& a = *args;
    ck.tensor("history", a.history);
    ck.tensor("scale", a.scale);
    if (a.scale_inv != nullptr) ck.tensor("scale_inv", a.scale_inv);
    const loom::Fp8Format f = loom::fp8_format(a.format);
    const int64_t n = a.history->shape[0], len = a.history->shape[1];
    float* h = data_of<float>(a.history);
    float* scale = data_of<float>(a.scale);
    float* inv = a.scale_inv != nullptr ? data_of<float>(a.scale_inv) : nullptr;
    const bool most_recent = (a.flags & LOOM_FP8_MOST_RECENT) != 0;
    for (int64_t i = 0; i < n; ++i) {
      loom::fp8_delayed_update(f, h + i * len, len, most_recent, a.margin, scale + i);
      if (inv != nullptr) inv[i] = 1.0f / scale[i];
    }
  });
}

}  // namespace loom_cpu
