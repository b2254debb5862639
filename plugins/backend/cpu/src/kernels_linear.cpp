// Linear layers: GEMM (to OpenBLAS) and the bias add / bias gradient around it.
//   gemm:          C(m,n) = alpha * op(A) @ op(B) + beta * C, row-major, `batch` times
//   bias_add:      out(N,C) += bias(C)
//   bias_backward: dbias(C) += sum over rows of dout(N,C)   (parameter gradient: +=)
//   gemm with loom.gemm-epilogue/1: the GEMM, then bias_add on C or bias_backward of A
#include <omp.h>

#include <algorithm>
#include <climits>
#include <vector>

#include "blas.hpp"
#include "cpu_backend.hpp"
#include "loom/cpp/fp8_args.hpp"
#include "loom/cpp/gemm_args.hpp"
#include "loom/cpp/gemm_epilogue.hpp"
#include "mixed.hpp"

namespace loom_cpu {
namespace {

// Below this many multiply-adds per matrix, a batched GEMM runs one matrix per thread (each a
// single-threaded BLAS call: OpenBLAS stays serial inside an OpenMP region) instead of
// splitting each small matrix across threads, where the fork/join would dominate. Attention
// scores (64x64x64 per head) are the case this is for.
constexpr int64_t kSmallGemm = 96 * 96 * 96;

// The stored matrix of one operand: rows x cols with row pitch ld, `batch` of them.
void check_operand(const Check& ck, const char* name, const DLTensor* t, int64_t rows, int64_t cols,
                   int64_t ld, int64_t stride, int64_t offset, int64_t batch) {
  std::string n(name);
  if (ld < std::max<int64_t>(1, cols))
    ck.fail("ld" + n + " = " + std::to_string(ld) + " is less than the " + std::to_string(cols) +
            " columns " + n + " has as stored");
  if (offset < 0 || stride < 0) ck.fail("offset_" + n + " and stride_" + n + " must be >= 0");
  if (ld > INT_MAX || rows > INT_MAX || cols > INT_MAX)
    ck.fail(n + " dimensions exceed the 32-bit BLAS interface");
  if (rows == 0 || cols == 0) return;
  int64_t end = offset + (batch - 1) * stride + (rows - 1) * ld + cols;
  int64_t have = loom_tensor_numel(t);
  if (end > have)
    ck.fail(n + " needs " + std::to_string(end) + " elements (offset " + std::to_string(offset) +
            ", " + std::to_string(batch) + " x " + std::to_string(rows) + "x" +
            std::to_string(cols) + " with ld " + std::to_string(ld) + ", stride " +
            std::to_string(stride) + ") but has " + std::to_string(have));
}

// The three operands' extents against their pitches and offsets, and the sizes: every
// gemm's checks after the dtypes.
void check_operands(const Check& ck, const loom_gemm_args& g) {
  if (std::string why = loom::gemm_sizes_refusal(g); !why.empty()) ck.fail(why);
  check_operand(ck, "a", g.a, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda, g.stride_a,
                g.offset_a, g.batch);
  check_operand(ck, "b", g.b, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb, g.stride_b,
                g.offset_b, g.batch);
  check_operand(ck, "c", g.c, g.m, g.n, g.ldc, g.stride_c, g.offset_c, g.batch);
}

template <class T>
void gemm_one(const Blas& blas, const loom_gemm_args& g, int64_t i, const T* a, const T* b, T* c) {
  const T* ai = a + g.offset_a + i * g.stride_a;
  const T* bi = b + g.offset_b + i * g.stride_b;
  T* ci = c + g.offset_c + i * g.stride_c;
  int ta = g.trans_a ? Blas::kTrans : Blas::kNoTrans;
  int tb = g.trans_b ? Blas::kTrans : Blas::kNoTrans;
  if constexpr (std::is_same_v<T, float>)
    blas.sgemm(Blas::kRowMajor, ta, tb, (int)g.m, (int)g.n, (int)g.k, (float)g.alpha, ai,
               (int)g.lda, bi, (int)g.ldb, (float)g.beta, ci, (int)g.ldc);
  else
    blas.dgemm(Blas::kRowMajor, ta, tb, (int)g.m, (int)g.n, (int)g.k, g.alpha, ai, (int)g.lda, bi,
               (int)g.ldb, g.beta, ci, (int)g.ldc);
}

// One stored matrix (rows x cols, row pitch ld) of a 16-bit tensor into compact f32, or a
// compact f32 one back into it.
void load_matrix(DLDataType dt, const uint16_t* src, int64_t ld, int64_t rows, int64_t cols,
                 float* dst, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static) if (rows * cols >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) half_to_f32(dt, src + r * ld, dst + r * cols, cols, 1);
}
void store_matrix(DLDataType dt, const float* src, int64_t rows, int64_t cols, uint16_t* dst,
                  int64_t ld, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static) if (rows * cols >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) f32_to_half(dt, src + r * cols, dst + r * ld, cols, 1);
}

