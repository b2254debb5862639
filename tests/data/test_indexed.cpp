// The SDK's Megatron indexed-dataset helper (loom/cpp/megatron_indexed.hpp) and the
// dataset/indexed plugin: the format page's worked example byte for byte (written by hand
// here), the writer against an independent encoder of the layout, every validation
// refusal, and the plugin loaded through the ABI alone.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "loom/cpp/megatron_indexed.hpp"
#include "test_files.hpp"
#include "test_host.hpp"

namespace fs = std::filesystem;
namespace mg = loom::megatron;

namespace {

using namespace loomtest;  // TempDir, slurp, spit, q (tests/support/test_files.hpp)

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int v : b) s.push_back(static_cast<char>(v));
  return s;
}

// An independent encoder of the layout: little-endian by shifts, not memcpy.
void le(std::string& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
using Doc = std::vector<std::vector<int32_t>>;  // a document: its sequences
std::pair<std::string, std::string> encode_layout(const std::vector<Doc>& docs, int code,
                                                  int item) {
  std::string bin, idx = "MMIDIDX";
  idx.push_back('\0');
  idx.push_back('\0');
  std::vector<uint64_t> lens, ptrs, doc_idx{0};
  for (const Doc& d : docs) {
    for (const auto& seq : d) {
      ptrs.push_back(bin.size());
      lens.push_back(seq.size());
      for (int32_t id : seq) le(bin, static_cast<uint32_t>(id), item);
    }
    doc_idx.push_back(lens.size());
  }
  le(idx, 1, 8);
  le(idx, static_cast<uint64_t>(code), 1);
  le(idx, lens.size(), 8);
  le(idx, doc_idx.size(), 8);
  for (uint64_t v : lens) le(idx, v, 4);
  for (uint64_t v : ptrs) le(idx, v, 8);
  for (uint64_t v : doc_idx) le(idx, v, 8);
  return {bin, idx};
}

void write_docs(const std::string& prefix, mg::DType dtype, const std::vector<Doc>& docs) {
  mg::Writer w(prefix, dtype);
  for (const Doc& d : docs) {
    for (const auto& seq : d) w.add_sequence(seq);
    w.end_document();
  }
  w.finalize();
}

// The format page's worked example: two documents of 3 and 2 tokens (ids 1 2 3 / 4 5).
const std::string kExampleBin = bytes({1, 0, 2, 0, 3, 0, 4, 0, 5, 0});
const std::string kExampleIdx = bytes({
    'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0,  // magic
    1,   0,   0,   0,   0,   0,   0,   0,     // version 1
    8,                                        // dtype code 8 = uint16
    2,   0,   0,   0,   0,   0,   0,   0,     // N = 2 sequences
    3,   0,   0,   0,   0,   0,   0,   0,     // M = 3 = documents + 1
    3,   0,   0,   0,   2,   0,   0,   0,     // lengths [3, 2]
    0,   0,   0,   0,   0,   0,   0,   0,     // pointers [0,
    6,   0,   0,   0,   0,   0,   0,   0,     //           6]
    0,   0,   0,   0,   0,   0,   0,   0,     // document indices [0,
    1,   0,   0,   0,   0,   0,   0,   0,     //                   1,
    2,   0,   0,   0,   0,   0,   0,   0,     //                   2]
});

std::string error_of(const std::string& prefix) {
  try {
    mg::Reader r(prefix);
  } catch (const mg::FormatError& e) {
    return e.what();
  }
  return "";
}

// Both example files under `prefix`, with `mutate` applied to the .idx / .bin bytes.
void example_with(const std::string& prefix, void (*mutate_idx)(std::string&),
                  void (*mutate_bin)(std::string&) = nullptr) {
  std::string idx = kExampleIdx, bin = kExampleBin;
  if (mutate_idx) mutate_idx(idx);
  if (mutate_bin) mutate_bin(bin);
  spit(prefix + ".idx", idx);
  spit(prefix + ".bin", bin);
}

// dataset/indexed through the ABI alone.
struct Plugin {
  loomtest::TestHost host;
  const loom_dataset_api* api = nullptr;
  loom_config cfg;
  loom_dataset* self = nullptr;
  loom_status code = LOOM_OK;
  std::string message;
  explicit Plugin(const std::string& prefix) {
    const loom_plugin_descriptor* d = loomtest::load_descriptor("dataset", "indexed");
    api = static_cast<const loom_dataset_api*>(d->api);
    cfg = loomtest::TestHost::config(d, {{"prefix", prefix}});
    if (loom_error* e = api->create(host.host(), &cfg, &self)) {
      code = e->code;
      message = e->message;
      delete e;
    }
  }
  ~Plugin() { api->destroy(self); }
  std::vector<int32_t> doc(int64_t i) {
    const int32_t* ids = nullptr;
    size_t n = 0;
    loom_error* e = api->document(self, i, &ids, &n);
    REQUIRE_MESSAGE(e == nullptr, (e ? e->message : ""));
    return std::vector<int32_t>(ids, ids + n);
  }
};

}  // namespace

