// Loom SDK C++ helpers (header-only): numpy's legacy RandomState, as far as Megatron-LM's
// datasets draw from it, so that a Loom sample equals Megatron's for the same seed. The
// engine's GPT sample order and dataset/bert's masking share this one implementation.
//
// MT19937 (Matsumoto & Nishimura 1998) is written from the published algorithm: a 624-word
// state, the tempering transform and init_genrand seeding. On top of it, numpy's draws:
//   random_sample()   53 random bits from two words, (a >> 5, b >> 6)
//   interval(max)     uniform in [0, max] by masked rejection (mask = max with every lower bit
//                     set; 32-bit words while max < 2^32, else 64-bit words, high word first)
//   randint(lo, hi)   lo + interval(hi - 1 - lo), numpy's legacy int64 randint
//   shuffle(a, n)     for i = n-1 down to 1: swap a[i] with a[interval(i)] (arrays and lists)
//   choice(cdf)       numpy's choice(a, p=p): one random_sample searched in the normalised
//                     cumulative sums, side "right"
//   geometric(p)      numpy's legacy geometric: for p >= 1/3 a search over the cumulative
//                     probabilities, else ceil(log1p(-U) / log(1 - p)), U one random_sample
// MEGATRON_FORMATS.md section 2 gives check values (tests/data/test_mt19937.cpp holds them).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace loom {

class RandomState {
 public:
  explicit RandomState(uint32_t seed) {
    mt_[0] = seed;
    for (size_t i = 1; i < kN; ++i)
      mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + (uint32_t)i;
    pos_ = kN;
  }

  uint32_t next_u32() {
    if (pos_ >= kN) refill();
    uint32_t y = mt_[pos_++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
  }
  uint64_t next_u64() {  // (first << 32) | second
    const uint64_t hi = next_u32();
    return (hi << 32) | next_u32();
  }
  double random_sample() {  // in [0, 1)
    const uint32_t a = next_u32() >> 5, b = next_u32() >> 6;
    return ((double)a * 67108864.0 + (double)b) / 9007199254740992.0;
  }
  uint64_t interval(uint64_t max) {
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
  // Uniform in [lo, hi), hi > lo.
  int64_t randint(int64_t lo, int64_t hi) {
    return lo + (int64_t)interval((uint64_t)(hi - 1 - lo));
  }

  template <class T>
  void shuffle(T* a, size_t n) {
    for (size_t i = n; i > 1; --i) {
      const size_t j = (size_t)interval(i - 1);
      std::swap(a[i - 1], a[j]);
    }
  }
  template <class T>
  void shuffle(std::vector<T>& a) {
    shuffle(a.data(), a.size());
  }

  // Trials up to the first success, >= 1 (SpanBERT's and T5's span lengths).
  int64_t geometric(double p) {
    const double u = random_sample();
    if (p >= 0.333333333333333333333333) {
      int64_t x = 1;
      double sum = p, prod = p;
      while (u > sum) {
        prod *= 1.0 - p;
        sum += prod;
        ++x;
      }
      return x;
    }
    return (int64_t)std::ceil(std::log1p(-u) / std::log(1.0 - p));
  }

  // The index numpy's choice(len(p), p=p) picks: `cdf` holds p's cumulative sums (numpy
  // divides them by the last; pass them so).
  size_t choice(const std::vector<double>& cdf) {
    const double u = random_sample();
    return (size_t)(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
  }

 private:
  static constexpr size_t kN = 624, kM = 397;
  void refill() {
    constexpr uint32_t kMatrixA = 0x9908b0dfu, kUpper = 0x80000000u, kLower = 0x7fffffffu;
    for (size_t k = 0; k < kN; ++k) {
      const uint32_t y = (mt_[k] & kUpper) | (mt_[(k + 1) % kN] & kLower);
      mt_[k] = mt_[(k + kM) % kN] ^ (y >> 1) ^ ((y & 1u) ? kMatrixA : 0u);
    }
    pos_ = 0;
  }
  std::array<uint32_t, kN> mt_{};
  size_t pos_ = kN;
};

}  // namespace loom
