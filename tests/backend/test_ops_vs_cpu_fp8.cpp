// loom.fp8/1 (fp8.h, ABI 2.32; issue 39's gpu.fp8_vs_cpu at the op level) on the device backend
// against backend/cpu's exact emulation:
//  - quantize with the tensor scaling, current and delayed, f32 and bf16 sources, with the
//    transposed copy: the codes, the scale, its inverse and the amax equal the cpu's to the
//    bit (both take the f32 product x * scale and round it to nearest even, saturating: PTX's
//    cvt.rn.satfinite on the device, loom::fp8_encode on the cpu);
//  - delayed_update: bit for bit;
//  - the scaled GEMM in the layout the layer library uses (A (m, k), B (n, k)), e4m3 x e4m3
//    and e5m2 x e4m3, into f32 and bf16, with beta: within 5e-3 of the cpu's largest
//    magnitude. The operands are the same codes on both sides, so the products are exact;
//    what differs is the order and the precision of the sums: Hopper's FP8 tensor cores keep
//    fewer accumulator bits than f32 (DeepSeek-V3's report: about 14 on H800) before cuBLASLt
//    promotes the partial sums, an error of a few 2^-14 relative over k in the thousands.
// Run on backend/cuda by tools/gpu-check and on backend/cpu (the harness's self-check) by
// gpu.ops_harness_cpu.
#include <cstring>
#include <string>

#include "gpu_pair.hpp"
#include "loom/cpp/fp8_args.hpp"

using namespace gputest;

namespace {

const loom_fp8_api& fp8_api(const loom::Backend& B) {
  return lent(B, &loom::find_fp8, LOOM_EXT_FP8);
}

// A tensor of raw bytes of `dt` (an FP8 dtype) on one side, and its bytes back.
std::vector<uint8_t> bytes_of(const loom::Tensor& t) { return t.download<uint8_t>(); }

// One side's quantize of `src` (rows, cols) into `dt`, with the transposed copy.
struct Quantized {
  loom::Tensor codes, codes_t, scale, scale_inv, amax;
};
Quantized quantize(const loom::Backend& B, const DLTensor* src, int64_t rows, int64_t cols,
                   DLDataType dt, bool current, float delayed_scale) {
  Quantized q{loom::Tensor(B, dt, {rows, cols}), loom::Tensor(B, dt, {cols, rows}),
              loom::Tensor(B, f32(), {1}), loom::Tensor(B, f32(), {1}),
              loom::Tensor(B, f32(), {1})};
  upload(q.scale, {delayed_scale});
  upload(q.amax, {0.125});
  loom_fp8_quantize_args a{};
  a.struct_size = LOOM_FP8_QUANTIZE_ARGS_SIZE_V2_32;
  a.src = src;
  a.dst = q.codes;
  a.dst_t = q.codes_t;
  a.scaling = LOOM_FP8_SCALE_TENSOR;
  a.flags = current ? LOOM_FP8_CURRENT : 0u;
  a.scale = q.scale;
  a.scale_inv = q.scale_inv;
  a.amax = q.amax;
  loom::check(B.host(), fp8_api(B).quantize(B.self(), &a));
  return q;
}

void check_quantize(DLDataType src_dt, DLDataType dt, bool current) {
  const std::string what =
      dtype_name(src_dt) + " -> " + loom::dtype_str(dt) + (current ? " current" : " delayed");
  CAPTURE(what);
  const int64_t rows = 257, cols = 131;  // tails of every vector and tile width
  Vec x = random_vec(static_cast<size_t>(rows * cols), 71, -3.0, 3.0);
  x[5] = 1e6;   // saturates under the delayed scale below
  x[17] = 0.0;  // and a zero
  Pair src(src_dt, {rows, cols}, x);
  Quantized q[2];
  run_both([&](const loom::Backend& B, int s) {
    q[s] = quantize(B, src[s], rows, cols, dt, current, 37.5f);
  });
  CHECK(bytes_of(q[1].codes) == bytes_of(q[0].codes));
  CHECK(bytes_of(q[1].codes_t) == bytes_of(q[0].codes_t));
  for (auto member : {&Quantized::scale, &Quantized::scale_inv, &Quantized::amax})
    CHECK(download(q[1].*member) == download(q[0].*member));
}

void check_gemm(DLDataType adt, DLDataType cdt, int64_t m, int64_t n, int64_t k) {
  const std::string what = loom::dtype_str(adt) + " x e4m3 -> " + dtype_name(cdt) + " " +
                           std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
  CAPTURE(what);
  Pair a(f32(), {m, k}, random_vec(static_cast<size_t>(m * k), 81));
  Pair b(f32(), {n, k}, random_vec(static_cast<size_t>(n * k), 82, -0.1, 0.1));
  Pair c(cdt, {m, n}, random_vec(static_cast<size_t>(m * n), 83));
  run_both([&](const loom::Backend& B, int s) {
    const Quantized qa = quantize(B, a[s], m, k, adt, true, 1.0f);
    const Quantized qb = quantize(B, b[s], n, k, loom_e4m3(), true, 1.0f);
    loom_gemm_fp8 e =
        loom::gemm_fp8(qa.scale_inv, LOOM_FP8_SCALE_TENSOR, qb.scale_inv, LOOM_FP8_SCALE_TENSOR);
    loom::gemm_scaled(B, false, true, m, n, k, 0.5, qa.codes, k, 0, qb.codes, k, 0, c[s], n, 0, 1.0,
                      &e.base);
  });
  expect_close(c, 5e-3, what);
}

}  // namespace

TEST_CASE("fp8: quantize (tensor scaling) equals backend/cpu's to the bit") {
  for (DLDataType src : {f32(), bf16()})
    for (DLDataType dt : {loom_e4m3(), loom_e5m2()})
      for (bool current : {true, false}) check_quantize(src, dt, current);
}

TEST_CASE("fp8: delayed_update equals backend/cpu's to the bit") {
  const int64_t n = 9, len = 16;
  Vec h = random_vec(static_cast<size_t>(n * len), 91, 0.0, 50.0);
  h[0] = 0.0;  // a tensor with nothing cast this step
  Pair history(f32(), {n, len}, h), scale(f32(), {n}, random_vec(n, 92, 0.5, 4.0));
  Pair inv(f32(), {n});
  for (bool most_recent : {false, true}) {
    run_both([&](const loom::Backend& B, int s) {
      loom_fp8_update_args a{};
      a.struct_size = LOOM_FP8_UPDATE_ARGS_SIZE_V2_32;
      a.history = history[s];
      a.scale = scale[s];
      a.scale_inv = inv[s];
      a.format = loom_e5m2();
      a.margin = 1;
      a.flags = most_recent ? LOOM_FP8_MOST_RECENT : 0u;
      loom::check(B.host(), fp8_api(B).delayed_update(B.self(), &a));
    });
    expect_close(history, 0.0, "history");
    expect_close(scale, 0.0, "scale");
    expect_close(inv, 0.0, "scale_inv");
  }
}

TEST_CASE("fp8: the scaled GEMM (A (m, k), B (n, k)) within 5e-3 of backend/cpu's") {
  check_gemm(loom_e4m3(), f32(), 64, 48, 96);
  check_gemm(loom_e4m3(), bf16(), 128, 256, 512);
  check_gemm(loom_e5m2(), f32(), 32, 80, 1024);  // the input gradient's pair
  if (model_shapes()) check_gemm(loom_e4m3(), bf16(), 1024, 2304, 768);  // GPT-2's c_attn
}
