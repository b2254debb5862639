// Loom layer library (loom/cpp/layers/decoder/decoder.hpp has the overview): the linear-layer
// view of a parameter, y(N,out) = x(N,in) W^T + b.
#pragma once

#include "loom/cpp/layers/core/params.hpp"

namespace loom::layers {

// linear.cpp. Rows [row0, row0 + out) of a local (rows, in) weight: a whole layer, or the
// local q, k or v part of the fused c_attn (loom::tp::LocalLinear does the gemms).
using Linear = loom::tp::LocalLinear;
Linear make_linear(Param& w, Param* b, int64_t row0, int64_t out);

}  // namespace loom::layers
