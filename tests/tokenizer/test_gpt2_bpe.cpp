// tokenizer/gpt2-bpe: merge semantics on small hand-made models; ids against the reference
// ids MEGATRON_FORMATS.md lists and against an independent Python implementation
// (data/, made by make_gpt2_reference.py); lossless round trips of Tiny Shakespeare and of
// random bytes; how invalid UTF-8 is split; the chunk cache; errors for bad files.
#include <openssl/evp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer_test_util.hpp"

namespace {

using toktest::Outcome;
using toktest::Tokenizer;

const std::string kVocab = toktest::shared_path("gpt2/gpt2-vocab.json");
const std::string kMerges = toktest::shared_path("gpt2/gpt2-merges.txt");
const std::string kShakespeare = toktest::shared_path("tinyshakespeare/input.txt");

std::map<std::string, std::string> gpt2_config() {
  return {{"vocab_file", kVocab}, {"merge_file", kMerges}};
}
bool have_gpt2(const std::vector<std::string>& more = {}) {
  std::vector<std::string> files = {kVocab, kMerges};
  files.insert(files.end(), more.begin(), more.end());
  return toktest::have_files("tokenizer/gpt2-bpe (GPT-2 files)", files);
}

std::string sha256_hex(const std::string& data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  REQUIRE(EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr) == 1);
  std::string hex;
  char buf[3];
  for (unsigned i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof buf, "%02x", md[i]);
    hex += buf;
  }
  return hex;
}

// The UTF-8 of how GPT-2's files spell byte b (written here independently of the plugin):
// printable Latin-1 bytes as themselves, the 68 others as U+0100 + their order.
std::string spell_byte(unsigned b) {
  auto printable = [](unsigned x) {
    return (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
  };
  unsigned cp = b;
  if (!printable(b)) {
    cp = 256;
    for (unsigned x = 0; x < b; ++x) cp += printable(x) ? 0 : 1;
  }
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xc0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
  return s;
}
std::string spell(const std::string& bytes) {
  std::string s;
  for (unsigned char b : bytes) s += spell_byte(b);
  return s;
}

// A hand-made model: the 256 bytes (ids 0..255, in byte order), then each merge's result in
// rank order (ids 256, 257, ...), then "<|endoftext|>" when `eod`. Merges are "left right"
// over plain ASCII letters.
using Merges = std::vector<std::pair<std::string, std::string>>;

struct TinyModel {
  toktest::TempDir dir{"gpt2-tiny"};
  std::map<std::string, int32_t> ids;  // token bytes -> id
  std::string vocab_path = dir.file("vocab.json");
  std::string merges_path = dir.file("merges.txt");

  explicit TinyModel(const Merges& merges, bool eod = false) {
    nlohmann::json vocab = nlohmann::json::object();
    auto add = [&](const std::string& bytes) {
      if (ids.count(bytes)) return;
      const auto id = static_cast<int32_t>(ids.size());
      ids[bytes] = id;
      vocab[spell(bytes)] = id;
    };
    for (unsigned b = 0; b < 256; ++b) add(std::string(1, static_cast<char>(b)));
    std::string text = "#version: 0.2\n";
    for (const auto& [l, r] : merges) {
      add(l + r);
      text += spell(l) + " " + spell(r) + "\n";
    }
    if (eod) add("<|endoftext|>");
    toktest::write_file(vocab_path, vocab.dump());
    toktest::write_file(merges_path, text);
  }
  std::map<std::string, std::string> config() const {
    return {{"vocab_file", vocab_path}, {"merge_file", merges_path}};
  }
  std::vector<int32_t> tokens(const std::vector<std::string>& pieces) const {
    std::vector<int32_t> out;
    for (const std::string& p : pieces) out.push_back(ids.at(p));
    return out;
  }
};

std::vector<int32_t> read_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    int32_t id = 0;
    while (words >> id) ids.push_back(id);
  }
  return ids;
}

// The value after `key` on the header line that has it ("... sha256 <hex>").
std::string header_value(const std::string& text, const std::string& line_start,
                         const std::string& key) {
  const size_t at = text.find("# " + line_start);
  REQUIRE_MESSAGE(at != std::string::npos, "no header line '# " << line_start << "'");
  const size_t end = text.find('\n', at);
  const std::string line = text.substr(at, end - at);
  const size_t k = line.find(key);
  REQUIRE(k != std::string::npos);
  std::istringstream rest(line.substr(k + key.size()));
  std::string value;
  rest >> value;
  return value;
}

