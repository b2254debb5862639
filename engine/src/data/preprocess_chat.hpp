// `loom preprocess --chat-format`: conversations (data/chat_format.hpp) rendered in a model
// family's chat format and tokenised whole, with a loss mask of the same length that marks
// the tokens SFT trains on: `<prefix>_chat_document.{bin,idx}` holds the ids and
// `<prefix>_chat_loss_mask_document.{bin,idx}` (uint8, 1 = trained) the mask, one document
// per conversation in both. Preference pairs (DPO's data) write the chosen and the rejected
// conversation of each line to `<prefix>_chosen_*` and `<prefix>_rejected_*` alike, document
// i of one paired with document i of the other.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "data/chat_format.hpp"
#include "data/preprocess_tokenizer.hpp"

namespace loom::engine {

// --chat-format NAME (chatml, llama3, ...) or a Hugging Face tokenizer_config.json whose
// chat_template is one of them; --chat-template TEXT (a plain template). Throws UsageError.
ChatFormat chat_format_of(const std::string& format, const std::string& plain_template,
                          const std::string& command);

// The outputs of a chat run, in encode_chat_line's order: chat, chat_loss_mask; or for
// preference pairs (--preference-pairs) chosen, chosen_loss_mask, rejected, rejected_loss_mask.
std::vector<std::string> chat_output_keys(bool preference);

// One line's arrays in chat_output_keys' order: each conversation's token ids and its loss
// mask (0/1 per id), with `eod` (>= 0) appended untrained. The rendered text is tokenised
// whole, as the model reads it; a piece's tokens begin where the tokens of the text before
// it stop agreeing with the whole's (a token across a boundary belongs to the later piece).
// Throws std::invalid_argument (a malformed line) or ChatRefused (the format's refusal).
std::vector<std::vector<int32_t>> encode_chat_line(const ChatFormat& format, Tokenizer& tok,
                                                   const nlohmann::json& line, bool preference,
                                                   int64_t eod);

}  // namespace loom::engine
