// FP8's two formats (loom/cpp/fp8.hpp, issue 39): every code's value against the table that
// make_fp8_table.py wrote from the formats' definitions in exact rational arithmetic, and the
// saturating round-to-nearest-even cast against a brute-force reference (the nearest of the
// table's values, ties to the even code) at every value, every midpoint between neighbours
// and just either side of it, below the smallest subnormal, beyond the largest, at the
// infinities and NaN, and at 10^5 random magnitudes. Delayed scaling's amax history against
// a reference that keeps every step's amax.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "loom/cpp/fp8.hpp"

namespace {

using Values = std::array<double, 256>;

// The table's values by format name ("e4m3", "e5m2").
std::map<std::string, Values> read_table() {
  std::ifstream in(std::string(LOOM_SOURCE_DIR) + "/tests/backend/fp8_table.txt");
  REQUIRE(in.good());
  std::map<std::string, Values> table;
  std::map<std::string, int> seen;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream f(line);
    std::string fmt, code, value;
    f >> fmt >> code >> value;
    const long c = std::strtol(code.c_str(), nullptr, 16);
    REQUIRE((c >= 0 && c < 256));
    table[fmt][(size_t)c] = std::strtod(value.c_str(), nullptr);  // hex floats, inf, nan
    ++seen[fmt];
  }
  REQUIRE(seen["e4m3"] == 256);
  REQUIRE(seen["e5m2"] == 256);
  return table;
}

bool same(double a, double b) {  // bitwise, but any NaN equals any NaN
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

// The reference cast: beyond the largest finite value (infinity included) the largest of the
// sign; otherwise the nearest finite value of the sign, a tie going to the even code.
uint8_t reference_encode(const Values& v, const loom::Fp8Format& f, double x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(x);
  if (a >= f.largest) return sign | f.largest_code;
  int best = -1;
  double best_d = 0;
  for (int c = 0; c < 128; ++c) {
    if (!std::isfinite(v[(size_t)c])) continue;
    const double d = std::fabs(v[(size_t)c] - a);
    if (best < 0 || d < best_d || (d == best_d && (c & 1) == 0)) best = c, best_d = d;
  }
  return static_cast<uint8_t>(sign | best);
}

// The finite non-negative values of the format in increasing order (their codes count up).
std::vector<double> positives(const Values& v) {
  std::vector<double> out;
  for (int c = 0; c < 128; ++c)
    if (std::isfinite(v[(size_t)c])) out.push_back(v[(size_t)c]);
  return out;
}

const std::pair<const char*, loom::Fp8Format> kFormats[] = {{"e4m3", loom::fp8_e4m3()},
                                                            {"e5m2", loom::fp8_e5m2()}};

}  // namespace

TEST_CASE("fp8: every code decodes to the table's value; every value encodes to its code") {
  const auto table = read_table();
  for (const auto& [name, f] : kFormats) {
    CAPTURE(name);
    const Values& v = table.at(name);
    for (int c = 0; c < 256; ++c) {
      CAPTURE(c);
      const double want = v[(size_t)c];
      CHECK(same(loom::fp8_decode(f, (uint8_t)c), want));
      if (std::isfinite(want)) CHECK((int)loom::fp8_encode(f, want) == c);
    }
    CHECK(loom::fp8_decode(f, f.largest_code) == f.largest);
    CHECK(std::isnan(loom::fp8_decode(f, f.nan_code)));
  }
  // The formats' landmarks, as OCP's specification states them.
  CHECK(loom::fp8_decode(loom::fp8_e4m3(), 0x01) == std::ldexp(1.0, -9));
  CHECK(loom::fp8_decode(loom::fp8_e5m2(), 0x01) == std::ldexp(1.0, -16));
  CHECK(loom::fp8_decode(loom::fp8_e5m2(), 0x7c) == HUGE_VAL);
  CHECK(loom::fp8_decode(loom::fp8_e5m2(), 0xfc) == -HUGE_VAL);
}