size_t first_mismatch(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

TEST_CASE("gpt2-bpe: descriptor; vocab_file and merge_file are required strings") {
  const loom_plugin_descriptor* d = loomtest::load_descriptor("tokenizer", "gpt2-bpe");
  CHECK(d->kind == LOOM_KIND_TOKENIZER);
  CHECK(std::string(d->name) == "gpt2-bpe");
  REQUIRE(d->num_params == 2);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(d->params[i].type == LOOM_PARAM_STRING);
    CHECK(d->params[i].default_value == nullptr);
  }
  CHECK(std::string(d->params[0].name) == "vocab_file");
  CHECK(std::string(d->params[1].name) == "merge_file");
}

TEST_CASE("gpt2-bpe: the lowest-ranked pair merges first, every occurrence, left to right") {
  SUBCASE("one merge, overlapping occurrences") {
    TinyModel m(Merges{{"a", "a"}});
    Tokenizer t("gpt2-bpe", m.config());
    REQUIRE_MESSAGE(t.created().ok(), t.created().message);
    CHECK(t.vocab_size() == 257);
    CHECK(t.eod_id() == -1);  // no <|endoftext|> in this vocabulary
    CHECK(t.encode("aaaa") == m.tokens({"aa", "aa"}));
    CHECK(t.encode("aaa") == m.tokens({"aa", "a"}));
    CHECK(t.encode("aaaaa") == m.tokens({"aa", "aa", "a"}));
  }
  SUBCASE("rank decides, not position") {
    TinyModel ab_first(Merges{{"a", "b"}, {"b", "c"}});
    Tokenizer t1("gpt2-bpe", ab_first.config());
    CHECK(t1.encode("abc") == ab_first.tokens({"ab", "c"}));
    TinyModel bc_first(Merges{{"b", "c"}, {"a", "b"}});
    Tokenizer t2("gpt2-bpe", bc_first.config());
    CHECK(t2.encode("abc") == bc_first.tokens({"a", "bc"}));
  }
  SUBCASE("merges build on merges") {
    TinyModel m(Merges{{"a", "b"}, {"ab", "c"}, {"abc", "abc"}}, /*eod=*/true);
    Tokenizer t("gpt2-bpe", m.config());
    CHECK(t.vocab_size() == 256 + 3 + 1);
    CHECK(t.eod_id() == 259);
    CHECK(t.encode("abcabc") == m.tokens({"abcabc"}));
    CHECK(t.encode("abcab") == m.tokens({"abc", "ab"}));
    CHECK(t.decode(t.encode("abcab")) == "abcab");
  }
  SUBCASE("a pair a merge creates waits until every occurrence of the current pair merged") {
    // rank 0 = (ab, a), rank 1 = (a, b). In "abab" both (a, b) merge in one pass before
    // (ab, a) could apply, as GPT-2's loop does: [ab, ab], not [aba, b].
    TinyModel m(Merges{{"ab", "a"}, {"a", "b"}});
    Tokenizer t("gpt2-bpe", m.config());
    CHECK(t.encode("abab") == m.tokens({"ab", "ab"}));
    CHECK(t.encode("aba") == m.tokens({"aba"}));
  }
  SUBCASE("chunks are merged separately") {
    TinyModel m(Merges{{"a", "b"}, {" ", "a"}});
    Tokenizer t("gpt2-bpe", m.config());
    // " ab" is one chunk (" ?\p{L}+"): rank 0 (a, b) first, then nothing joins " ".
    CHECK(t.encode("ab ab") == m.tokens({"ab", " ", "ab"}));
    CHECK(t.encode("a a") == m.tokens({"a", " a"}));
  }
}

TEST_CASE("gpt2-bpe: the reference ids of MEGATRON_FORMATS.md") {
  if (!have_gpt2()) return;
  Tokenizer t("gpt2-bpe", gpt2_config());
  REQUIRE_MESSAGE(t.created().ok(), t.created().message);
  CHECK(t.vocab_size() == 50257);
  CHECK(t.eod_id() == 50256);
  CHECK(t.encode("Hello world") == std::vector<int32_t>{15496, 995});
  CHECK(t.encode("First Citizen:\nBefore we proceed") ==
        std::vector<int32_t>{5962, 22307, 25, 198, 8421, 356, 5120});
}

