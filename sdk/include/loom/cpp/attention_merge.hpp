// Partial attention's merge (attention.h, ABI 2.7) over host memory: the one loop that
// attention plugins share. out (B,T,H,D) and lse (B,H,T) take part_out (B,Tp,H,D) and part_lse
// (B,H,Tp) into rows [row0, row0 + Tp): lse' = logaddexp(lse, part_lse) and
// out' = exp(lse - lse') out + exp(part_lse - lse') part_out, in double. `widen` and `narrow`
// convert the storage type St (float, double, or a plugin's 16-bit type) to and from double.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "loom/attention.h"
#include "loom/cpp/plugin.hpp"

namespace loom {

struct MergeDims {
  int64_t B = 0, T = 0, Tp = 0, H = 0, D = 0, row0 = 0;
};

// merge's shape contract; the dims of its tensors. `who` names the plugin.
inline MergeDims merge_dims(const std::string& who, const loom_attention_merge_args& a) {
  require(a.struct_size >= LOOM_ATTENTION_MERGE_ARGS_SIZE_V2_7 && a.out && a.lse && a.part_out &&
              a.part_lse,
          who + ": merge needs out, lse, part_out and part_lse");
  require(a.out->ndim == 4 && a.part_out->ndim == 4,
          who + ": merge: out and part_out are (B, T, H, D)");
  MergeDims d{a.out->shape[0], a.out->shape[1], a.part_out->shape[1],
              a.out->shape[2], a.out->shape[3], a.row0};
  require(a.part_out->shape[0] == d.B && a.part_out->shape[2] == d.H && a.part_out->shape[3] == d.D,
          who + ": merge: part_out must match out but in its rows");
  require(d.row0 >= 0 && d.row0 + d.Tp <= d.T, who + ": merge: rows [" + std::to_string(d.row0) +
                                                   ", " + std::to_string(d.row0 + d.Tp) +
                                                   ") outside out's " + std::to_string(d.T));
  require(loom_tensor_numel(a.lse) == d.B * d.H * d.T &&
              loom_tensor_numel(a.part_lse) == d.B * d.H * d.Tp,
          who + ": merge: lse is (B, H, T) and part_lse (B, H, Tp)");
  require(loom_dtype_eq(a.out->dtype, a.part_out->dtype) &&
              loom_dtype_eq(a.lse->dtype, a.part_lse->dtype),
          who + ": merge: part_out and part_lse must have out's and lse's dtypes");
  return d;
}

template <class St, class L, class Widen, class Narrow>
void merge_partial(const MergeDims& d, St* out, L* lse, const St* part_out, const L* part_lse,
                   Widen widen, Narrow narrow) {
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h)
      for (int64_t i = 0; i < d.Tp; ++i) {
        const int64_t t = d.row0 + i;
        L& l = lse[(b * d.H + h) * d.T + t];
        const double pl = (double)part_lse[(b * d.H + h) * d.Tp + i], ol = (double)l;
        if (pl == -inf) continue;  // part saw no key
        St* o = out + ((b * d.T + t) * d.H + h) * d.D;
        const St* p = part_out + ((b * d.Tp + i) * d.H + h) * d.D;
        const double m = std::max(ol, pl);
        const double nl = m + std::log(std::exp(ol - m) + std::exp(pl - m));
        const double wo = ol == -inf ? 0.0 : std::exp(ol - nl), wp = std::exp(pl - nl);
        for (int64_t x = 0; x < d.D; ++x)
          o[x] = narrow(wo * (double)widen(o[x]) + wp * (double)widen(p[x]));
        l = (L)nl;
      }
}

}  // namespace loom
