// Loom SDK C++ helpers: f32 <-> bf16 / f16 conversions on the host, bit-exact and
// round-to-nearest-even (the IEEE default, and what PyTorch's .to() does), with NaN kept a NaN and
// overflow going to infinity.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace loom {

inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  // A NaN whose payload sits in the low 16 bits would round to infinity: keep it quiet NaN.
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  // Add half an ulp of bf16, plus one if the kept part is odd (ties to even); a carry out of
  // the mantissa bumps the exponent, which is exactly right, up to infinity.
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_to_f32(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

inline uint16_t f32_to_f16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u)  // NaN: quiet, top payload bits kept
    return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u)  // >= 65520 (incl. inf): rounds past 65504, the largest f16
    return static_cast<uint16_t>(sign | 0x7c00u);
  if (a >= 0x38800000u) {  // >= 2^-14: normal in f16; drop 13 mantissa bits, ties to even
    a += 0x0fffu + ((a >> 13) & 1u);
    a -= 112u << 23;  // exponent bias 127 -> 15
    return static_cast<uint16_t>(sign | (a >> 13));
  }
  // Subnormal (or zero): f16 counts in units of 2^-24. Adding 0.5f (whose ulp is 2^-24) makes
  // the FPU round |f| to that grid, ties to even; the sum's low bits are the count. A count
  // of 1024 is the smallest normal, 0x0400, which is also the right encoding.
  float t = std::fabs(f) + 0.5f;
  return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(t) - 0x3f000000u));
}

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0)  // zero or subnormal: mant * 2^-24, exact in f32
    return std::bit_cast<float>(std::bit_cast<uint32_t>(static_cast<float>(mant) * 0x1p-24f) |
                                sign);
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace loom
