// Loom SDK C++ helpers: tensors, dtypes and devices named the one way every plugin's error
// messages name them ("bf16", "(4,768)", "cuda:0").
#pragma once

#include <string>

#include "loom/fp8.h"
#include "loom/tensor.h"

namespace loom {

// "f32", "bf16", "e4m3", "i32", "u8", ...; anything else "dtype(code=C,bits=B,lanes=L)".
// (std::string(..) += .., not "f" + std::to_string(..): g++ 12 warns, wrongly, that the
// latter's memcpy may overlap, and -Werror makes that fatal.)
inline std::string dtype_str(DLDataType d) {
  if (d.lanes == 1) {
    if (d.code == kDLFloat && (d.bits == 16 || d.bits == 32 || d.bits == 64))
      return std::string("f") += std::to_string(d.bits);
    if (d.code == kDLBfloat && d.bits == 16) return "bf16";
    if (d.code == LOOM_DL_FLOAT8_E4M3FN && d.bits == 8) return "e4m3";
    if (d.code == LOOM_DL_FLOAT8_E5M2 && d.bits == 8) return "e5m2";
    if (d.code == kDLInt) return std::string("i") += std::to_string(d.bits);
    if (d.code == kDLUInt) return std::string("u") += std::to_string(d.bits);
  }
  return "dtype(code=" + std::to_string(d.code) + ",bits=" + std::to_string(d.bits) +
         ",lanes=" + std::to_string(d.lanes) + ")";
}

// "(2,3,4)"; "()" for a scalar.
inline std::string shape_str(const DLTensor* t) {
  std::string s = "(";
  for (int d = 0; d < t->ndim; ++d) {
    if (d > 0) s += ',';
    s += std::to_string(t->shape[d]);
  }
  return s + ")";
}

// "cpu", "cuda:1", "cuda_host (pinned CPU memory)", ...
inline std::string device_str(DLDevice d) {
  switch (d.device_type) {
    case kDLCPU:
      return "cpu";
    case kDLCUDA:
      return std::string("cuda:") += std::to_string(d.device_id);
    case kDLCUDAHost:
      return "cuda_host (pinned CPU memory)";
    case kDLCUDAManaged:
      return "cuda_managed";
    default:
      return std::string("device type ") += std::to_string(d.device_type);
  }
}

// "" when t has ref's shape, else why: "<name> has shape (..), expected <ref_name>'s (..)"
// ("<name> is NULL, ..." when t is NULL). ref must be given.
inline std::string shape_like_refusal(const char* name, const DLTensor* t, const char* ref_name,
                                      const DLTensor* ref) {
  bool same = t != nullptr && t->ndim == ref->ndim;
  for (int d = 0; same && d < t->ndim; ++d) same = t->shape[d] == ref->shape[d];
  if (same) return {};
  const std::string has = t ? std::string(" has shape ") + shape_str(t) : " is NULL";
  return std::string(name) + has + ", expected " + ref_name + "'s " + shape_str(ref);
}

}  // namespace loom
