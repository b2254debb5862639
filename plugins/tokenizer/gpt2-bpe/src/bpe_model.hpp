// The GPT-2 BPE model: the vocabulary (id <-> token bytes), the merge ranks, and the merge
// loop that turns one pre-tokenised chunk into ids. Immutable after loading; the merge loop
// works in a caller-owned Scratch, so one model can serve several tokenizer instances.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace gpt2bpe {

class BpeModel {
 public:
  // Working memory of encode_chunk, reused between calls (one per thread).
  struct Scratch {
    struct Symbol {
      int32_t id;    // token id; -1 once merged into its left neighbour
      int32_t prev;  // index of the previous live symbol, -1 at the start
      int32_t next;  // index of the next live symbol, -1 at the end
    };
    struct Candidate {
      int32_t rank;   // merge rank: lower merges first
      int32_t pos;    // index of the pair's left symbol: ties merge left to right
      int32_t left;   // ids the pair had when queued; a changed id makes the entry stale
      int32_t right;  //
      int32_t merged;
    };
    std::vector<Symbol> symbols;
    std::vector<Candidate> heap;
    std::vector<Candidate> pending;
  };

  // Reads vocab.json (token -> id, tokens spelt with the byte map) and merges.txt (an
  // optional "#version" line, then one "left right" pair per line, rank = order).
  // Throws loom::Error: LOOM_ERR_IO when a file cannot be read (naming the recipe key and
  // the path), LOOM_ERR_INVALID_ARGUMENT for malformed content (naming file and line).
  BpeModel(const std::string& vocab_path, const std::string& merges_path);

  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }
  // Id of "<|endoftext|>", or -1 when the vocabulary has none.
  int32_t eod_id() const { return eod_; }
  // The raw bytes of token `id` (0 <= id < vocab_size()).
  const std::string& token_bytes(int32_t id) const { return tokens_[static_cast<size_t>(id)]; }

  // Appends the ids of one chunk (any non-empty bytes) to `out`: start from one token per
  // byte, then repeatedly take the lowest-ranked adjacent pair and merge every occurrence
  // of it, left to right without overlap, until no adjacent pair has a rank.
  void encode_chunk(std::string_view chunk, Scratch& scratch, std::vector<int32_t>& out) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;  // id of the concatenated token
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  void load_vocab(const std::string& path, std::unordered_map<std::string, int32_t>& ids);
  void load_merges(const std::string& path, const std::unordered_map<std::string, int32_t>& ids);
  void queue_pair(Scratch& s, int32_t pos, std::vector<Scratch::Candidate>& into) const;

  std::vector<std::string> tokens_;  // id -> raw bytes
  std::array<int32_t, 256> byte_ids_{};
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank and result
  int32_t eod_ = -1;
};

}  // namespace gpt2bpe
