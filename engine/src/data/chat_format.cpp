// Each format below follows its family's published Hugging Face chat template line by line
// for conversations of system, user, assistant and tool turns (tool *calls* are refused by
// parse_conversation): the same text, the same refusals, the same quirks (Llama 3 and Gemma
// strip each message's content; Qwen2.5 adds its default system message; Mixtral's and
// Gemma's templates insist that user and assistant alternate). tests/data/chat/ holds what
// the real templates render for a set of conversations; test_chat_format checks every one.
#include "data/chat_format.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

#include "base/errors.hpp"
#include "base/strings.hpp"

namespace loom::engine {
namespace {

using Pieces = std::vector<ChatPiece>;

void add(Pieces& p, const std::string& text, bool trained = false) {
  if (text.empty()) return;
  if (!p.empty() && p.back().trained == trained) {
    p.back().text += text;
  } else {
    p.push_back({text, trained});
  }
}

// The length of the UTF-8 whitespace character at s[i] (0 if none): what Python's
// str.isspace() accepts, as Jinja's `trim` filter is str.strip().
size_t space_at(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return i + k < s.size() ? (unsigned char)s[i + k] : 0u; };
  const unsigned c = b(0);
  if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return 1;
  if (c == 0xc2 && (b(1) == 0x85 || b(1) == 0xa0)) return 2;  // U+0085, U+00A0
  if (c == 0xe1 && b(1) == 0x9a && b(2) == 0x80) return 3;    // U+1680
  if (c == 0xe2 && b(1) == 0x80 && (b(2) <= 0x8a || b(2) == 0xa8 || b(2) == 0xa9 || b(2) == 0xaf))
    return 3;                                               // U+2000-200A, 2028, 2029, 202F
  if (c == 0xe2 && b(1) == 0x81 && b(2) == 0x9f) return 3;  // U+205F
  if (c == 0xe3 && b(1) == 0x80 && b(2) == 0x80) return 3;  // U+3000
  return 0;
}

std::string trim(const std::string& s) {
  size_t first = 0;
  while (size_t n = space_at(s, first)) first += n;
  // the last non-space character's end: scan forward, remembering where text last ended
  size_t end = first, i = first;
  while (i < s.size()) {
    if (size_t n = space_at(s, i)) {
      i += n;
    } else {
      ++i;
      end = i;
    }
  }
  return s.substr(first, end - first);
}

const char* const kAlternate =
    "Conversation roles must alternate user/assistant/user/assistant/...";

void alternate(const std::vector<ChatMessage>& m, size_t i) {
  if ((m[i].role == "user") != (i % 2 == 0)) throw ChatRefused(kAlternate);
}

Pieces chatml(const std::vector<ChatMessage>& m, bool gen) {
  Pieces p;
  if (!m.empty() && m[0].role == "system")
    add(p, "<|im_start|>system\n" + m[0].content + "<|im_end|>\n");
  else
    add(p,
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
        "assistant.<|im_end|>\n");
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string& r = m[i].role;
    if (r == "user" || (r == "system" && i > 0)) {
      add(p, "<|im_start|>" + r + "\n" + m[i].content + "<|im_end|>\n");
    } else if (r == "assistant") {
      add(p, "<|im_start|>assistant\n");
      add(p, m[i].content + "<|im_end|>", true);
      add(p, "\n");
    } else if (r == "tool") {  // consecutive tool turns share one user turn
      if (i == 0 || m[i - 1].role != "tool") add(p, "<|im_start|>user");
      add(p, "\n<tool_response>\n" + m[i].content + "\n</tool_response>");
      if (i + 1 == m.size() || m[i + 1].role != "tool") add(p, "<|im_end|>\n");
    }
  }
  if (gen) add(p, "<|im_start|>assistant\n");
  return p;
}

Pieces llama3(const std::vector<ChatMessage>& m, bool gen) {
  Pieces p;
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string header = std::string(i == 0 ? "<|begin_of_text|>" : "") +
                               "<|start_header_id|>" + m[i].role + "<|end_header_id|>\n\n";
    const bool reply = m[i].role == "assistant";
    add(p, header);
    add(p, trim(m[i].content) + "<|eot_id|>", reply);
  }
  if (gen) add(p, "<|start_header_id|>assistant<|end_header_id|>\n\n");
  return p;
}

Pieces mistral(const std::vector<ChatMessage>& m) {
  Pieces p;
  add(p, "<s>");
  for (size_t i = 0; i < m.size(); ++i) {
    alternate(m, i);
    if (m[i].role == "user")
      add(p, "[INST] " + m[i].content + " [/INST]");
    else if (m[i].role == "assistant")
      add(p, m[i].content + "</s>", true);
    else
      throw ChatRefused("Only user and assistant roles are supported!");
  }
  return p;  // the prompt already ends in [/INST]: no generation header
}

