// dataset/mock: deterministic per seed, different across seeds, ids inside the vocabulary
// (never the tokenizer's EOD), lengths around doc_length, and a learnable structure.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "plugin_test_util.hpp"

namespace {

std::vector<std::vector<int32_t>> all_docs(const ptest::Dataset& ds) {
  std::vector<std::vector<int32_t>> docs;
  for (int64_t i = 0; i < ds.size(); ++i) docs.push_back(ds.doc(i));
  return docs;
}

}  // namespace

TEST_CASE("dataset/mock: same seed, same documents; another seed, other documents") {
  loomtest::TestHost h;
  h.load_tokenizer("byte");
  ptest::Dataset a(h.host(), "mock",
                   {{"num_documents", "20"}, {"doc_length", "64"}, {"seed", "7"}});
  ptest::Dataset b(h.host(), "mock",
                   {{"num_documents", "20"}, {"doc_length", "64"}, {"seed", "7"}});
  ptest::Dataset c(h.host(), "mock",
                   {{"num_documents", "20"}, {"doc_length", "64"}, {"seed", "8"}});
  REQUIRE(a.created().ok());
  REQUIRE(b.created().ok());
  REQUIRE(c.created().ok());
  CHECK(a.size() == 20);
  const auto da = all_docs(a), db = all_docs(b), dc = all_docs(c);
  CHECK(da == db);
  CHECK(da != dc);
  int same = 0;
  for (size_t i = 0; i < da.size(); ++i) same += da[i] == dc[i];
  CHECK(same == 0);
  // order of reading does not matter
  CHECK(a.doc(13) == da[13]);
  CHECK(a.doc(2) == da[2]);
  // documents differ from each other
  CHECK(da[0] != da[1]);
}

TEST_CASE("dataset/mock: seed 0 derives the seed from the host (train.seed)") {
  loomtest::TestHost h;
  h.load_tokenizer("byte");
  ptest::Dataset a(h.host(), "mock", {{"num_documents", "5"}});
  ptest::Dataset b(h.host(), "mock", {{"num_documents", "5"}});
  REQUIRE(a.created().ok());
  CHECK(all_docs(a) == all_docs(b));
  // the host's "mock-data" stream, passed explicitly, gives the same documents
  const uint64_t s = h.host()->rng_seed(h.host()->ctx, "mock-data");
  ptest::Dataset c(h.host(), "mock",
                   {{"num_documents", "5"}, {"seed", std::to_string(static_cast<int64_t>(s))}});
  REQUIRE(c.created().ok());
  CHECK(all_docs(a) == all_docs(c));
}

TEST_CASE("dataset/mock: ids lie in the tokenizer's vocabulary minus EOD; EOD ends each") {
  loomtest::TestHost h;
  h.load_tokenizer("byte");
  ptest::Dataset ds(h.host(), "mock", {{"num_documents", "50"}, {"doc_length", "200"}});
  REQUIRE(ds.created().ok());
  std::vector<int> seen(257, 0);
  for (const auto& d : all_docs(ds)) {
    REQUIRE(d.size() >= 2);
    CHECK(d.back() == 256);  // 256 is the byte tokenizer's EOD, appended (append_eod)
    for (size_t t = 0; t + 1 < d.size(); ++t) {
      const int32_t id = d[t];
      REQUIRE(id >= 0);
      REQUIRE(id < 256);  // and never inside a document
      seen[id] = 1;
    }
  }
  int distinct = 0;
  for (int v : seen) distinct += v;
  CHECK(distinct > 200);  // the noise reaches (nearly) every symbol
}

TEST_CASE("dataset/mock: append_eod = false ends documents without EOD") {
  loomtest::TestHost h;
  h.load_tokenizer("byte");
  ptest::Dataset a(h.host(), "mock", {{"num_documents", "10"}, {"seed", "3"}});
  ptest::Dataset b(h.host(), "mock",
                   {{"num_documents", "10"}, {"seed", "3"}, {"append_eod", "false"}});
  REQUIRE(a.created().ok());
  REQUIRE(b.created().ok());
  for (int64_t i = 0; i < 10; ++i) {
    std::vector<int32_t> with = a.doc(i), without = b.doc(i);
    CHECK(without.back() != 256);
    without.push_back(256);
    CHECK(with == without);
  }
}

TEST_CASE("dataset/mock: an explicit vocab_size needs no tokenizer") {
  loomtest::TestHost h;  // no tokenizer
  ptest::Dataset ds(h.host(), "mock", {{"num_documents", "30"}, {"vocab_size", "50"}});
  REQUIRE_MESSAGE(ds.created().ok(), ds.created().message);
  for (const auto& d : all_docs(ds))
    for (int32_t id : d) REQUIRE((id >= 0 && id < 50));
  ptest::Dataset none(h.host(), "mock", {{"num_documents", "3"}});
  CHECK_FALSE(none.created().ok());
  CHECK(none.created().message.find("vocab_size") != std::string::npos);
}

TEST_CASE("dataset/mock: lengths vary around doc_length") {
  loomtest::TestHost h;
  h.load_tokenizer("byte");
  ptest::Dataset ds(h.host(), "mock", {{"num_documents", "400"}, {"doc_length", "100"}});
  REQUIRE(ds.created().ok());
  double sum = 0;
  size_t lo = 1000, hi = 0;
  for (const auto& d : all_docs(ds)) {
    sum += static_cast<double>(d.size());
    lo = std::min(lo, d.size());
    hi = std::max(hi, d.size());
  }
  const double mean = sum / 400.0;
  CHECK(mean > 90);
  CHECK(mean < 110);
  CHECK(lo >= 51);  // [L/2, 3L/2] tokens and the EOD
  CHECK(hi <= 151);
  CHECK(hi - lo > 50);
  CHECK(ds.doc_error(400).message.find("document 400") != std::string::npos);
  CHECK_FALSE(ds.doc_error(-1).ok());
}

TEST_CASE("dataset/mock: next-token structure is learnable (low conditional entropy)") {
  loomtest::TestHost h;
  h.load_tokenizer("byte");
  ptest::Dataset ds(h.host(), "mock", {{"num_documents", "400"}, {"doc_length", "512"}});
  REQUIRE(ds.created().ok());
  // Empirical H(next | current) in nats from bigram counts, vs ln(256) = 5.55 for noise.
  std::map<int32_t, std::map<int32_t, double>> counts;
  double total = 0;
  for (const auto& d : all_docs(ds))
    for (size_t t = 1; t < d.size(); ++t) {
      counts[d[t - 1]][d[t]] += 1;
      total += 1;
    }
  double h_cond = 0;
  for (const auto& [prev, next] : counts) {
    double n = 0;
    for (const auto& kv : next) n += kv.second;
    for (const auto& kv : next) h_cond -= kv.second / total * std::log(kv.second / n);
  }
  MESSAGE("conditional entropy: " << h_cond << " nats");
  CHECK(h_cond < 2.5);
  CHECK(h_cond > 1.0);
}
