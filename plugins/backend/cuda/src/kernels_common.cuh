// backend/cuda: what every kernel family shares. Storage dtypes (f32, bf16, f16) are converted
// to f32 on load and rounded once on store, so all arithmetic is f32 whatever the storage;
// warp/block reductions with a fixed order (same result on every run); 16-byte vector loads
// for kernels whose host side has checked the alignment; argument checks that name the op.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "allocator.hpp"
#include "cuda_backend.hpp"
#include "loom/cpp/cuda_convert.cuh"

namespace loom_cuda {

// ---- storage <-> f32: the SDK's one copy, shared with attention/flash-cuda --------------
using loom::from_f32;
using loom::to_f32;

// ---- 16-byte vectors ---------------------------------------------------------------------
// kVec<T> elements fill 16 bytes. load_vec/store_vec move V elements starting at p: V == 1
// is a scalar access, V == kVec<T> one 16-byte access (p must then be 16-byte aligned: the
// launcher checks with aligned16 and picks V = 1 otherwise).
template <class T>
constexpr int kVec = 16 / static_cast<int>(sizeof(T));

template <int V, class T>
__device__ __forceinline__ void load_vec(const T* p, float (&out)[V]) {
  static_assert(V == 1 || V * sizeof(T) == 16, "load_vec: V is 1 or a 16-byte vector");
  if constexpr (V == 1) {
    out[0] = to_f32(*p);
  } else {
    int4 raw = *reinterpret_cast<const int4*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = to_f32(e[i]);
  }
}

template <int V, class T>
__device__ __forceinline__ void store_vec(T* p, const float (&in)[V]) {
  static_assert(V == 1 || V * sizeof(T) == 16, "store_vec: V is 1 or a 16-byte vector");
  if constexpr (V == 1) {
    *p = from_f32<T>(in[0]);
  } else {
    int4 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int i = 0; i < V; ++i) e[i] = from_f32<T>(in[i]);
    *reinterpret_cast<int4*>(p) = raw;
  }
}

