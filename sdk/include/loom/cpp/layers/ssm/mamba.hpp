// Loom layer library (loom/cpp/layers/decoder/decoder.hpp has the overview): Mamba-2's mixer,
// the state-space layer of hybrid stacks (Megatron-Core's MambaMixer, HF's Mamba2Mixer).
//
//   z | xBC | dt = in_proj(u)                      u (N, C): the layer's norm output
//   xBC = silu(conv1d(xBC)), causal, per channel   K taps over time, within each sequence
//   x | B | C = xBC                                x (B,T,H,P), B and C (B,T,G,S)
//   y = scan(x, dt, A_log, B, C, D, dt_bias)       backend.h's ssm_scan_forward
//   out = out_proj(rmsnorm_g(y * silu(z)) * w)     the norm per group of heads
//
// Under tensor parallelism each rank holds whole groups of heads: its share of z, x, B, C
// and dt (in_proj column-parallel with those five blocks), of the convolution's channels and
// of the per-head parameters; out_proj is row-parallel. Sequence parallelism gathers u into
// the layers' shared buffer as the attention's projection does.
#pragma once

#include <string>

#include "loom/cpp/layers/core/acts.hpp"
#include "loom/cpp/layers/core/params.hpp"

namespace loom::layers {

struct MambaMixer {
  loom::tp::ColumnParallelLinear in_proj;  // parts z, xBC, dt: this rank's heads and groups
  loom::tp::RowParallelLinear out_proj;
  // values and gradients (mutable: the const passes write the gradients through them)
  mutable View conv_w, conv_dw, conv_b, conv_db;         // (cd, K), (cd)
  mutable View dt_bias, ddt_bias, A_log, dA_log, D, dD;  // (H)
  mutable View norm_w, norm_dw;                          // (di)
  int64_t H = 0, P = 0, G = 0, S = 0, chunk = 0;         // local heads and groups
  double eps = 1e-5;

  int64_t di() const { return H * P; }
  int64_t gs() const { return G * S; }
  int64_t cd() const { return di() + 2 * gs(); }

  static MambaMixer make(const Options& o, ParamStore& ps, const std::string& prefix);
  // y(Nl,C) = the mixer of x(Nl,C); saves what backward needs in a. With a cache (k: the
  // convolution's last K-1 inputs (rows, K-1, cd), v: the scan's state (rows, H, P, S)), each
  // sequence continues from its row's state (a sequence at position 0 from zero): generation.
  void forward(const Ctx& c, const Step& s, const DLTensor* x, LayerActs& a, DLTensor* y,
               LayerCache* cache) const;
  // dx (=) from dy; parameter gradients +=.
  void backward(const Ctx& c, const Step& s, const DLTensor* x, const LayerActs& a,
                const DLTensor* dy, DLTensor* dx, GradScratch& g) const;

 private:
  // The convolution and the scan of each sequence from its cache row's states.
  void forward_cached(const Ctx& c, const Step& s, LayerActs& a, LayerCache& cache) const;
};

}  // namespace loom::layers
