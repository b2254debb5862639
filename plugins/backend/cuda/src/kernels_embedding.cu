// Token/position embedding lookup and its gradient.
//   embedding_forward:  out(N,C) (= or +=) table(V,C)[ids(N)]
//   embedding_backward: dtable(V,C)[ids(N)] += dout(N,C)       (parameter gradient: +=)
// ids are i32 in device memory, so they cannot be checked on the host without a sync: an id
// outside [0,V) never indexes out of bounds; forward writes NaN into its row (the loss shows
// it) and backward skips it.
//
// The backward is deterministic: ids are stably sorted together with their token positions
// (CUB radix sort), then one block per run of equal ids sums that run's dout rows in token
// order in f32 and adds the sum to the table row once. No float atomics, so the same batch
// gives the same bits on every run, and a frequent token costs one block, not a contended
// address.
#include <cub/device/device_radix_sort.cuh>
#include <type_traits>

#include "kernels_common.cuh"
#include "ops.hpp"

namespace loom_cuda {
namespace {

// out(N,C), table(V,C): one block per token row. VW > 1 (16-byte vectors) only when T == U,
// both pointers are aligned and C is a multiple of VW.
template <class T, class U, int VW>
__global__ void embedding_forward_kernel(T* out, const int32_t* ids, const U* table, int64_t N,
                                         int64_t V, int64_t C, bool accumulate) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const int64_t id = ids[n];
    const bool ok = id >= 0 && id < V;
    const U* src = table + (ok ? id : 0) * C;
    T* dst = out + n * C;
    for (int64_t c = static_cast<int64_t>(threadIdx.x) * VW; c < C;
         c += static_cast<int64_t>(blockDim.x) * VW) {
      float v[VW];
      if (ok) {
        load_vec<VW>(src + c, v);
      } else {
#pragma unroll
        for (int i = 0; i < VW; ++i) v[i] = __int_as_float(0x7fc00000);  // NaN: bad id
      }
      if (accumulate) {
        float o[VW];
        load_vec<VW>(dst + c, o);
#pragma unroll
        for (int i = 0; i < VW; ++i) v[i] += o[i];
      }
      store_vec<VW>(dst + c, v);
    }
  }
}

__global__ void iota_kernel(int32_t* v, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    v[i] = static_cast<int32_t>(i);
}

// sorted_ids(N) ascending, order(N) the token of each sorted position (stable: token order
// within a run). dtable(V,C), dout(N,C). One block per sorted position; only the first
// position of each run works, so every table row is written by exactly one block.
template <class G, class T>
__global__ void embedding_backward_kernel(G* dtable, const int32_t* sorted_ids,
                                          const int32_t* order, const T* dout, int64_t N, int64_t V,
                                          int64_t C) {
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
    const int32_t id = sorted_ids[i];
    if (i > 0 && sorted_ids[i - 1] == id) continue;  // not the start of a run
    if (id < 0 || id >= V) continue;                 // bad id: skipped (see the top)
    int64_t end = i + 1;
    while (end < N && sorted_ids[end] == id) ++end;
    G* dst = dtable + static_cast<int64_t>(id) * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      float acc = 0.0f;
      for (int64_t j = i; j < end; ++j) acc += to_f32(dout[static_cast<int64_t>(order[j]) * C + c]);
      dst[c] = from_f32<G>(to_f32(dst[c]) + acc);
    }
  }
}

struct Dims {
  int64_t N, V, C;
};
// rows(N,C) is out or dout; table(V,C) is table or dtable.
Dims check_embedding(const char* op, const char* rows_name, const DLTensor* rows,
                     const DLTensor* ids, const char* table_name, const DLTensor* table) {
  need(op, rows_name, rows);
  need(op, "ids", ids);
  need(op, table_name, table);
  need_dtype(op, "ids", ids, loom_i32());
  need_float(op, rows_name, rows);
  need_float(op, table_name, table);
  if (table->ndim != 2)
    fail(op, std::string(table_name) + " has " + std::to_string(table->ndim) +
                 " dimensions, expected 2 (V, C)");
  Dims d{numel(ids), table->shape[0], table->shape[1]};
  if (d.N > 0 && rows->ndim >= 1 && rows->shape[rows->ndim - 1] != d.C)
    fail(op, std::string(rows_name) + " has " + std::to_string(rows->shape[rows->ndim - 1]) +
                 " channels in its last dimension, expected " + std::to_string(d.C));
  return d;
}

}  // namespace