// One matrix product of compact f32 operands (fa: A as stored, fb: B as stored) into matrix
// i of C: a 16-bit C through an f32 copy rounded back; an f32 C (the main grad) accumulated in
// place at full precision. What the mixed-precision and the FP8 gemm share.
void sgemm_staged(loom_backend& b, const loom_gemm_args& g, int64_t i, const float* fa,
                  const float* fb, std::vector<float>& fc) {
  const DLDataType dt = g.c->dtype;
  const bool c16 = !is_f32(dt);
  const int64_t ac = g.trans_a ? g.m : g.k, bc = g.trans_b ? g.k : g.n;
  float* c = nullptr;
  int64_t ldc = g.ldc;
  uint16_t* c_half = nullptr;
  if (c16) {
    c_half = data_of<uint16_t>(g.c) + g.offset_c + i * g.stride_c;
    fc.resize(static_cast<size_t>(g.m * g.n));
    c = fc.data();
    ldc = g.n;
    // beta == 0: C is not read (BLAS convention), so garbage in it does not matter
    if (g.beta != 0.0) load_matrix(dt, c_half, g.ldc, g.m, g.n, c, b.threads);
  } else {
    c = data_of<float>(g.c) + g.offset_c + i * g.stride_c;
  }
  b.blas->sgemm(Blas::kRowMajor, g.trans_a ? Blas::kTrans : Blas::kNoTrans,
                g.trans_b ? Blas::kTrans : Blas::kNoTrans, (int)g.m, (int)g.n, (int)g.k,
                (float)g.alpha, fa, (int)std::max<int64_t>(1, ac), fb,
                (int)std::max<int64_t>(1, bc), (float)g.beta, c, (int)ldc);
  if (c16) store_matrix(dt, c, g.m, g.n, c_half, g.ldc, b.threads);
}

// Mixed-precision gemm: each matrix of A and B converted to compact f32, then sgemm_staged.
// Only the matrices the call touches are converted, so per-head slices of a large tensor
// (attention) cost what they read.
void gemm_mixed(loom_backend& b, const loom_gemm_args& g) {
  const DLDataType dt = g.a->dtype;
  const int64_t ar = g.trans_a ? g.k : g.m, ac = g.trans_a ? g.m : g.k;
  const int64_t br = g.trans_b ? g.n : g.k, bc = g.trans_b ? g.k : g.n;
  std::vector<float> fa(static_cast<size_t>(ar * ac)), fb(static_cast<size_t>(br * bc)), fc;
  const uint16_t* a = data_of<const uint16_t>(g.a);
  const uint16_t* bm = data_of<const uint16_t>(g.b);
  for (int64_t i = 0; i < g.batch; ++i) {
    load_matrix(dt, a + g.offset_a + i * g.stride_a, g.lda, ar, ac, fa.data(), b.threads);
    load_matrix(dt, bm + g.offset_b + i * g.stride_b, g.ldb, br, bc, fb.data(), b.threads);
    sgemm_staged(b, g, i, fa.data(), fb.data(), fc);
  }
}

