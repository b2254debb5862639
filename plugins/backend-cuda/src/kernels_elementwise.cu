// Elementwise passes over whole tensors, and the bias pair of the linear layer.
//   fill:          t = value                         (f32, bf16, f16, i32)
//   copy:          dst = src, casting f32 <-> bf16/f16, or any same-dtype copy
//   add:           out(n) = a(n) + b(n)              (out may alias a or b)
//   axpby:         y(n) = alpha x(n) + beta y(n)     (beta == 0: y is not read)
//   sum_squares:   out[i] = sum x[i]^2 in double, many tensors, one copy back (synchronous)
//   bias_add:      out(N,C) += bias(C)
//   bias_backward: dbias(C) += colsum dout(N,C)      (parameter gradient: +=)
// A tensor is treated as its numel elements (shapes only have to agree in element count), as
// in backend/cpu. Under mixed precision each tensor of add/axpby/bias_* is f32 or the call's
// one 16-bit dtype (backend/cpu's rule). Arithmetic is f32 whatever the storage (double for
// sum_squares); every reduction has a fixed order that depends only on the shape, so runs
// are reproducible.
#include <algorithm>
#include <initializer_list>
#include <utility>

#include "kernels_common.cuh"
#include "ops.hpp"

namespace loom_cuda {
namespace {

// ---- kernels ---------------------------------------------------------------------------------

template <class T>
__global__ void fill_kernel(T* t, int64_t n, T v) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x)
    t[i] = v;
}

template <class D, class S>
__global__ void convert_kernel(D* dst, const S* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x)
    dst[i] = from_f32<D>(to_f32(src[i]));
}

template <class O, class A, class B>
__global__ void add_kernel(O* out, const A* a, const B* b, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x)
    out[i] = from_f32<O>(to_f32(a[i]) + to_f32(b[i]));
}

template <class T, class X>
__global__ void axpby_kernel(T* y, float alpha, const X* x, float beta, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x) {
    // BLAS convention: beta == 0 means y is not read, so NaN/Inf garbage in y is overwritten.
    const float yv = beta == 0.0f ? 0.0f : beta * to_f32(y[i]);
    y[i] = from_f32<T>(alpha * to_f32(x[i]) + yv);
  }
}

// C = beta * C on `batch` matrices of rows x cols, row pitch ld, `stride` apart.
template <class T>
__global__ void scale_matrices_kernel(T* c, int64_t rows, int64_t cols, int64_t ld, int64_t stride,
                                      int64_t batch, float beta) {
  const int64_t per = rows * cols, total = per * batch;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(blockDim.x) * gridDim.x) {
    const int64_t bi = i / per, r = (i % per) / cols, col = i % cols;
    T* p = c + bi * stride + r * ld + col;
    *p = from_f32<T>(beta == 0.0f ? 0.0f : beta * to_f32(*p));
  }
}

// sum of squares, pass 1: each block's grid-stride share summed in double by every thread,
// then across the block in a fixed tree; partial[blockIdx.x] gets the block's sum.
constexpr int kSsqBlocks = 1024;  // fixed: the summation order depends on n only
template <class T>
__global__ void sum_squares_partial(const T* x, int64_t n, double* partial) {
  __shared__ double sh[kThreads];
  double s = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x) {
    const double v = to_f32(x[i]);
    s += v * v;
  }
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (static_cast<int>(threadIdx.x) < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}
// pass 2 (one block): the partials, in the same fixed tree.
__global__ void sum_squares_final(const double* partial, int count, double* out) {
  __shared__ double sh[kThreads];
  double s = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (static_cast<int>(threadIdx.x) < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = sh[0];
}

// out(N,C) += bias(C)
template <class T, class B>
__global__ void bias_add_kernel(T* out, const B* bias, int64_t N, int64_t C) {
  const int64_t total = N * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(blockDim.x) * gridDim.x)
    out[i] = from_f32<T>(to_f32(out[i]) + to_f32(bias[i % C]));
}

