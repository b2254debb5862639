// numpy's legacy RandomState, as far as Megatron's GPT dataset uses it: MT19937 seeded with
// the standard init_genrand, random_sample() doubles and in-place shuffle().
//
// Contract (MEGATRON_FORMATS.md section 2): RandomState(seed) with seed < 2^32 draws the
// same 32-bit words as numpy.random.RandomState(seed); shuffle(a, n) permutes exactly as
// numpy's shuffle of a 1-D array: for i = n-1 down to 1, j is drawn by masked rejection
// (mask = i with every lower bit set; 32-bit words while i < 2^32, else 64-bit words made
// of two 32-bit draws, high first) and a[i] is swapped with a[j].
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace loom::engine {

class RandomState {
 public:
  explicit RandomState(uint32_t seed);
  uint32_t next_u32();
  uint64_t next_u64();              // (first << 32) | second
  double random_sample();           // in [0, 1) with 53 random bits: (a >> 5, b >> 6)
  uint64_t interval(uint64_t max);  // uniform in [0, max] by masked rejection

  template <class T>
  void shuffle(T* a, size_t n) {
    for (size_t i = n; i > 1; --i) {
      size_t j = (size_t)interval(i - 1);
      std::swap(a[i - 1], a[j]);
    }
  }

 private:
  void refill();
  std::array<uint32_t, 624> mt_;
  size_t pos_;
};

}  // namespace loom::engine
