// precision.dtype (dtype.hpp).
#include "recipe/dtype.hpp"

#include "base/errors.hpp"

namespace loom::engine {

DLDataType compute_dtype(const std::string& dtype) {
  if (dtype == "fp32") return loom_f32();
  if (dtype == "bf16") return loom_bf16();
  if (dtype == "fp16") return loom_f16();
  if (dtype == "fp64") return loom_f64();
  throw UsageError("precision.dtype = \"" + dtype + "\": not one of fp32, bf16, fp16, fp64");
}

bool is_wide(DLDataType dt) {
  return loom_dtype_eq(dt, loom_f32()) || loom_dtype_eq(dt, loom_f64());
}

}  // namespace loom::engine
