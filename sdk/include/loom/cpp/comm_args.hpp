// Loom SDK C++ helpers for comm plugins: the argument checks every comm plugin makes, in one
// wording. `where` starts each message: "comm/mpi: all_gather". What memory a plugin can
// reach (host, one GPU) is its own check.
#pragma once

#include <cstdint>
#include <string>

#include "loom/comm.h"
#include "loom/cpp/describe.hpp"
#include "loom/cpp/plugin.hpp"

namespace loom {

// The op arrives as loom_comm_args.op, an int32_t: checked before it becomes the enum, so an
// out-of-range value is reported instead of being undefined behaviour in C++.
inline loom_reduce_op comm_reduce_op(const std::string& where, int32_t op) {
  require(op >= LOOM_REDUCE_SUM && op <= LOOM_REDUCE_AVG,
          where + ": unknown reduce op " + std::to_string(op));
  return static_cast<loom_reduce_op>(op);
}

// `t` (named `what`) is there, has data unless it is empty, and is compact (row-major).
inline void comm_tensor(const std::string& where, const char* what, const DLTensor* t) {
  const std::string w = where + ": " + what;
  require(t != nullptr, w + " is NULL");
  require(t->data != nullptr || loom_tensor_numel(t) == 0, w + " has no data");
  if (t->strides == nullptr) return;
  int64_t expect = 1;
  for (int d = t->ndim - 1; d >= 0; --d) {
    require(t->shape[d] == 1 || t->strides[d] == expect,
            w + " " + shape_str(t) + " is not compact");
    expect *= t->shape[d];
  }
}

inline void comm_same_dtype(const std::string& where, const DLTensor* in, const DLTensor* out) {
  require(loom_dtype_eq(in->dtype, out->dtype),
          where + ": in is " + dtype_str(in->dtype) + " but out is " + dtype_str(out->dtype));
}

// root (broadcast) or peer (send/recv) is a rank of a group of `size`.
inline void comm_rank(const std::string& where, const char* role, int rank, int size) {
  require(rank >= 0 && rank < size, where + ": " + role + " " + std::to_string(rank) +
                                        " is not a rank of a group of " + std::to_string(size));
}

}  // namespace loom