loom_error* embedding_forward(loom_backend* be, DLTensor* out, const DLTensor* ids,
                              const DLTensor* table, int accumulate) noexcept {
  return run_op(be, "embedding_forward", [&](loom_backend& b) {
    const char* op = "embedding_forward";
    Dims d = check_embedding(op, "out", out, ids, "table", table);
    void* po = device_ptr(b, out, op, "out", d.N * d.C);
    const int32_t* pi = static_cast<const int32_t*>(device_ptr(b, ids, op, "ids", d.N));
    const void* pt = device_ptr(b, table, op, "table", d.V * d.C);
    if (d.N == 0 || d.C == 0) return;
    dispatch_float(op, "out", out, [&](auto tt) {
      using T = typename decltype(tt)::type;
      dispatch_param(op, "table", table, tt, [&](auto ut) {
        using U = typename decltype(ut)::type;
        constexpr int kV = std::is_same_v<T, U> ? kVec<T> : 1;
        const bool vec = kV > 1 && d.C % kV == 0 && aligned16(po) && aligned16(pt);
        const int threads = row_threads(vec ? d.C / kV : d.C, 256);
        auto launch = [&](auto vw) {
          embedding_forward_kernel<T, U, decltype(vw)::value>
              <<<grid_rows(d.N), threads, 0, b.stream>>>(static_cast<T*>(po), pi,
                                                         static_cast<const U*>(pt), d.N, d.V, d.C,
                                                         accumulate != 0);
        };
        if (vec)
          launch(std::integral_constant<int, kV>{});
        else
          launch(std::integral_constant<int, 1>{});
        LOOM_CUDA_LAUNCHED(op);
      });
    });
  });
}

loom_error* embedding_backward(loom_backend* be, DLTensor* dtable, const DLTensor* ids,
                               const DLTensor* dout) noexcept {
  return run_op(be, "embedding_backward", [&](loom_backend& b) {
    const char* op = "embedding_backward";
    Dims d = check_embedding(op, "dout", dout, ids, "dtable", dtable);
    const void* pd = device_ptr(b, dout, op, "dout", d.N * d.C);
    const int32_t* pi = static_cast<const int32_t*>(device_ptr(b, ids, op, "ids", d.N));
    void* pt = device_ptr(b, dtable, op, "dtable", d.V * d.C);
    if (d.N > 0x7fffffff)
      fail(op, "N = " + std::to_string(d.N) + " tokens; at most 2^31 - 1 per call",
           LOOM_ERR_UNIMPLEMENTED);
    if (d.N == 0 || d.C == 0) return;
    const int n = static_cast<int>(d.N);

    // Scratch: sorted ids, token positions before and after the sort, CUB's temporary space.
    size_t cub_bytes = 0;
    LOOM_CUDA_CHECK(
        op, cub::DeviceRadixSort::SortPairs(nullptr, cub_bytes, pi, static_cast<int32_t*>(nullptr),
                                            static_cast<const int32_t*>(nullptr),
                                            static_cast<int32_t*>(nullptr), n, 0, 32, b.stream));
    const size_t vec_bytes = round256(sizeof(int32_t) * static_cast<size_t>(n));
    StreamScratch scratch(3 * vec_bytes + cub_bytes, *b.alloc);
    int32_t* sorted_ids = scratch.at<int32_t>(0);
    int32_t* order_in = scratch.at<int32_t>(vec_bytes);
    int32_t* order = scratch.at<int32_t>(2 * vec_bytes);
    void* cub_tmp = scratch.at<void>(3 * vec_bytes);

    iota_kernel<<<grid_for(d.N), kThreads, 0, b.stream>>>(order_in, d.N);
    LOOM_CUDA_LAUNCHED(op);
    // All 32 bits: a bad (negative or >= V) id must still sort into a run of its own, or it
    // could split a run of a good id into two blocks writing the same row.
    LOOM_CUDA_CHECK(op, cub::DeviceRadixSort::SortPairs(cub_tmp, cub_bytes, pi, sorted_ids,
                                                        order_in, order, n, 0, 32, b.stream));
    dispatch_float(op, "dout", dout, [&](auto tt) {
      using T = typename decltype(tt)::type;
      dispatch_param(op, "dtable", dtable, tt, [&](auto gt) {
        using G = typename decltype(gt)::type;
        embedding_backward_kernel<G, T><<<grid_rows(d.N), row_threads(d.C, 256), 0, b.stream>>>(
            static_cast<G*>(pt), sorted_ids, order, static_cast<const T*>(pd), d.N, d.V, d.C);
        LOOM_CUDA_LAUNCHED(op);
      });
    });
  });
}

}  // namespace loom_cuda
