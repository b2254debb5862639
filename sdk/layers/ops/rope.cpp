// Loom layer library, RoPE's frequencies: theta's, Llama 3.1's scaling and YaRN's, the tables
// computed here in double and applied by the backend (loom.rope-freqs/1); rope_at runs the
// rotation at a step's positions.
#include "loom/cpp/layers/ops/rope.hpp"

#include <algorithm>
#include <cmath>

#include "loom/cpp/layers/ops/context_parallel.hpp"

namespace loom::layers {

namespace {
constexpr double kPi = 3.14159265358979323846;

// Llama 3.1: wavelengths longer than original / low_freq_factor slowed by the factor, shorter
// than original / high_freq_factor kept, those between blended by where they fall.
void llama3(const Options& o, std::vector<double>& f) {
  const double old_len = (double)o.rope_original_max;
  const double low_wave = old_len / o.rope_low_freq, high_wave = old_len / o.rope_high_freq;
  for (double& x : f) {
    const double wave = 2 * kPi / x;
    if (wave < high_wave) continue;
    if (wave > low_wave) {
      x /= o.rope_factor;
      continue;
    }
    const double smooth = (old_len / wave - o.rope_low_freq) / (o.rope_high_freq - o.rope_low_freq);
    x = (1 - smooth) * x / o.rope_factor + smooth * x;
  }
}

double yarn_mscale(double factor, double m) {
  return factor <= 1 ? 1.0 : 0.1 * m * std::log(factor) + 1.0;
}

// YaRN: each pair's frequency between the interpolated (÷ factor) and the original, by a
// linear ramp over the pairs whose rotations within the original context fall between
// beta_slow and beta_fast; cos and sin times the attention factor.
void yarn(const Options& o, int64_t dim, std::vector<double>& f, double& scale) {
  const double base = o.rope_theta, L = (double)o.rope_original_max;
  auto correction_dim = [&](double rotations) {
    return (double)dim * std::log(L / (rotations * 2 * kPi)) / (2 * std::log(base));
  };
  const double low = std::max(std::floor(correction_dim(o.yarn_beta_fast)), 0.0);
  double high = std::min(std::ceil(correction_dim(o.yarn_beta_slow)), (double)dim - 1);
  if (high == low) high += 0.001;
  for (size_t i = 0; i < f.size(); ++i) {
    const double ramp = std::clamp(((double)i - low) / (high - low), 0.0, 1.0);
    const double extrapolate = 1 - ramp;  // the share of the original frequency
    f[i] = f[i] / o.rope_factor * (1 - extrapolate) + f[i] * extrapolate;
  }
  scale = o.yarn_mscale_all_dim > 0 ? yarn_mscale(o.rope_factor, o.yarn_mscale) /
                                          yarn_mscale(o.rope_factor, o.yarn_mscale_all_dim)
                                    : yarn_mscale(o.rope_factor, 1.0);
}
}  // namespace

Rope Rope::make(const Options& o, int64_t dim) {
  Rope r;
  r.theta = o.rope_theta;
  if (o.rope_scaling == "none") return r;
  r.inv_freq.resize((size_t)(dim / 2));
  for (size_t i = 0; i < r.inv_freq.size(); ++i)
    r.inv_freq[i] = std::pow(o.rope_theta, -2.0 * (double)i / (double)dim);
  if (o.rope_scaling == "llama3")
    llama3(o, r.inv_freq);
  else
    yarn(o, dim, r.inv_freq, r.scale);
  return r;
}

double mla_query_scale(const Options& o) {
  if (o.rope_scaling != "yarn" || o.yarn_mscale_all_dim <= 0) return 1.0;
  const double m = yarn_mscale(o.rope_factor, o.yarn_mscale_all_dim);
  return m * m;
}

void rope_at(const Ctx& c, const Step& s, DLTensor* x, const Rope& r, bool backward) {
  const int64_t T = s.T, H = x->shape[2], D = x->shape[3];
  const loom_rope_freqs table{
      {sizeof(loom_rope_freqs), LOOM_EXT_ROPE_FREQS, LOOM_EXT_REQUIRED, nullptr},
      r.inv_freq.data(),
      (int64_t)r.inv_freq.size(),
      r.scale};
  const loom_rope_freqs* freqs = r.inv_freq.empty() ? nullptr : &table;
  auto one = [&](DLTensor* v, int64_t pos) {
    if (backward)
      loom::rope_backward(c.be, v, pos, r.theta, freqs);
    else
      loom::rope_forward(c.be, v, pos, r.theta, freqs);
  };
  auto rows = [&](int64_t first_row, int64_t n, int64_t pos) {
    View v = view(x, {1, n, H, D}, first_row * H * D);
    one(v.get(), pos);
  };
  if (s.docs) {
    const int32_t* at =
        s.docs->cu_seqlens_q_padded ? s.docs->cu_seqlens_q_padded : s.docs->cu_seqlens_q;
    for (int64_t i = 0; i < s.docs->num_seqs; ++i)
      rows(at[i], s.docs->cu_seqlens_q[i + 1] - s.docs->cu_seqlens_q[i], 0);
  } else if (c.cp.size > 1) {  // this rank's two chunks of each sample
    const int64_t Tc = T / 2;
    for (int64_t b = 0; b < s.B; ++b) {
      rows(b * T, Tc, cp_position(c.cp, Tc, 0));
      rows(b * T + Tc, Tc, cp_position(c.cp, Tc, Tc));
    }
  } else if (s.pos) {
    for (int64_t b = 0; b < s.B; ++b) rows(b * T, T, s.start(b));
  } else {
    one(x, s.pos0);
  }
}

}  // namespace loom::layers