TEST_CASE("fp8: the cast rounds to nearest, ties to even, at and around every midpoint") {
  const auto table = read_table();
  for (const auto& [name, f] : kFormats) {
    CAPTURE(name);
    const Values& v = table.at(name);
    const std::vector<double> p = positives(v);
    std::vector<double> xs;
    for (size_t i = 0; i + 1 < p.size(); ++i) {
      const double mid = (p[i] + p[i + 1]) / 2;  // exact: one more bit than the format has
      for (double x : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, HUGE_VAL),
                       p[i] + (p[i + 1] - p[i]) / 4, p[i] + 3 * (p[i + 1] - p[i]) / 4})
        xs.push_back(x);
    }
    const double largest = p.back(), step = largest - p[p.size() - 2];
    for (double x :
         {p[1] / 2, p[1] / 4, std::nextafter(p[1] / 2, 1.0), largest + step / 2, largest + step,
          largest * 1e6, 1e300, HUGE_VAL, std::numeric_limits<double>::denorm_min()})
      xs.push_back(x);
    size_t ties_down = 0;
    for (double x : xs)
      for (double s : {1.0, -1.0}) {
        CAPTURE(s * x);
        const uint8_t want = reference_encode(v, f, s * x);
        CHECK((int)loom::fp8_encode(f, s * x) == (int)want);
        CHECK(same(loom::fp8_round(f, s * x), v[want]));
        ties_down += std::fabs(v[want]) < x;
      }
    CHECK(ties_down > p.size());  // the midpoints went both ways: some down, not all up
    // Saturation: beyond the largest and at infinity, the largest of the sign (satfinite).
    CHECK(loom::fp8_encode(f, HUGE_VAL) == f.largest_code);
    CHECK(loom::fp8_encode(f, -HUGE_VAL) == (0x80 | f.largest_code));
    CHECK(std::isnan(loom::fp8_round(f, std::nan(""))));
    CHECK(loom::fp8_encode(f, -0.0) == 0x80);
    CHECK(loom::fp8_encode(f, -p[1] / 2) == 0x80);  // a tie with zero: the even code, -0
  }
}

TEST_CASE("fp8: the cast equals the reference at 10^5 random magnitudes, f32 inputs too") {
  const auto table = read_table();
  std::mt19937_64 rng(39);
  for (const auto& [name, f] : kFormats) {
    CAPTURE(name);
    const Values& v = table.at(name);
    // log-uniform from well below the smallest subnormal to well beyond the largest
    std::uniform_real_distribution<double> log2(std::log2(v[1]) - 3, std::log2(f.largest) + 2);
    for (int i = 0; i < 100000; ++i) {
      const double x = std::exp2(log2(rng)) * (i % 2 ? -1.0 : 1.0);
      const float xf = static_cast<float>(x);
      REQUIRE((int)loom::fp8_encode(f, x) == (int)reference_encode(v, f, x));
      REQUIRE((int)loom::fp8_encode(f, xf) == (int)reference_encode(v, f, xf));
    }
  }
}

TEST_CASE("fp8: the per-tensor scale maps amax onto the format's largest value, in f32") {
  std::mt19937_64 rng(8);
  std::uniform_real_distribution<double> log10(-30, 30);
  for (const auto& [name, f] : kFormats) {
    CAPTURE(name);
    for (int i = 0; i < 20000; ++i) {
      const float amax = static_cast<float>(std::pow(10.0, log10(rng)));
      CAPTURE(amax);
      // largest / amax correctly rounded to f32: the double quotient rounded once more (a
      // double carries more than twice f32's bits, so that is the f32 division's result)
      const float want = static_cast<float>(f.largest / static_cast<double>(amax));
      const float s = loom::fp8_scale(f, amax);
      REQUIRE(s == want);
      REQUIRE(loom::fp8_scale(f, amax, 3) == want / 8);  // the margin: exact powers of two
      const float p = loom::fp8_scale(f, amax, 0, true);
      int e = 0;
      REQUIRE((p <= want && want < 2 * p && std::frexp(p, &e) == 0.5f));
      // amax scaled lands on the format's top binade, never past its largest value
      const double top = loom::fp8_decode(f, loom::fp8_quantize(f, amax, s));
      REQUIRE((top <= f.largest && top >= f.largest / 2));
    }
    CHECK(loom::fp8_scale(f, 0.0f) == 1.0f);
    CHECK(loom::fp8_scale(f, HUGE_VALF) == 1.0f);
    CHECK(loom::fp8_scale(f, std::nanf("")) == 1.0f);
    CHECK(loom::fp8_scale(f, 1e-45f) == std::numeric_limits<float>::max());  // past f32
  }
  // The product is rounded to f32 before the cast: x = 1.0625 + 2^-23 and s = 1 - 2^-24 make
  // 1.0625 + 5.6e-8 exactly, past E4M3's midpoint 1.0625 between 1 and 1.125 by less than
  // half an f32 ulp, so f32 makes it the midpoint and the tie goes to the even code, 1.
  const loom::Fp8Format e4m3 = loom::fp8_e4m3();
  const float x = 1.0625f + std::ldexp(1.0f, -23), s = 1.0f - std::ldexp(1.0f, -24);
  CHECK(loom::fp8_decode(e4m3, loom::fp8_quantize(e4m3, x, s)) == 1.0);
  CHECK(loom::fp8_round(e4m3, (double)x * (double)s) == 1.125);  // unrounded: the other way
}

