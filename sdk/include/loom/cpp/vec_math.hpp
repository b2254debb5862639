// Loom SDK C++ helpers: an exp the compiler can vectorise. glibc's expf is a scalar call that stops
// a loop from vectorising (its SIMD variant is only declared under -ffast-math), and GELU, SwiGLU,
// softmax and cross-entropy spend most of their time in it. The f32 version below is branch-free
// arithmetic, so `#pragma omp simd` loops over it become vector code; the f64 version is
// libm's (f64 is the finite-difference test path, where accuracy matters and speed does not).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

// Function multiversioning for compute-bound host loops: GCC compiles the function for
// AVX-512, AVX2 and baseline x86-64 and picks one at load time, so a plugin stays loadable on
// any x86-64 yet runs wide where it can. Every plugin that must reproduce another's results
// to the bit (backend/cpu's kernels, optimizer/adamw's) uses this one definition.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LOOM_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define LOOM_CPU_CLONES
#endif

namespace loom {

// exp(x) for f32 with ~1 ulp relative error on [-80, 80]; inputs outside are clamped to it, so
// the result is never 0 or inf but between ~1.8e-35 and ~5.5e34. Every use tolerates that
// (softmax and cross-entropy add it to a sum >= 1; sigmoid 1/(1 + exp(-x)) gives ~1e-35
// instead of a smaller number), and it keeps results and their products with ordinary
// factors out of the denormal range, where x86 takes a ~100-cycle assist per operation.
// NaN propagates. Method: x = n*ln2 + r with |r| <= ln2/2, exp(r) by a degree-6 polynomial
// (Cephes coefficients), 2^n built directly in the exponent bits.
inline float exp_f32(float x) {
  // The clamp is a bitwise select on purpose: written as `x < lo ? lo : x`, GCC threads the
  // clamped case through the caller as a separate constant path (e.g. GELU's x / (1 + e^80)),
  // evaluates it in every vector lane, and that constant path makes denormals — GELU ran 10x
  // slower. The masks below carry no constant for it to propagate. NaN compares false to
  // both bounds and passes through unchanged.
  constexpr float lo = -80.0f, hi = 80.0f;
  uint32_t below = 0u - static_cast<uint32_t>(x < lo);
  uint32_t above = 0u - static_cast<uint32_t>(x > hi);
  uint32_t bits = (std::bit_cast<uint32_t>(x) & ~(below | above)) |
                  (std::bit_cast<uint32_t>(lo) & below) | (std::bit_cast<uint32_t>(hi) & above);
  x = std::bit_cast<float>(bits);
  // Round x*log2(e) to the nearest integer by adding 1.5*2^23: the float's low mantissa bits
  // then hold n (valid for |n| < 2^22, far beyond the clamp).
  const float shifter = 12582912.0f;
  float k = x * 1.44269504088896341f + shifter;
  float n = k - shifter;
  int32_t ni = std::bit_cast<int32_t>(k) - std::bit_cast<int32_t>(shifter);
  // ln2 split in two so n*ln2_hi is exact and r keeps full precision.
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.0f;
  float scale = std::bit_cast<float>((ni + 127) << 23);
  return y * scale;
}

template <class T>
inline T vexp(T x);
template <>
inline float vexp<float>(float x) {
  return exp_f32(x);
}
template <>
inline double vexp<double>(double x) {
  return std::exp(x);
}

}  // namespace loom
