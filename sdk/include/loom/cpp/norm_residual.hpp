// Loom SDK C++ helpers for ABI 2.29's loom.norm-residual/1 (loom/norm_residual.h): the check
// every backend applies to the extension (loom::OpsSlots runs it before the kernel), whether
// an instance lends it, and the extension a caller chains.
#pragma once

#include <string>
#include <utility>

#include "loom/backend.h"
#include "loom/cpp/describe.hpp"
#include "loom/cpp/plugin.hpp"
#include "loom/cpp/tensor.hpp"

namespace loom {

// Why loom.norm-residual/1 (`e`, on the chain `ext` of a norm over `inp`) cannot run ("" when
// it can): the extension is short, another required extension rides the chain (the gated
// norm's too), residual (and in the forward sum) is not a tensor of inp's shape and dtype, or
// the backward was given a sum.
inline std::string norm_residual_refusal(const loom_ext* ext, const loom_ext* e,
                                         const DLTensor* inp, bool backward) {
  if (e->struct_size < LOOM_NORM_RESIDUAL_SIZE_V1)
    return "the " LOOM_EXT_NORM_RESIDUAL " extension is smaller than its version 1";
  if (std::string why = other_required_refusal(ext, e); !why.empty()) return why;
  if (inp == nullptr) return "inp must be given";
  const auto& r = *reinterpret_cast<const loom_norm_residual*>(e);
  if (backward && r.sum != nullptr) return LOOM_EXT_NORM_RESIDUAL "'s sum is forward only";
  for (const auto& [name, t] : {std::pair<const char*, const DLTensor*>{"residual", r.residual},
                                {"sum", backward ? inp : r.sum}}) {
    if (std::string why = shape_like_refusal(name, t, "inp", inp); !why.empty()) return why;
    if (!loom_dtype_eq(t->dtype, inp->dtype))
      return std::string(name) + " is " + dtype_str(t->dtype) + ", expected inp's " +
             dtype_str(inp->dtype);
  }
  return {};
}

// Whether this backend instance's norms take loom.norm-residual/1 (its get_ext table).
inline bool lends_norm_residual(const Backend& be) {
  const loom_backend_api* api = be.api();
  return api && api->struct_size >= LOOM_BACKEND_API_SIZE_V2 && api->get_ext &&
         api->get_ext(be.self(), LOOM_EXT_NORM_RESIDUAL) != nullptr;
}

// The args extension: forward (sum given) or backward (sum NULL).
inline loom_norm_residual norm_residual(const DLTensor* residual, DLTensor* sum) {
  return {{sizeof(loom_norm_residual), LOOM_EXT_NORM_RESIDUAL, LOOM_EXT_REQUIRED, nullptr},
          residual,
          sum};
}

}  // namespace loom