// The values of one stored FP8 matrix (rows x cols, row pitch ld) into compact f32: each code
// decoded exactly (a table of the format's 256 values), times its block's scale inverse, one
// f32 rounding (loom.fp8/1's "A' and B' in f32").
void dequantize_matrix(const DLTensor* t, int64_t offset, int64_t ld, int64_t rows, int64_t cols,
                       const float* sinv, uint32_t scaling, float* dst, int nt) {
  const loom::Fp8Format f = loom::fp8_format(t->dtype);
  float lut[256];
  for (int c = 0; c < 256; ++c) lut[c] = static_cast<float>(loom::fp8_decode(f, (uint8_t)c));
  const uint8_t* codes = data_of<const uint8_t>(t) + offset;
  const int64_t br = loom::fp8_block_rows(scaling), bc = loom::fp8_block_cols(scaling);
  const int64_t gc = loom::fp8_scale_grid(scaling, rows, cols).second;
#pragma omp parallel for num_threads(nt) schedule(static) if (rows * cols >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* srow = sinv + (br == 0 ? 0 : (r / br) * gc);
    for (int64_t c = 0; c < cols; ++c)
      dst[r * cols + c] = lut[codes[r * ld + c]] * srow[bc == 0 ? 0 : c / bc];
  }
}

template <class T>
void bias_add_kernel(T* out, const T* bias, int64_t N, int64_t C, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static) if (N * C >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    T* row = out + n * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) row[c] += bias[c];
  }
}

// Column blocks in parallel, rows in order within a block: no two threads touch one dbias
// element, and the sum order does not depend on the thread count (reproducible runs).
template <class T>
void bias_backward_kernel(T* dbias, const T* dout, int64_t N, int64_t C, int nt) {
  constexpr int64_t kBlock = 64;
  int64_t nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for num_threads(nt) schedule(static) if (N * C >= kParallelMin)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    int64_t c0 = blk * kBlock, w = std::min(kBlock, C - c0);
    T acc[kBlock] = {};
    for (int64_t n = 0; n < N; ++n) {
      const T* row = dout + n * C + c0;
#pragma omp simd
      for (int64_t c = 0; c < w; ++c) acc[c] += row[c];
    }
    for (int64_t c = 0; c < w; ++c) dbias[c0 + c] += acc[c];
  }
}

}  // namespace

loom_error* op_gemm(loom_backend* be, const loom_gemm_args* args) noexcept {
  return run_op(be, "gemm", [&](loom_backend& b) {
    Check ck{"gemm"};
    const loom_gemm_args& g = *args;
    ck.tensor("a", g.a);
    ck.tensor("b", g.b);
    ck.tensor("c", g.c);
    const bool mixed = Staging::any_half({g.a, g.b, g.c});
    if (mixed) {
      // Mixed precision: a and b in the compute dtype, c the same or f32 (a weight
      // gradient accumulating into the f32 main grad).
      if (!loom_dtype_eq(g.a->dtype, g.b->dtype) || !is_half(g.a->dtype) ||
          !(loom_dtype_eq(g.c->dtype, g.a->dtype) || is_f32(g.c->dtype)))
        ck.fail("a is " + dtype_str(g.a->dtype) + ", b " + dtype_str(g.b->dtype) + ", c " +
                dtype_str(g.c->dtype) +
                "; mixed precision takes a and b both bf16 or both f16, and c in their dtype "
                "or f32");
    } else {
      ck.floating("c", g.c);
      ck.same_dtype("a", g.a, "c", g.c);
      ck.same_dtype("b", g.b, "c", g.c);
    }
    check_operands(ck, g);
    if (std::string why = loom::gemm_overlap_refusal(g); !why.empty()) ck.fail(why);
    if (g.m == 0 || g.n == 0) return;

    b.blas->use_threads(b.threads);
    if (mixed) {
      gemm_mixed(b, g);
      return;
    }
    dispatch_float(ck, "c", g.c, [&](auto tag) {
      using T = decltype(tag);
      const T* a = data_of<const T>(g.a);
      const T* bm = data_of<const T>(g.b);
      T* c = data_of<T>(g.c);
      bool small = g.m * g.n * std::max<int64_t>(g.k, 1) <= kSmallGemm;
      if (g.batch > 1 && small && b.threads > 1) {
#pragma omp parallel for num_threads(b.threads) schedule(static)
        for (int64_t i = 0; i < g.batch; ++i) gemm_one(*b.blas, g, i, a, bm, c);
      } else {
        for (int64_t i = 0; i < g.batch; ++i) gemm_one(*b.blas, g, i, a, bm, c);
      }
    });
  });
}

