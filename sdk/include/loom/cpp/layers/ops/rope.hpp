// Loom layer library (loom/cpp/layers/decoder/decoder.hpp has the overview): RoPE's
// frequencies, theta's or a long-context scaling's (Llama 3.1's, YaRN's).
#pragma once

#include <vector>

#include "loom/cpp/layers/core/acts.hpp"

namespace loom::layers {

// rope.cpp. The rotation of `dim` channels (a head, or MLA's rotated part): theta^(-2i/dim),
// or with a scaling (Options::rope_scaling) a table and a factor on cos and sin, handed to
// the backend as loom.rope-freqs/1.
struct Rope {
  double theta = 10000.0;
  std::vector<double> inv_freq;  // dim/2 entries; empty: theta's
  double scale = 1.0;            // YaRN's attention factor
  static Rope make(const Options& o, int64_t dim);
};

// MLA's softmax scale under YaRN with mscale_all_dim (DeepSeek-V3): the queries are multiplied
// by this, mscale(factor, mscale_all_dim)^2 (1 otherwise), which scales the scores alike.
double mla_query_scale(const Options& o);

// RoPE of x (B,T,H,D) at the step's positions (each sequence's start, each packed document's,
// this context rank's chunks), in place; backward: the gradient through it.
void rope_at(const Ctx& c, const Step& s, DLTensor* x, const Rope& r, bool backward);

}  // namespace loom::layers
