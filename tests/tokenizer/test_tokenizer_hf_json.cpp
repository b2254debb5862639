// tokenizer/hf-json: ids and decoded text against the Hugging Face `tokenizers` crate
// (data/hf-ref.json, made by data/make_hf_json_ref.js) for five tokenizer.json layouts;
// GPT-2's reference ids; SentencePiece agreement; errors.
#include <filesystem>

#include "test_skip.hpp"
#include "tok_util.hpp"

using tokmore::contains;
using tokmore::Tok;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("loom-hf-" + name)).string();
}

bool have_gpt2() { return tokmore::have(tokmore::shared("gpt2/gpt2-vocab.json")); }

// A skeleton from data/ with model.vocab and model.merges filled from shared/data/gpt2,
// written to a temporary file; returns its path.
std::string with_gpt2(const std::string& skeleton) {
  nlohmann::json j = tokmore::read_json(tokmore::data(skeleton));
  j["model"]["vocab"] = tokmore::read_json(tokmore::shared("gpt2/gpt2-vocab.json"));
  std::ifstream in(tokmore::shared("gpt2/gpt2-merges.txt"), std::ios::binary);
  REQUIRE(in.good());
  nlohmann::json merges = nlohmann::json::array();
  std::string line;
  for (bool first = true; std::getline(in, line); first = false)
    if (!first && !line.empty()) merges.push_back(line);
  j["model"]["merges"] = std::move(merges);
  const std::string path = temp_path(skeleton);
  tokmore::write_file(path, j.dump());
  return path;
}

std::string path_for(const std::string& name) {
  return name.find("skeleton") != std::string::npos ? with_gpt2(name) : tokmore::data(name);
}

void check_against_reference(const std::string& name) {
  const auto ref = tokmore::read_json(tokmore::data("hf-ref.json"));
  const std::string path = path_for(name);
  Tok t("hf-json", {{"tokenizer_file", path}});
  REQUIRE_MESSAGE(t.ok(), t.created().message);
  for (const auto& c : ref[name]) {
    const std::string text = c["text"].get<std::string>();
    CAPTURE(text);
    const std::vector<int32_t> ids = t.encode(text);
    CHECK(ids == c["ids"].get<std::vector<int32_t>>());
    CHECK(t.decode(c["ids"].get<std::vector<int32_t>>()) == c["decoded"].get<std::string>());
  }
}

}  // namespace

TEST_CASE("tokenizer/hf-json: GPT-2 byte-level BPE gives GPT-2's reference ids") {
  if (!have_gpt2()) {
    loomtest::skip("shared/data/gpt2 is absent");
    return;
  }
  Tok t("hf-json", {{"tokenizer_file", with_gpt2("hf-gpt2-skeleton.json")}});
  REQUIRE_MESSAGE(t.ok(), t.created().message);
  CHECK(t.vocab_size() == 50257);
  CHECK(t.eod() == 50256);
  CHECK(t.encode("Hello world") == std::vector<int32_t>{15496, 995});
  CHECK(t.encode("First Citizen:\nBefore we proceed") ==
        std::vector<int32_t>{5962, 22307, 25, 198, 8421, 356, 5120});
  CHECK(t.decode({5962, 22307, 25, 198, 8421, 356, 5120}) == "First Citizen:\nBefore we proceed");
}

TEST_CASE("tokenizer/hf-json: matches HF tokenizers, GPT-2 layout") {
  if (!have_gpt2()) {
    loomtest::skip("shared/data/gpt2 is absent");
    return;
  }
  check_against_reference("hf-gpt2-skeleton.json");
}

TEST_CASE("tokenizer/hf-json: matches HF tokenizers, Llama-3 layout (Split regex + BOS)") {
  if (!have_gpt2()) {
    loomtest::skip("shared/data/gpt2 is absent");
    return;
  }
  check_against_reference("hf-llama3-skeleton.json");
  Tok t("hf-json", {{"tokenizer_file", with_gpt2("hf-llama3-skeleton.json")}});
  CHECK(t.vocab_size() == 50259);
  CHECK(t.eod() == 50256);  // <|endoftext|> is in GPT-2's model vocab and comes first
  Tok named("hf-json", {{"tokenizer_file", with_gpt2("hf-llama3-skeleton.json")},
                        {"eod_token", "<|end_of_text|>"}});
  CHECK(named.eod() == 50258);
  Tok plain("hf-json", {{"tokenizer_file", with_gpt2("hf-llama3-skeleton.json")},
                        {"add_special_tokens", "false"}});
  CHECK(plain.encode("Hello world") == std::vector<int32_t>{15496, 995});
}

TEST_CASE("tokenizer/hf-json: matches HF tokenizers, Llama-2 layout (byte_fallback)") {
  check_against_reference("hf-llama2-bf.json");
  Tok t("hf-json", {{"tokenizer_file", tokmore::data("hf-llama2-bf.json")}});
  CHECK(t.vocab_size() == 700);
  CHECK(t.eod() == 2);
}

TEST_CASE("tokenizer/hf-json: matches HF tokenizers, Metaspace pre-tokenizer layout") {
  check_against_reference("hf-llama2-metaspace.json");
}

TEST_CASE("tokenizer/hf-json: matches HF tokenizers, NFKC/Lowercase/Digits/Metaspace layout") {
  check_against_reference("hf-sp-lower.json");
}

TEST_CASE("tokenizer/hf-json: the Llama-2 conversion agrees with SentencePiece itself") {
  // The same model through libsentencepiece (reference: python3-sentencepiece's ids).
  const auto sp = tokmore::read_json(tokmore::data("sp-ref.json"));
  Tok t("hf-json",
        {{"tokenizer_file", tokmore::data("hf-llama2-bf.json")}, {"add_special_tokens", "false"}});
  for (const auto& c : sp["cases"]) {
    const std::string text = c["text"].get<std::string>();
    // HF matches added tokens (<s>, </s>) in text; SentencePiece reads them as text.
    if (contains(text, "<s>")) continue;
    CAPTURE(text);
    CHECK(t.encode(text) == c["ids"].get<std::vector<int32_t>>());
  }
}