// bias_backward, pass 1: block (x, y) sums columns [32x, 32x + 32) over row chunk y
// (rows y, y + R, y + 2R, ... for R = gridDim.y) into partial(R, C). Threads are 32 columns
// (coalesced along the row) by 8 row lanes, summed over the lanes in a fixed order.
constexpr int kBiasRowLanes = 8;
template <class T>
__global__ void bias_backward_partial(const T* dout, int64_t N, int64_t C, float* partial) {
  __shared__ float sh[kBiasRowLanes][33];
  const int64_t c = blockIdx.x * int64_t(32) + threadIdx.x;
  const int64_t R = gridDim.y;
  float s = 0;
  if (c < C)
    for (int64_t r = blockIdx.y + R * threadIdx.y; r < N; r += R * kBiasRowLanes)
      s += to_f32(dout[r * C + c]);
  sh[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float t = 0;
#pragma unroll
    for (int j = 0; j < kBiasRowLanes; ++j) t += sh[j][threadIdx.x];
    partial[blockIdx.y * C + c] = t;
  }
}
// pass 2: dbias(c) += sum over the R chunks, in chunk order.
template <class B>
__global__ void bias_backward_final(B* dbias, const float* partial, int64_t R, int64_t C) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < C;
       c += int64_t(blockDim.x) * gridDim.x) {
    float s = 0;
    for (int64_t r = 0; r < R; ++r) s += partial[r * C + c];
    dbias[c] = from_f32<B>(to_f32(dbias[c]) + s);
  }
}

// ---- launchers -------------------------------------------------------------------------------

// Calls fn(Tag<T>{}) for T in {f32, bf16, f16}; the name is only for the message.
template <class Fn>
void dispatch_storage(const char* op, const char* name, DLDataType d, Fn&& fn) {
  if (is_f32(d))
    fn(Tag<float>{});
  else if (is_bf16(d))
    fn(Tag<__nv_bfloat16>{});
  else if (is_f16(d))
    fn(Tag<__half>{});
  else
    fail(op,
         std::string(name) + " is " + dtype_str(d) + "; backend/cuda supports f32, bf16 and f16",
         LOOM_ERR_UNIMPLEMENTED);
}

// Launchers: named templates (a kernel launched from a generic lambda nested three deep
// trips nvcc's stub generation).
template <class O, class A, class B>
void launch_add(cudaStream_t st, void* o, const void* a, const void* b, int64_t n) {
  add_kernel<<<grid_for(n), kThreads, 0, st>>>(static_cast<O*>(o), static_cast<const A*>(a),
                                               static_cast<const B*>(b), n);
}
template <class T, class X>
void launch_axpby(cudaStream_t st, void* y, double alpha, const void* x, double beta, int64_t n) {
  axpby_kernel<<<grid_for(n), kThreads, 0, st>>>(static_cast<T*>(y), static_cast<float>(alpha),
                                                 static_cast<const X*>(x), static_cast<float>(beta),
                                                 n);
}
template <class T, class B>
void launch_bias_add(cudaStream_t st, void* out, const void* bias, int64_t N, int64_t C) {
  bias_add_kernel<<<grid_for(N * C), kThreads, 0, st>>>(static_cast<T*>(out),
                                                        static_cast<const B*>(bias), N, C);
}
template <class T, class B>
void launch_bias_backward(cudaStream_t st, void* dbias, const void* dout, int64_t N, int64_t C,
                          int64_t R, float* partial) {
  const unsigned col_blocks = static_cast<unsigned>((C + 31) / 32);
  bias_backward_partial<<<dim3(col_blocks, static_cast<unsigned>(R)), dim3(32, kBiasRowLanes), 0,
                          st>>>(static_cast<const T*>(dout), N, C, partial);
  LOOM_CUDA_LAUNCHED("bias_backward");
  bias_backward_final<<<grid_for(C), kThreads, 0, st>>>(static_cast<B*>(dbias), partial, R, C);
}

