#include "data/preprocess_chat.hpp"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/errors.hpp"

namespace loom::engine {

ChatFormat chat_format_of(const std::string& format, const std::string& plain_template,
                          const std::string& command) {
  if (!format.empty() && !plain_template.empty())
    throw UsageError(command + ": --chat-format and --chat-template are alternatives");
  if (!plain_template.empty()) return ChatFormat::plain(plain_template);
  if (!format.ends_with(".json")) return ChatFormat::named(format);
  const std::string flag = command + ": --chat-format";
  if (!std::filesystem::exists(format)) throw UsageError(flag + ": cannot read " + format);
  const std::string jinja = ChatFormat::template_in(format, flag);
  if (jinja.empty())
    throw UsageError(flag + ": " + format +
                     " has no chat_template string (a tokenizer_config.json has one)");
  const std::string name = ChatFormat::recognise(jinja);
  if (name.empty())
    throw UsageError(flag + ": the chat_template of " + format + " is none of the known formats (" +
                     ChatFormat::known() +
                     "); name one with --chat-format or give --chat-template TEXT");
  return ChatFormat::named(name);
}

namespace {

void encode_chat(const ChatFormat& format, Tokenizer& tok, const std::vector<ChatMessage>& m,
                 int64_t eod, std::vector<int32_t>& ids, std::vector<int32_t>& mask) {
  const std::vector<ChatPiece> pieces = format.render(m);
  const std::string text = join_text(pieces);
  auto [all, n] = tok.encode(text.data(), text.size());
  ids.assign(all, all + n);
  mask.assign(n, 0);
  size_t start = 0, end_char = 0;  // tokens [start, ...) and characters [.., end_char)
  for (size_t k = 0; k < pieces.size(); ++k) {
    end_char += pieces[k].text.size();
    size_t stop = n;
    if (k + 1 < pieces.size()) {  // where the text up to this piece's end stops agreeing
      auto [pre, m] = tok.encode(text.data(), end_char);
      stop = static_cast<size_t>(std::mismatch(pre, pre + std::min(m, n), ids.data()).first - pre);
      stop = std::max(stop, start);
    }
    std::fill(mask.begin() + (ptrdiff_t)start, mask.begin() + (ptrdiff_t)stop,
              pieces[k].trained ? 1 : 0);
    start = stop;
  }
  if (eod >= 0) {  // packed conversations end at it (data.pack_sequences); not trained
    ids.push_back(static_cast<int32_t>(eod));
    mask.push_back(0);
  }
}

}  // namespace

std::vector<std::string> chat_output_keys(bool preference) {
  if (preference) return {"chosen", "chosen_loss_mask", "rejected", "rejected_loss_mask"};
  return {"chat", "chat_loss_mask"};
}

std::vector<std::vector<int32_t>> encode_chat_line(const ChatFormat& format, Tokenizer& tok,
                                                   const nlohmann::json& line, bool preference,
                                                   int64_t eod) {
  std::vector<std::vector<ChatMessage>> convs;
  if (preference) {
    auto [chosen, rejected] = parse_preference(line);
    convs = {std::move(chosen), std::move(rejected)};
  } else {
    convs = {parse_conversation(line)};
  }
  std::vector<std::vector<int32_t>> out(2 * convs.size());
  for (size_t k = 0; k < convs.size(); ++k)
    encode_chat(format, tok, convs[k], eod, out[2 * k], out[2 * k + 1]);
  return out;
}

}  // namespace loom::engine