TEST_CASE("gpt2-bpe: \"<|endoftext|>\" in text is not special; id 50256 decodes to it") {
  if (!have_gpt2()) return;
  Tokenizer t("gpt2-bpe", gpt2_config());
  const std::vector<int32_t> ids = t.encode("<|endoftext|>");
  CHECK(ids == std::vector<int32_t>{27, 91, 437, 1659, 5239, 91, 29});
  CHECK(t.decode({50256}) == "<|endoftext|>");
  CHECK(t.decode({15496, 50256, 995}) == "Hello<|endoftext|> world");
}

TEST_CASE("gpt2-bpe: the first 10,000 bytes of Tiny Shakespeare match the Python reference") {
  const std::string ref_path =
      std::string(LOOM_TOKENIZER_TEST_DATA) + "/tinyshakespeare_10000.gpt2.ids";
  if (!have_gpt2({kShakespeare})) return;
  const std::string ref = toktest::read_file(ref_path);
  const std::string whole = toktest::read_file(kShakespeare);
  REQUIRE_MESSAGE(sha256_hex(whole) == header_value(ref, "input.txt:", "sha256"),
                  kShakespeare << " is not the file the reference ids were made from");
  const std::vector<int32_t> want = read_ids(ref);
  REQUIRE(want.size() == 2805);
  Tokenizer t("gpt2-bpe", gpt2_config());
  const std::vector<int32_t> got = t.encode(std::string_view(whole).substr(0, 10000));
  const size_t i = first_mismatch(got, want);
  CHECK_MESSAGE(got == want, "first difference at id " << i << " of " << want.size() << " (got "
                                                       << got.size() << " ids)");
}

TEST_CASE("gpt2-bpe: probe texts (scripts, marks, whitespace kinds, long runs) match Python") {
  if (!have_gpt2()) return;
  const auto doc = nlohmann::json::parse(
      toktest::read_file(std::string(LOOM_TOKENIZER_TEST_DATA) + "/gpt2_cases.json"));
  Tokenizer t("gpt2-bpe", gpt2_config());
  REQUIRE(doc.at("cases").size() >= 20);
  for (const auto& c : doc.at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    const std::string text = c.at("text").get<std::string>();
    const std::vector<int32_t> want = c.at("ids").get<std::vector<int32_t>>();
    CAPTURE(name);
    const std::vector<int32_t> got = t.encode(text);
    CHECK_MESSAGE(got == want, name << ": first difference at id " << first_mismatch(got, want));
    CHECK(t.decode(got) == text);
  }
}

TEST_CASE("gpt2-bpe: the whole of Tiny Shakespeare matches the Python digest and round-trips") {
  if (!have_gpt2({kShakespeare})) return;
  const std::string ref =
      toktest::read_file(std::string(LOOM_TOKENIZER_TEST_DATA) + "/tinyshakespeare_10000.gpt2.ids");
  const std::string whole = toktest::read_file(kShakespeare);
  Tokenizer t("gpt2-bpe", gpt2_config());
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = t.encode(whole);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("Tiny Shakespeare: " << whole.size() << " bytes -> " << ids.size() << " ids in " << s
                               << " s (one call, cold cache)");
  // The reference keeps the whole file's ids as a count and the sha256 of their text.
  CHECK(std::to_string(ids.size()) == header_value(ref, "whole input.txt:", "input.txt:"));
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) text += (i ? " " : "") + std::to_string(ids[i]);
  CHECK(sha256_hex(text) == header_value(ref, "whole input.txt:", "sha256"));
  CHECK(t.decode(ids) == whole);
  CHECK(std::none_of(ids.begin(), ids.end(), [](int32_t id) { return id < 0 || id >= 50257; }));
}