loom_error* op_bias_add(loom_backend* be, DLTensor* out, const DLTensor* bias) noexcept {
  return run_op(be, "bias_add", [&](loom_backend& b) {
    Check ck{"bias_add"};
    if (Staging::any_half({out, bias})) {
      Staging st(ck, b.threads);
      const DLTensor* bias_ = st.in("bias", bias);
      DLTensor* out_ = st.out("out", out);
      st.run(b, [&] { return op_bias_add(&b, out_, bias_); });
      return;
    }
    ck.tensor("out", out);
    ck.tensor("bias", bias);
    int64_t C = ck.last_dim("out", out);
    ck.same_dtype("bias", bias, "out", out);
    ck.numel("bias", bias, C);
    int64_t N = C ? loom_tensor_numel(out) / C : 0;
    dispatch_float(ck, "out", out, [&](auto tag) {
      using T = decltype(tag);
      bias_add_kernel(data_of<T>(out), data_of<const T>(bias), N, C, b.threads);
    });
  });
}

loom_error* op_bias_backward(loom_backend* be, DLTensor* dbias, const DLTensor* dout) noexcept {
  return run_op(be, "bias_backward", [&](loom_backend& b) {
    Check ck{"bias_backward"};
    if (Staging::any_half({dbias, dout})) {
      Staging st(ck, b.threads);
      const DLTensor* dout_ = st.in("dout", dout);
      DLTensor* dbias_ = st.out("dbias", dbias);
      st.run(b, [&] { return op_bias_backward(&b, dbias_, dout_); });
      return;
    }
    ck.tensor("dbias", dbias);
    ck.tensor("dout", dout);
    int64_t C = ck.last_dim("dout", dout);
    ck.same_dtype("dbias", dbias, "dout", dout);
    ck.numel("dbias", dbias, C);
    int64_t N = C ? loom_tensor_numel(dout) / C : 0;
    dispatch_float(ck, "dout", dout, [&](auto tag) {
      using T = decltype(tag);
      bias_backward_kernel(data_of<T>(dbias), data_of<const T>(dout), N, C, b.threads);
    });
  });
}

// loom.gemm-epilogue/1 (checked by loom::OpsSlots): the plain GEMM, then the bias or GELU
// pass the epilogue stands for, with the kernels the layer library calls without one, so that a run
// with epilogues equals one without to the bit. Nothing here is faster: OpenBLAS has no
// epilogues; the CPU offers them so that the layers' fused path is exercised everywhere.
loom_error* op_gemm_epilogue(loom_backend* be, const loom_gemm_args* args,
                             const loom_gemm_epilogue* e) noexcept {
  return loom::gemm_epilogue_two_passes(be, *args, *e,
                                        loom::EpiloguePasses{op_gemm, op_bias_add, op_bias_backward,
                                                             op_gelu_forward, op_gelu_backward});
}

// loom.fp8/1 on a gemm (checked by loom::OpsSlots): A and B dequantized to f32 as the header
// says, then the f32 product as any mixed-precision gemm makes it.
loom_error* op_gemm_fp8(loom_backend* be, const loom_gemm_args* args,
                        const loom_gemm_fp8* x) noexcept {
  return run_op(be, "gemm", [&](loom_backend& b) {
    Check ck{"gemm"};
    const loom_gemm_args& g = *args;
    ck.tensor("a", g.a);
    ck.tensor("b", g.b);
    ck.tensor("c", g.c);
    ck.tensor("a_scale_inv", x->a_scale_inv);
    ck.tensor("b_scale_inv", x->b_scale_inv);
    check_operands(ck, g);  // batch 1 (gemm_fp8_refusal)
    if (g.m == 0 || g.n == 0) return;
    const int64_t ar = g.trans_a ? g.k : g.m, ac = g.trans_a ? g.m : g.k;
    const int64_t br = g.trans_b ? g.n : g.k, bc = g.trans_b ? g.k : g.n;
    std::vector<float> fa(static_cast<size_t>(ar * ac)), fb(static_cast<size_t>(br * bc)), fc;
    dequantize_matrix(g.a, g.offset_a, g.lda, ar, ac, data_of<const float>(x->a_scale_inv),
                      x->a_scaling, fa.data(), b.threads);
    dequantize_matrix(g.b, g.offset_b, g.ldb, br, bc, data_of<const float>(x->b_scale_inv),
                      x->b_scaling, fb.data(), b.threads);
    b.blas->use_threads(b.threads);
    sgemm_staged(b, g, 0, fa.data(), fb.data(), fc);
  });
}

}  // namespace loom_cpu
