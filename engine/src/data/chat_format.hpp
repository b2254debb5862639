// Chat formats for supervised finetuning: a conversation (OpenAI `messages`: system, user,
// assistant and tool turns) rendered as the text a model family's own Hugging Face chat
// template renders, in pieces that say which text SFT trains on (the assistant's replies and
// their end-of-turn markers). The formats are written out here, not interpreted from Jinja:
// tests/data/chat holds each family's rendering of a set of conversations, made by the
// family's published template with python3-jinja2 (make_references.py beside them).
#pragma once

#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace loom::engine {

struct ChatMessage {
  std::string role, content;  // role: system | user | assistant | tool
};

// A piece of rendered text; `trained`: an assistant reply (or its end-of-turn marker).
struct ChatPiece {
  std::string text;
  bool trained = false;
};

// A conversation the format cannot render (the family's template raises, or a role it has
// no place for): the message says which rule, as the template's own exception does.
struct ChatRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class ChatFormat {
 public:
  // chatml (Qwen2.5's template), llama3 (Llama 3's), mistral (Mixtral-8x7B-Instruct-v0.1's),
  // gemma (Gemma 2's), deepseek-v3 (DeepSeek-V3's). Throws UsageError listing them.
  static ChatFormat named(const std::string& name);
  // A plain template, e.g. "<|{role}|>\n{content}</s>\n": each message is the template with
  // {role} and {content} replaced; an assistant message trains on its content and on the
  // template's text after {content}. Throws UsageError without exactly one {content}.
  static ChatFormat plain(const std::string& tmpl);
  static const std::vector<std::string>& names();
  static std::string known();  // the names, comma-separated, for messages
  // The chat_template string of a Hugging Face tokenizer_config.json, or "" when it has none
  // (a missing file too). Throws UsageError, prefixed with `who`, when it is not JSON.
  static std::string template_in(const std::filesystem::path& config, const std::string& who);
  // The known format whose Hugging Face `chat_template` this is, or "" (its distinctive
  // markers and rules: a template that renders otherwise, such as Llama 3.1's dated system
  // block or Qwen3's thinking tags, is not one of them).
  static std::string recognise(const std::string& jinja);

  const std::string& name() const { return name_; }
  // The whole conversation, in order; with `generation_prompt` the header that asks the
  // model for the next assistant turn follows (what `loom serve` sends). Throws ChatRefused.
  std::vector<ChatPiece> render(const std::vector<ChatMessage>& messages,
                                bool generation_prompt = false) const;
  // The text a generation stops at (the assistant's end-of-turn marker).
  std::string stop() const;

 private:
  enum class Kind { chatml, llama3, mistral, gemma, deepseek_v3, plain };
  ChatFormat(Kind k, std::string name, std::string tmpl = {})
      : kind_(k), name_(std::move(name)), template_(std::move(tmpl)) {}
  Kind kind_;
  std::string name_, template_;
};

// The conversation of one JSON line: {"messages": [{"role", "content"}, ...]} or
// {"prompt": ..., "completion": ...} (a user turn and the assistant's reply). Throws
// std::invalid_argument naming what is wrong.
std::vector<ChatMessage> parse_conversation(const nlohmann::json& line);

// A preference pair of one JSON line (DPO's data): {"prompt", "chosen", "rejected"}, each a
// string (the prompt a user turn, the answers an assistant turn) or a list of messages (the
// prompt's conversation, the answers' turns); returns the chosen and the rejected
// conversations, the prompt first in both. Throws std::invalid_argument.
std::pair<std::vector<ChatMessage>, std::vector<ChatMessage>> parse_preference(
    const nlohmann::json& line);

// The pieces concatenated.
std::string join_text(const std::vector<ChatPiece>& pieces);

}  // namespace loom::engine
