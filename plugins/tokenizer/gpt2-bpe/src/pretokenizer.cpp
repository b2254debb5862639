// PCRE2 setup and the chunk loop of the GPT-2 pre-tokeniser (see pretokenizer.hpp).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "pretokenizer.hpp"

#include <pcre2.h>

#include <string>

#include "loom/cpp/plugin.hpp"

namespace gpt2bpe {
namespace {

// Unicode White_Space (25 code points): Python `regex`'s `\s` on str patterns.
#define LOOM_GPT2_WS                                                                             \
  "\\t-\\r\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}" \
  "\\x{3000}"

// GPT-2's pattern with `\s` -> [WS] and `\S` -> [^WS].
const char* const kPattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" LOOM_GPT2_WS "\\p{L}\\p{N}]+|[" LOOM_GPT2_WS
    "]+(?![^" LOOM_GPT2_WS "])|[" LOOM_GPT2_WS "]+";

#undef LOOM_GPT2_WS

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  int n = pcre2_get_error_message(code, buf, sizeof buf);
  return n < 0 ? "PCRE2 error " + std::to_string(code) : std::string(reinterpret_cast<char*>(buf));
}

}  // namespace

Pretokenizer::Pretokenizer() {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  code_ =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED,
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_offset, nullptr);
  if (code_ == nullptr)
    throw loom::Error(LOOM_ERR_INTERNAL, "tokenizer/gpt2-bpe: PCRE2 refused the GPT-2 pattern at " +
                                             std::to_string(err_offset) + ": " +
                                             pcre2_message(err));
  match_ = pcre2_match_data_create_from_pattern(code_, nullptr);
  context_ = pcre2_match_context_create(nullptr);
  if (match_ == nullptr || context_ == nullptr) {
    release();
    throw std::bad_alloc();
  }
  // Without a JIT (an unsupported CPU, or PCRE2 built without one) the interpreter runs
  // the same pattern, only slower.
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
  if (jit_) {
    // Backtracking over a long run of spaces needs more than the default 32 KiB.
    jit_stack_ = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (jit_stack_ != nullptr) pcre2_jit_stack_assign(context_, nullptr, jit_stack_);
  }
}

Pretokenizer::~Pretokenizer() { release(); }

void Pretokenizer::release() noexcept {
  pcre2_jit_stack_free(jit_stack_);
  pcre2_match_context_free(context_);
  pcre2_match_data_free(match_);
  pcre2_code_free(code_);
  jit_stack_ = nullptr;
  context_ = nullptr;
  match_ = nullptr;
  code_ = nullptr;
}

size_t Pretokenizer::next_chunk(std::string_view text, size_t pos) {
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  // pcre2_jit_match skips pcre2_match's option checks: the same result, a little faster.
  const int rc = jit_ ? pcre2_jit_match(code_, subject, text.size(), pos, 0, match_, context_)
                      : pcre2_match(code_, subject, text.size(), pos, 0, match_, context_);
  if (rc == PCRE2_ERROR_NOMATCH) return text.size();  // only invalid bytes are left
  if (rc < 0)
    throw loom::Error(LOOM_ERR_INTERNAL, "tokenizer/gpt2-bpe: pre-tokenising at byte " +
                                             std::to_string(pos) + ": " + pcre2_message(rc));
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match_);
  // A match further on leaves a run of invalid bytes before it: that run is a chunk.
  if (ov[0] > pos) return ov[0];
  if (ov[1] <= pos)  // every alternative takes at least one character
    throw loom::Error(LOOM_ERR_INTERNAL, "tokenizer/gpt2-bpe: empty pre-tokeniser match");
  return ov[1];
}

}  // namespace gpt2bpe
