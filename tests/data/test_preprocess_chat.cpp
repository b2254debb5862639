// `loom preprocess --chat-format` as the real executable: the token ids are the text the
// family's Hugging Face template renders (chat/references.jsonl), and the loss mask marks the
// assistant's replies with their end-of-turn markers, found here in the text itself (after
// each assistant header, up to and with the next end-of-turn marker). With the byte tokenizer
// the ids are the bytes; with gpt2-bpe (when ../shared/data has it) the text is tokenised
// whole, and the trained ids decode to the replies.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "build_paths.h"
#include "preprocess_run.hpp"
#include "test_files.hpp"
#include "test_skip.hpp"

namespace {

using loomtest::q;
using loomtest::spit;
using loomtest::TempDir;
using namespace preprocess_test;

std::string chat_dir() { return std::string(loomtest_source_dir()) + "/tests/data/chat"; }

// The references' texts of one format without the generation prompt, by conversation; ""
// where the template refuses it.
std::vector<std::string> reference_texts(const std::string& format) {
  std::ifstream f(chat_dir() + "/references.jsonl");
  std::vector<std::string> texts;
  for (std::string line; std::getline(f, line);) {
    const nlohmann::json r = nlohmann::json::parse(line);
    if (r["format"] != format || r["generation_prompt"].get<bool>()) continue;
    texts.push_back(r.contains("text") ? r["text"].get<std::string>() : "");
  }
  return texts;
}

// 1 for each byte of `text` from the end of an `open` marker to the end of the next `close`.
std::vector<int32_t> trained_bytes(const std::string& text, const std::string& open,
                                   const std::string& close) {
  std::vector<int32_t> mask(text.size(), 0);
  for (size_t at = text.find(open); at != std::string::npos; at = text.find(open, at + 1)) {
    const size_t from = at + open.size(), to = text.find(close, from) + close.size();
    for (size_t i = from; i < to; ++i) mask[i] = 1;
  }
  return mask;
}

std::vector<int32_t> flat(const Docs& docs, size_t d) {
  std::vector<int32_t> ids;
  for (const auto& s : docs.at(d)) ids.insert(ids.end(), s.begin(), s.end());
  return ids;
}

// Preprocesses the conversations in `format` into dir/<name> (default: the format's name).
std::string run_chat(TempDir& dir, const std::string& format, const std::string& extra = "",
                     const std::string& name = "") {
  const std::string out = dir / (name.empty() ? format : name);
  const Result r = run_loom("preprocess --input " + q(chat_dir() + "/conversations.jsonl") +
                            " --output-prefix " + q(out) + " --tokenizer byte --chat-format " +
                            format + " --skip-bad-lines " + extra);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  return out;
}

}  // namespace

TEST_CASE("chat data: the rendered text's bytes, and the replies' bytes in the loss mask") {
  TempDir dir("preprocess-chat");
  struct Case {
    const char *format, *open, *close;
  } cases[] = {{"llama3", "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>"},
               {"chatml", "<|im_start|>assistant\n", "<|im_end|>"},
               {"gemma", "<start_of_turn>model\n", "<end_of_turn>"}};
  for (const Case& c : cases) {
    CAPTURE(c.format);
    const std::string out = run_chat(dir, c.format, "--workers 2 --chunk-bytes 300");
    const Docs ids = read_docs(out + "_chat_document");
    const Docs mask = read_docs(out + "_chat_loss_mask_document");
    const std::vector<std::string> want = reference_texts(c.format);
    size_t d = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      if (want[i].empty()) continue;  // refused, and skipped
      CAPTURE(i);
      REQUIRE(d < ids.size());
      CHECK(ids[d].size() == 1);  // one sequence per conversation
      const std::vector<int32_t> got = flat(ids, d), got_mask = flat(mask, d);
      CHECK(std::string(got.begin(), got.end()) == want[i]);
      CHECK(got_mask == trained_bytes(want[i], c.open, c.close));
      ++d;
    }
    CHECK(d == ids.size());
    CHECK(mask.size() == ids.size());
  }
  // --append-eod: the tokenizer's EOD (256) after each conversation, not trained (packed
  // sequences end documents at it).
  run_chat(dir, "chatml", "--append-eod", "e");
  const Docs e_ids = read_docs(dir / "e_chat_document"),
             e_mask = read_docs(dir / "e_chat_loss_mask_document");
  const Docs c_ids = read_docs(dir / "chatml_chat_document"),
             c_mask = read_docs(dir / "chatml_chat_loss_mask_document");
  REQUIRE(e_ids.size() == c_ids.size());
  for (size_t d = 0; d < e_ids.size(); ++d) {
    std::vector<int32_t> want = flat(c_ids, d), want_mask = flat(c_mask, d);
    want.push_back(256);
    want_mask.push_back(0);
    CHECK(flat(e_ids, d) == want);
    CHECK(flat(e_mask, d) == want_mask);
  }
  // The mask is stored as uint8 (code 1), the ids as the vocabulary needs.
  CHECK(loom::megatron::Reader(dir / "llama3_chat_loss_mask_document").dtype() ==
        loom::megatron::DType::u8);
}

