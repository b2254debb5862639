// numpy's legacy RandomState: the formats page's check values, then raw words, doubles and
// permutations for several seeds against numpy (data/mt19937.txt).
#include <doctest/doctest.h>

#include <numeric>

#include "loom/cpp/numpy_random.hpp"
#include "reference.hpp"

using loom::RandomState;

namespace {
std::vector<int64_t> permutation(uint32_t seed, size_t n) {
  std::vector<int64_t> a(n);
  std::iota(a.begin(), a.end(), 0);
  RandomState r(seed);
  r.shuffle(a.data(), a.size());
  return a;
}
}  // namespace

TEST_CASE("RandomState(0): the formats page's check values") {
  RandomState r(0);
  CHECK(r.random_sample() == 0.5488135039273248);
  CHECK(permutation(0, 10) == std::vector<int64_t>{2, 8, 4, 9, 1, 6, 7, 3, 0, 5});
}

TEST_CASE("RandomState: words, doubles and permutations equal numpy's") {
  int checked = 0;
  for (const auto& w : sref::lines("mt19937.txt")) {
    const uint32_t seed = (uint32_t)std::stoull(w[1]);
    CAPTURE(w[0]);
    CAPTURE(seed);
    RandomState r(seed);
    if (w[0] == "u32") {
      for (int64_t v : sref::ints(w, 2)) CHECK(r.next_u32() == (uint32_t)v);
    } else if (w[0] == "doubles") {
      for (size_t i = 2; i < w.size(); ++i) CHECK(r.random_sample() == std::stod(w[i]));
    } else if (w[0] == "permutation") {
      const size_t n = std::stoull(w[2]);
      CHECK(permutation(seed, n) == sref::ints(w, 3));
    }
    ++checked;
  }
  CHECK(checked == 16);
}

TEST_CASE("RandomState::interval stays in range, masked rejection") {
  RandomState r(42);
  for (uint64_t max : {0ull, 1ull, 2ull, 5ull, 255ull, 256ull, 1000ull, 0xffffffffull,
                       0x100000000ull, 0x123456789abull})
    for (int i = 0; i < 200; ++i) REQUIRE(r.interval(max) <= max);
}
