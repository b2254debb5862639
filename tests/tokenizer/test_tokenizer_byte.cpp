// tokenizer/byte: lossless byte round-trips, vocabulary, EOD, and errors on bad ids.
#include <string>
#include <vector>

#include "plugin_test_util.hpp"

namespace {

struct Tok {
  loomtest::TestHost host;
  loom_tokenizer_ref ref;
  explicit Tok(const std::map<std::string, std::string>& values = {})
      : ref(host.load_tokenizer("byte", values)) {}

  std::vector<int32_t> encode(const std::string& s) {
    const int32_t* ids = nullptr;
    size_t n = 0;
    host.check(ref.api->encode(ref.self, s.data(), s.size(), &ids, &n));
    REQUIRE(ids != nullptr);
    return std::vector<int32_t>(ids, ids + n);
  }
  std::string decode(const std::vector<int32_t>& ids) {
    const char* text = nullptr;
    size_t len = 0;
    host.check(ref.api->decode(ref.self, ids.data(), ids.size(), &text, &len));
    REQUIRE(text != nullptr);
    return std::string(text, len);
  }
  ptest::Outcome decode_error(const std::vector<int32_t>& ids) {
    const char* text = nullptr;
    size_t len = 0;
    return ptest::outcome(ref.api->decode(ref.self, ids.data(), ids.size(), &text, &len));
  }
};

}  // namespace

TEST_CASE("tokenizer/byte: descriptor and vocabulary") {
  auto* d = loomtest::load_descriptor("tokenizer", "byte");
  CHECK(d->kind == LOOM_KIND_TOKENIZER);
  CHECK(std::string(d->name) == "byte");
  CHECK(d->abi_major == LOOM_ABI_MAJOR);
  Tok t;
  CHECK(t.ref.api->vocab_size(t.ref.self) == 257);
  CHECK(t.ref.api->eod_id(t.ref.self) == 256);
}

TEST_CASE("tokenizer/byte: every byte value round-trips, in order") {
  Tok t;
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::vector<int32_t> ids = t.encode(all);
  REQUIRE(ids.size() == 256);
  for (int b = 0; b < 256; ++b) CHECK(ids[b] == b);
  CHECK(t.decode(ids) == all);
}

TEST_CASE("tokenizer/byte: invalid UTF-8, embedded NULs and multi-byte text round-trip") {
  Tok t;
  const std::string bad(
      "\xff\xfe\xc3\x28\xa0\xa1\xe2\x28\xa1\x00\x80"
      "ok\x00",
      14);
  CHECK(t.encode(bad).size() == bad.size());
  CHECK(t.decode(t.encode(bad)) == bad);
  const std::string utf8 = "h\xc3\xa9llo \xe2\x9c\x93 \xf0\x9f\x98\x80";  // héllo ✓ 😀
  std::vector<int32_t> ids = t.encode(utf8);
  CHECK(ids.size() == utf8.size());
  CHECK(ids[1] == 0xc3);
  CHECK(ids[2] == 0xa9);
  CHECK(t.decode(ids) == utf8);
}

TEST_CASE("tokenizer/byte: empty input") {
  Tok t;
  CHECK(t.encode("").empty());
  CHECK(t.decode({}).empty());
  const int32_t* ids = nullptr;
  size_t n = 99;
  t.host.check(t.ref.api->encode(t.ref.self, nullptr, 0, &ids, &n));
  CHECK(n == 0);
  CHECK_FALSE(ptest::outcome(t.ref.api->encode(t.ref.self, nullptr, 3, &ids, &n)).ok());
}

TEST_CASE("tokenizer/byte: EOD decodes to nothing by default, or to eod_text") {
  Tok plain;
  CHECK(plain.decode({'a', 256, 'b'}) == "ab");
  Tok marked(std::map<std::string, std::string>{{"eod_text", "<|endoftext|>"}});
  CHECK(marked.decode({'a', 256, 'b', 256}) == "a<|endoftext|>b<|endoftext|>");
  // EOD is never produced by encode, even for text that spells the marker.
  for (int32_t id : marked.encode("<|endoftext|>")) CHECK(id < 256);
}

TEST_CASE("tokenizer/byte: ids outside [0, 257) are errors naming the id") {
  Tok t;
  ptest::Outcome o = t.decode_error({'a', 'b', 257});
  CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(o.message.find("id 257") != std::string::npos);
  CHECK(o.message.find("position 2") != std::string::npos);
  o = t.decode_error({-1});
  CHECK(o.message.find("id -1") != std::string::npos);
  o = t.decode_error({70000});
  CHECK(o.message.find("id 70000") != std::string::npos);
}

TEST_CASE("tokenizer/byte: decode can take encode's result directly (separate buffers)") {
  Tok t;
  const std::string s = "stable";
  const int32_t* ids = nullptr;
  size_t n = 0;
  t.host.check(t.ref.api->encode(t.ref.self, s.data(), s.size(), &ids, &n));
  const char* text = nullptr;
  size_t len = 0;
  // decode uses a separate buffer, so the ids are still readable as its input
  t.host.check(t.ref.api->decode(t.ref.self, ids, n, &text, &len));
  CHECK(std::string(text, len) == s);
  CHECK(text[len] == '\0');
}
