// Loom SDK: the two 8-bit floating-point formats of FP8 training (issue 39), as OCP's "OFP8"
// specification defines them and Hopper's tensor cores, Transformer Engine and Megatron use
// them: E4M3 (4 exponent bits, bias 7, 3 mantissa bits; no infinities, S.1111.111 is NaN,
// largest 448) for the forward's tensors, E5M2 (5 exponent bits, bias 15, 2 mantissa bits;
// IEEE-like infinities and NaNs, largest 57344) for the gradients.
//
// encode is the saturating cast of PTX's cvt.rn.satfinite and of Transformer Engine's casts:
// round to nearest, ties to even, on the exact value; a finite value beyond the largest and
// an infinity become the largest of their sign; a NaN stays a NaN (S.1111.111 and S.11111.11;
// a NaN's code is not a number the casts agree on). decode is exact. So the CPU emulates a
// GPU's cast to the bit: backend/cpu's FP8 path and the tests' references use these. Header-only
// and free of the C++ library's containers, like clip.hpp, so that nvcc compiles it into device
// code too.
#pragma once

#include <cmath>
#include <cstdint>

#include "loom/cpp/clip.hpp"  // LOOM_HOST_DEVICE

namespace loom {

struct Fp8Format {
  int exp_bits, man_bits, bias;
  bool has_inf;          // E5M2: S.11111.00 is an infinity; E4M3 has none
  double largest;        // the largest finite magnitude
  uint8_t largest_code;  // its code (sign bit clear)
  uint8_t nan_code;      // the NaN a cast makes (sign bit clear)
};

// The two formats (functions, not constants: device code reaches them too).
LOOM_HOST_DEVICE constexpr Fp8Format fp8_e4m3() { return {4, 3, 7, false, 448.0, 0x7e, 0x7f}; }
LOOM_HOST_DEVICE constexpr Fp8Format fp8_e5m2() { return {5, 2, 15, true, 57344.0, 0x7b, 0x7f}; }

// The value of code `c` in format `f`, exactly (a double holds every one).
LOOM_HOST_DEVICE inline double fp8_decode(const Fp8Format& f, uint8_t c) {
  const bool negative = (c & 0x80) != 0;
  const int e = (c >> f.man_bits) & ((1 << f.exp_bits) - 1);
  const int m = c & ((1 << f.man_bits) - 1);
  const int top = (1 << f.exp_bits) - 1;
  double v;
  if (f.has_inf && e == top) {
    v = m == 0 ? HUGE_VAL : NAN;
  } else if (!f.has_inf && e == top && m == (1 << f.man_bits) - 1) {
    v = NAN;
  } else if (e == 0) {  // subnormal: m units of 2^(1 - bias - man_bits)
    v = std::ldexp(static_cast<double>(m), 1 - f.bias - f.man_bits);
  } else {
    v = std::ldexp(static_cast<double>((1 << f.man_bits) + m), e - f.bias - f.man_bits);
  }
  return negative ? -v : v;
}

// The code of `x` in format `f`: round to nearest, ties to even, saturating (see above).
// Exact for any double: the magnitude is scaled by a power of two to count units of the
// format's spacing at its binade, and that count is rounded once (rint: the default mode,
// nearest even). A carry out of the mantissa lands on the next binade's first code, and out
// of the subnormals on the first normal, because codes count up with magnitude.
LOOM_HOST_DEVICE inline uint8_t fp8_encode(const Fp8Format& f, double x) {
  if (std::isnan(x)) return f.nan_code;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(x);
  if (a >= f.largest) return sign | f.largest_code;  // also infinity: saturated
  if (a == 0) return sign;
  int e2 = 0;
  (void)std::frexp(a, &e2);  // a = r * 2^e2, r in [0.5, 1): its binade's exponent is e2 - 1
  const int emin = 1 - f.bias;
  const int binade = e2 - 1 < emin ? emin : e2 - 1;  // subnormals share the lowest's spacing
  const double units = std::rint(std::ldexp(a, f.man_bits - binade));
  // units is at most 2^(man_bits + 1) (a below the largest cannot round past it)
  const int base = binade == emin && units < (1 << f.man_bits)
                       ? 0  // a subnormal: its code is its unit count
                       : (binade + f.bias) << f.man_bits;
  const int code =
      base == 0 ? static_cast<int>(units) : base + static_cast<int>(units) - (1 << f.man_bits);
  return static_cast<uint8_t>(sign | code);
}

// x rounded to format f and back: what a tensor holds after a cast (a NaN stays NaN).
LOOM_HOST_DEVICE inline double fp8_round(const Fp8Format& f, double x) {
  return fp8_decode(f, fp8_encode(f, x));
}

// The scale that maps `amax` (the largest magnitude of what is cast) onto the format's largest
// value, 2^margin below it: what a tensor is multiplied by before its cast and divided by
// after (Transformer Engine's and Megatron's per-tensor scaling; current scaling casts with
// the amax of the tensor itself, delayed scaling with one from its history). In f32 as the
// kernels use it: largest / amax rounded once, then the exact power of two of the margin. An
// amax of 0, infinite or NaN gives 1 (nothing to scale, or nothing a scale could help); a
// quotient beyond f32's range gives f32's largest. With `pow2` only the power of two of the
// quotient is kept (rounded down, so the scaled amax stays within the format), which keeps
// the scaling itself exact.
LOOM_HOST_DEVICE inline float fp8_scale(const Fp8Format& f, float amax, int margin = 0,
                                        bool pow2 = false) {
  if (!(amax > 0) || std::isinf(amax)) return 1.0f;  // 0, negative, NaN or infinite
  float s = static_cast<float>(f.largest) / amax;
  if (std::isinf(s)) s = 3.40282347e38f;  // FLT_MAX
  if (pow2) {
    int e = 0;
    (void)std::frexp(s, &e);
    s = std::ldexp(1.0f, e - 1);
  }
  return std::ldexp(s, -margin);
}

// The code of x * scale (the product rounded to f32 first, as a kernel computes it).
LOOM_HOST_DEVICE inline uint8_t fp8_quantize(const Fp8Format& f, float x, float scale) {
  return fp8_encode(f, static_cast<double>(x * scale));
}

// ---- delayed scaling (precision.fp8 = "delayed") ------------------------------------------
// One scaled tensor's amax history of `len` floats, as Transformer Engine keeps it: slot 0
// gathers the current step's amax (each cast folds its amax in with fmax), slots 1..len-1 hold
// the len - 1 steps before it. At the step's end fp8_delayed_update derives the next step's
// scale from the history, then rolls it: the current amax joins the earlier ones, the oldest
// leaves, and slot 0 starts again from 0. The window is the whole history, the current step
// included (len = 1: the current amax alone). fmax, as the kernels take it, passes over NaN.

// The amax the next scale is made from: the current step's (`most_recent`, Megatron's
// fp8_amax_compute_algo = "most_recent") or the largest of the window ("max").
LOOM_HOST_DEVICE inline float fp8_history_amax(const float* history, int64_t len,
                                               bool most_recent) {
  if (most_recent || len <= 1) return history[0];
  float amax = 0.0f;
  for (int64_t i = 0; i < len; ++i) amax = std::fmax(amax, history[i]);
  return amax;
}

// The scale after a step whose history holds `amax` (fp8_history_amax): the format's largest
// 2^margin below it over amax, as fp8_scale makes it; where amax is 0 or not finite, the
// previous scale stays (nothing was cast, or the step overflowed: its amax says nothing).
LOOM_HOST_DEVICE inline float fp8_delayed_scale(const Fp8Format& f, float amax, float previous,
                                                int margin = 0) {
  if (!(amax > 0) || std::isinf(amax)) return previous;
  return fp8_scale(f, amax, margin);
}

// The step's end for one tensor: *scale from the history (above), then the roll. Returns the
// amax the scale was made from.
LOOM_HOST_DEVICE inline float fp8_delayed_update(const Fp8Format& f, float* history, int64_t len,
                                                 bool most_recent, int margin, float* scale) {
  const float amax = fp8_history_amax(history, len, most_recent);
  *scale = fp8_delayed_scale(f, amax, *scale, margin);
  // history[1..len) moves down one slot and the current amax goes last: the oldest falls out.
  const float current = history[0];
  for (int64_t i = 0; i + 1 < len; ++i) history[i] = history[i + 1];
  if (len > 1) history[len - 1] = current;
  history[0] = 0.0f;
  return amax;
}

}  // namespace loom
