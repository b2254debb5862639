// tokenizer/sentencepiece: ids and decoded text against python3-sentencepiece's output for
// the same model (data/make_sentencepiece_data.py), BOS/EOS options, EOD, errors.
#include <filesystem>

#include "tok_util.hpp"

using tokmore::contains;
using tokmore::Tok;

namespace {

const std::string kModel = tokmore::data("sp-shakespeare-bpe.model");

std::map<std::string, std::string> cfg(const std::string& model, bool bos = false,
                                       bool eos = false) {
  return {{"model_file", model},
          {"add_bos", bos ? "true" : "false"},
          {"add_eos", eos ? "true" : "false"}};
}

}  // namespace

TEST_CASE("tokenizer/sentencepiece: descriptor, vocabulary and EOD = </s>") {
  auto* d = loomtest::load_descriptor("tokenizer", "sentencepiece");
  CHECK(d->kind == LOOM_KIND_TOKENIZER);
  CHECK(std::string(d->name) == "sentencepiece");
  const auto ref = tokmore::read_json(tokmore::data("sp-ref.json"));
  Tok t("sentencepiece", cfg(kModel));
  REQUIRE_MESSAGE(t.ok(), t.created().message);
  CHECK(t.vocab_size() == ref["vocab_size"].get<int64_t>());
  CHECK(t.eod() == 2);
}

TEST_CASE("tokenizer/sentencepiece: ids and decoded text match python3-sentencepiece") {
  const auto ref = tokmore::read_json(tokmore::data("sp-ref.json"));
  Tok t("sentencepiece", cfg(kModel));
  for (const auto& c : ref["cases"]) {
    const std::string text = c["text"].get<std::string>();
    CAPTURE(text);
    const std::vector<int32_t> ids = t.encode(text);
    CHECK(ids == c["ids"].get<std::vector<int32_t>>());
    CHECK(t.decode(ids) == c["decoded"].get<std::string>());
    CHECK(t.decode(ids) == text);  // identity normalisation + byte fallback: lossless
  }
}

TEST_CASE("tokenizer/sentencepiece: add_bos / add_eos wrap each text; decode drops them") {
  const auto ref = tokmore::read_json(tokmore::data("sp-ref.json"));
  const auto& first = ref["cases"][0];
  std::vector<int32_t> want = first["ids"].get<std::vector<int32_t>>();
  Tok bos("sentencepiece", cfg(kModel, true, false));
  std::vector<int32_t> with_bos = want;
  with_bos.insert(with_bos.begin(), 1);
  CHECK(bos.encode(first["text"].get<std::string>()) == with_bos);
  Tok both("sentencepiece", cfg(kModel, true, true));
  std::vector<int32_t> with_both = with_bos;
  with_both.push_back(2);
  CHECK(both.encode(first["text"].get<std::string>()) == with_both);
  CHECK(both.decode(with_both) == first["text"].get<std::string>());
  CHECK(both.encode("") == std::vector<int32_t>{1, 2});
}

TEST_CASE("tokenizer/sentencepiece: decode refuses ids outside the vocabulary") {
  Tok t("sentencepiece", cfg(kModel));
  const auto o = t.decode_error({5, 700});
  CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(contains(o.message, "id 700 at position 1"));
}

TEST_CASE("tokenizer/sentencepiece: missing and malformed model files") {
  Tok missing("sentencepiece", cfg("/nonexistent/tokenizer.model"));
  CHECK(missing.created().code == LOOM_ERR_IO);
  CHECK(contains(missing.created().message, "model_file"));
  CHECK(contains(missing.created().message, "/nonexistent/tokenizer.model"));
  const std::string bad =
      (std::filesystem::temp_directory_path() / "loom-sp-not-a-model.model").string();
  tokmore::write_file(bad, "this is not a protobuf\n");
  Tok malformed("sentencepiece", cfg(bad));
  CHECK(malformed.created().code == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(contains(malformed.created().message, "is not a SentencePiece model"));
  std::filesystem::remove(bad);
}
