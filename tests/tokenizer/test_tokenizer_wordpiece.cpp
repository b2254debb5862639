// tokenizer/wordpiece: ids against a reference computed by an independent Python
// re-implementation (data/make_wordpiece_data.py, Python's own str.lower/split and
// unicodedata); Megatron's [BOS]/[EOS] appending; decode; errors.
#include <filesystem>

#include "tok_util.hpp"

using tokmore::contains;
using tokmore::Tok;

namespace {

const std::string kVocab = tokmore::data("wordpiece-vocab.txt");

std::map<std::string, std::string> cfg(const std::string& vocab, bool lower = true) {
  return {{"vocab_file", vocab}, {"lower_case", lower ? "true" : "false"}};
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("loom-wp-" + name)).string();
}

}  // namespace

TEST_CASE("tokenizer/wordpiece: descriptor, vocabulary size and Megatron's appended [BOS]/[EOS]") {
  auto* d = loomtest::load_descriptor("tokenizer", "wordpiece");
  CHECK(d->kind == LOOM_KIND_TOKENIZER);
  CHECK(std::string(d->name) == "wordpiece");
  const auto ref = tokmore::read_json(tokmore::data("wordpiece-ref.json"));
  const int64_t lines = ref["vocab_size_in_file"].get<int64_t>();
  Tok t("wordpiece", cfg(kVocab));
  REQUIRE_MESSAGE(t.ok(), t.created().message);
  CHECK(t.vocab_size() == lines + 2);  // [BOS] = lines, [EOS] = lines + 1
  CHECK(t.eod() == lines + 1);
  CHECK(t.decode({static_cast<int32_t>(lines), static_cast<int32_t>(lines + 1)}) == "[BOS] [EOS]");
}

TEST_CASE("tokenizer/wordpiece: lower-case ids match the reference") {
  const auto ref = tokmore::read_json(tokmore::data("wordpiece-ref.json"));
  Tok t("wordpiece", cfg(kVocab, true));
  for (const auto& c : ref["cases"]) {
    const std::string text = c["text"].get<std::string>();
    CAPTURE(text);
    CHECK(t.encode(text) == c["lower"].get<std::vector<int32_t>>());
  }
}

TEST_CASE("tokenizer/wordpiece: cased ids match the reference") {
  const auto ref = tokmore::read_json(tokmore::data("wordpiece-ref.json"));
  Tok t("wordpiece", cfg(kVocab, false));
  for (const auto& c : ref["cases"]) {
    const std::string text = c["text"].get<std::string>();
    CAPTURE(text);
    CHECK(t.encode(text) == c["cased"].get<std::vector<int32_t>>());
  }
}

TEST_CASE("tokenizer/wordpiece: a hand-checked example, and decode's ## merging") {
  const std::string path = temp_path("small.txt");
  // CRLF line ends and surrounding spaces are stripped like Python's readline().strip().
  tokmore::write_file(path,
                      "[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\n[MASK]\r\n  un  \r\n##aff\r\n##able\r\n"
                      "hello\r\n,\r\n!\r\n[EOS]\r\n[BOS]\r\n");
  Tok t("wordpiece", cfg(path));
  REQUIRE_MESSAGE(t.ok(), t.created().message);
  CHECK(t.vocab_size() == 13);  // both present: nothing appended
  CHECK(t.eod() == 11);
  CHECK(t.encode("UnAffable, HELLO!") == std::vector<int32_t>{5, 6, 7, 9, 8, 10});
  CHECK(t.encode("unaffablex") == std::vector<int32_t>{1});  // no piece for "x": whole word
  CHECK(t.decode({5, 6, 7, 9, 8, 10}) == "unaffable , hello !");
  CHECK(t.decode({}).empty());
  std::filesystem::remove(path);
}

// Megatron's --vocab-extra-ids: <extra_id_i> appended after [BOS]/[EOS], in order, each only
// when the file lacks it; found by token_to_id (ABI 2.3), as a T5 dataset finds its sentinels.
TEST_CASE("tokenizer/wordpiece: vocab_extra_ids appends T5's sentinels") {
  const std::string path = temp_path("extra.txt");
  tokmore::write_file(path, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n<extra_id_1>\n");
  const std::map<std::string, std::string> c = {
      {"vocab_file", path}, {"lower_case", "true"}, {"vocab_extra_ids", "3"}};
  Tok t("wordpiece", c);
  REQUIRE_MESSAGE(t.ok(), t.created().message);
  CHECK(t.vocab_size() == 7 + 2 + 2);  // [BOS] 7, [EOS] 8, <extra_id_0> 9, <extra_id_2> 10
  auto id = [&](const std::string& s) {
    return t.api()->token_to_id(t.self(), s.data(), s.size());
  };
  CHECK(id("[BOS]") == 7);
  CHECK(id("[EOS]") == 8);
  CHECK(id("<extra_id_0>") == 9);
  CHECK(id("<extra_id_1>") == 6);  // already in the file
  CHECK(id("<extra_id_2>") == 10);
  CHECK(id("<extra_id_3>") == -1);
  CHECK(t.eod() == 8);
  std::filesystem::remove(path);
}

TEST_CASE("tokenizer/wordpiece: decode refuses ids outside the vocabulary") {
  Tok t("wordpiece", cfg(kVocab));
  const auto o = t.decode_error({5, static_cast<int32_t>(t.vocab_size())});
  CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(contains(o.message, "position 1"));
  CHECK(t.decode_error({-3}).code == LOOM_ERR_INVALID_ARGUMENT);
}

TEST_CASE("tokenizer/wordpiece: a missing vocab_file is an I/O error naming key and path") {
  Tok t("wordpiece", cfg("/nonexistent/vocab.txt"));
  CHECK(t.created().code == LOOM_ERR_IO);
  CHECK(contains(t.created().message, "vocab_file"));
  CHECK(contains(t.created().message, "/nonexistent/vocab.txt"));
}

TEST_CASE("tokenizer/wordpiece: vocabularies without BERT's specials or with repeats are refused") {
  const std::string path = temp_path("bad.txt");
  tokmore::write_file(path, "[PAD]\n[UNK]\n[CLS]\nhello\n");
  Tok missing("wordpiece", cfg(path));
  CHECK(missing.created().code == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(contains(missing.created().message, "[SEP], [MASK]"));
  tokmore::write_file(path, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nhello\n");
  Tok repeated("wordpiece", cfg(path));
  CHECK(repeated.created().code == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(contains(repeated.created().message, "line 7 repeats the token \"hello\" of line 6"));
  std::filesystem::remove(path);
}

TEST_CASE("tokenizer/wordpiece: ill-formed UTF-8 is refused, naming the byte") {
  Tok t("wordpiece", cfg(kVocab));
  auto o = t.encode_error("ok \xc3(");
  CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(contains(o.message, "not valid UTF-8 (byte 3)"));
  CHECK(t.encode_error("s \xed\xa0\x80").code == LOOM_ERR_INVALID_ARGUMENT);  // a surrogate
  CHECK(t.encode_error("\xc0\xaf").code == LOOM_ERR_INVALID_ARGUMENT);        // overlong
  CHECK(t.encode_error("caf\xc3\xa9").code == LOOM_OK);
}
