// precision.dtype as the engine reads it: the model's compute dtype, and which dtypes need
// no f32 main copy. Below the training loop: `loom validate` checks configurations with it.
#pragma once

#include <string>

#include "loom/loom.h"

namespace loom::engine {

// precision.dtype -> the model's compute dtype: fp32, bf16, fp16, fp64.
DLDataType compute_dtype(const std::string& dtype);
// f32 or f64: a dtype that needs no f32 main copy (and is stored as it is in checkpoints).
bool is_wide(DLDataType dt);

}  // namespace loom::engine