TEST_CASE("the worked example: the writer's bytes equal the format page's, written by hand") {
  CHECK(kExampleIdx.size() == 82);
  TempDir dir("indexed");
  const std::string p = dir / "example";
  write_docs(p, mg::DType::u16, {{{1, 2, 3}}, {{4, 5}}});
  CHECK(slurp(p + ".bin") == kExampleBin);
  CHECK(slurp(p + ".idx") == kExampleIdx);
  CHECK(!fs::exists(p + ".bin.tmp"));
  CHECK(!fs::exists(p + ".idx.tmp"));

  mg::Reader r(p);
  CHECK(r.dtype() == mg::DType::u16);
  CHECK(r.num_sequences() == 2);
  CHECK(r.num_documents() == 2);
  CHECK(r.length(0) == 3);
  CHECK(r.length(1) == 2);
  CHECK(r.pointer(1) == 6);
  CHECK(r.document_index(2) == 2);
  std::vector<int32_t> ids;
  r.read(1, ids);
  CHECK(ids == std::vector<int32_t>{4, 5});
}

TEST_CASE("the writer matches an independent encoding of the layout (u16, i32, empty docs)") {
  std::mt19937 rng(7);
  for (auto [dtype, code, item, hi] :
       {std::tuple{mg::DType::u16, 8, 2, 65535}, std::tuple{mg::DType::i32, 4, 4, 2000000000},
        std::tuple{mg::DType::u8, 1, 1, 255}}) {
    CAPTURE(code);
    std::vector<Doc> docs;
    for (int d = 0; d < 300; ++d) {
      Doc doc;
      const int nseq = static_cast<int>(rng() % 4);  // 0 = a document without sequences
      for (int s = 0; s < nseq; ++s) {
        std::vector<int32_t> seq(rng() % 40);  // empty sequences are allowed by the format
        for (int32_t& id : seq) id = static_cast<int32_t>(rng() % (static_cast<uint32_t>(hi) + 1));
        doc.push_back(seq);
      }
      docs.push_back(doc);
    }
    TempDir dir("indexed");
    const std::string p = dir / "rand";
    write_docs(p, dtype, docs);
    auto [bin, idx] = encode_layout(docs, code, item);
    CHECK(slurp(p + ".bin") == bin);
    CHECK(slurp(p + ".idx") == idx);

    mg::Reader r(p);
    int64_t seq = 0;
    std::vector<int32_t> ids;
    for (size_t d = 0; d < docs.size(); ++d) {
      CHECK(r.document_index(static_cast<int64_t>(d)) == seq);
      for (const auto& s : docs[d]) {
        r.read(seq++, ids);
        CHECK(ids == s);
      }
    }
    CHECK(r.num_sequences() == seq);
  }
}

TEST_CASE("dtype choice follows Megatron: uint16 below 65500 tokens, else int32") {
  CHECK(mg::dtype_for_vocab(257) == mg::DType::u16);
  CHECK(mg::dtype_for_vocab(50257) == mg::DType::u16);
  CHECK(mg::dtype_for_vocab(65499) == mg::DType::u16);
  CHECK(mg::dtype_for_vocab(65500) == mg::DType::i32);
  CHECK(mg::dtype_for_vocab(128256) == mg::DType::i32);
}