TEST_CASE("chat data: a format's refusals are bad lines; bad flags exit 2 and say why") {
  TempDir dir("preprocess-chat");
  const std::string in = chat_dir() + "/conversations.jsonl";
  Result r = run_loom("preprocess --input " + q(in) + " --output-prefix " + q(dir / "m") +
                      " --tokenizer byte --chat-format mistral");
  CHECK(r.code == 1);
  CHECK_MESSAGE(contains(r.err,
                         "conversations.jsonl:2: chat format mistral refuses this "
                         "conversation: Conversation roles must alternate"),
                r.err);
  const std::string out = run_chat(dir, "mistral");
  CHECK(read_docs(out + "_chat_document").size() == 5);  // 5 of the 10 alternate user/assistant

  const std::string base =
      "preprocess --input " + q(in) + " --output-prefix " + q(dir / "x") + " --tokenizer byte ";
  r = run_loom(base + "--chat-format vicuna");
  CHECK(r.code == 2);
  CHECK_MESSAGE(contains(r.err, "unknown chat format 'vicuna' (known: chatml, llama3"), r.err);
  r = run_loom(base + "--chat-format chatml --split-sentences");
  CHECK(r.code == 2);
  CHECK(contains(r.err, "--chat-format takes no --split-sentences"));
  r = run_loom(base + "--chat-format chatml --chat-template '{content}'");
  CHECK(r.code == 2);
  CHECK(contains(r.err, "are alternatives"));

  // A tokenizer_config.json: its chat_template recognised, or refused with the known names
  // (JSON's "\\n" is the template's own \n, inside a Jinja string).
  spit(
      dir / "gemma.json",
      R"({"chat_template": "{{ raise_exception('System role not supported') }}{{ '<start_of_turn>' )"
      R"(+ role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"})");
  r = run_loom(base + "--skip-bad-lines --chat-format " + q(dir / "gemma.json"));
  CHECK_MESSAGE(r.code == 0, r.err);
  CHECK(read_docs(dir / "x_chat_document").size() ==
        read_docs(run_chat(dir, "gemma") + "_chat_document").size());
  spit(dir / "other.json", R"({"chat_template": "{{ messages }}"})");
  r = run_loom(base + "--chat-format " + q(dir / "other.json"));
  CHECK(r.code == 2);
  CHECK_MESSAGE(contains(r.err,
                         "is none of the known formats (chatml, llama3, mistral, gemma, "
                         "deepseek-v3)"),
                r.err);
}

