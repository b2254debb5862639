// Megatron's GPT dataset arrays and blending against the numpy re-implementation
// (make_reference.py): split bounds, document/sample/shuffle indices for one epoch, several
// epochs with and without the separate last epoch, and blend orders.
#include <doctest/doctest.h>

#include "base/errors.hpp"
#include "data/blend.hpp"
#include "data/gpt_dataset.hpp"
#include "reference.hpp"

using namespace loom::engine;

TEST_CASE("split bounds: normalised, cumulative, round half to even") {
  int n = 0;
  for (const auto& w : sref::lines("splits.txt")) {
    CAPTURE(w[1]);
    CAPTURE(w[2]);
    SplitRanges r = split_documents(std::stoll(w[2]), w[1]);
    std::vector<int64_t> want = sref::ints(w, 3);
    CHECK(std::vector<int64_t>{r.begin[0], r.end[0], r.end[1], r.end[2]} == want);
    CHECK(r.begin[1] == r.end[0]);
    CHECK(r.begin[2] == r.end[1]);
    ++n;
  }
  CHECK(n == 10);
  CHECK_THROWS_AS(split_documents(10, "a,b"), UsageError);
  CHECK_THROWS_AS(split_documents(10, "0,0,0"), UsageError);
  CHECK_THROWS_AS(split_documents(10, "1,2,3,4"), UsageError);
}

TEST_CASE("GPT indices equal numpy's for one and several epochs") {
  auto lines = sref::lines("gpt_indices.txt");
  REQUIRE(lines[0][0] == "sizes");
  std::vector<int32_t> sizes = sref::ints<int32_t>(lines[0], 1);
  int cases = 0, separate = 0, joint_multi = 0;
  for (size_t l = 1; l + 3 < lines.size() + 0; l += 4) {
    const auto& c = lines[l];
    REQUIRE(c[0] == "case");
    CAPTURE(c[1]);
    GptIndexSpec spec;
    spec.doc_begin = std::stoll(c[2]);
    spec.doc_end = std::stoll(c[3]);
    spec.seq_len = std::stoll(c[4]);
    spec.seed = (uint32_t)std::stoll(c[5]);
    spec.num_samples = std::stoll(c[6]);
    GptIndices x = build_gpt_indices(sizes, spec);
    CHECK(x.num_epochs == std::stoll(c[7]));
    CHECK(x.separate_last_epoch == (c[8] == "1"));
    CHECK(std::vector<int64_t>(x.doc_idx.begin(), x.doc_idx.end()) == sref::ints(lines[l + 1], 1));
    CHECK(x.sample_idx == sref::ints(lines[l + 2], 1));
    CHECK(x.shuffle_idx == sref::ints(lines[l + 3], 1));
    CHECK((int64_t)x.shuffle_idx.size() >= spec.num_samples);
    separate += x.separate_last_epoch;
    joint_multi += x.num_epochs > 1 && !x.separate_last_epoch;
    ++cases;
  }
  CHECK(cases == 7);
  CHECK(separate >= 2);
  CHECK(joint_multi >= 2);
}

TEST_CASE("GPT indices: an empty split is an error, not a hang") {
  std::vector<int32_t> sizes = {0, 0, 3};
  GptIndexSpec spec;
  spec.doc_begin = 0;
  spec.doc_end = 2;
  spec.seq_len = 4;
  spec.num_samples = 5;
  CHECK_THROWS_AS(build_gpt_indices(sizes, spec), RunError);
}

// Issue 17, finding 4: epochs were counted one at a time, so 10^18 samples spun (and E*T
// wrapped int64). In closed form the count is immediate, and one past int64 is refused.
TEST_CASE("GPT indices: epochs in closed form; a count past int64 is refused, not spun on") {
  std::vector<int32_t> sizes = {3, 4, 5};  // T = 12
  GptIndexSpec spec;
  spec.doc_begin = 0;
  spec.doc_end = 3;
  spec.seq_len = 4;
  spec.num_samples = 100;  // (E*12 - 1) // 4 >= 100: E = 34 (33 gives 395 // 4 = 98)
  GptIndices x = build_gpt_indices(sizes, spec);
  CHECK(x.num_epochs == 34);
  CHECK((int64_t)x.shuffle_idx.size() == (34 * 12 - 1) / 4);
  spec.num_samples = 99;  // 98 < 99: still 34
  CHECK(build_gpt_indices(sizes, spec).num_epochs == 34);
  spec.num_samples = 98;  // 98 >= 98: 33
  CHECK(build_gpt_indices(sizes, spec).num_epochs == 33);
  spec.num_samples = (int64_t)1 << 62;
  CHECK_THROWS_WITH_AS(build_gpt_indices(sizes, spec),
                       doctest::Contains("need more epochs than int64 counts"), RunError);
}

TEST_CASE("blending: sizes and order equal numpy's; proportions follow the weights") {
  auto lines = sref::lines("blend.txt");
  int n = 0;
  for (size_t l = 0; l + 3 < lines.size() + 0; l += 4) {
    const auto& b = lines[l];
    REQUIRE(b[0] == "blend");
    const int64_t size = std::stoll(b[1]);
    std::vector<double> w;
    for (size_t i = 2; i < b.size(); ++i) w.push_back(std::stod(b[i]));
    CAPTURE(size);
    std::vector<double> nw = normalise(w);
    CHECK(blend_dataset_sizes(nw, size) == sref::ints(lines[l + 1], 1));
    BlendIndex x = build_blend_index(nw, size);
    CHECK(std::vector<int64_t>(x.dataset.begin(), x.dataset.end()) == sref::ints(lines[l + 2], 1));
    CHECK(x.sample == sref::ints(lines[l + 3], 1));
    std::vector<int64_t> count(w.size(), 0);
    for (int16_t k : x.dataset) ++count[(size_t)k];
    for (size_t k = 0; k < w.size(); ++k) CHECK(std::abs((double)count[k] - nw[k] * size) <= 1.0);
    ++n;
  }
  CHECK(n == 4);
}

TEST_CASE("blend strings parse like Megatron's --data-path") {
  auto e = parse_blend("0.3 data/a 0.7 data/b", "data.blend");
  REQUIRE(e.size() == 2);
  CHECK(e[0].weight == 0.3);
  CHECK(e[1].prefix == "data/b");
  CHECK(parse_blend("  ", "k").empty());
  auto one = parse_blend("data/only", "k");
  REQUIRE(one.size() == 1);
  CHECK(one[0].weight == 1.0);
  CHECK_THROWS_AS(parse_blend("0.3 a 0.7", "k"), UsageError);
  CHECK_THROWS_AS(parse_blend("x a y b", "k"), UsageError);
  CHECK_THROWS_AS(parse_blend("0 a 0 b", "k"), UsageError);
}
