// The index cache beside the data: written as real .npy files, read back on the second
// build, rebuilt when corrupt, keyed by everything the arrays depend on; and sample text.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "data/gpt_dataset.hpp"
#include "data/sampler.hpp"
#include "fake_dataset.hpp"
#include "test_files.hpp"

namespace fs = std::filesystem;
using namespace loom::engine;

namespace {

using loomtest::fake_api;
using loomtest::FakeDs;

// Document d holds tokens 1000*d + t, t < its length; cache_prefix is `prefix`.
FakeDs make_ds(const std::string& prefix) {
  FakeDs ds;
  ds.prefix = prefix;
  const int lengths[] = {5, 13, 1, 9, 0, 22, 7, 3, 16, 11, 2, 8, 30, 4, 6, 12, 10};
  for (int d = 0; d < 17; ++d) {
    std::vector<int32_t> v;
    for (int t = 0; t < lengths[d]; ++t) v.push_back(1000 * d + t);
    ds.docs.push_back(v);
  }
  return ds;
}

using loomtest::TempDir;

GptIndexSpec spec_of(uint32_t seed, int64_t samples) {
  GptIndexSpec s;
  s.doc_begin = 0;
  s.doc_end = 17;
  s.seq_len = 8;
  s.seed = seed;
  s.num_samples = samples;
  return s;
}

std::vector<fs::path> npy_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".npy") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("cache: built once, read back, rebuilt when corrupt, keyed by the seed") {
  TempDir dir("sampler");
  FakeDs fake = make_ds((dir.path() / "corpus").string());
  loom_dataset_api api = fake_api();
  auto src = DocumentSource::read(&api, reinterpret_cast<loom_dataset*>(&fake), "fake");
  const GptIndexSpec spec = spec_of(1234, 25);
  const std::string stem = src->cache_prefix + "." + gpt_index_hash(*src, spec);

  IndexOrigin origin;
  GptIndices a = load_or_build_gpt_indices(*src, spec, true, &origin);
  CHECK(origin == IndexOrigin::kBuilt);
  for (const char* kind : {"doc", "sample", "shuffle"})
    REQUIRE(fs::exists(stem + "." + kind + "_idx.npy"));
  CHECK(npy_files(dir.path()).size() == 3);  // no temporaries left behind
  {
    std::ifstream f(stem + ".sample_idx.npy", std::ios::binary);
    std::string head(128, '\0');
    f.read(head.data(), 128);
    CHECK(head.rfind("\x93NUMPY\x01\x00", 0) == 0);
    CHECK(head.find("'descr': '<i8', 'fortran_order': False, 'shape': (" +
                    std::to_string(a.shuffle_idx.size() + 1) + ", 2), }") != std::string::npos);
  }
  const auto t0 = fs::last_write_time(stem + ".shuffle_idx.npy");

  GptIndices b = load_or_build_gpt_indices(*src, spec, true, &origin);
  CHECK(origin == IndexOrigin::kLoaded);
  CHECK(b.doc_idx == a.doc_idx);
  CHECK(b.sample_idx == a.sample_idx);
  CHECK(b.shuffle_idx == a.shuffle_idx);
  CHECK(b.num_epochs == a.num_epochs);
  CHECK(fs::last_write_time(stem + ".shuffle_idx.npy") == t0);

  // Truncated: rebuilt and rewritten.
  fs::resize_file(stem + ".shuffle_idx.npy", fs::file_size(stem + ".shuffle_idx.npy") - 8);
  GptIndices c = load_or_build_gpt_indices(*src, spec, true, &origin);
  CHECK(origin == IndexOrigin::kBuilt);
  CHECK(c.shuffle_idx == a.shuffle_idx);
  load_or_build_gpt_indices(*src, spec, true, &origin);
  CHECK(origin == IndexOrigin::kLoaded);

  // Same size, a value out of range (a duplicate in the shuffle): rebuilt.
  {
    std::fstream f(stem + ".shuffle_idx.npy", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-8, std::ios::end);
    const int64_t bad = a.shuffle_idx[0];
    f.write(reinterpret_cast<const char*>(&bad), 8);
  }
  load_or_build_gpt_indices(*src, spec, true, &origin);
  CHECK(origin == IndexOrigin::kBuilt);

  // Another seed, another key; other samples wanted or seq_len, another key.
  const GptIndexSpec other = spec_of(1235, 25);
  CHECK(gpt_index_hash(*src, other) != gpt_index_hash(*src, spec));
  CHECK(gpt_index_hash(*src, spec_of(1234, 26)) != gpt_index_hash(*src, spec));
  GptIndexSpec longer = spec;
  longer.seq_len = 9;
  CHECK(gpt_index_hash(*src, longer) != gpt_index_hash(*src, spec));
  load_or_build_gpt_indices(*src, other, true, &origin);
  CHECK(origin == IndexOrigin::kBuilt);
  CHECK(npy_files(dir.path()).size() == 6);

  // A document changing length changes the dataset's identity.
  fake.docs[3].push_back(7);
  auto src2 = DocumentSource::read(&api, reinterpret_cast<loom_dataset*>(&fake), "fake");
  CHECK(gpt_index_hash(*src2, spec) != gpt_index_hash(*src, spec));

  // numpy reads the files (when this machine has it).
  if (fs::exists("/usr/bin/python3") &&
      std::system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") == 0) {
    const std::string cmd = "/usr/bin/python3 -c \"import numpy as np; s = '" + stem +
                            "'; d = np.load(s + '.doc_idx.npy'); x = np.load(s + "
                            "'.sample_idx.npy'); y = np.load(s + '.shuffle_idx.npy'); "
                            "assert d.dtype == np.int32 and x.shape == (len(y) + 1, 2); "
                            "assert sorted(y.tolist()) == list(range(len(y))); "
                            "assert d[:4].tolist() == [" +
                            std::to_string(a.doc_idx[0]) + ", " + std::to_string(a.doc_idx[1]) +
                            ", " + std::to_string(a.doc_idx[2]) + ", " +
                            std::to_string(a.doc_idx[3]) + "]\"";
    CHECK(std::system(cmd.c_str()) == 0);
  } else {
    MESSAGE("numpy not available: skipping the np.load check");
  }
}

