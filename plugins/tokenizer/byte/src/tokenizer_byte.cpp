// tokenizer/byte: every byte is its own token. Ids 0..255 are the bytes 0x00..0xFF and
// id 256 is the end-of-document token, so vocab_size is 257. Any byte string round-trips,
// including invalid UTF-8 and embedded NULs; no normalisation, no merges.
//
// decode writes the bytes of ids < 256 and the recipe's `eod_text` for id 256 (empty by
// default: EOD decodes to nothing). Any other id is an error that names the id and its
// position. Results live in the instance and stay valid until its next call (tokenizer.h).
#include <string>
#include <utility>
#include <vector>

#include "loom/cpp/plugin.hpp"
#include "loom/cpp/tokenizer.hpp"

namespace {

constexpr int32_t kEod = 256;
constexpr int64_t kVocab = 257;

class ByteTokenizer {
 public:
  ByteTokenizer(const loom_host* host, std::string eod_text)
      : host_(host), eod_text_(std::move(eod_text)) {}
  const loom_host* host() const { return host_; }
  int64_t vocab_size() const { return kVocab; }
  int64_t eod_id() const { return kEod; }

  void encode(const char* text, size_t len, const int32_t** ids, size_t* num_ids) {
    loom::require(text != nullptr || len == 0, "tokenizer/byte: encode got NULL text");
    ids_.resize(len);
    const auto* bytes = reinterpret_cast<const unsigned char*>(text);
    for (size_t i = 0; i < len; ++i) ids_[i] = bytes[i];
    // A valid pointer even for empty input: callers may not expect NULL.
    *ids = ids_.empty() ? &kEod : ids_.data();
    *num_ids = ids_.size();
  }

  void decode(const int32_t* ids, size_t num_ids, const char** text, size_t* len) {
    loom::require(ids != nullptr || num_ids == 0, "tokenizer/byte: decode got NULL ids");
    text_.clear();
    text_.reserve(num_ids);
    for (size_t i = 0; i < num_ids; ++i) {
      const int32_t id = ids[i];
      if (id >= 0 && id < kEod) {
        text_.push_back(static_cast<char>(static_cast<unsigned char>(id)));
      } else if (id == kEod) {
        text_ += eod_text_;
      } else {
        throw loom::Error(LOOM_ERR_INVALID_ARGUMENT, "tokenizer/byte: id " + std::to_string(id) +
                                                         " at position " + std::to_string(i) +
                                                         " is outside the vocabulary [0, " +
                                                         std::to_string(kVocab) + ")");
      }
    }
    *text = text_.c_str();  // NUL-terminated as a convenience; `len` is authoritative
    *len = text_.size();
  }

 private:
  const loom_host* host_;
  std::string eod_text_;
  std::vector<int32_t> ids_;
  std::string text_;
};

loom_error* create(const loom_host* host, const loom_config* cfg, loom_tokenizer** out) {
  return loom::guard(host, [&] {
    loom::Config c(host, cfg);
    *out = reinterpret_cast<loom_tokenizer*>(new ByteTokenizer(host, c.get_string("eod_text")));
  });
}
// No vocabulary of strings (token_to_id, id_to_token): bytes.
const loom_tokenizer_api kApi = loom::TokenizerTable<ByteTokenizer>::api(create);

const loom_param_spec kParams[] = {
    loom::param("eod_text", LOOM_PARAM_STRING, "",
                "what decode writes for the end-of-document id 256 (default: nothing)"),
};

}  // namespace

LOOM_PLUGIN(.description =
                "one token per byte (ids 0-255) plus end-of-document 256; lossless for any bytes",
            .params = kParams, .api = &kApi)
