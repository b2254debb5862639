// tokenizer.json's BPE model: vocab, ranked merges, unk/fuse_unk, byte_fallback ("<0xXX>"
// tokens for characters outside the vocabulary), continuing_subword_prefix,
// end_of_word_suffix and ignore_merges. Merges apply lowest rank first, leftmost first
// among equal ranks (HF's Word::merge_all). dropout must be absent, null or 0 (it would
// make encoding random).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "components.hpp"

namespace hfjson {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class Bpe {
 public:
  Bpe(const json& model, const std::string& where);
  const TokenMap& vocab() const { return vocab_; }
  // Appends the ids of one pre-tokenized word.
  void encode_word(const std::string& word, std::vector<int32_t>& out);

 private:
  void merge(std::vector<int32_t>& symbols) const;

  TokenMap vocab_;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (a,b) -> (rank, id)
  int32_t unk_ = -1;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::string prefix_, suffix_;
  std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace hfjson
