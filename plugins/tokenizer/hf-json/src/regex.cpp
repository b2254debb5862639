// PCRE2 behind hfjson::Regex; see regex.hpp.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "regex.hpp"

#include <pcre2.h>

#include "loom/cpp/plugin.hpp"

namespace hfjson {

struct Regex::Impl {
  pcre2_code* code = nullptr;
  pcre2_match_data* match = nullptr;
  ~Impl() {
    pcre2_match_data_free(match);
    pcre2_code_free(code);
  }
};

Regex::Regex(const std::string& pattern, bool literal, const std::string& where)
    : impl_(std::make_unique<Impl>()) {
  // PCRE2_LITERAL admits no UCP (nothing to interpret there anyway).
  const uint32_t options = PCRE2_UTF | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  int err = 0;
  PCRE2_SIZE offset = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                              &err, &offset, nullptr);
  if (impl_->code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    throw loom::Error(LOOM_ERR_INVALID_ARGUMENT,
                      where + ": regex \"" + pattern + "\" does not compile at offset " +
                          std::to_string(offset) + ": " + reinterpret_cast<const char*>(msg));
  }
  pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);  // optional: falls back to the interpreter
  impl_->match = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  if (impl_->match == nullptr) throw std::bad_alloc();
}

Regex::~Regex() = default;

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view s) const {
  std::vector<std::pair<size_t, size_t>> out;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t start = 0;
  while (start <= s.size()) {
    const int rc = pcre2_match(impl_->code, subject, s.size(), start, PCRE2_NO_UTF_CHECK,
                               impl_->match, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      throw loom::Error(LOOM_ERR_INTERNAL, std::string("tokenizer/hf-json: regex match failed: ") +
                                               reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(impl_->match);
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      out.emplace_back(b, e);
      start = e;
    } else {
      // Empty match: step over one whole character.
      if (b >= s.size()) break;
      size_t next = b + 1;
      while (next < s.size() && (static_cast<unsigned char>(s[next]) & 0xC0) == 0x80) ++next;
      start = next;
    }
  }
  return out;
}

}  // namespace hfjson