TEST_CASE("an empty dataset and a dataset of empty documents are valid") {
  TempDir dir("indexed");
  write_docs(dir / "none", mg::DType::u16, {});
  mg::Reader a(dir / "none");
  CHECK(a.num_sequences() == 0);
  CHECK(a.num_documents() == 0);
  CHECK(a.idx_bytes() == 34 + 8);
  write_docs(dir / "empty", mg::DType::u16, {{}, {}, {}});
  mg::Reader b(dir / "empty");
  CHECK(b.num_documents() == 3);
  CHECK(b.bin_bytes() == 0);
}

TEST_CASE("the writer refuses ids outside its dtype and leaves nothing behind unfinalized") {
  TempDir dir("indexed");
  const std::string p = dir / "w";
  {
    mg::Writer w(p, mg::DType::u16);
    std::vector<int32_t> ok{1, 2}, bad{3, 70000};
    w.add_sequence(ok);
    CHECK_THROWS_WITH_AS(w.add_sequence(bad), doctest::Contains("70000 does not fit uint16"),
                         mg::FormatError);
    w.end_document();
    CHECK(fs::exists(p + ".bin.tmp"));
    CHECK(!fs::exists(p + ".idx"));
  }  // destroyed without finalize
  CHECK(!fs::exists(p + ".bin.tmp"));
  CHECK(!fs::exists(p + ".bin"));
  CHECK(!fs::exists(p + ".idx"));

  // An unfinished rewrite keeps the old dataset; a finished one replaces it.
  write_docs(p, mg::DType::u16, {{{1, 2, 3}}, {{4, 5}}});
  {
    mg::Writer w(p, mg::DType::u16);
    w.add_sequence(std::vector<int32_t>{9, 9, 9, 9});
    w.end_document();
  }
  CHECK(slurp(p + ".idx") == kExampleIdx);
  CHECK(slurp(p + ".bin") == kExampleBin);
  write_docs(p, mg::DType::u16, {{{9}}});
  CHECK(mg::Reader(p).num_tokens() == 1);
}

TEST_CASE("the reader refuses damaged files, naming the file and the problem") {
  TempDir dir("indexed");
  const std::string p = dir / "bad";
  example_with(p, nullptr);
  CHECK(error_of(p).empty());

  example_with(p, nullptr, [](std::string& b) { b.resize(8); });
  CHECK(error_of(p) == p + ".bin: truncated: .bin has 8 bytes, the index needs 10");

  example_with(p, nullptr, [](std::string& b) { b += "xx"; });
  CHECK(error_of(p) == p + ".bin: size mismatch: .bin has 12 bytes, the index needs 10");

  example_with(p, [](std::string& i) { i.resize(74); });
  CHECK(error_of(p) == p + ".idx: truncated: .idx has 74 bytes, N=2 and M=3 need 82");

  example_with(p, [](std::string& i) { i.resize(20); });
  CHECK(error_of(p) == p + ".idx: truncated: 20 bytes, shorter than the 34-byte header");

  example_with(p, [](std::string& i) { i[0] = 'X'; });
  CHECK(doctest::String(error_of(p).c_str()) == doctest::Contains(".idx: bad magic"));

  example_with(p, [](std::string& i) { i[9] = 2; });
  CHECK(error_of(p) == p + ".idx: unsupported version 2 (expected 1)");

  example_with(p, [](std::string& i) { i[17] = 9; });
  CHECK(error_of(p) == p + ".idx: unknown dtype code 9 (expected 1-8)");

  example_with(p, [](std::string& i) { i[34 + 8 + 8] = 4; });  // pointer[1] = 4, not 6
  CHECK(error_of(p) ==
        p + ".idx: inconsistent pointers: sequence 1 starts at byte 4, the lengths before it "
            "put it at 6");

  example_with(p, [](std::string& i) { i[34 + 24 + 8] = 3; });  // doc idx [0, 3, 2]
  CHECK(error_of(p) == p + ".idx: document indices decrease at entry 2 (3 then 2)");

  example_with(p, [](std::string& i) { i[34 + 24 + 16] = 1; });  // doc idx [0, 1, 1]
  CHECK(error_of(p) == p + ".idx: the last document index is 1, not the sequence count 2");

  example_with(p, [](std::string& i) { i[34 + 24] = 1; });  // doc idx [1, 1, 2]
  CHECK(error_of(p) == p + ".idx: document indices start at 1, not 0");

  example_with(p, [](std::string& i) { i[26] = 4; });  // M = 4: the file is 8 bytes short
  CHECK(error_of(p) == p + ".idx: truncated: .idx has 82 bytes, N=2 and M=4 need 90");

  example_with(p, [](std::string& i) { i += "xyz"; });
  CHECK(error_of(p) == p + ".idx: size mismatch: .idx has 85 bytes, N=2 and M=3 need 82 (or 84 "
                           "with modes)");

  // Multimodal modes (one i8 per sequence) after the document indices are accepted.
  example_with(p, [](std::string& i) { i += std::string("\x01\x02", 2); });
  mg::Reader modes(p);
  CHECK(modes.has_modes());
  CHECK(modes.mode(1) == 2);

  fs::remove(p + ".bin");
  CHECK(doctest::String(error_of(p).c_str()) == doctest::Contains(".bin: cannot open"));
  fs::remove(p + ".idx");
  CHECK(doctest::String(error_of(p).c_str()) == doctest::Contains(".idx: cannot open"));
}

