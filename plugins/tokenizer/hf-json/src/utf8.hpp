// UTF-8 helpers shared by the hf-json pipeline: lossy decoding with the Unicode "maximal
// subpart" rule (one U+FFFD per maximal ill-formed subsequence, as Rust's
// String::from_utf8_lossy and Python's errors="replace" do), encoding, and GPT-2's
// byte <-> character table used by the ByteLevel pre-tokenizer and decoder.
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace hfjson {

// Decodes one code point at s[i]; returns the bytes consumed (>= 1) and sets `cp`, which is
// U+FFFD when the bytes there do not start a well-formed sequence.
size_t next_code_point(std::string_view s, size_t i, char32_t& cp);

// `s` with every ill-formed subsequence replaced by U+FFFD (s itself when valid).
std::string sanitize_utf8(std::string_view s);

std::u32string to_u32(std::string_view s);
void append_utf8(std::string& out, char32_t cp);
std::string to_utf8(std::u32string_view s);

// Unicode White_Space (Rust's char::is_whitespace).
bool is_white_space(char32_t c);

// GPT-2's bytes_to_unicode: bytes 33-126, 161-172 and 174-255 map to the same code point,
// the other 68 to 256, 257, ... in byte order.
const std::array<char32_t, 256>& byte_to_char();
// The inverse; -1 for code points that are not in the table.
int char_to_byte(char32_t c);

}  // namespace hfjson
