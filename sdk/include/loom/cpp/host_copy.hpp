// Loom SDK C++ helpers for backend plugins: the one refusal rule of to_host/from_host, so that
// every backend words a bad host copy the same way.
#pragma once

#include <cstddef>
#include <string>

#include "loom/cpp/describe.hpp"

namespace loom {

// Why a backend's to_host/from_host of `bytes` is refused, "" when it is not: `bytes` must be
// `want`, the whole of tensor `t` (named `name`), and the host pointer `host` (named
// `host_name`) non-NULL unless nothing is copied. `said` words the count from the caller's
// side: "asked for" (to_host), "got" (from_host).
inline std::string host_copy_refusal(const char* said, const char* name, const DLTensor* t,
                                     size_t want, size_t bytes, const char* host_name,
                                     const void* host) {
  if (bytes != want)
    return std::string(said) + " " + std::to_string(bytes) + " bytes, " + name + " " +
           shape_str(t) + " " + dtype_str(t->dtype) + " holds " + std::to_string(want);
  if (bytes && host == nullptr) return std::string(host_name) + " is NULL";
  return "";
}

}  // namespace loom
