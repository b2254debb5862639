// The chat formats (engine/src/data/chat_format.cpp) against what each model family's own
// Hugging Face chat template renders for chat/conversations.jsonl (chat/references.jsonl,
// rendered by chat/make_references.py with python3-jinja2): the same text, with and without
// the generation prompt, and the same refusals. Then the pieces SFT trains on: exactly the
// assistant replies with their end-of-turn markers.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/errors.hpp"
#include "build_paths.h"
#include "data/chat_format.hpp"

using loom::engine::ChatFormat;
using loom::engine::ChatMessage;
using loom::engine::ChatPiece;
using nlohmann::json;

namespace {

std::vector<json> read_lines(const std::string& path) {
  std::ifstream f(path);
  REQUIRE_MESSAGE(f.good(), "cannot read " << path);
  std::vector<json> rows;
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) rows.push_back(json::parse(line));
  return rows;
}

std::string chat_dir() { return std::string(loomtest_source_dir()) + "/tests/data/chat"; }

}  // namespace

TEST_CASE("each chat format renders what its family's Hugging Face template renders") {
  const std::vector<json> convs = read_lines(chat_dir() + "/conversations.jsonl");
  const std::vector<json> refs = read_lines(chat_dir() + "/references.jsonl");
  REQUIRE(refs.size() == ChatFormat::names().size() * convs.size() * 2);
  int texts = 0, refusals = 0;
  for (const json& ref : refs) {
    const ChatFormat f = ChatFormat::named(ref["format"].get<std::string>());
    const size_t i = ref["conversation"].get<size_t>();
    const bool gen = ref["generation_prompt"].get<bool>();
    CAPTURE(f.name());
    CAPTURE(i);
    CAPTURE(gen);
    const std::vector<ChatMessage> m = loom::engine::parse_conversation(convs.at(i));
    if (ref.contains("error")) {
      CHECK_THROWS_WITH_AS(f.render(m, gen), ref["error"].get<std::string>().c_str(),
                           loom::engine::ChatRefused);
      ++refusals;
    } else {
      CHECK(loom::engine::join_text(f.render(m, gen)) == ref["text"].get<std::string>());
      ++texts;
    }
  }
  CHECK(texts == 80);
  CHECK(refusals == 20);
}

TEST_CASE("SFT trains on the assistant's replies and their end-of-turn markers alone") {
  const std::vector<json> convs = read_lines(chat_dir() + "/conversations.jsonl");
  for (const std::string& name : ChatFormat::names()) {
    const ChatFormat f = ChatFormat::named(name);
    for (const json& c : convs) {
      const std::vector<ChatMessage> m = loom::engine::parse_conversation(c);
      std::vector<ChatPiece> pieces;
      try {
        pieces = f.render(m);
      } catch (const loom::engine::ChatRefused&) {
        continue;
      }
      std::vector<std::string> trained;
      for (const ChatPiece& p : pieces)
        if (p.trained) trained.push_back(p.text);
      std::vector<std::string> replies;
      for (const ChatMessage& x : m)
        if (x.role == "assistant") replies.push_back(x.content);
      CAPTURE(name);
      CAPTURE(c.dump());
      REQUIRE(trained.size() == replies.size());  // one trained piece per reply
      for (size_t k = 0; k < trained.size(); ++k) {
        // each ends with the end-of-turn marker, and holds the reply (stripped by llama3 and
        // gemma, as their templates do)
        const std::string stop = f.stop();
        REQUIRE(trained[k].size() >= stop.size());
        CHECK(trained[k].substr(trained[k].size() - stop.size()) == stop);
        const std::string body = trained[k].substr(0, trained[k].size() - stop.size());
        CHECK(replies[k].find(body) != std::string::npos);
        CHECK(!body.empty());
      }
    }
  }
}

