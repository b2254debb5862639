// GPT-2's pre-tokeniser: the text is cut into chunks by the regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (PCRE2, UTF + UCP, JIT-compiled when the platform has a JIT), and each chunk is then
// byte-pair encoded on its own.
//
// Fidelity to the Python `regex` module that GPT-2 and Megatron use:
//  - `\s` is written out as the Unicode White_Space set, which is what `regex` matches;
//    PCRE2's own `\s` also takes U+180E (MONGOLIAN VOWEL SEPARATOR).
//  - \p{L} and \p{N} follow PCRE2's Unicode tables (14.0 in PCRE2 10.42); characters added
//    in later Unicode versions may classify differently from a newer `regex`.
// Invalid UTF-8: the pattern is compiled with PCRE2_MATCH_INVALID_UTF, so an invalid
// sequence is a barrier no match crosses (to the regex it looks like the end of the text).
// Every valid character matches some alternative, so what lies between two matches is a
// maximal run of invalid bytes; that run becomes one chunk of its own. Encoding is thus
// lossless for any bytes, and text that is valid UTF-8 is split exactly as GPT-2 splits it.
#pragma once

#include <cstddef>
#include <string_view>

struct pcre2_real_code_8;
struct pcre2_real_match_data_8;
struct pcre2_real_match_context_8;
struct pcre2_real_jit_stack_8;

namespace gpt2bpe {

class Pretokenizer {
 public:
  // Compiles the pattern; throws loom::Error (LOOM_ERR_INTERNAL) if PCRE2 refuses it.
  Pretokenizer();
  ~Pretokenizer();
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  // Whether matching runs JIT-compiled code (else PCRE2's interpreter).
  bool jit() const { return jit_; }

  // The end of the chunk that starts at `pos` (pos < text.size()). Successive calls from 0,
  // each starting where the last chunk ended, tile the whole text. Not thread-safe (the
  // match data is reused); throws loom::Error if PCRE2 reports an error.
  size_t next_chunk(std::string_view text, size_t pos);

 private:
  void release() noexcept;

  pcre2_real_code_8* code_ = nullptr;
  pcre2_real_match_data_8* match_ = nullptr;
  pcre2_real_match_context_8* context_ = nullptr;
  pcre2_real_jit_stack_8* jit_stack_ = nullptr;
  bool jit_ = false;
};

}  // namespace gpt2bpe
