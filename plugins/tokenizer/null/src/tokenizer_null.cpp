// tokenizer/null: the text already is the ids, written as decimal integers separated by
// whitespace ("12 7 0 3"), as Megatron-LM's NullTokenizer reads it. For pre-tokenised data
// and for tests that need exact ids without a vocabulary file.
//
// Ids, as in Megatron (NullTokenizer(vocab_size)): the recipe's `vocab_size` = N counts the
// ordinary ids 0..N-1; the end-of-document id is N, and the vocabulary this plugin reports
// is N + 1 (Megatron's `vocab_size` property is also N + 1).
//
// encode accepts 0..N (EOD included, so decode's output encodes back to the same ids);
// anything else - not a decimal integer, negative, above N - is an error naming the text
// and its byte offset. Whitespace is ASCII space, tab, CR, LF, VT, FF; empty or blank text
// gives no ids. decode writes the ids in decimal separated by single spaces (EOD too, as
// Megatron's detokenize does), so encode(decode(ids)) == ids; decode(encode(text)) is the
// text with its whitespace normalised. Results live in the instance and stay valid until
// its next call (tokenizer.h); encode and decode use separate buffers.
#include <charconv>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "loom/cpp/plugin.hpp"
#include "loom/cpp/tokenizer.hpp"

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// `s` in quotes, shortened and with non-printable bytes escaped, for messages.
std::string quote(std::string_view s) {
  constexpr size_t kMax = 40;
  std::string q = "'";
  for (size_t i = 0; i < s.size() && i < kMax; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      q += buf;
    } else {
      q.push_back(static_cast<char>(c));
    }
  }
  return q + (s.size() > kMax ? "...'" : "'");
}

class NullTokenizer {
 public:
  NullTokenizer(const loom_host* host, int64_t n) : host_(host), eod_(n) {}
  const loom_host* host() const { return host_; }
  int64_t vocab_size() const { return eod_ + 1; }
  int64_t eod_id() const { return eod_; }

  void encode(const char* text, size_t len, const int32_t** ids, size_t* num_ids) {
    loom::require(text != nullptr || len == 0, "tokenizer/null: encode got NULL text");
    ids_.clear();
    for (size_t pos = 0; pos < len;) {
      if (is_space(text[pos])) {
        ++pos;
        continue;
      }
      size_t end = pos;
      while (end < len && !is_space(text[end])) ++end;
      ids_.push_back(parse(std::string_view(text + pos, end - pos), pos));
      pos = end;
    }
    static const int32_t kNone = 0;
    *ids = ids_.empty() ? &kNone : ids_.data();  // a valid pointer even for no ids
    *num_ids = ids_.size();
  }

  void decode(const int32_t* ids, size_t num_ids, const char** text, size_t* len) {
    loom::require(ids != nullptr || num_ids == 0, "tokenizer/null: decode got NULL ids");
    text_.clear();
    char buf[16];
    for (size_t i = 0; i < num_ids; ++i) {
      if (ids[i] < 0 || ids[i] > eod_)
        throw loom::Error(LOOM_ERR_INVALID_ARGUMENT,
                          "tokenizer/null: id " + std::to_string(ids[i]) + " at position " +
                              std::to_string(i) + " is outside the vocabulary [0, " +
                              std::to_string(vocab_size()) + ")");
      auto r = std::to_chars(buf, buf + sizeof buf, ids[i]);
      if (i > 0) text_.push_back(' ');
      text_.append(buf, r.ptr);
    }
    *text = text_.c_str();  // NUL-terminated as a convenience; `len` is authoritative
    *len = text_.size();
  }

 private:
  // `word`: a non-empty run of non-space bytes that starts at byte `offset` of the text.
  int32_t parse(std::string_view word, size_t offset) const {
    const std::string where = " at byte " + std::to_string(offset);
    const bool negative = word[0] == '-';
    const std::string_view digits = word.substr(negative ? 1 : 0);
    bool ok = !digits.empty();
    for (char c : digits) ok = ok && c >= '0' && c <= '9';
    if (!ok)
      throw loom::Error(LOOM_ERR_INVALID_ARGUMENT,
                        "tokenizer/null: " + quote(word) + where +
                            " is not an id; the text must be decimal integers separated by "
                            "whitespace");
    int64_t v = 0;
    auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (negative || r.ec != std::errc() || v > eod_)
      throw loom::Error(LOOM_ERR_INVALID_ARGUMENT,
                        "tokenizer/null: id " + quote(word) + where +
                            " is out of range: ids are 0.." + std::to_string(eod_ - 1) +
                            " and the EOD id " + std::to_string(eod_) +
                            " ([tokenizer] vocab_size " + std::to_string(eod_) + ")");
    return static_cast<int32_t>(v);
  }

  const loom_host* host_;
  int64_t eod_;  // = the recipe's vocab_size
  std::vector<int32_t> ids_;
  std::string text_;
};

constexpr int64_t kMaxVocab = std::numeric_limits<int32_t>::max() - 1;  // EOD must fit

loom_error* create(const loom_host* host, const loom_config* cfg, loom_tokenizer** out) {
  return loom::guard(host, [&] {
    loom::Config c(host, cfg);
    const int64_t n = c.get_int("vocab_size");
    loom::require(n >= 1 && n <= kMaxVocab, "tokenizer/null: [tokenizer] vocab_size " +
                                                std::to_string(n) + " must be between 1 and " +
                                                std::to_string(kMaxVocab));
    *out = reinterpret_cast<loom_tokenizer*>(new NullTokenizer(host, n));
  });
}
const loom_tokenizer_api kApi = loom::TokenizerTable<NullTokenizer>::api(create);

const loom_param_spec kParams[] = {
    loom::param("vocab_size", LOOM_PARAM_INT, nullptr,
                "ordinary ids 0..vocab_size-1; EOD is vocab_size, so the vocabulary is "
                "vocab_size + 1 (as Megatron's NullTokenizer)",
                1, static_cast<double>(kMaxVocab)),
};

}  // namespace

LOOM_PLUGIN(.description =
                "the text is the ids, as whitespace-separated integers (Megatron's NullTokenizer)",
            .params = kParams, .api = &kApi)
