// Elementwise passes over whole tensors, and the bias pair of the linear layer.
//   fill:          t = value                         (f32, bf16, f16, f64, i32)
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

// VW elements per thread, 16-byte stores of dst when VW > 1 (the master parameters cast to
// the compute dtype after every optimizer step go through here, one tensor per call).
template <class D, class S, int VW>
__global__ void convert_kernel(D* dst, const S* src, int64_t n) {
  for (int64_t i = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) * VW; i < n;
       i += int64_t(blockDim.x) * gridDim.x * VW) {
    float v[VW];
    load_row<VW>(src + i, v);
    store_vec<VW>(dst + i, v);
  }
}

// add and axpby walk VW elements per thread (16-byte accesses of `out`/`y` when VW > 1; the
// launcher checks n and the pointers). Element-wise, they reached 33-48 % of the copy
// bandwidth (ncu and the step profile, H200, 2026-11-27).
template <class O, class A, class B, int VW>
__global__ void add_kernel(O* out, const A* a, const B* b, int64_t n) {
  for (int64_t i = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) * VW; i < n;
       i += int64_t(blockDim.x) * gridDim.x * VW) {
    float x[VW], y[VW];
    load_row<VW>(a + i, x);
    load_row<VW>(b + i, y);
#pragma unroll
    for (int k = 0; k < VW; ++k) x[k] += y[k];
    store_vec<VW>(out + i, x);
  }
}

template <class T, class X, int VW>
__global__ void axpby_kernel(T* y, float alpha, const X* x, float beta, int64_t n) {
  for (int64_t i = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) * VW; i < n;
       i += int64_t(blockDim.x) * gridDim.x * VW) {
    float xv[VW], yv[VW];
    load_row<VW>(x + i, xv);
    // BLAS convention: beta == 0 means y is not read, so NaN/Inf garbage in y is overwritten.
    if (beta == 0.0f) {
#pragma unroll
      for (int k = 0; k < VW; ++k) yv[k] = 0.0f;
    } else {
      load_vec<VW>(y + i, yv);
#pragma unroll
      for (int k = 0; k < VW; ++k) yv[k] *= beta;
    }
#pragma unroll
    for (int k = 0; k < VW; ++k) yv[k] = alpha * xv[k] + yv[k];
    store_vec<VW>(y + i, yv);
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

// sum of squares over a list of tensors, two launches for the whole list (it was two per
// tensor, each of 1024 blocks whatever the size: 296 launches and 1.1 ms per gpt2-124m step,
// step profile, H200, 2026-11-26). Tensor t gets ssq_blocks(n) blocks, a function of its size
// only; pass 1: each block's grid-stride share of its tensor, squared and summed in double by
// every thread, then across the block in a fixed tree; pass 2: one block per tensor sums its
// blocks' partials in the same fixed tree. So the result depends on n only.
constexpr int kSsqList = 128;  // tensors per launch: the list is a kernel parameter (~2.7 KB)
struct SsqList {
  const void* x[kSsqList];
  int64_t n[kSsqList];
  int32_t first[kSsqList + 1];  // tensor t's partials are [first[t], first[t + 1])
  int8_t dtype[kSsqList];       // 0 f32, 1 bf16, 2 f16
  int count;
};
inline int32_t ssq_blocks(int64_t n) {
  return static_cast<int32_t>(std::clamp<int64_t>((n + 65535) / 65536, 1, 1024));
}
template <class T>
__device__ __forceinline__ double ssq_range(const T* x, int64_t n, int64_t b, int64_t nb) {
  double s = 0;
  for (int64_t i = b * blockDim.x + threadIdx.x; i < n; i += nb * blockDim.x) {
    const double v = to_f32(x[i]);
    s += v * v;
  }
  return s;
}
__global__ void sum_squares_partial(const SsqList L, double* partial) {
  int lo = 0, hi = L.count - 1;  // the tensor of this block: the last t with first[t] <= block
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (L.first[mid] <= static_cast<int32_t>(blockIdx.x))
      lo = mid;
    else
      hi = mid - 1;
  }
  const int64_t b = blockIdx.x - L.first[lo], nb = L.first[lo + 1] - L.first[lo];
  double s;
  if (L.dtype[lo] == 0)
    s = ssq_range(static_cast<const float*>(L.x[lo]), L.n[lo], b, nb);
  else if (L.dtype[lo] == 1)
    s = ssq_range(static_cast<const __nv_bfloat16*>(L.x[lo]), L.n[lo], b, nb);
  else
    s = ssq_range(static_cast<const __half*>(L.x[lo]), L.n[lo], b, nb);
  s = tree_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}