TEST_CASE("a plain template: {role} and {content}, the reply and what follows it trained") {
  const ChatFormat f = ChatFormat::plain("<|{role}|>\n{content}</s>\n");
  const std::vector<ChatMessage> m{{"user", "hi"}, {"assistant", "yo"}};
  const std::vector<ChatPiece> p = f.render(m, false);
  REQUIRE(p.size() == 2);
  CHECK(p[0].text == "<|user|>\nhi</s>\n<|assistant|>\n");
  CHECK(!p[0].trained);
  CHECK(p[1].text == "yo</s>\n");
  CHECK(p[1].trained);
  CHECK(f.stop() == "</s>");
  CHECK(loom::engine::join_text(f.render(m, true)) == p[0].text + p[1].text + "<|assistant|>\n");
}

TEST_CASE("bad formats, templates and conversations are refused by name") {
  CHECK_THROWS_WITH_AS(ChatFormat::named("vicuna"),
                       doctest::Contains("known: chatml, llama3, mistral, gemma, deepseek-v3"),
                       loom::engine::UsageError);
  CHECK_THROWS_WITH_AS(ChatFormat::plain("{role}: no content"),
                       doctest::Contains("needs {content} exactly once"), loom::engine::UsageError);
  const auto refused = [](const char* line) {
    try {
      loom::engine::parse_conversation(json::parse(line));
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(refused(R"({"text": "x"})").find("no \"messages\"") != std::string::npos);
  CHECK(refused(R"({"messages": []})").find("non-empty") != std::string::npos);
  CHECK(refused(R"({"messages": [{"role": "bot", "content": "x"}]})") ==
        "messages[0].role 'bot' is none of system, user, assistant, tool");
  CHECK(refused(R"({"messages": [{"role": "user", "content": 3}]})") ==
        "messages[0].content is a number, not a string");
  CHECK(refused(R"({"messages": [{"role": "assistant", "content": null, "tool_calls": [{}]}]})")
            .find("tool_calls") != std::string::npos);
  CHECK(refused(R"({"prompt": "a", "completion": "b"})") == "accepted");
}

TEST_CASE("a Hugging Face chat_template is recognised by its rules, or not at all") {
  // The distinctive lines of each family's template (written here, not its full text); the
  // indentation is not part of it.
  CHECK(ChatFormat::recognise("{%- else %}\n  {{- '<|im_start|>system\\nYou are Qwen, created by "
                              "Alibaba Cloud. You are "
                              "a helpful assistant.<|im_end|>\\n' }}") == "chatml");
  CHECK(ChatFormat::recognise("{{- '<think>' }} <|im_start|> You are Qwen, created by Alibaba "
                              "Cloud. You are a helpful assistant.") == "");
  CHECK(
      ChatFormat::recognise("'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
                            "message['content'] | trim + '<|eot_id|>'") == "llama3");
  CHECK(ChatFormat::recognise("Cutting Knowledge Date: '<|start_header_id|>' message['content'] | "
                              "trim + '<|eot_id|>'") == "");  // Llama 3.1: a dated system block
  CHECK(ChatFormat::recognise("{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif %}{{ "
                              "message['content'] + eos_token}}{{ raise_exception('Only user and "
                              "assistant roles are supported!') }}") == "mistral");
  CHECK(ChatFormat::recognise("{{ '[INST] ' + message['content'] + ' [/INST]' }}{{ "
                              "message['content'] + eos_token + ' ' }} Only user and assistant "
                              "roles are supported!") == "");  // v0.1: a space after </s>
  CHECK(ChatFormat::recognise("raise_exception('System role not supported') '<start_of_turn>' + "
                              "role + '\\n' + message['content'] | trim + '<end_of_turn>\\n'") ==
        "gemma");
  CHECK(ChatFormat::recognise(
            "ns.system_prompt = ns.system_prompt + '\\n\\n' + message['content'] '<｜User｜>' "
            "'<｜Assistant｜>'") == "deepseek-v3");
  CHECK(ChatFormat::recognise(
            "ns.system_prompt = ns.system_prompt + '\\n\\n' + message['content'] '<｜User｜>' "
            "'<｜Assistant｜><think>\\n'") == "");  // R1
  CHECK(ChatFormat::recognise("{{ messages }}") == "");
}