TEST_CASE("gpt2-bpe: random bytes, invalid UTF-8 included, round-trip") {
  if (!have_gpt2()) return;
  Tokenizer t("gpt2-bpe", gpt2_config());
  std::mt19937 rng(42);
  // Fragments that make mixtures likelier to hit UTF-8 edge cases than uniform bytes.
  const std::vector<std::string> pieces = {"a",
                                           " ",
                                           "  ",
                                           "\n",
                                           "'s",
                                           "9",
                                           "\xc3\xa9",
                                           "\xe2\x82\xac",
                                           "\xf0\x9f\x98\x80",
                                           "\xc3",
                                           "\x80",
                                           "\xff",
                                           "\xed\xa0\x80",
                                           "\xe2\x82",
                                           "\t",
                                           "\xc2\xa0",
                                           "\x00",
                                           "Hello",
                                           "\xe3\x80\x80"};
  for (int round = 0; round < 400; ++round) {
    std::string s;
    const size_t len = rng() % 300;
    if (round % 2 == 0) {
      for (size_t i = 0; i < len; ++i) s.push_back(static_cast<char>(rng() & 0xff));
    } else {
      while (s.size() < len) s += pieces[rng() % pieces.size()];
    }
    CAPTURE(round);
    const std::vector<int32_t> ids = t.encode(s);
    REQUIRE(t.decode(ids) == s);
  }
}

TEST_CASE("gpt2-bpe: a run of invalid UTF-8 is a chunk; the text around it splits as if cut") {
  // The documented rule (pretokenizer.hpp): encode(A + bad + B) == encode(A) + encode(bad) +
  // encode(B) for valid A and B and a run `bad` of bytes that are not valid UTF-8.
  if (!have_gpt2()) return;
  Tokenizer t("gpt2-bpe", gpt2_config());
  const std::vector<std::string> before = {"Hello", "Hello  ", "it", "x'", "123", "", "  ", "\n"};
  const std::vector<std::string> bad = {"\xff",         "\xff\xfe", "\x80\x80", "\xc3",
                                        "\xed\xa0\x80", "\xe2\x82", "\xc0\xaf", "\xf8\x88"};
  const std::vector<std::string> after = {"World", " world", "'s", "  x", "42", "", " ", "!"};
  for (const std::string& a : before)
    for (const std::string& b : bad)
      for (const std::string& c : after) {
        std::vector<int32_t> want = t.encode(a);
        for (int32_t id : t.encode(b)) want.push_back(id);
        for (int32_t id : t.encode(c)) want.push_back(id);
        const std::string text = a + b + c;
        CAPTURE(text);
        CHECK(t.encode(text) == want);
      }
}

TEST_CASE("gpt2-bpe: long single chunks (letters, digits, spaces, punctuation, accents)") {
  // One chunk each (a run the regex does not split), so the cache cannot help: the merge
  // loop must be n log n, not n^2 (at this size n^2 would outlast the test's timeout).
  if (!have_gpt2()) return;
  Tokenizer t("gpt2-bpe", gpt2_config());
  const size_t n = size_t{256} << 10;
  for (const std::string unit : {"a", "7", " ", "-=", "\xc3\xa9"}) {
    std::string text;
    while (text.size() < n) text += unit;
    CAPTURE(unit);
    CHECK(t.decode(t.encode(text)) == text);
  }
}

TEST_CASE("gpt2-bpe: the bounded chunk cache does not change results") {
  if (!have_gpt2()) return;
  // 70,000 distinct words: more than the cache holds (65,536), so it empties and refills.
  std::string text;
  std::vector<std::string> words;
  for (int i = 0; i < 70000; ++i) {
    std::string w = " ";
    for (int v = i + 1; v > 0; v /= 26) w.push_back(static_cast<char>('a' + v % 26));
    words.push_back(w);
    text += w;
  }
  Tokenizer whole("gpt2-bpe", gpt2_config());
  Tokenizer by_word("gpt2-bpe", gpt2_config());
  const std::vector<int32_t> ids = whole.encode(text);
  std::vector<int32_t> joined;
  for (const std::string& w : words)
    for (int32_t id : by_word.encode(w)) joined.push_back(id);
  CHECK(ids == joined);
  CHECK(whole.encode(text) == ids);  // again, with the cache in another state
}