// VW elements of any storage type starting at p: 16-byte loads when VW is a multiple of
// kVec<T> (p then 16-byte aligned), scalar loads otherwise. For a weight row read next to
// activations of another dtype (f32 weights beside bf16 activations).
template <int VW, class T>
__device__ __forceinline__ void load_row(const T* p, float (&out)[VW]) {
  if constexpr (VW % kVec<T> == 0) {
#pragma unroll
    for (int k = 0; k < VW; k += kVec<T>) {
      float part[kVec<T>];
      load_vec<kVec<T>>(p + k, part);
#pragma unroll
      for (int i = 0; i < kVec<T>; ++i) out[k + i] = part[i];
    }
  } else {
#pragma unroll
    for (int i = 0; i < VW; ++i) out[i] = to_f32(p[i]);
  }
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
// Every non-NULL pointer of the list 16-byte aligned.
inline bool all_aligned16(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (p != nullptr && !aligned16(p)) return false;
  return true;
}

// Calls fn(std::integral_constant<int, VW>{}) with VW = kVec<T> when `divisible` (the row
// length or the split is a multiple of the vector) and every non-NULL pointer is 16-byte
// aligned, else VW = 1: one kernel template serves both paths.
template <class T, class Fn>
void with_vec(bool divisible, std::initializer_list<const void*> ptrs, Fn&& fn) {
  if (divisible && all_aligned16(ptrs))
    fn(std::integral_constant<int, kVec<T>>{});
  else
    fn(std::integral_constant<int, 1>{});
}

// ---- reductions ----------------------------------------------------------------------------
// Butterfly (xor) shuffles: every lane ends with the same value, and the order of the
// additions is fixed by the lane numbers, so the result does not change between runs.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide sum/max, broadcast to every thread. blockDim.x must be a multiple of 32 (at most
// 1024) and every thread of the block must call it. The leading barrier lets a kernel call
// it several times: no warp can overwrite `part` while another still reads the last result.
template <bool kMax>
__device__ __forceinline__ float block_reduce(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  const float identity = kMax ? -INFINITY : 0.0f;
  v = lane < nwarps ? part[lane] : identity;
  return kMax ? warp_max(v) : warp_sum(v);
}
__device__ __forceinline__ float block_sum(float v) { return block_reduce<false>(v); }
__device__ __forceinline__ float block_max(float v) { return block_reduce<true>(v); }

// ---- column sums of partial sums ---------------------------------------------------------
// out(C) += sum over k of part(K, C), the second pass of every column reduction (bias and
// norm parameter gradients). Block (32, kColLanes): x = a column of a 32-column slice, y a
// lane over k = y, y + kColLanes, ...; the lanes are then summed in lane order. So the order
// depends on K only, and each thread reads K / kColLanes partials instead of K: one thread
// per column reading 256 partials in turn took 90 us per call (ncu, H200, 2026-11-27).
// gridDim.y == 2 does a second (out1, part1) pair in the same launch.
constexpr int kColLanes = 32;
template <class G>
__global__ void column_sum_finish(G* out0, const float* part0, G* out1, const float* part1,
                                  int64_t K, int64_t C) {
  __shared__ float sh[kColLanes][33];
  G* out = blockIdx.y == 0 ? out0 : out1;
  const float* part = blockIdx.y == 0 ? part0 : part1;
  const int64_t c = int64_t{blockIdx.x} * 32 + threadIdx.x;
  float s = 0.0f;
  if (c < C)
    for (int64_t k = threadIdx.y; k < K; k += kColLanes) s += part[k * C + c];
  sh[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float t = 0.0f;
#pragma unroll
    for (int j = 0; j < kColLanes; ++j) t += sh[j][threadIdx.x];
    out[c] = from_f32<G>(to_f32(out[c]) + t);
  }
}
inline dim3 column_sum_grid(int64_t C, int pairs) {
  return dim3(static_cast<unsigned>((C + 31) / 32), static_cast<unsigned>(pairs));
}
// The first pass's row chunks over N rows (K = chunks partials a column): a function of N
// only, never of the device, so the summation order, and the result, is the same on any GPU.
struct RowChunks {
  int64_t chunks, rows_per_chunk;
};
inline RowChunks row_chunks(int64_t N) {
  const int64_t chunks = std::min<int64_t>((N + 31) / 32, 256);
  return {chunks, chunks > 0 ? (N + chunks - 1) / chunks : 0};
}

// ---- launch shapes ----------------------------------------------------------------------------
constexpr int kThreads = 256;
// Grid-stride kernels: enough blocks to fill any current GPU, capped so the index math of a
// huge tensor stays in the loop rather than in the launch.
inline unsigned grid_for(int64_t work_items, int threads = kThreads) {
  int64_t blocks = (work_items + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > 65536) blocks = 65536;
  return static_cast<unsigned>(blocks);
}
// One block per row (grid-stride over rows when there are more than 2^31 - 1).
inline unsigned grid_rows(int64_t rows) {
  return static_cast<unsigned>(rows < 1 ? 1 : (rows > 0x7fffffff ? 0x7fffffff : rows));
}
// Threads of a block that walks a row of `per_row` items: a multiple of 32 in [32, cap].
inline int row_threads(int64_t per_row, int cap = 512) {
  int64_t t = (per_row + 31) / 32 * 32;
  if (t < 32) t = 32;
  if (t > cap) t = cap;
  return static_cast<int>(t);
}

// The sum of every thread's s in double, in a fixed tree (so in an order fixed by the block
// size), broadcast to every thread. blockDim.x must be kThreads; every thread must call it.
__device__ __forceinline__ double tree_sum(double s) {
  __shared__ double sh[kThreads];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (static_cast<int>(threadIdx.x) < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  return sh[0];
}

// ---- scratch: StreamScratch (allocator.hpp) ----------------------------------------------
inline size_t round256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// ---- dtypes and argument checks -------------------------------------------------------------
template <class T>
struct Tag {
  using type = T;
};
template <class T>
inline DLDataType dtype_of();
template <>
inline DLDataType dtype_of<float>() {
  return loom_f32();
}
template <>
inline DLDataType dtype_of<__nv_bfloat16>() {
  return loom_bf16();
}
template <>
inline DLDataType dtype_of<__half>() {
  return loom_f16();
}

inline const DLTensor* need(const char* op, const char* name, const DLTensor* t) {
  if (t == nullptr) fail(op, std::string(name) + " is NULL");
  return t;
}
// Another float dtype than f32/bf16/f16 (f64 included) is UNIMPLEMENTED, as backend.h asks.
inline void need_float(const char* op, const char* name, const DLTensor* t) {
  if (!is_float(t->dtype))
    fail(op,
         std::string(name) + " is " + dtype_str(t->dtype) +
             "; backend/cuda supports f32, bf16 and f16",
         LOOM_ERR_UNIMPLEMENTED);
}
inline void need_dtype(const char* op, const char* name, const DLTensor* t, DLDataType want) {
  if (!loom_dtype_eq(t->dtype, want))
    fail(op, std::string(name) + " is " + dtype_str(t->dtype) + ", expected " + dtype_str(want));
}
inline void need_same_dtype(const char* op, const char* name, const DLTensor* t,
                            const char* ref_name, const DLTensor* ref) {
  if (!loom_dtype_eq(t->dtype, ref->dtype))
    fail(op, std::string(name) + " is " + dtype_str(t->dtype) + " but " + ref_name + " is " +
                 dtype_str(ref->dtype) + "; they must match");
}
// The size of the last dimension (ndim >= 1).
inline int64_t last_dim(const char* op, const char* name, const DLTensor* t) {
  if (t->ndim < 1) fail(op, std::string(name) + " has no dimensions");
  return t->shape[t->ndim - 1];
}
inline void need_finite(const char* op, const char* name, double x) {
  if (!std::isfinite(x)) fail(op, std::string(name) + " = " + std::to_string(x) + " is not finite");
}

// Calls fn(Tag<T>{}) with T = float, __nv_bfloat16 or __half for t's dtype.
template <class Fn>
void dispatch_float(const char* op, const char* name, const DLTensor* t, Fn&& fn) {
  need_float(op, name, t);
  if (is_f32(t->dtype))
    fn(Tag<float>{});
  else if (is_bf16(t->dtype))
    fn(Tag<__nv_bfloat16>{});
  else
    fn(Tag<__half>{});
}
// A parameter or parameter gradient next to activations of dtype T: stored as T itself or as
// f32 (mixed precision keeps main grads, and may keep weights, in f32). Calls fn(Tag<W>{}).
template <class T, class Fn>
void dispatch_param(const char* op, const char* name, const DLTensor* t, Tag<T>, Fn&& fn) {
  if (loom_dtype_eq(t->dtype, dtype_of<T>()))
    fn(Tag<T>{});
  else if (is_f32(t->dtype))
    fn(Tag<float>{});
  else
    fail(op, std::string(name) + " is " + dtype_str(t->dtype) + "; expected " +
                 dtype_str(dtype_of<T>()) + " (the activations' dtype) or f32");
}

}  // namespace loom_cuda