TEST_CASE("dataset/indexed: sequences are the documents, ids widened to int32") {
  TempDir dir("indexed");
  const std::string p = dir / "ds";
  // Megatron's GPT dataset samples sequences: 2 documents here, 3 sequences.
  write_docs(p, mg::DType::u16, {{{1, 2, 3}, {65535}}, {}, {{7, 8}}});
  Plugin ds(p);
  REQUIRE_MESSAGE(ds.code == LOOM_OK, ds.message);
  CHECK(ds.api->num_documents(ds.self) == 3);
  CHECK(ds.doc(0) == std::vector<int32_t>{1, 2, 3});
  CHECK(ds.doc(1) == std::vector<int32_t>{65535});
  CHECK(ds.doc(2) == std::vector<int32_t>{7, 8});
  CHECK(std::string(ds.api->cache_prefix(ds.self)) == p);
  const int32_t* ids = nullptr;
  size_t n = 0;
  loom_error* e = ds.api->document(ds.self, 3, &ids, &n);
  REQUIRE(e != nullptr);
  CHECK(std::string(e->message).find("out of range") != std::string::npos);
  delete e;

  // A path to the .idx file names the same dataset.
  Plugin by_file(p + ".idx");
  CHECK(by_file.code == LOOM_OK);

  write_docs(dir / "wide", mg::DType::i32, {{{100000, 2000000000}}});
  Plugin wide(dir / "wide");
  REQUIRE_MESSAGE(wide.code == LOOM_OK, wide.message);
  CHECK(wide.doc(0) == std::vector<int32_t>{100000, 2000000000});
}

TEST_CASE("dataset/indexed refuses damaged datasets with the reason (LOOM_ERR_IO)") {
  TempDir dir("indexed");
  const std::string p = dir / "bad";
  struct Case {
    const char* what;
    void (*idx)(std::string&);
    void (*bin)(std::string&);
    const char* reason;
  };
  const Case cases[] = {
      {"truncated .bin", nullptr, [](std::string& b) { b.resize(8); },
       "truncated: .bin has 8 bytes, the index needs 10"},
      {"truncated .idx", [](std::string& i) { i.resize(74); }, nullptr, "truncated: .idx has 74"},
      {"bad magic", [](std::string& i) { i[3] = 'X'; }, nullptr, "bad magic"},
      {"wrong version", [](std::string& i) { i[9] = 3; }, nullptr, "unsupported version 3"},
      {"inconsistent pointers", [](std::string& i) { i[34 + 8 + 8] = 4; }, nullptr,
       "inconsistent pointers"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    example_with(p, c.idx, c.bin);
    Plugin ds(p);
    CHECK(ds.code == LOOM_ERR_IO);
    CHECK_MESSAGE(ds.message.find(c.reason) != std::string::npos, ds.message);
    CHECK_MESSAGE(ds.message.find(p) != std::string::npos, ds.message);
  }
  Plugin missing(dir / "nothing");
  CHECK(missing.code == LOOM_ERR_IO);
  CHECK(missing.message.find("cannot open") != std::string::npos);
}
