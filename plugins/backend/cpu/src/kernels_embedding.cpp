// Token/position embedding lookup and its gradient.
//   embedding_forward:  out(N,C) (= or +=) table(V,C)[ids(N)]
//   embedding_backward: dtable(V,C)[ids(N)] += dout(N,C)       (parameter gradient: +=)
// ids are i32 and checked against [0,V) before any thread starts: a bad id is a clear error,
// not a read or write out of bounds.
#include <omp.h>

#include <algorithm>

#include "cpu_backend.hpp"
#include "mixed.hpp"

namespace loom_cpu {
namespace {

void check_ids(const Check& ck, const int32_t* ids, int64_t N, int64_t V) {
  for (int64_t n = 0; n < N; ++n)
    if (ids[n] < 0 || ids[n] >= V)
      ck.fail("ids[" + std::to_string(n) + "] = " + std::to_string(ids[n]) + " is outside [0, " +
              std::to_string(V) + ")");
}

// Shared checks; returns {N, V, C}.
struct Dims {
  int64_t N, V, C;
};
Dims check_embedding(const Check& ck, const char* rows_name, const DLTensor* rows,
                     const DLTensor* ids, const char* table_name, const DLTensor* table) {
  ck.tensor(rows_name, rows);
  ck.tensor("ids", ids);
  ck.tensor(table_name, table);
  ck.dtype("ids", ids, loom_i32());
  ck.same_dtype(rows_name, rows, table_name, table);
  ck.floating(table_name, table);
  ck.ndim(table_name, table, 2);
  Dims d{loom_tensor_numel(ids), table->shape[0], table->shape[1]};
  ck.numel(rows_name, rows, d.N * d.C);
  if (rows->ndim >= 1 && d.N > 0 && rows->shape[rows->ndim - 1] != d.C)
    ck.fail(std::string(rows_name) + " has " + std::to_string(rows->shape[rows->ndim - 1]) +
            " channels in its last dimension, expected " + std::to_string(d.C));
  check_ids(ck, data_of<const int32_t>(ids), d.N, d.V);
  return d;
}

template <class T>
void embedding_forward_kernel(T* out, const int32_t* ids, const T* table, int64_t N, int64_t C,
                              bool accumulate, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static) if (N * C >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* src = table + static_cast<int64_t>(ids[n]) * C;
    T* dst = out + n * C;
    if (accumulate) {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) dst[c] += src[c];
    } else {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) dst[c] = src[c];
    }
  }
}

// Repeated ids make a row-parallel scatter race; splitting the channels instead gives every
// thread its own columns of every table row, and keeps the summation order of a row fixed.
template <class T>
void embedding_backward_kernel(T* dtable, const int32_t* ids, const T* dout, int64_t N, int64_t C,
                               int nt) {
  constexpr int64_t kBlock = 128;
  int64_t nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for num_threads(nt) schedule(static) if (N * C >= kParallelMin)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    int64_t c0 = blk * kBlock, w = std::min(kBlock, C - c0);
    for (int64_t n = 0; n < N; ++n) {
      T* dst = dtable + static_cast<int64_t>(ids[n]) * C + c0;
      const T* src = dout + n * C + c0;
#pragma omp simd
      for (int64_t c = 0; c < w; ++c) dst[c] += src[c];
    }
  }
}

}  // namespace

loom_error* op_embedding_forward(loom_backend* be, DLTensor* out, const DLTensor* ids,
                                 const DLTensor* table, int accumulate) noexcept {
  return run_op(be, "embedding_forward", [&](loom_backend& b) {
    Check ck{"embedding_forward"};
    if (Staging::any_half({out, table})) {
      Staging st(ck, b.threads);
      const DLTensor* ids_ = st.in("ids", ids);
      const DLTensor* table_ = st.in("table", table);
      DLTensor* out_ = st.out("out", out);
      st.run(b, [&] { return op_embedding_forward(&b, out_, ids_, table_, accumulate); });
      return;
    }
    Dims d = check_embedding(ck, "out", out, ids, "table", table);
    dispatch_float(ck, "table", table, [&](auto tag) {
      using T = decltype(tag);
      embedding_forward_kernel(data_of<T>(out), data_of<const int32_t>(ids),
                               data_of<const T>(table), d.N, d.C, accumulate != 0, b.threads);
    });
  });
}

loom_error* op_embedding_backward(loom_backend* be, DLTensor* dtable, const DLTensor* ids,
                                  const DLTensor* dout) noexcept {
  return run_op(be, "embedding_backward", [&](loom_backend& b) {
    Check ck{"embedding_backward"};
    if (Staging::any_half({dtable, dout})) {
      Staging st(ck, b.threads);
      const DLTensor* ids_ = st.in("ids", ids);
      const DLTensor* dout_ = st.in("dout", dout);
      DLTensor* dtable_ = st.out("dtable", dtable);
      st.run(b, [&] { return op_embedding_backward(&b, dtable_, ids_, dout_); });
      return;
    }
    Dims d = check_embedding(ck, "dout", dout, ids, "dtable", dtable);
    dispatch_float(ck, "dtable", dtable, [&](auto tag) {
      using T = decltype(tag);
      embedding_backward_kernel(data_of<T>(dtable), data_of<const int32_t>(ids),
                                data_of<const T>(dout), d.N, d.C, b.threads);
    });
  });
}

}  // namespace loom_cpu