// Mixed precision (backend.h): the tensors of one call are each f32 or the one 16-bit
// compute dtype. Calls fn(Tag<T>{}) with T that dtype (float when all are f32); each tensor
// is then dispatched with dispatch_param(..., Tag<T>{}, ...).
template <class Fn>
void dispatch_compute(const char* op,
                      std::initializer_list<std::pair<const char*, const DLTensor*>> ts, Fn&& fn) {
  const DLTensor* half = nullptr;
  const char* half_name = nullptr;
  for (const auto& [name, t] : ts) {
    need_float(op, name, t);
    if (!is_f32(t->dtype) && half == nullptr) half = t, half_name = name;
  }
  if (half == nullptr) return fn(Tag<float>{});
  for (const auto& [name, t] : ts)
    if (!is_f32(t->dtype) && !loom_dtype_eq(t->dtype, half->dtype))
      fail(op, std::string(name) + " is " + dtype_str(t->dtype) + " but " + half_name + " is " +
                   dtype_str(half->dtype) + "; one call mixes f32 with one 16-bit dtype only");
  if (is_bf16(half->dtype))
    fn(Tag<__nv_bfloat16>{});
  else
    fn(Tag<__half>{});
}

}  // namespace

loom_error* fill(loom_backend* be, DLTensor* t, double value) noexcept {
  return run_op(be, "fill", [&](loom_backend& b) {
    void* p = device_ptr(b, t, "fill", "t");
    const int64_t n = numel(t);
    if (n == 0) return;
    if (is_i32(t->dtype)) {
      if (value != std::nearbyint(value) || std::fabs(value) > 2147483647.0)
        fail("fill", "value " + std::to_string(value) + " is not an i32");
      fill_kernel<<<grid_for(n), kThreads, 0, b.stream>>>(static_cast<int32_t*>(p), n,
                                                          static_cast<int32_t>(value));
    } else {
      if (!is_float(t->dtype))
        fail("fill", "t is " + dtype_str(t->dtype) + "; fill supports f32, bf16, f16 and i32",
             LOOM_ERR_UNIMPLEMENTED);
      dispatch_storage("fill", "t", t->dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        // Rounded once on the host, as backend/cpu does: f64 -> f32 -> storage.
        const T v = static_cast<T>(static_cast<float>(value));
        fill_kernel<<<grid_for(n), kThreads, 0, b.stream>>>(static_cast<T*>(p), n, v);
      });
    }
    LOOM_CUDA_LAUNCHED("fill");
  });
}

loom_error* copy(loom_backend* be, DLTensor* dst, const DLTensor* src) noexcept {
  return run_op(be, "copy", [&](loom_backend& b) {
    const void* s = device_ptr(b, src, "copy", "src");
    const int64_t n = numel(src);
    void* d = device_ptr(b, dst, "copy", "dst", n);
    const DLDataType sd = src->dtype, dd = dst->dtype;
    if (loom_dtype_eq(sd, dd)) {
      // cudaMemcpyAsync device to device is memmove-safe only for disjoint buffers; an exact
      // self-copy is a no-op, a partial overlap is refused (backend/cpu would memmove it).
      const size_t bytes = static_cast<size_t>(n) * loom_dtype_bytes(sd);
      if (bytes == 0 || s == d) return;
      const char *sc = static_cast<const char*>(s), *dc = static_cast<char*>(d);
      if (sc < dc + bytes && dc < sc + bytes)
        fail("copy", "src and dst overlap partially (" + std::to_string(bytes) + " bytes)");
      LOOM_CUDA_CHECK("copy", cudaMemcpyAsync(d, s, bytes, cudaMemcpyDeviceToDevice, b.stream));
      return;
    }
    const bool cast =
        (is_f32(sd) && (is_bf16(dd) || is_f16(dd))) || ((is_bf16(sd) || is_f16(sd)) && is_f32(dd));
    if (!cast)
      fail("copy",
           "no cast from " + dtype_str(sd) + " to " + dtype_str(dd) +
               " (backend/cuda casts f32 <-> bf16/f16; go through f32)",
           LOOM_ERR_UNIMPLEMENTED);
    if (n == 0) return;
    dispatch_storage("copy", "dst", dd, [&](auto dtag) {
      using D = typename decltype(dtag)::type;
      dispatch_storage("copy", "src", sd, [&](auto stag) {
        using S = typename decltype(stag)::type;
        convert_kernel<<<grid_for(n), kThreads, 0, b.stream>>>(static_cast<D*>(d),
                                                               static_cast<const S*>(s), n);
      });
    });
    LOOM_CUDA_LAUNCHED("copy");
  });
}

