// Shared-memory tile helpers of attention/flash-cuda: element conversions, the block-wide
// tile GEMM (tensor cores through nvcuda::wmma for bf16/f16, plain fp32 FMA for f32, which
// is the exact path the tests hold to 1e-4), global <-> shared tile copies, and the tile
// sizes per element type.
//
// Every tile lives in shared memory, row-major with the leading dimension given. A GEMM
// reads A and B (element type T) and writes or accumulates C in fp32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cstdint>
#include <type_traits>

#include "flash_kernels.hpp"
#include "loom/cpp/cuda_convert.cuh"

namespace flash {

constexpr int kThreads = 128;  // 4 warps per block, every kernel
constexpr int kWarps = kThreads / 32;

// Tile sizes: bf16/f16 use 64x64 score tiles; f32 (testing only) 32x32 so its backward's
// shared memory (twice the bytes per element) still fits in the 227 KiB of an sm_90 block.
template <class T>
struct Tiles {
  static constexpr int kBr = 64, kBc = 64;  // query rows, key rows per tile
};
template <>
struct Tiles<float> {
  static constexpr int kBr = 32, kBc = 32;
};

__host__ __device__ __forceinline__ int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
__host__ __device__ __forceinline__ int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

// Element conversions: the SDK's, as backend/cuda's kernels round.
using loom::from_f32;
using loom::to_f32;

// C(M,N) (+)= op(A)(M,K) @ op(B)(K,N). op(A) is A (row-major, lda) or, with ta, the
// transpose of a stored (K,M) row-major matrix (lda its pitch); likewise op(B) with tb.
// C is fp32 row-major (ldc). All threads of the block call it; the caller synchronises
// before (inputs written) and after (C read).
//
// Tensor-core path: 16x16x16 wmma fragments, warps take output tiles round-robin. A stored
// transpose is exactly a col_major fragment layout, so no data moves. wmma needs 32-byte
// aligned tile pointers and leading dimensions that are multiples of 8 (16-bit) / 4 (fp32):
// every buffer is 128-byte aligned and M, N, K, lda, ldb, ldc are multiples of 16 here.
template <class T, bool ta, bool tb>
__device__ __forceinline__ void tile_gemm(int M, int N, int K, const T* A, int lda, const T* B,
                                          int ldb, float* C, int ldc, bool accumulate) {
  if constexpr (sizeof(T) == 2) {
    using namespace nvcuda;
    using LA = typename std::conditional<ta, wmma::col_major, wmma::row_major>::type;
    using LB = typename std::conditional<tb, wmma::col_major, wmma::row_major>::type;
    const int warp = threadIdx.x / 32, tiles_n = N / 16, tiles = (M / 16) * tiles_n;
    for (int t = warp; t < tiles; t += kWarps) {
      const int m0 = (t / tiles_n) * 16, n0 = (t % tiles_n) * 16;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
      if (accumulate)
        wmma::load_matrix_sync(c, C + m0 * ldc + n0, ldc, wmma::mem_row_major);
      else
        wmma::fill_fragment(c, 0.0f);
      for (int k0 = 0; k0 < K; k0 += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LA> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LB> b;
        // element (m,k) of op(A): A[m*lda + k], or A[k*lda + m] when transposed
        wmma::load_matrix_sync(a, ta ? A + k0 * lda + m0 : A + m0 * lda + k0, lda);
        wmma::load_matrix_sync(b, tb ? B + n0 * ldb + k0 : B + k0 * ldb + n0, ldb);
        wmma::mma_sync(c, a, b, c);
      }
      wmma::store_matrix_sync(C + m0 * ldc + n0, c, ldc, wmma::mem_row_major);
    }
  } else {
    // fp32: one output element per thread per step, exact fp32 FMA in k order.
    for (int idx = threadIdx.x; idx < M * N; idx += kThreads) {
      const int m = idx / N, n = idx % N;
      float acc = accumulate ? C[m * ldc + n] : 0.0f;
#pragma unroll 4  // fully unrolled, the f32 test path spills registers
      for (int k = 0; k < K; ++k) {
        const float a = to_f32(ta ? A[k * lda + m] : A[m * lda + k]);
        const float b = to_f32(tb ? B[n * ldb + k] : B[k * ldb + n]);
        acc = fmaf(a, b, acc);
      }
      C[m * ldc + n] = acc;
    }
  }
}

// Copies `rows` rows of D elements (global row pitch `pitch` elements) into a (R,D) shared
// tile, zero-filling rows [rows, R): padding rows then add nothing to any product.
template <class T, int D>
__device__ __forceinline__ void load_rows(T* dst, int R, const T* src, int64_t pitch, int rows) {
  for (int idx = threadIdx.x; idx < R * D; idx += kThreads) {
    const int r = idx / D, c = idx % D;
    dst[idx] = r < rows ? src[r * pitch + c] : from_f32<T>(0.0f);
  }
}

// Carves 128-byte aligned buffers out of dynamic shared memory, in order. The host sizes
// the launch with the same sequence of take() calls over a null base (pointers stay null,
// `off` ends at the byte count), so the two can never disagree.
struct Carver {
  char* base;
  size_t off = 0;
  template <class U>
  __host__ __device__ U* take(int64_t n) {
    U* r = base ? reinterpret_cast<U*>(base + off) : nullptr;
    off += (static_cast<size_t>(n) * sizeof(U) + 127) / 128 * 128;
    return r;
  }
};

// Blocks of `per_block` items for `work` items, at most the grid's 65535 (grid-stride loops).
inline unsigned blocks_for(int64_t work, int64_t per_block) {
  return static_cast<unsigned>(imin((work + per_block - 1) / per_block, 65535));
}

// f(T{}) with T the element type of dt (float, __nv_bfloat16, __half): the launchers' one
// switch over the dtypes.
template <class F>
cudaError_t dispatch(Dtype dt, F&& f) {
  switch (dt) {
    case Dtype::kF32:
      return f(float{});
    case Dtype::kBF16:
      return f(__nv_bfloat16{});
    case Dtype::kF16:
      return f(__half{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace flash
