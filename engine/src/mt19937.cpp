// MT19937 (Matsumoto & Nishimura 1998) written from the published algorithm: a 624-word
// state, the tempering transform, and init_genrand seeding.
#include "mt19937.hpp"

namespace loom::engine {

namespace {
constexpr size_t kN = 624, kM = 397;
constexpr uint32_t kMatrixA = 0x9908b0dfu, kUpper = 0x80000000u, kLower = 0x7fffffffu;
}  // namespace

RandomState::RandomState(uint32_t seed) {
  mt_[0] = seed;
  for (size_t i = 1; i < kN; ++i)
    mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + (uint32_t)i;
  pos_ = kN;
}

void RandomState::refill() {
  for (size_t k = 0; k < kN; ++k) {
    uint32_t y = (mt_[k] & kUpper) | (mt_[(k + 1) % kN] & kLower);
    mt_[k] = mt_[(k + kM) % kN] ^ (y >> 1) ^ ((y & 1u) ? kMatrixA : 0u);
  }
  pos_ = 0;
}

uint32_t RandomState::next_u32() {
  if (pos_ >= kN) refill();
  uint32_t y = mt_[pos_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

uint64_t RandomState::next_u64() {
  uint64_t hi = next_u32();
  return (hi << 32) | next_u32();
}

double RandomState::random_sample() {
  uint32_t a = next_u32() >> 5, b = next_u32() >> 6;
  return ((double)a * 67108864.0 + (double)b) / 9007199254740992.0;
}

uint64_t RandomState::interval(uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;
  for (int s = 1; s < 64; s <<= 1) mask |= mask >> s;
  uint64_t v;
  if (max <= 0xffffffffull) {
    do v = next_u32() & mask;
    while (v > max);
  } else {
    do v = next_u64() & mask;
    while (v > max);
  }
  return v;
}

}  // namespace loom::engine
