// The document split and the sampler's stream, against a hand-built dataset.
#include <doctest/doctest.h>

#include <set>
#include <vector>

#include "errors.hpp"
#include "sampler.hpp"

using namespace loom::engine;

namespace {
// A dataset of documents {d*10, d*10+1, ...} of length d+1 — enough to recognise tokens.
struct FakeDs {
  std::vector<std::vector<int32_t>> docs;
};
loom_dataset_api fake_api() {
  loom_dataset_api a{};
  a.struct_size = LOOM_DATASET_API_SIZE_V1;
  a.num_documents = [](loom_dataset* d) {
    return (int64_t) reinterpret_cast<FakeDs*>(d)->docs.size();
  };
  a.document = [](loom_dataset* d, int64_t i, const int32_t** ids, size_t* n) -> loom_error* {
    auto& v = reinterpret_cast<FakeDs*>(d)->docs[(size_t)i];
    *ids = v.data();
    *n = v.size();
    return nullptr;
  };
  return a;
}
}  // namespace

TEST_CASE("split weights cut document ranges in order") {
  SplitRanges r = split_documents(100, "98,2,0");
  CHECK(r.begin[0] == 0);
  CHECK(r.end[0] == 98);
  CHECK(r.begin[1] == 98);
  CHECK(r.end[1] == 100);
  CHECK(r.begin[2] == 100);
  CHECK(r.end[2] == 100);
  SplitRanges q = split_documents(10, "1,1");
  CHECK(q.end[0] == 5);
  CHECK(q.end[1] == 10);
  CHECK_THROWS_AS(split_documents(10, "a,b"), UsageError);
  CHECK_THROWS_AS(split_documents(10, "0,0,0"), UsageError);
}

TEST_CASE("samples tile the shuffled stream, targets shifted by one") {
  FakeDs ds;
  for (int d = 0; d < 6; ++d) {
    std::vector<int32_t> v;
    for (int i = 0; i <= d; ++i) v.push_back(d * 10 + i);
    ds.docs.push_back(v);
  }
  loom_dataset_api api = fake_api();
  auto* h = reinterpret_cast<loom_dataset*>(&ds);
  const int64_t eod = 999, L = 4;
  Sampler s(&api, h, 0, 6, eod, L, 42);
  CHECK(s.tokens_per_epoch() == 21 + 6);  // 1+2+..+6 tokens and one EOD each

  // Reassemble the first epoch from consecutive samples: every document appears exactly
  // once, whole and followed by EOD, and targets are the next token.
  std::vector<int32_t> stream;
  int32_t tok[L], tgt[L];
  for (int64_t i = 0; i * L < s.tokens_per_epoch(); ++i) {
    s.sample(i, tok, tgt);
    for (int t = 0; t < L; ++t) {
      stream.push_back(tok[t]);
      if (t + 1 < L) CHECK(tgt[t] == tok[t + 1]);
    }
  }
  stream.resize((size_t)s.tokens_per_epoch());
  std::set<int> seen;
  for (size_t p = 0; p < stream.size();) {
    int d = stream[p] / 10;
    for (int i = 0; i <= d; ++i) REQUIRE(stream[p + (size_t)i] == d * 10 + i);
    REQUIRE(stream[p + (size_t)d + 1] == eod);
    seen.insert(d);
    p += (size_t)d + 2;
  }
  CHECK(seen.size() == 6);

  // Deterministic for a seed, different for another.
  Sampler s2(&api, h, 0, 6, eod, L, 42), s3(&api, h, 0, 6, eod, L, 43);
  bool differs = false;
  for (int64_t i = 0; i < 20; ++i) {
    int32_t a[L], b[L], c[L], x[L];
    s.sample(i, a, x);
    s2.sample(i, b, x);
    s3.sample(i, c, x);
    CHECK(std::equal(a, a + L, b));
    differs |= !std::equal(a, a + L, c);
  }
  CHECK(differs);
}
