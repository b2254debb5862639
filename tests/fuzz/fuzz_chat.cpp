// libFuzzer harness: what `loom preprocess --chat-format` and `loom serve`'s chat formats do
// with a line of data (data/chat_format.cpp): the JSON parsed as a conversation and as a
// preference pair, rendered in every chat format with and without the generation prompt,
// and the line as a Hugging Face chat_template to recognise. Malformed lines and the
// formats' refusals are exceptions of their kinds; anything else (a crash, a sanitizer
// report, another exception) is a finding. Checked on every rendering: the pieces are not
// empty, and every trained piece ends with the format's end-of-turn marker.
//
// Input: one JSON line (tests/fuzz/chat/seeds: the conversations of tests/data/chat).
#include <nlohmann/json.hpp>
#include <string>

#include "base/errors.hpp"
#include "data/chat_format.hpp"

namespace {

using loom::engine::ChatFormat;
using loom::engine::ChatMessage;
using loom::engine::ChatPiece;

void render_all(const std::vector<ChatMessage>& m) {
  for (const std::string& name : ChatFormat::names()) {
    const ChatFormat f = ChatFormat::named(name);
    for (bool gen : {false, true}) {
      std::vector<ChatPiece> pieces;
      try {
        pieces = f.render(m, gen);
      } catch (const loom::engine::ChatRefused&) {
        continue;
      }
      const std::string stop = f.stop();
      for (const ChatPiece& p : pieces) {
        if (p.text.empty()) __builtin_trap();
        if (p.trained && (p.text.size() < stop.size() ||
                          p.text.compare(p.text.size() - stop.size(), stop.size(), stop) != 0))
          __builtin_trap();
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)ChatFormat::recognise(text);
  nlohmann::json line;
  try {
    line = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  try {
    render_all(loom::engine::parse_conversation(line));
  } catch (const std::invalid_argument&) {
  }
  try {
    auto [chosen, rejected] = loom::engine::parse_preference(line);
    render_all(chosen);
    render_all(rejected);
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