// Delayed scaling against a reference that keeps every step's amax: the window of step t is
// the last `len` of them (t's own included), its amax the largest (NaN passed over, no less
// than 0, as the history starts at zeros) or t's own, and the scale moves only on a finite,
// positive amax.
TEST_CASE("fp8: delayed scaling's history, window, roll and kept scale") {
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<double> log2(-20, 20);
  const float specials[] = {0.0f, HUGE_VALF, std::nanf("")};
  for (const auto& [name, f] : kFormats)
    for (const int64_t len : {1, 2, 5, 16})
      for (const bool most_recent : {false, true})
        for (const int margin : {0, 2}) {
          CAPTURE(name);
          CAPTURE(len);
          CAPTURE(most_recent);
          CAPTURE(margin);
          std::vector<float> history((size_t)len, 0.0f), seen;
          float scale = 1.0f, want = 1.0f;
          for (int t = 0; t < 60; ++t) {
            CAPTURE(t);
            // a few casts a step fold their amax into slot 0; now and then one of 0, inf, NaN
            float step_amax = 0.0f;
            for (int c = 0; c < 3; ++c) {
              const float a = t % 7 == 3 && c == 0 ? specials[(t / 7) % 3]
                                                   : static_cast<float>(std::exp2(log2(rng)));
              history[0] = std::fmax(history[0], a);
              step_amax = std::fmax(step_amax, a);
            }
            seen.push_back(step_amax);
            float window = 0.0f;
            if (most_recent) {
              window = step_amax;
            } else {
              for (size_t i = seen.size() > (size_t)len ? seen.size() - (size_t)len : 0;
                   i < seen.size(); ++i)
                window = std::fmax(window, seen[i]);
            }
            if (window > 0 && std::isfinite(window)) want = loom::fp8_scale(f, window, margin);
            const float used =
                loom::fp8_delayed_update(f, history.data(), len, most_recent, margin, &scale);
            REQUIRE((used == window || (std::isnan(used) && std::isnan(window))));
            REQUIRE(scale == want);
            // after the roll: slot 0 empty, the others the last len - 1 steps' amaxes
            REQUIRE(history[0] == 0.0f);
            std::vector<float> held(history.begin() + 1, history.end()), last;
            for (size_t i = seen.size() > (size_t)(len - 1) ? seen.size() - (size_t)(len - 1) : 0;
                 i < seen.size(); ++i)
              last.push_back(seen[i]);
            while ((int64_t)last.size() < len - 1) last.insert(last.begin(), 0.0f);
            auto key = [](float v) { return std::isnan(v) ? -1.0f : v; };  // NaN sorts first
            auto order = [&](float a, float b) { return key(a) < key(b); };
            std::sort(held.begin(), held.end(), order);
            std::sort(last.begin(), last.end(), order);
            REQUIRE(held.size() == last.size());
            for (size_t i = 0; i < held.size(); ++i)
              REQUIRE((held[i] == last[i] || (std::isnan(held[i]) && std::isnan(last[i]))));
          }
        }
  // The kept scale: a step that cast nothing, or overflowed, leaves it as it was.
  const loom::Fp8Format e4m3 = loom::fp8_e4m3();
  CHECK(loom::fp8_delayed_scale(e4m3, 0.0f, 0.25f) == 0.25f);
  CHECK(loom::fp8_delayed_scale(e4m3, HUGE_VALF, 0.25f) == 0.25f);
  CHECK(loom::fp8_delayed_scale(e4m3, std::nanf(""), 0.25f) == 0.25f);
  CHECK(loom::fp8_delayed_scale(e4m3, 448.0f, 0.25f, 1) == 0.5f);
}