TEST_CASE("gpt2-bpe: unreadable files are LOOM_ERR_IO naming the key and the path") {
  toktest::TempDir dir("gpt2-errors");
  TinyModel good(Merges{{"a", "b"}});
  SUBCASE("missing vocab_file") {
    const std::string missing = dir.file("no-such-vocab.json");
    Tokenizer t("gpt2-bpe", {{"vocab_file", missing}, {"merge_file", good.merges_path}});
    CHECK(t.created().code == LOOM_ERR_IO);
    CHECK(t.created().message.find("vocab_file") != std::string::npos);
    CHECK(t.created().message.find(missing) != std::string::npos);
  }
  SUBCASE("missing merge_file") {
    const std::string missing = dir.file("no-such-merges.txt");
    Tokenizer t("gpt2-bpe", {{"vocab_file", good.vocab_path}, {"merge_file", missing}});
    CHECK(t.created().code == LOOM_ERR_IO);
    CHECK(t.created().message.find("merge_file") != std::string::npos);
    CHECK(t.created().message.find(missing) != std::string::npos);
  }
  SUBCASE("a folder, or an empty path") {
    Tokenizer folder("gpt2-bpe", {{"vocab_file", dir.path()}, {"merge_file", good.merges_path}});
    CHECK(folder.created().code == LOOM_ERR_IO);
    CHECK(folder.created().message.find("directory") != std::string::npos);
    Tokenizer empty("gpt2-bpe", {{"vocab_file", good.vocab_path}, {"merge_file", ""}});
    CHECK(empty.created().code == LOOM_ERR_IO);
    CHECK(empty.created().message.find("merge_file") != std::string::npos);
  }
}

TEST_CASE("gpt2-bpe: malformed files are errors naming the file and the line") {
  toktest::TempDir dir("gpt2-malformed");
  TinyModel good(Merges{{"a", "b"}});
  auto create = [&](const std::string& vocab, const std::string& merges) {
    const std::string v = dir.file("vocab.json"), m = dir.file("merges.txt");
    toktest::write_file(v, vocab);
    toktest::write_file(m, merges);
    Tokenizer t("gpt2-bpe", {{"vocab_file", v}, {"merge_file", m}});
    return t.created();
  };
  const std::string vocab = toktest::read_file(good.vocab_path);
  SUBCASE("a merges line with three tokens") {
    Outcome o = create(vocab, "#version: 0.2\na b\na b c\n");
    CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
    CHECK(o.message.find("line 3") != std::string::npos);
    CHECK(o.message.find("merges.txt") != std::string::npos);
  }
  SUBCASE("a merges line with one token") {
    Outcome o = create(vocab, "a b\nab\n");
    CHECK(o.message.find("line 2") != std::string::npos);
  }
  SUBCASE("a long bad line is shortened in the message (say, vocab.json given as merges)") {
    Outcome o = create(vocab, vocab);
    CHECK(o.message.find("line 1") != std::string::npos);
    CHECK(o.message.size() < 400);
  }
  SUBCASE("a merge of tokens the vocabulary lacks") {
    Outcome o = create(vocab, "#version: 0.2\na b\nb c\n");  // "bc" is not in the vocabulary
    CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
    CHECK(o.message.find("line 3") != std::string::npos);
    CHECK(o.message.find("'bc'") != std::string::npos);
  }
  SUBCASE("CRLF line ends and no final newline are fine") {
    CHECK(create(vocab, "#version: 0.2\r\na b\r\n").ok());
    CHECK(create(vocab, "a b").ok());
  }
  SUBCASE("vocab.json that is not JSON") {
    Outcome o = create("{\"a\": 0,", "a b\n");
    CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
    CHECK(o.message.find("not valid JSON") != std::string::npos);
  }
  SUBCASE("vocab.json without every byte") {
    nlohmann::json v = nlohmann::json::parse(vocab);
    v[spell("zz")] = v[spell_byte('q')];  // keeps the ids dense
    v.erase(spell_byte('q'));
    Outcome o = create(v.dump(), "");
    CHECK(o.message.find("0x71") != std::string::npos);
  }
  SUBCASE("vocab.json ids that repeat") {
    nlohmann::json v = nlohmann::json::parse(vocab);
    v[spell("ab")] = 0;
    Outcome o = create(v.dump(), "");
    CHECK(o.message.find("used twice") != std::string::npos);
  }
  SUBCASE("a token spelt with a character outside the byte map") {
    nlohmann::json v = nlohmann::json::parse(vocab);
    v["a b"] = v[spell("ab")];  // a literal space: GPT-2 writes it as U+0120
    v.erase(spell("ab"));
    Outcome o = create(v.dump(), "");
    CHECK(o.message.find("U+0020") != std::string::npos);
  }
}