TEST_CASE("chat data with gpt2-bpe: the text tokenised whole, a masked run per reply") {
  const std::string shared = LOOM_SHARED_DATA;
  const std::string vocab = shared + "/gpt2/gpt2-vocab.json",
                    merges = shared + "/gpt2/gpt2-merges.txt";
  if (!fs::exists(std::string(LOOM_TEST_PLUGIN_DIR) + "/loom-tokenizer-gpt2-bpe.so") ||
      !fs::exists(vocab)) {
    loomtest::skip("chat data with gpt2-bpe: the plugin or " + shared + " is absent");
    return;
  }
  TempDir dir("preprocess-chat");
  const std::string tok =
      " --tokenizer GPT2BPETokenizer --vocab-file " + q(vocab) + " --merge-file " + q(merges);
  Result r = run_loom("preprocess --input " + q(chat_dir() + "/conversations.jsonl") +
                      " --output-prefix " + q(dir / "g") + tok + " --chat-format llama3");
  REQUIRE_MESSAGE(r.code == 0, r.err);
  // The same texts as plain documents: the ids must be theirs (a BPE merges across the
  // pieces' boundaries, so tokenising piece by piece would differ).
  const std::vector<std::string> want = reference_texts("llama3");
  std::string jsonl;
  for (const std::string& t : want) jsonl += nlohmann::json{{"text", t}}.dump() + "\n";
  spit(dir / "texts.jsonl", jsonl);
  r = run_loom("preprocess --input " + q(dir / "texts.jsonl") + " --output-prefix " + q(dir / "t") +
               tok);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const Docs ids = read_docs(dir / "g_chat_document");
  const Docs mask = read_docs(dir / "g_chat_loss_mask_document");
  const Docs plain = read_docs(dir / "t_text_document");
  REQUIRE(ids.size() == want.size());
  for (size_t d = 0; d < ids.size(); ++d) {
    CAPTURE(d);
    CHECK(flat(ids, d) == flat(plain, d));
    // one run of trained ids per assistant reply (GPT-2 has no <|eot_id|> token, so the
    // marker's last characters merge with the next header's and stay untrained)
    const std::vector<int32_t> m = flat(mask, d);
    size_t runs = 0;
    for (size_t i = 0; i < m.size(); ++i) runs += m[i] && (i == 0 || !m[i - 1]);
    const std::vector<int32_t> b =
        trained_bytes(want[d], "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>");
    size_t replies = 0;
    for (size_t i = 0; i < b.size(); ++i) replies += b[i] && (i == 0 || !b[i - 1]);
    CHECK(runs == replies);
  }
}