__global__ void sum_squares_final(const SsqList L, const double* partial, double* out) {
  double s = 0;
  for (int32_t i = L.first[blockIdx.x] + threadIdx.x; i < L.first[blockIdx.x + 1]; i += blockDim.x)
    s += partial[i];
  s = tree_sum(s);
  if (threadIdx.x == 0) out[blockIdx.x] = s;
}

// out(N,C) += bias(C). Thread t owns columns [t VW, t VW + VW) (and every blockDim.x VW
// after): it loads their bias once, then walks rows blockIdx.x, + gridDim.x, ... with 16-byte
// accesses when VW > 1. The element-wise version (one 64-bit modulo per element, 2-byte
// accesses) ran at 30 % of the copy bandwidth (step profile, H200, 2026-11-26).
template <class T, class B, int VW>
__global__ void bias_add_kernel(T* out, const B* bias, int64_t N, int64_t C) {
  for (int64_t c = int64_t{threadIdx.x} * VW; c < C; c += int64_t{blockDim.x} * VW) {
    float bb[VW];
    load_row<VW>(bias + c, bb);
    for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
      float v[VW];
      load_vec<VW>(out + n * C + c, v);
#pragma unroll
      for (int i = 0; i < VW; ++i) v[i] += bb[i];
      store_vec<VW>(out + n * C + c, v);
    }
  }
}