loom_error* add(loom_backend* be, DLTensor* out, const DLTensor* a, const DLTensor* b) noexcept {
  return run_op(be, "add", [&](loom_backend& bk) {
    void* o = device_ptr(bk, out, "add", "out");
    const int64_t n = numel(out);
    const void* pa = device_ptr(bk, a, "add", "a", n);
    const void* pb = device_ptr(bk, b, "add", "b", n);
    dispatch_compute("add", {{"out", out}, {"a", a}, {"b", b}}, [&](auto tag) {
      dispatch_param("add", "out", out, tag, [&](auto otag) {
        dispatch_param("add", "a", a, tag, [&](auto atag) {
          dispatch_param("add", "b", b, tag, [&](auto btag) {
            if (n == 0) return;
            launch_add<typename decltype(otag)::type, typename decltype(atag)::type,
                       typename decltype(btag)::type>(bk.stream, o, pa, pb, n);
            LOOM_CUDA_LAUNCHED("add");
          });
        });
      });
    });
  });
}

loom_error* axpby(loom_backend* be, DLTensor* y, double alpha, const DLTensor* x,
                  double beta) noexcept {
  return run_op(be, "axpby", [&](loom_backend& b) {
    void* py = device_ptr(b, y, "axpby", "y");
    const int64_t n = numel(y);
    const void* px = device_ptr(b, x, "axpby", "x", n);
    dispatch_compute("axpby", {{"y", y}, {"x", x}}, [&](auto tag) {
      dispatch_param("axpby", "y", y, tag, [&](auto ytag) {
        dispatch_param("axpby", "x", x, tag, [&](auto xtag) {
          if (n == 0) return;
          launch_axpby<typename decltype(ytag)::type, typename decltype(xtag)::type>(
              b.stream, py, alpha, px, beta, n);
          LOOM_CUDA_LAUNCHED("axpby");
        });
      });
    });
  });
}

loom_error* sum_squares(loom_backend* be, const loom_sum_squares_args* a) noexcept {
  return run_op(be, "sum_squares", [&](loom_backend& b) {
    const char* op = "sum_squares";
    if (a->n == 0) return;
    if (a->x == nullptr || a->out == nullptr) fail(op, "x or out is NULL");
    // Scratch: the partials of the tensor in flight (reused: the stream orders each
    // tensor's two passes before the next one's), then one result per tensor, copied back
    // together: one synchronisation for the whole list.
    const size_t max_n = b.scratch_bytes / sizeof(double) - kSsqBlocks;
    double* partial = static_cast<double*>(b.scratch);
    double* results = partial + kSsqBlocks;
    for (size_t first = 0; first < a->n; first += max_n) {
      const size_t count = std::min(max_n, a->n - first);
      for (size_t i = 0; i < count; ++i) {
        const DLTensor* x = a->x[first + i];
        const void* px = device_ptr(b, x, op, "x");
        const int64_t n = numel(x);
        dispatch_float(op, "x", x, [&](auto tag) {
          using T = typename decltype(tag)::type;
          if (n == 0) {
            LOOM_CUDA_CHECK(op, cudaMemsetAsync(results + i, 0, sizeof(double), b.stream));
            return;
          }
          sum_squares_partial<<<kSsqBlocks, kThreads, 0, b.stream>>>(static_cast<const T*>(px), n,
                                                                     partial);
          LOOM_CUDA_LAUNCHED(op);
          sum_squares_final<<<1, kThreads, 0, b.stream>>>(partial, kSsqBlocks, results + i);
          LOOM_CUDA_LAUNCHED(op);
        });
      }
      LOOM_CUDA_CHECK(op, cudaMemcpyAsync(a->out + first, results, count * sizeof(double),
                                          cudaMemcpyDeviceToHost, b.stream));
      LOOM_CUDA_CHECK(op, stream_sync(b.stream));
    }
  });
}

