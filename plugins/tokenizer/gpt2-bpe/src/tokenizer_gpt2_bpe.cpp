// tokenizer/gpt2-bpe: GPT-2's byte-level BPE, id for id what Megatron-LM's GPT2BPETokenizer
// produces. vocab_size is the unpadded vocabulary (50257 for GPT-2; the model pads it) and
// the end-of-document id is that of "<|endoftext|>" (50256). As in Megatron, the text
// "<|endoftext|>" is not special when encoding: it is BPE-encoded like any other text.
//
// encode: pre-tokenise (pretokenizer.hpp), then BPE each chunk (bpe_model.hpp), with a
// bounded cache of chunk -> ids in front of the merge loop. Any bytes encode, invalid
// UTF-8 included (see pretokenizer.hpp for how it is split), and decode returns exactly
// the bytes encoded: unlike Megatron's detokenize (which decodes UTF-8 with
// errors='replace'), decode never alters bytes; ids are concatenated as raw bytes.
//
// Results live in the instance and stay valid until its next call (tokenizer.h); encode
// and decode use separate buffers, so decode can take encode's result directly.
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bpe_model.hpp"
#include "loom/cpp/plugin.hpp"
#include "loom/cpp/tokenizer.hpp"
#include "pretokenizer.hpp"

namespace {

// chunk bytes -> ids, in front of the merge loop. Bounded: emptied when it holds
// kMaxWords chunks; chunks over kMaxBytes are not kept (long runs are rare and would
// dominate the memory). Natural text repeats few distinct words, so most chunks hit.
class ChunkCache {
 public:
  static constexpr size_t kMaxWords = 1 << 16;
  static constexpr size_t kMaxBytes = 64;

  // Appends the ids of `chunk` to `out` and returns true when it is cached.
  bool lookup(std::string_view chunk, std::vector<int32_t>& out) const {
    auto it = map_.find(chunk);
    if (it == map_.end()) return false;
    const int32_t* ids = arena_.data() + it->second.first;
    out.insert(out.end(), ids, ids + it->second.second);
    return true;
  }
  void insert(std::string_view chunk, const int32_t* ids, size_t n) {
    if (chunk.size() > kMaxBytes) return;
    if (map_.size() >= kMaxWords) {
      map_.clear();
      arena_.clear();
    }
    map_.emplace(std::string(chunk),
                 std::make_pair(static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(n)));
    arena_.insert(arena_.end(), ids, ids + n);
  }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  // value: (offset, count) of the ids in arena_
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, Hash, std::equal_to<>> map_;
  std::vector<int32_t> arena_;
};

class Gpt2BpeTokenizer {
 public:
  Gpt2BpeTokenizer(const loom_host* host, const std::string& vocab_file,
                   const std::string& merge_file)
      : host_(host), model_(vocab_file, merge_file) {
    loom::log(host, LOOM_LOG_INFO,
              std::to_string(model_.vocab_size()) + " tokens from " + vocab_file +
                  ", merges from " + merge_file + ", end-of-document id " +
                  std::to_string(model_.eod_id()) +
                  (pre_.jit() ? "" : "; PCRE2 JIT unavailable, using the interpreter"));
  }
  const loom_host* host() const { return host_; }
  int64_t vocab_size() const { return model_.vocab_size(); }
  int64_t eod_id() const { return model_.eod_id(); }

  void encode(const char* text, size_t len, const int32_t** ids, size_t* num_ids) {
    loom::require(text != nullptr || len == 0, "tokenizer/gpt2-bpe: encode got NULL text");
    ids_.clear();
    ids_.reserve(len / 3 + 16);  // English runs ~4 bytes per token
    const std::string_view all(text, len);
    for (size_t pos = 0; pos < len;) {
      const size_t end = pre_.next_chunk(all, pos);
      const std::string_view chunk = all.substr(pos, end - pos);
      pos = end;
      if (chunk.size() == 1 || !cache_.lookup(chunk, ids_)) {
        const size_t before = ids_.size();
        model_.encode_chunk(chunk, scratch_, ids_);
        if (chunk.size() > 1) cache_.insert(chunk, ids_.data() + before, ids_.size() - before);
      }
    }
    static const int32_t kNone = 0;
    *ids = ids_.empty() ? &kNone : ids_.data();  // a valid pointer even for no ids
    *num_ids = ids_.size();
  }

  void decode(const int32_t* ids, size_t num_ids, const char** text, size_t* len) {
    loom::require(ids != nullptr || num_ids == 0, "tokenizer/gpt2-bpe: decode got NULL ids");
    const int64_t vocab = model_.vocab_size();
    text_.clear();
    text_.reserve(num_ids * 4);
    for (size_t i = 0; i < num_ids; ++i) {
      const int32_t id = ids[i];
      if (id < 0 || id >= vocab)
        throw loom::Error(LOOM_ERR_INVALID_ARGUMENT,
                          "tokenizer/gpt2-bpe: id " + std::to_string(id) + " at position " +
                              std::to_string(i) + " is outside the vocabulary [0, " +
                              std::to_string(vocab) + ")");
      text_ += model_.token_bytes(id);
    }
    *text = text_.c_str();  // NUL-terminated as a convenience; `len` is authoritative
    *len = text_.size();
  }

 private:
  const loom_host* host_;
  gpt2bpe::BpeModel model_;
  gpt2bpe::Pretokenizer pre_;
  gpt2bpe::BpeModel::Scratch scratch_;
  ChunkCache cache_;
  std::vector<int32_t> ids_;
  std::string text_;
};

loom_error* create(const loom_host* host, const loom_config* cfg, loom_tokenizer** out) {
  return loom::guard(host, [&] {
    loom::Config c(host, cfg);
    *out = reinterpret_cast<loom_tokenizer*>(
        new Gpt2BpeTokenizer(host, c.get_string("vocab_file"), c.get_string("merge_file")));
  });
}
const loom_tokenizer_api kApi = loom::TokenizerTable<Gpt2BpeTokenizer>::api(create);

const loom_param_spec kParams[] = {
    loom::param("vocab_file", LOOM_PARAM_STRING, nullptr,
                "GPT-2's vocab.json, token -> id (relative to the working directory)"),
    loom::param("merge_file", LOOM_PARAM_STRING, nullptr,
                "GPT-2's merges.txt, one merge per line in rank order (relative to the working "
                "directory)"),
};

}  // namespace

LOOM_PLUGIN(.description =
                "GPT-2 byte-level BPE, as Megatron's GPT2BPETokenizer; EOD = <|endoftext|>; any "
                "bytes round-trip",
            .params = kParams, .api = &kApi)