Pieces gemma(const std::vector<ChatMessage>& m, bool gen) {
  Pieces p;
  add(p, "<bos>");
  if (!m.empty() && m[0].role == "system") throw ChatRefused("System role not supported");
  for (size_t i = 0; i < m.size(); ++i) {
    alternate(m, i);
    const bool reply = m[i].role == "assistant";
    add(p, "<start_of_turn>" + (reply ? std::string("model") : m[i].role) + "\n");
    add(p, trim(m[i].content) + "<end_of_turn>", reply);
    add(p, "\n");
  }
  if (gen) add(p, "<start_of_turn>model\n");
  return p;
}

Pieces deepseek_v3(const std::vector<ChatMessage>& m, bool gen) {
  // Every system message goes first, joined by blank lines.
  std::string system;
  bool first_system = true;
  for (const ChatMessage& x : m)
    if (x.role == "system") {
      system += (first_system ? "" : "\n\n") + x.content;
      first_system = false;
    }
  Pieces p;
  add(p, "<｜begin▁of▁sentence｜>" + system);
  bool is_tool = false, output_first = true;  // (the template never resets output_first)
  for (const ChatMessage& x : m) {
    if (x.role == "user") {
      is_tool = false;
      add(p, "<｜User｜>" + x.content);
    } else if (x.role == "assistant") {
      add(p, is_tool ? "<｜tool▁outputs▁end｜>" : "<｜Assistant｜>");
      add(p, x.content + "<｜end▁of▁sentence｜>", true);
      is_tool = false;
    } else if (x.role == "tool") {
      is_tool = true;
      add(p, std::string(output_first ? "<｜tool▁outputs▁begin｜>" : "\n") +
                 "<｜tool▁output▁begin｜>" + x.content + "<｜tool▁output▁end｜>");
      output_first = false;
    }
  }
  if (is_tool) add(p, "<｜tool▁outputs▁end｜>");
  if (gen && !is_tool) add(p, "<｜Assistant｜>");
  return p;
}

Pieces plain_render(const std::string& tmpl, const std::vector<ChatMessage>& m, bool gen) {
  const size_t at = tmpl.find("{content}");
  const std::string before = tmpl.substr(0, at), after = tmpl.substr(at + 9);
  Pieces p;
  for (const ChatMessage& x : m) {
    const bool reply = x.role == "assistant";
    add(p, replace_all(before, "{role}", x.role));
    add(p, x.content + replace_all(after, "{role}", x.role), reply);
  }
  if (gen) add(p, replace_all(before, "{role}", "assistant"));
  return p;
}

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

}  // namespace

const std::vector<std::string>& ChatFormat::names() {
  static const std::vector<std::string> n{"chatml", "llama3", "mistral", "gemma", "deepseek-v3"};
  return n;
}

ChatFormat ChatFormat::named(const std::string& name) {
  static const Kind kinds[] = {Kind::chatml, Kind::llama3, Kind::mistral, Kind::gemma,
                               Kind::deepseek_v3};
  for (size_t i = 0; i < names().size(); ++i)
    if (names()[i] == name) return ChatFormat(kinds[i], name);
  throw UsageError("unknown chat format '" + name + "' (known: " + known() +
                   ", or a plain template with {role} and {content})");
}

std::string ChatFormat::known() {
  std::string list;
  for (const std::string& n : names()) list += (list.empty() ? "" : ", ") + n;
  return list;
}

std::string ChatFormat::template_in(const std::filesystem::path& config, const std::string& who) {
  if (!std::filesystem::exists(config)) return "";
  std::ifstream f(config);
  if (!f) throw UsageError(who + ": cannot read " + config.string());
  nlohmann::json cfg;
  try {
    cfg = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(who + ": " + config.string() + " is not JSON: " + e.what());
  }
  if (!cfg.is_object() || !cfg.contains("chat_template") || !cfg["chat_template"].is_string())
    return "";
  return cfg["chat_template"].get<std::string>();
}

ChatFormat ChatFormat::plain(const std::string& tmpl) {
  const size_t at = tmpl.find("{content}");
  if (at == std::string::npos || tmpl.find("{content}", at + 1) != std::string::npos)
    throw UsageError("chat template '" + tmpl + "' needs {content} exactly once");
  return ChatFormat(Kind::plain, "template", tmpl);
}

std::string ChatFormat::recognise(const std::string& jinja) {
  // Without whitespace, nor the escape \n inside Jinja's strings (a newline written either
  // way renders the same): the templates differ in their indentation and such spellings.
  std::string t;
  for (size_t i = 0; i < jinja.size(); ++i) {
    const char c = jinja[i];
    if (c == '\\' && i + 1 < jinja.size() && jinja[i + 1] == 'n') {
      ++i;
    } else if (c != ' ' && c != '\n' && c != '\t' && c != '\r') {
      t += c;
    }
  }
  if (has(t, "<|im_start|>") &&
      has(t, "YouareQwen,createdbyAlibabaCloud.Youareahelpfulassistant.") && !has(t, "<think>"))
    return "chatml";
  if (has(t, "<|start_header_id|>") && has(t, "message['content']|trim+'<|eot_id|>'") &&
      !has(t, "CuttingKnowledgeDate") && !has(t, "<|image|>"))
    return "llama3";
  if (has(t, "'[INST]'+message['content']+'[/INST]'") && has(t, "message['content']+eos_token}}") &&
      has(t, "Onlyuserandassistantrolesaresupported!"))
    return "mistral";
  if (has(t, "<start_of_turn>") && has(t, "Systemrolenotsupported") &&
      has(t, "message['content']|trim+'<end_of_turn>'"))
    return "gemma";
  if (has(t, "<｜User｜>") && has(t, "<｜Assistant｜>") && !has(t, "think>") &&
      has(t, "ns.system_prompt=ns.system_prompt+''+message['content']"))
    return "deepseek-v3";
  return "";
}

