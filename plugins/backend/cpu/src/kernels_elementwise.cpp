// Elementwise passes over whole tensors: fill, copy/cast, add, axpby, sum_squares.
// Every loop is a flat `omp parallel for` + `omp simd` over the elements, so it runs at
// memory bandwidth; a tensor is treated as its numel elements (shape only has to agree in
// element count).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu_backend.hpp"
#include "loom/cpp/graph.hpp"
#include "loom/cpp/half.hpp"
#include "mixed.hpp"

namespace loom_cpu {
namespace {

template <class T>
void fill_kernel(T* t, int64_t n, T v, int nt) {
#pragma omp parallel for simd num_threads(nt) schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) t[i] = v;
}

template <class T>
void add_kernel(T* out, const T* a, const T* b, int64_t n, int nt) {
#pragma omp parallel for simd num_threads(nt) schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <class T>
void axpby_kernel(T* y, T alpha, const T* x, T beta, int64_t n, int nt) {
  if (beta == T(0)) {
    // BLAS convention: beta == 0 means y is not read, so NaN/Inf garbage in y is overwritten.
#pragma omp parallel for simd num_threads(nt) schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) y[i] = alpha * x[i];
  } else {
#pragma omp parallel for simd num_threads(nt) schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) y[i] = alpha * x[i] + beta * y[i];
  }
}

// Fixed-size chunks summed in parallel, then the chunk sums in order: the result does not
// depend on the thread count, so a gradient-norm clip is reproducible across machines.
template <class T>
LOOM_CPU_CLONES double sum_squares_kernel(const T* x, int64_t n, int nt) {
  constexpr int64_t kChunk = 1 << 16;
  int64_t nchunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(static_cast<size_t>(nchunks));
#pragma omp parallel for num_threads(nt) schedule(static) if (nchunks > 1)
  for (int64_t ch = 0; ch < nchunks; ++ch) {
    int64_t i0 = ch * kChunk, i1 = std::min(n, i0 + kChunk);
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = i0; i < i1; ++i) {
      double v = static_cast<double>(x[i]);
      s += v * v;
    }
    part[static_cast<size_t>(ch)] = s;
  }
  double total = 0;
  for (double p : part) total += p;
  return total;
}

}  // namespace

loom_error* op_fill(loom_backend* be, DLTensor* t, double value) noexcept {
  return run_op(be, "fill", [&](loom_backend& b) {
    Check ck{"fill"};
    ck.tensor("t", t);
    int64_t n = loom_tensor_numel(t);
    if (is_f32(t->dtype)) {
      fill_kernel(data_of<float>(t), n, static_cast<float>(value), b.threads);
    } else if (is_f64(t->dtype)) {
      fill_kernel(data_of<double>(t), n, value, b.threads);
    } else if (is_bf16(t->dtype)) {
      fill_kernel(data_of<uint16_t>(t), n, loom::f32_to_bf16(static_cast<float>(value)), b.threads);
    } else if (is_f16(t->dtype)) {
      fill_kernel(data_of<uint16_t>(t), n, loom::f32_to_f16(static_cast<float>(value)), b.threads);
    } else if (is_i32(t->dtype)) {
      if (value != std::nearbyint(value) || std::fabs(value) > 2147483647.0)
        ck.fail("value " + std::to_string(value) + " is not an i32");
      fill_kernel(data_of<int32_t>(t), n, static_cast<int32_t>(value), b.threads);
    } else {
      ck.fail("t is " + dtype_str(t->dtype) + "; fill supports f32, f64, bf16, f16 and i32",
              LOOM_ERR_UNIMPLEMENTED);
    }
  });
}

loom_error* op_copy_strided(loom_backend* be, DLTensor* dst, int64_t ld_dst, int64_t offset_dst,
                            const DLTensor* src, int64_t ld_src, int64_t offset_src, int64_t rows,
                            int64_t cols) noexcept {
  return run_op(be, "copy_strided", [&](loom_backend&) {
    Check ck{"copy_strided"};
    ck.tensor("dst", dst);
    ck.tensor("src", src);
    const size_t e = loom_dtype_bytes(dst->dtype), row = (size_t)cols * e;
    char* d = data_of<char>(dst) + (size_t)offset_dst * e;
    const char* s = data_of<const char>(src) + (size_t)offset_src * e;
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(d + (size_t)(r * ld_dst) * e, s + (size_t)(r * ld_src) * e, row);
  });
}

loom_error* op_copy(loom_backend* be, DLTensor* dst, const DLTensor* src) noexcept {
  return run_op(be, "copy", [&](loom_backend& b) {
    Check ck{"copy"};
    ck.tensor("dst", dst);
    ck.tensor("src", src);
    int64_t n = loom_tensor_numel(src);
    ck.numel("dst", dst, n);
    DLDataType sd = src->dtype, dd = dst->dtype;
    int nt = b.threads;
    if (loom_dtype_eq(sd, dd)) {
      // memmove: a copy between overlapping views of one buffer is still well defined.
      std::memmove(data_of<char>(dst), data_of<const char>(src),
                   static_cast<size_t>(n) * loom_dtype_bytes(sd));
    } else if (is_f32(sd) && is_f64(dd)) {
      convert(data_of<double>(dst), data_of<const float>(src), n, nt,
              [](float v) { return static_cast<double>(v); });
    } else if (is_f64(sd) && is_f32(dd)) {
      convert(data_of<float>(dst), data_of<const double>(src), n, nt,
              [](double v) { return static_cast<float>(v); });
    } else if (is_f32(sd) && is_half(dd)) {
      f32_to_half(dd, data_of<const float>(src), data_of<uint16_t>(dst), n, nt);
    } else if (is_half(sd) && is_f32(dd)) {
      half_to_f32(sd, data_of<const uint16_t>(src), data_of<float>(dst), n, nt);
    } else {
      ck.fail("no cast from " + dtype_str(sd) + " to " + dtype_str(dd) +
                  " (casts are f32 <-> f64/bf16/f16; go through f32)",
              LOOM_ERR_UNIMPLEMENTED);
    }
  });
}

loom_error* op_add(loom_backend* be, DLTensor* out, const DLTensor* a, const DLTensor* b) noexcept {
  return run_op(be, "add", [&](loom_backend& bk) {
    Check ck{"add"};
    if (Staging::any_half({out, a, b})) {
      Staging st(ck, bk.threads);
      const DLTensor* a_ = st.in("a", a);
      const DLTensor* b_ = st.in("b", b);
      DLTensor* out_ = st.out("out", out);
      st.run(bk, [&] { return op_add(&bk, out_, a_, b_); });
      return;
    }
    ck.tensor("out", out);
    ck.tensor("a", a);
    ck.tensor("b", b);
    ck.same_dtype("a", a, "out", out);
    ck.same_dtype("b", b, "out", out);
    int64_t n = loom_tensor_numel(out);
    ck.numel("a", a, n);
    ck.numel("b", b, n);
    dispatch_float(ck, "out", out, [&](auto tag) {
      using T = decltype(tag);
      add_kernel(data_of<T>(out), data_of<const T>(a), data_of<const T>(b), n, bk.threads);
    });
  });
}

loom_error* op_axpby(loom_backend* be, DLTensor* y, double alpha, const DLTensor* x,
                     double beta) noexcept {
  return run_op(be, "axpby", [&](loom_backend& b) {
    Check ck{"axpby"};
    if (Staging::any_half({y, x})) {
      Staging st(ck, b.threads);
      const DLTensor* x_ = st.in("x", x);
      DLTensor* y_ = st.out("y", y);
      st.run(b, [&] { return op_axpby(&b, y_, alpha, x_, beta); });
      return;
    }
    ck.tensor("y", y);
    ck.tensor("x", x);
    ck.same_dtype("x", x, "y", y);
    int64_t n = loom_tensor_numel(y);
    ck.numel("x", x, n);
    dispatch_float(ck, "y", y, [&](auto tag) {
      using T = decltype(tag);
      axpby_kernel(data_of<T>(y), static_cast<T>(alpha), data_of<const T>(x), static_cast<T>(beta),
                   n, b.threads);
    });
  });
}

namespace {
// One tensor's sum of squares into *out.
void sum_squares_one(loom_backend& b, Check& ck, const DLTensor* x, double* out) {
  if (Staging::any_half({x})) {
    Staging st(ck, b.threads);
    const DLTensor* x_ = st.in("x", x);
    st.run(b, [&] {  // x_ is f32: no staging again
      return run_op(&b, "sum_squares", [&](loom_backend& bb) { sum_squares_one(bb, ck, x_, out); });
    });
    return;
  }
  ck.tensor("x", x);
  dispatch_float(ck, "x", x, [&](auto tag) {
    using T = decltype(tag);
    *out = sum_squares_kernel(data_of<const T>(x), loom_tensor_numel(x), b.threads);
  });
}
}  // namespace

loom_error* op_sum_squares(loom_backend* be, const loom_sum_squares_args* a) noexcept {
  return run_op(be, "sum_squares", [&](loom_backend& b) {
    Check ck{"sum_squares"};
    // the sums go to host memory (loom.sum-squares-total/1 keeps them on the device)
    loom::host_graph::refuse_in_graph(&b, "sum_squares into host memory");
    if (a->n > 0 && (a->x == nullptr || a->out == nullptr)) ck.fail("x or out is NULL");
    for (size_t i = 0; i < a->n; ++i) sum_squares_one(b, ck, a->x[i], &a->out[i]);
  });
}

// The host's own loop over the per-tensor sums (index order, from 0), so that the total is
// what a caller summing `out` gets, to the bit.
loom_error* op_sum_squares_total(loom_backend* be, const loom_sum_squares_args* a,
                                 DLTensor* total) noexcept {
  return run_op(be, "sum_squares", [&](loom_backend& b) {
    Check ck{"sum_squares"};
    ck.tensor("total", total);
    double sum = 0.0;
    for (size_t i = 0; i < a->n; ++i) {
      double one = 0.0;
      sum_squares_one(b, ck, a->x[i], &one);
      sum += one;
    }
    *data_of<double>(total) = sum;
  });
}

}  // namespace loom_cpu