loom_error* bias_add(loom_backend* be, DLTensor* out, const DLTensor* bias) noexcept {
  return run_op(be, "bias_add", [&](loom_backend& b) {
    void* o = device_ptr(b, out, "bias_add", "out");
    const int64_t C = last_dim("bias_add", "out", out);
    const void* pb = device_ptr(b, bias, "bias_add", "bias", C);
    const int64_t N = C ? numel(out) / C : 0;
    dispatch_compute("bias_add", {{"out", out}, {"bias", bias}}, [&](auto tag) {
      dispatch_param("bias_add", "out", out, tag, [&](auto otag) {
        dispatch_param("bias_add", "bias", bias, tag, [&](auto btag) {
          if (N * C == 0) return;
          launch_bias_add<typename decltype(otag)::type, typename decltype(btag)::type>(b.stream, o,
                                                                                        pb, N, C);
          LOOM_CUDA_LAUNCHED("bias_add");
        });
      });
    });
  });
}

loom_error* bias_backward(loom_backend* be, DLTensor* dbias, const DLTensor* dout) noexcept {
  return run_op(be, "bias_backward", [&](loom_backend& b) {
    const void* pd = device_ptr(b, dout, "bias_backward", "dout");
    const int64_t C = last_dim("bias_backward", "dout", dout);
    void* pb = device_ptr(b, dbias, "bias_backward", "dbias", C);
    const int64_t N = C ? numel(dout) / C : 0;
    if (N == 0 || C == 0) {  // += of an empty sum; still check the dtypes
      dispatch_compute("bias_backward", {{"dbias", dbias}, {"dout", dout}}, [](auto) {});
      return;
    }
    // Row chunks: enough blocks to fill the GPU for a thin C, as many as the scratch holds,
    // none empty. R depends on (N, C) only, so the sum order is reproducible.
    const int64_t col_blocks = (C + 31) / 32;
    const int64_t cap = static_cast<int64_t>(b.scratch_bytes / sizeof(float)) / C;
    if (cap < 1)
      fail("bias_backward", "C = " + std::to_string(C) + " exceeds the scratch buffer",
           LOOM_ERR_UNIMPLEMENTED);
    if (col_blocks > 0x7fffffff) fail("bias_backward", "C too large");
    const int64_t R = std::max<int64_t>(
        1, std::min<int64_t>({(N + 63) / 64, std::max<int64_t>(1, 1024 / col_blocks), cap, 65535}));
    float* partial = static_cast<float*>(b.scratch);
    dispatch_compute("bias_backward", {{"dbias", dbias}, {"dout", dout}}, [&](auto tag) {
      dispatch_param("bias_backward", "dout", dout, tag, [&](auto dtag) {
        dispatch_param("bias_backward", "dbias", dbias, tag, [&](auto btag) {
          launch_bias_backward<typename decltype(dtag)::type, typename decltype(btag)::type>(
              b.stream, pb, pd, N, C, R, partial);
          LOOM_CUDA_LAUNCHED("bias_backward");
        });
      });
    });
  });
}

void scale_matrices(loom_backend& be, DLDataType dtype, void* c, int64_t rows, int64_t cols,
                    int64_t ld, int64_t stride, int64_t batch, double beta) {
  const int64_t total = rows * cols * batch;
  if (total == 0) return;
  dispatch_storage("gemm", "c", dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    scale_matrices_kernel<<<grid_for(total), kThreads, 0, be.stream>>>(
        static_cast<T*>(c), rows, cols, ld, stride, batch, static_cast<float>(beta));
  });
  LOOM_CUDA_LAUNCHED("gemm");
}

}  // namespace loom_cuda
