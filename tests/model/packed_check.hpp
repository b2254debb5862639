// Packed sequences against the same documents run one by one: a check shared by the model
// tests of packing (test_gpt.cpp) and of what rides on it (multi-token prediction).
#pragma once

#include <cmath>
#include <vector>

#include "model_test_util.hpp"

namespace modeltest {

// Packed sequences: documents 6 + 10 in row 0 and 3 + 13 in row 1 give the loss and every
// gradient that the four documents give run one by one (float64), for learned positions
// (GPT-2) and RoPE with GQA (Llama). The target crossing into the next document is -1 in
// both, as data.pack_sequences makes it.
inline void packed_equals_separate(const Overrides& cfg) {
  const int64_t B = 2, T = 16, V = 50;
  const std::vector<std::vector<int64_t>> docs = {{6, 10}, {3, 13}};
  std::vector<int32_t> tokens(B * T), targets(B * T), positions(B * T);
  for (int64_t i = 0; i < B * T; ++i) tokens[i] = (int32_t)((i * 37 + 11) % V);
  for (int64_t b = 0; b < B; ++b) {
    int64_t t0 = 0;
    for (int64_t len : docs[b]) {
      for (int64_t t = 0; t < len; ++t) {
        const int64_t i = b * T + t0 + t;
        positions[i] = (int32_t)t;
        targets[i] = t + 1 < len ? tokens[i + 1] : (t0 + len < T ? -1 : (int32_t)(i % V));
      }
      t0 += len;
    }
  }
  Host h;
  Gpt packed(h, cfg, V, B, T, loom_f64()), alone(h, cfg, V, 1, T, loom_f64());
  packed.check(packed.api()->init_params(packed.self(), 3));
  alone.check(alone.api()->init_params(alone.self(), 3));
  const double loss = packed.run(tokens, targets, positions, B, T, 1.0, true).first;
  double sum = 0;
  for (int64_t b = 0; b < B; ++b) {
    int64_t t0 = 0;
    for (int64_t len : docs[b]) {
      const auto at = [&](const std::vector<int32_t>& v) {
        return std::vector<int32_t>(v.begin() + b * T + t0, v.begin() + b * T + t0 + len);
      };
      sum += alone.run(at(tokens), at(targets), 1, len, 1.0, true).first;
      t0 += len;
    }
  }
  CHECK(std::fabs(loss - sum) <= 1e-12 * std::fabs(sum));
  double worst = 0;
  for (const auto& p : packed.params) {
    const auto g = packed.grad(p.name), want = alone.grad(p.name);
    double err = 0;
    for (size_t i = 0; i < g.size(); ++i) err = std::max(err, std::fabs(g[i] - want[i]));
    CHECK_MESSAGE(err <= 1e-10 * std::max(max_abs(want), 1e-30), p.name << ": " << err);
    worst = std::max(worst, err / std::max(max_abs(want), 1e-30));
  }
  MESSAGE("packed vs separate: loss " << loss << " vs " << sum << ", worst gradient error " << worst
                                      << " (relative to each tensor's largest)");
  // A position that neither restarts nor continues is refused by name.
  positions[5] = 7;
  CHECK_THROWS_WITH_AS(packed.run(tokens, targets, positions, B, T, 1.0, false),
                       doctest::Contains("positions[0][5] = 7"), std::runtime_error);
}

}  // namespace modeltest
