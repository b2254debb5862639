// The rule-based sentence splitter of `loom preprocess --split-sentences` (the rules are
// listed in docs/data.md and in preprocess_sentences.cpp).
#pragma once

#include <string_view>
#include <vector>

namespace loom::engine {

// The sentences of `text` as views into it, whitespace trimmed, empty ones dropped.
std::vector<std::string_view> split_sentences(std::string_view text);

}  // namespace loom::engine