std::vector<ChatPiece> ChatFormat::render(const std::vector<ChatMessage>& m, bool gen) const {
  switch (kind_) {
    case Kind::chatml:
      return chatml(m, gen);
    case Kind::llama3:
      return llama3(m, gen);
    case Kind::mistral:
      return mistral(m);
    case Kind::gemma:
      return gemma(m, gen);
    case Kind::deepseek_v3:
      return deepseek_v3(m, gen);
    case Kind::plain:
      break;
  }
  return plain_render(template_, m, gen);
}

std::string ChatFormat::stop() const {
  switch (kind_) {
    case Kind::chatml:
      return "<|im_end|>";
    case Kind::llama3:
      return "<|eot_id|>";
    case Kind::mistral:
      return "</s>";
    case Kind::gemma:
      return "<end_of_turn>";
    case Kind::deepseek_v3:
      return "<｜end▁of▁sentence｜>";
    case Kind::plain:
      break;
  }
  return trim(template_.substr(template_.find("{content}") + 9));
}

namespace {

std::string text_of(const nlohmann::json& j, const std::string& what) {
  if (!j.is_string())
    throw std::invalid_argument(what + " is a " + j.type_name() + ", not a string");
  return j.get<std::string>();
}

// The messages of list `key` of `line` ("messages", or a preference pair's member).
std::vector<ChatMessage> messages_of(const nlohmann::json& list, const std::string& key) {
  if (!list.is_array() || list.empty())
    throw std::invalid_argument("\"" + key + "\" must be a non-empty list of {role, content}");
  std::vector<ChatMessage> m;
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& x = list[i];
    const std::string at = key + "[" + std::to_string(i) + "]";
    if (!x.is_object() || !x.contains("role"))
      throw std::invalid_argument(at + " must be an object with a role and a content");
    const std::string role = text_of(x["role"], at + ".role");
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      throw std::invalid_argument(at + ".role '" + role +
                                  "' is none of system, user, assistant, tool");
    if (x.contains("tool_calls") && !x["tool_calls"].is_null())
      throw std::invalid_argument(at + " has tool_calls, which no chat format here renders");
    if (!x.contains("content")) throw std::invalid_argument(at + " has no content");
    m.push_back({role, text_of(x["content"], at + ".content")});
  }
  return m;
}

// A string as one turn of `role`, or a list of messages.
std::vector<ChatMessage> turns_of(const nlohmann::json& j, const std::string& key,
                                  const char* role) {
  if (j.is_string()) return {{role, j.get<std::string>()}};
  return messages_of(j, key);
}

}  // namespace

std::vector<ChatMessage> parse_conversation(const nlohmann::json& line) {
  if (!line.is_object())
    throw std::invalid_argument("expected a JSON object, got " + std::string(line.type_name()));
  if (auto it = line.find("messages"); it != line.end()) return messages_of(*it, "messages");
  if (line.contains("prompt") && line.contains("completion"))
    return {{"user", text_of(line["prompt"], "\"prompt\"")},
            {"assistant", text_of(line["completion"], "\"completion\"")}};
  throw std::invalid_argument(
      "no \"messages\" (a conversation) nor \"prompt\" and \"completion\" (a pair)");
}

std::pair<std::vector<ChatMessage>, std::vector<ChatMessage>> parse_preference(
    const nlohmann::json& line) {
  if (!line.is_object())
    throw std::invalid_argument("expected a JSON object, got " + std::string(line.type_name()));
  for (const char* key : {"prompt", "chosen", "rejected"})
    if (!line.contains(key))
      throw std::invalid_argument(std::string("a preference pair needs \"prompt\", \"chosen\" "
                                              "and \"rejected\"; no \"") +
                                  key + "\"");
  std::vector<ChatMessage> chosen = turns_of(line["prompt"], "prompt", "user");
  std::vector<ChatMessage> rejected = chosen;
  for (const ChatMessage& x : turns_of(line["chosen"], "chosen", "assistant")) chosen.push_back(x);
  for (const ChatMessage& x : turns_of(line["rejected"], "rejected", "assistant"))
    rejected.push_back(x);
  return {chosen, rejected};
}

std::string join_text(const std::vector<ChatPiece>& pieces) {
  std::string s;
  for (const ChatPiece& p : pieces) s += p.text;
  return s;
}

}  // namespace loom::engine