TEST_CASE("chat data with hf-json: the markers are single special ids, and one BOS") {
  const std::string shared = LOOM_SHARED_DATA;
  const std::string skeleton =
      std::string(loomtest_source_dir()) + "/tests/tokenizer/data/hf-llama3-skeleton.json";
  if (!fs::exists(std::string(LOOM_TEST_PLUGIN_DIR) + "/loom-tokenizer-hf-json.so") ||
      !fs::exists(shared + "/gpt2/gpt2-vocab.json")) {
    loomtest::skip("chat data with hf-json: the plugin or " + shared + " is absent");
    return;
  }
  // Llama 3's skeleton (GPT-2's vocabulary, <|begin_of_text|> 50257 added first by its
  // post-processor) with the chat markers as special tokens.
  nlohmann::json j = nlohmann::json::parse(loomtest::slurp(skeleton));
  j["model"]["vocab"] = nlohmann::json::parse(loomtest::slurp(shared + "/gpt2/gpt2-vocab.json"));
  nlohmann::json merges = nlohmann::json::array();
  std::istringstream in(loomtest::slurp(shared + "/gpt2/gpt2-merges.txt"));
  std::string line;
  for (bool first = true; std::getline(in, line); first = false)
    if (!first && !line.empty()) merges.push_back(line);
  j["model"]["merges"] = merges;
  const char* markers[] = {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
  for (int k = 0; k < 3; ++k)
    j["added_tokens"].push_back({{"id", 50259 + k},
                                 {"content", markers[k]},
                                 {"single_word", false},
                                 {"lstrip", false},
                                 {"rstrip", false},
                                 {"normalized", false},
                                 {"special", true}});
  TempDir dir("preprocess-chat");
  spit(dir / "tokenizer.json", j.dump());
  spit(dir / "one.jsonl", R"({"messages": [{"role": "user", "content": "Hello"}, )"
                          R"({"role": "assistant", "content": "Hi there!"}]})"
                          "\n");
  const auto run = [&](const std::string& name, const std::string& extra) {
    const Result r = run_loom("preprocess --input " + q(dir / "one.jsonl") + " --output-prefix " +
                              q(dir / name) + " --tokenizer hf-json --tokenizer-model " +
                              q(dir / "tokenizer.json") + " --chat-format llama3 " + extra);
    REQUIRE_MESSAGE(r.code == 0, r.err);
    return std::make_pair(flat(read_docs(dir / (name + "_chat_document")), 0),
                          flat(read_docs(dir / (name + "_chat_loss_mask_document")), 0));
  };
  const auto [ids, mask] = run("a", "");
  const auto count = [&](int32_t id) { return std::count(ids.begin(), ids.end(), id); };
  CHECK(ids.front() == 50257);  // the rendered text's BOS, and no second one
  CHECK(count(50257) == 1);
  CHECK(count(50259) == 2);  // one id per marker: a header per message
  CHECK(count(50260) == 2);
  CHECK(count(50261) == 2);
  // trained: exactly the reply's ids and its <|eot_id|>, after the last "\n\n" (628)
  const size_t last_nl =
      ids.size() - 1 - (size_t)(std::find(ids.rbegin(), ids.rend(), 628) - ids.rbegin());
  for (size_t i = 0; i < ids.size(); ++i) {
    CAPTURE(i);
    CHECK(mask[i] == (i > last_nl ? 1 : 0));
  }
  CHECK(ids.back() == 50261);
  // the user's own add_special_tokens=true wins: the post-processor's BOS comes too
  const auto [twice, twice_mask] = run("b", "--tokenizer-option add_special_tokens=true");
  CHECK(std::count(twice.begin(), twice.end(), 50257) == 2);
  (void)twice_mask;
}

TEST_CASE("preference pairs: the chosen and the rejected conversation of each line, paired") {
  TempDir dir("preprocess-chat");
  spit(
      dir / "pairs.jsonl",
      R"({"prompt": "2+2?", "chosen": "4", "rejected": "5"})"
      "\n"
      R"({"prompt": [{"role": "system", "content": "Be exact."}, {"role": "user", "content": "hi"}], )"
      R"("chosen": [{"role": "assistant", "content": "Hello."}], "rejected": "Go away."})"
      "\n");
  Result r = run_loom("preprocess --input " + q(dir / "pairs.jsonl") + " --output-prefix " +
                      q(dir / "p") + " --tokenizer byte --chat-format chatml --preference-pairs");
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const std::string sys =
      "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
      "assistant.<|im_end|>\n";
  const std::string want[2][2] = {
      {sys + "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n",
       sys + "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n5<|im_end|>\n"},
      {"<|im_start|>system\nBe exact.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
       "<|im_start|>assistant\nHello.<|im_end|>\n",
       "<|im_start|>system\nBe exact.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
       "<|im_start|>assistant\nGo away.<|im_end|>\n"}};
  const char* sides[2] = {"chosen", "rejected"};
  for (int s = 0; s < 2; ++s) {
    const Docs ids = read_docs(dir / ("p_" + std::string(sides[s]) + "_document"));
    const Docs mask = read_docs(dir / ("p_" + std::string(sides[s]) + "_loss_mask_document"));
    REQUIRE(ids.size() == 2);
    for (size_t d = 0; d < 2; ++d) {
      CAPTURE(sides[s]);
      CAPTURE(d);
      const std::vector<int32_t> got = flat(ids, d);
      CHECK(std::string(got.begin(), got.end()) == want[d][s]);
      CHECK(flat(mask, d) == trained_bytes(want[d][s], "<|im_start|>assistant\n", "<|im_end|>"));
    }
  }
  spit(dir / "bad.jsonl", R"({"prompt": "x", "chosen": "y"})"
                          "\n");
  r = run_loom("preprocess --input " + q(dir / "bad.jsonl") + " --output-prefix " + q(dir / "b") +
               " --tokenizer byte --chat-format chatml --preference-pairs");
  CHECK(r.code == 1);
  CHECK_MESSAGE(contains(r.err,
                         "bad.jsonl:1: a preference pair needs \"prompt\", \"chosen\" and "
                         "\"rejected\"; no \"rejected\""),
                r.err);
  r = run_loom("preprocess --input " + q(dir / "pairs.jsonl") + " --output-prefix " + q(dir / "c") +
               " --tokenizer byte --preference-pairs");
  CHECK(r.code == 2);
  CHECK(contains(r.err, "--preference-pairs needs --chat-format or --chat-template"));
}