// bias_backward, pass 1: block (x, y) sums the 32 VW columns from 32 VW blockIdx.x over row
// chunk y (rows y, y + R, y + 2R, ... for R = gridDim.y) into partial(R, C). Threads are 32
// column groups of VW (16-byte loads along the row when VW > 1) by 8 row lanes, summed over
// the lanes in a fixed order. The shared rows are laid out [i][x] so that both the stores and
// the lane sums hit 32 distinct banks.
constexpr int kBiasRowLanes = 8;
template <class T, int VW>
__global__ void bias_backward_partial(const T* dout, int64_t N, int64_t C, float* partial) {
  __shared__ float sh[kBiasRowLanes][VW * 32];
  const int64_t c0 = (blockIdx.x * int64_t{32} + threadIdx.x) * VW;
  const int64_t R = gridDim.y;
  float s[VW];
#pragma unroll
  for (int i = 0; i < VW; ++i) s[i] = 0.0f;
  if (c0 < C)
    for (int64_t r = blockIdx.y + R * threadIdx.y; r < N; r += R * kBiasRowLanes) {
      float v[VW];
      load_vec<VW>(dout + r * C + c0, v);
#pragma unroll
      for (int i = 0; i < VW; ++i) s[i] += v[i];
    }
#pragma unroll
  for (int i = 0; i < VW; ++i) sh[threadIdx.y][i * 32 + threadIdx.x] = s[i];
  __syncthreads();
  if (threadIdx.y == 0 && c0 < C) {
#pragma unroll
    for (int i = 0; i < VW; ++i) {
      float t = 0;
#pragma unroll
      for (int j = 0; j < kBiasRowLanes; ++j) t += sh[j][i * 32 + threadIdx.x];
      partial[blockIdx.y * C + c0 + i] = t;
    }
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
template <class D, class S>
void launch_convert(cudaStream_t st, void* d, const void* s, int64_t n) {
  with_vec<D>(n % kVec<D> == 0, {d, s}, [&](auto vw) {
    constexpr int VW = decltype(vw)::value;
    convert_kernel<D, S, VW>
        <<<grid_for(n / VW), kThreads, 0, st>>>(static_cast<D*>(d), static_cast<const S*>(s), n);
  });
}
template <class O, class A, class B>
void launch_add(cudaStream_t st, void* o, const void* a, const void* b, int64_t n) {
  with_vec<O>(n % kVec<O> == 0, {o, a, b}, [&](auto vw) {
    constexpr int VW = decltype(vw)::value;
    add_kernel<O, A, B, VW><<<grid_for(n / VW), kThreads, 0, st>>>(
        static_cast<O*>(o), static_cast<const A*>(a), static_cast<const B*>(b), n);
  });
}
template <class T, class X>
void launch_axpby(cudaStream_t st, void* y, double alpha, const void* x, double beta, int64_t n) {
  with_vec<T>(n % kVec<T> == 0, {y, x}, [&](auto vw) {
    constexpr int VW = decltype(vw)::value;
    axpby_kernel<T, X, VW><<<grid_for(n / VW), kThreads, 0, st>>>(
        static_cast<T*>(y), static_cast<float>(alpha), static_cast<const X*>(x),
        static_cast<float>(beta), n);
  });
}
template <class T, class B>
void launch_bias_add(cudaStream_t st, void* out, const void* bias, int64_t N, int64_t C) {
  with_vec<T>(C % kVec<T> == 0, {out, bias}, [&](auto vw) {
    constexpr int VW = decltype(vw)::value;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(N, 8192));
    bias_add_kernel<T, B, VW><<<blocks, row_threads(C / VW), 0, st>>>(
        static_cast<T*>(out), static_cast<const B*>(bias), N, C);
  });
}
template <class T, class B>
void launch_bias_backward(cudaStream_t st, void* dbias, const void* dout, int64_t N, int64_t C,
                          int64_t R, float* partial) {
  with_vec<T>(C % kVec<T> == 0, {dout}, [&](auto vw) {
    constexpr int VW = decltype(vw)::value;
    const unsigned col_blocks = static_cast<unsigned>((C + 32 * VW - 1) / (32 * VW));
    bias_backward_partial<T, VW>
        <<<dim3(col_blocks, static_cast<unsigned>(R)), dim3(32, kBiasRowLanes), 0, st>>>(
            static_cast<const T*>(dout), N, C, partial);
  });
  LOOM_CUDA_LAUNCHED("bias_backward");
  column_sum_finish<B><<<column_sum_grid(C, 1), dim3(32, kColLanes), 0, st>>>(
      static_cast<B*>(dbias), partial, nullptr, nullptr, R, C);
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
    } else if (loom_dtype_eq(t->dtype, loom_f64())) {  // the host's sums on the device
      fill_kernel<<<grid_for(n), kThreads, 0, b.stream>>>(static_cast<double*>(p), n, value);
    } else {
      if (!is_float(t->dtype))
        fail("fill", "t is " + dtype_str(t->dtype) + "; fill supports f32, bf16, f16, f64 and i32",
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

loom_error* copy_strided(loom_backend* be, DLTensor* dst, int64_t ld_dst, int64_t offset_dst,
                         const DLTensor* src, int64_t ld_src, int64_t offset_src, int64_t rows,
                         int64_t cols) noexcept {
  return run_op(be, "copy_strided", [&](loom_backend& b) {
    const size_t e = loom_dtype_bytes(dst->dtype);
    char* d = static_cast<char*>(device_ptr(b, dst, "copy_strided", "dst")) + offset_dst * e;
    const char* s =
        static_cast<const char*>(device_ptr(b, src, "copy_strided", "src")) + offset_src * e;
    LOOM_CUDA_CHECK("copy_strided", cudaMemcpy2DAsync(d, (size_t)ld_dst * e, s, (size_t)ld_src * e,
                                                      (size_t)cols * e, (size_t)rows,
                                                      cudaMemcpyDeviceToDevice, b.stream));
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
        launch_convert<D, S>(b.stream, d, s, n);
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

namespace {
// total[0] (= 0 first when `reset`) += results[0] + ... + results[count - 1], one thread in
// index order: the host's loop over the per-tensor sums, to the bit.
__global__ void ssq_accumulate(const double* results, int count, double* total, bool reset) {
  double s = reset ? 0.0 : total[0];
  for (int i = 0; i < count; ++i) s += results[i];
  total[0] = s;
}

// The per-tensor sums of a->x, a list of up to kSsqList tensors at a time into the scratch;
// `done(results, first, count)` queues what happens to each list's results (tensors
// [first, first + count)) before the next list reuses the scratch.
template <class Done>
void ssq_lists(loom_backend& b, const loom_sum_squares_args* a, Done&& done) {
  const char* op = "sum_squares";
  const int64_t cap = static_cast<int64_t>(b.scratch_bytes / sizeof(double)) - kSsqList;
  double* results = static_cast<double*>(b.scratch);
  double* partial = results + kSsqList;
  SsqList L{};
  size_t first = 0;
  const auto flush = [&] {
    if (L.count == 0) return;
    sum_squares_partial<<<static_cast<unsigned>(L.first[L.count]), kThreads, 0, b.stream>>>(
        L, partial);
    LOOM_CUDA_LAUNCHED(op);
    sum_squares_final<<<static_cast<unsigned>(L.count), kThreads, 0, b.stream>>>(L, partial,
                                                                                 results);
    LOOM_CUDA_LAUNCHED(op);
    done(results, first, L.count);
    first += static_cast<size_t>(L.count);
    L = SsqList{};
  };
  for (size_t i = 0; i < a->n; ++i) {
    const DLTensor* x = a->x[i];
    const void* px = device_ptr(b, x, op, "x");
    const int64_t n = numel(x);
    int8_t code = 0;
    dispatch_float(op, "x", x, [&](auto tag) {
      using T = typename decltype(tag)::type;
      code = std::is_same_v<T, float> ? 0 : std::is_same_v<T, __nv_bfloat16> ? 1 : 2;
    });
    if (L.count == kSsqList || L.first[L.count] + ssq_blocks(n) > cap) flush();
    L.x[L.count] = px;
    L.n[L.count] = n;
    L.dtype[L.count] = code;
    L.first[L.count + 1] = L.first[L.count] + ssq_blocks(n);
    ++L.count;
  }
  flush();
}
}  // namespace

// Lists follow each other on the stream, so each reuses the scratch after the last one's
// results were copied back; one synchronisation for the whole call.
loom_error* sum_squares(loom_backend* be, const loom_sum_squares_args* a) noexcept {
  return run_op(be, "sum_squares", [&](loom_backend& b) {
    const char* op = "sum_squares";
    refuse_in_capture(b, "sum_squares into host memory");
    if (a->n == 0) return;
    if (a->x == nullptr || a->out == nullptr) fail(op, "x or out is NULL");
    ssq_lists(b, a, [&](const double* results, size_t first, int count) {
      LOOM_CUDA_CHECK(op, cudaMemcpyAsync(a->out + first, results, count * sizeof(double),
                                          cudaMemcpyDeviceToHost, b.stream));
    });
    LOOM_CUDA_CHECK(op, stream_sync(b.stream));
  });
}

// loom.sum-squares-total/1: the same lists, each list's sums added into total on the device
// (one thread, index order); nothing is read back, nothing waited for.
loom_error* sum_squares_total(loom_backend* be, const loom_sum_squares_args* a,
                              DLTensor* total) noexcept {
  return run_op(be, "sum_squares", [&](loom_backend& b) {
    const char* op = "sum_squares";
    double* t = static_cast<double*>(device_ptr(b, total, op, "total"));
    if (a->n == 0) {
      LOOM_CUDA_CHECK(op, cudaMemsetAsync(t, 0, sizeof(double), b.stream));
      return;
    }
    ssq_lists(b, a, [&](const double* results, size_t first, int count) {
      ssq_accumulate<<<1, 1, 0, b.stream>>>(results, count, t, first == 0);
      LOOM_CUDA_LAUNCHED(op);
    });
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
    // Row chunks: enough blocks of 256-column slices to fill the GPU, as many as the scratch
    // holds, none empty. R depends on (N, C) only, so the sum order is reproducible (and the
    // same with 16-byte loads or without).
    const int64_t slices = (C + 255) / 256;
    const int64_t cap = static_cast<int64_t>(b.scratch_bytes / sizeof(float)) / C;
    if (cap < 1)
      fail("bias_backward", "C = " + std::to_string(C) + " exceeds the scratch buffer",
           LOOM_ERR_UNIMPLEMENTED);
    if ((C + 31) / 32 > 0x7fffffff) fail("bias_backward", "C too large");
    const int64_t R = std::max<int64_t>(
        1, std::min<int64_t>({(N + 63) / 64, std::max<int64_t>(1, 2048 / slices), cap, 65535}));
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

void add_column_sums(loom_backend& be, DLTensor* dbias, const float* part, int64_t K, int64_t C) {
  void* pd = device_ptr(be, dbias, "gemm", "dbias", C);
  if (C == 0) return;
  dispatch_storage("gemm", "dbias", dbias->dtype, [&](auto tag) {
    using G = typename decltype(tag)::type;
    column_sum_finish<G><<<column_sum_grid(C, 1), dim3(32, kColLanes), 0, be.stream>>>(
        static_cast<G*>(pd), part, nullptr, nullptr, K, C);
  });
  LOOM_CUDA_LAUNCHED("gemm");
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
