// The training loop's view of the sampler: Megatron's samples wanted per split, the split of
// documents, and a blended sampler mapping each sample to its dataset. The index arrays
// themselves are checked against numpy in tests/data.
#include <doctest/doctest.h>

#include <set>
#include <vector>

#include "base/errors.hpp"
#include "data/sampler.hpp"
#include "fake_dataset.hpp"

using namespace loom::engine;

namespace {
using loomtest::fake_api;
using loomtest::FakeDs;

// Document d holds tokens {d*100, d*100+1, ...}, d+3 of them; no cache prefix.
FakeDs make(int n, int base) {
  FakeDs ds;
  for (int d = 0; d < n; ++d) {
    std::vector<int32_t> v;
    for (int i = 0; i < d + 3; ++i) v.push_back(base + d * 100 + i);
    ds.docs.push_back(v);
  }
  return ds;
}
}  // namespace

TEST_CASE("samples wanted per split follow Megatron") {
  auto w = samples_wanted(100, 8, 10, 2);
  CHECK(w[kTrain] == 800);
  CHECK(w[kValid] == (100 / 10 + 1) * 2 * 8);
  CHECK(w[kTest] == 16);
  CHECK(samples_wanted(100, 8, 0, 2)[kValid] == 0);  // no evaluation, no valid samples
}

TEST_CASE("split weights cut document ranges in order") {
  SplitRanges r = split_documents(100, "98,2,0");
  CHECK(r.end[0] == 98);
  CHECK(r.begin[1] == 98);
  CHECK(r.end[1] == 100);
  CHECK(r.begin[2] == 100);
  SplitRanges m = split_documents(1000, "969,30,1");
  CHECK(m.end[0] == 969);
  CHECK(m.end[1] == 999);
  CHECK(m.end[2] == 1000);
  SplitRanges h = split_documents(5, "1,1");  // 2.5 rounds half to even
  CHECK(h.end[0] == 2);
}

TEST_CASE("a blended sampler: each sample from its dataset, tokens and targets shifted") {
  FakeDs a = make(10, 0), b = make(7, 50000);
  loom_dataset_api api = fake_api();
  auto sa = DocumentSource::read(&api, reinterpret_cast<loom_dataset*>(&a), "a");
  auto sb = DocumentSource::read(&api, reinterpret_cast<loom_dataset*>(&b), "b");
  const std::vector<double> weights = {1, 3};
  const int64_t size = 40;
  std::vector<int64_t> sizes = blend_dataset_sizes(normalise(weights), size);
  CHECK(sizes == std::vector<int64_t>{11, 31});  // ceil(ceil(40 w) * 1.005)
  std::vector<std::shared_ptr<GptDataset>> parts;
  for (size_t k = 0; k < 2; ++k) {
    GptIndexSpec spec;
    spec.doc_begin = 0;
    spec.doc_end = k == 0 ? 10 : 7;
    spec.seq_len = 6;
    spec.seed = 1234;
    spec.num_samples = sizes[k];
    parts.push_back(std::make_shared<GptDataset>(k == 0 ? sa : sb, spec, false));
  }
  Sampler s(parts, weights, size);
  CHECK(s.size() == size);
  CHECK(s.num_datasets() == 2);
  int from_b = 0;
  std::set<std::pair<size_t, int64_t>> seen;
  std::vector<int32_t> tok(6), tgt(6), text(7);
  for (int64_t i = 0; i < size; ++i) {
    Sampler::Origin o = s.origin(i);
    CHECK(seen.insert({o.dataset, o.index}).second);  // no sample twice
    from_b += o.dataset == 1;
    s.sample(i, tok.data(), tgt.data());
    parts[o.dataset]->text(o.index, text.data());
    CHECK(std::equal(tok.begin(), tok.end(), text.begin()));
    CHECK(std::equal(tgt.begin(), tgt.end(), text.begin() + 1));
    CHECK((tok[0] >= 50000) == (o.dataset == 1));
  }
  CHECK(from_b == 30);
  CHECK_THROWS_AS(s.origin(size), RunError);
}