TEST_CASE("tokenizer/hf-json: ill-formed UTF-8 is encoded as U+FFFD") {
  if (!have_gpt2()) {
    loomtest::skip("shared/data/gpt2 is absent");
    return;
  }
  Tok t("hf-json", {{"tokenizer_file", with_gpt2("hf-gpt2-skeleton.json")}});
  CHECK(t.encode("a\xff"
                 "b") == t.encode("a\xEF\xBF\xBD"
                                  "b"));
  CHECK(t.encode("\xE2\x82") == t.encode("\xEF\xBF\xBD"));  // one U+FFFD: a maximal subpart
}

TEST_CASE("tokenizer/hf-json: errors name the file, the key and the component") {
  Tok missing("hf-json", {{"tokenizer_file", "/nonexistent/tokenizer.json"}});
  CHECK(missing.created().code == LOOM_ERR_IO);
  CHECK(contains(missing.created().message, "tokenizer_file"));
  CHECK(contains(missing.created().message, "/nonexistent/tokenizer.json"));

  const std::string path = temp_path("bad.json");
  tokmore::write_file(path, "{\"model\": {\"type\": \"BPE\",,}}");
  Tok malformed("hf-json", {{"tokenizer_file", path}});
  CHECK(malformed.created().code == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(contains(malformed.created().message, "not valid JSON"));
  CHECK(contains(malformed.created().message,
                 "is not valid JSON: at line 1, column 26: syntax error"));

  auto with = [&](const std::string& member, const std::string& json_text) {
    nlohmann::json j = tokmore::read_json(tokmore::data("hf-llama2-bf.json"));
    j[member] = nlohmann::json::parse(json_text);
    tokmore::write_file(path, j.dump());
    return std::make_unique<Tok>("hf-json",
                                 std::map<std::string, std::string>{{"tokenizer_file", path}});
  };
  auto t = with("normalizer", R"({"type": "Precompiled", "precompiled_charsmap": ""})");
  CHECK(t->created().code == LOOM_ERR_UNIMPLEMENTED);
  CHECK(contains(t->created().message, "normalizer type \"Precompiled\""));
  t = with("pre_tokenizer",
           R"({"type": "Sequence", "pretokenizers": [{"type": "UnicodeScripts"}]})");
  CHECK(t->created().code == LOOM_ERR_UNIMPLEMENTED);
  CHECK(contains(t->created().message, "pre_tokenizer.pretokenizers[0]"));
  CHECK(contains(t->created().message, "\"UnicodeScripts\""));
  t = with("decoder", R"({"type": "CTC"})");
  CHECK(t->created().code == LOOM_ERR_UNIMPLEMENTED);
  CHECK(contains(t->created().message, "decoder type \"CTC\""));
  t = with("post_processor", R"({"type": "Unknown"})");
  CHECK(t->created().code == LOOM_ERR_UNIMPLEMENTED);
  t = with("model", R"({"type": "Unigram", "vocab": []})");
  CHECK(t->created().code == LOOM_ERR_UNIMPLEMENTED);
  CHECK(contains(t->created().message, "model type \"Unigram\""));
  t = with("pre_tokenizer", R"({"type": "Split", "pattern": {"Regex": "(unclosed"},
                                "behavior": "Isolated"})");
  CHECK(t->created().code == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(contains(t->created().message, "does not compile"));
  t.reset();

  Tok no_eod("hf-json",
             {{"tokenizer_file", tokmore::data("hf-llama2-bf.json")}, {"eod_token", "<eot>"}});
  CHECK(no_eod.created().code == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(contains(no_eod.created().message, "eod_token \"<eot>\""));
  std::filesystem::remove(path);
}

TEST_CASE("tokenizer/hf-json: decode refuses ids outside the vocabulary") {
  Tok t("hf-json", {{"tokenizer_file", tokmore::data("hf-llama2-bf.json")}});
  const auto o = t.decode_error({1, 700});
  CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(contains(o.message, "id 700 at position 1"));
}

TEST_CASE("tokenizer/hf-json: all of Tiny Shakespeare matches HF tokenizers and round-trips") {
  const std::string corpus_path = tokmore::shared("tinyshakespeare/input.txt");
  if (!have_gpt2() || !tokmore::have(corpus_path)) {
    loomtest::skip("shared/data/gpt2 or tinyshakespeare is absent");
    return;
  }
  std::ifstream in(corpus_path, std::ios::binary);
  const std::string corpus((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto ref = tokmore::read_json(tokmore::data("hf-ref.json"))["tinyshakespeare"];
  for (const char* name : {"hf-gpt2-skeleton.json", "hf-llama3-skeleton.json"}) {
    CAPTURE(name);
    Tok t("hf-json", {{"tokenizer_file", with_gpt2(name)}, {"add_special_tokens", "false"}});
    const std::vector<int32_t> ids = t.encode(corpus);
    int64_t sum = 0;
    for (int32_t id : ids) sum += id;
    // The reference encoded with the post-processor: Llama-3's adds one BOS (50257).
    const bool bos = std::string(name) == "hf-llama3-skeleton.json";
    CHECK(static_cast<int64_t>(ids.size()) + (bos ? 1 : 0) == ref[name]["count"].get<int64_t>());
    CHECK(sum + (bos ? 50257 : 0) == ref[name]["sum"].get<int64_t>());
    CHECK(t.decode(ids) == corpus);
  }
}