TEST_CASE("cache: off, or no cache prefix, builds in memory and writes nothing") {
  TempDir dir("sampler");
  FakeDs fake = make_ds((dir.path() / "corpus").string());
  loom_dataset_api api = fake_api();
  auto src = DocumentSource::read(&api, reinterpret_cast<loom_dataset*>(&fake), "fake");
  IndexOrigin origin;
  load_or_build_gpt_indices(*src, spec_of(1, 10), false, &origin);
  CHECK(origin == IndexOrigin::kMemory);
  FakeDs nowhere = make_ds("");
  auto src2 = DocumentSource::read(&api, reinterpret_cast<loom_dataset*>(&nowhere), "fake");
  CHECK(src2->cache_prefix.empty());
  load_or_build_gpt_indices(*src2, spec_of(1, 10), true, &origin);
  CHECK(origin == IndexOrigin::kMemory);
  CHECK(npy_files(dir.path()).empty());
}

TEST_CASE("samples: L+1 tokens across documents from the indices; tokens and targets shift") {
  FakeDs fake = make_ds("");
  loom_dataset_api api = fake_api();
  auto src = DocumentSource::read(&api, reinterpret_cast<loom_dataset*>(&fake), "fake");
  const GptIndexSpec spec = spec_of(1234, 25);
  auto ds = std::make_shared<GptDataset>(src, spec, false);
  const GptIndices& x = ds->indices();
  // The whole token stream in document-index order, with each position's start.
  std::vector<int32_t> stream;
  std::vector<int64_t> start;
  for (int32_t d : x.doc_idx) {
    start.push_back((int64_t)stream.size());
    stream.insert(stream.end(), fake.docs[(size_t)d].begin(), fake.docs[(size_t)d].end());
  }
  Sampler sampler(ds);
  CHECK(sampler.size() == ds->size());
  std::vector<int32_t> text(9), tok(8), tgt(8);
  for (int64_t i = 0; i < ds->size(); ++i) {
    const int64_t j = x.shuffle_idx[(size_t)i];
    const int64_t at =
        start[(size_t)x.sample_idx[(size_t)(2 * j)]] + x.sample_idx[(size_t)(2 * j + 1)];
    CHECK(at == j * 8);  // sample j starts at stream token j * L
    ds->text(i, text.data());
    REQUIRE(std::equal(text.begin(), text.end(), stream.begin() + at));
    sampler.sample(i, tok.data(), tgt.data());
    CHECK(std::equal(tok.begin(), tok.end(), text.begin()));
    CHECK(std::equal(tgt.begin(), tgt.end(), text.begin() + 1));
  }
}
