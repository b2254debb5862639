// GPT-2's reversible byte <-> character map. vocab.json and merges.txt spell every token as
// characters, one per byte: bytes 33-126, 161-172 and 174-255 are written as the code
// point of the same value, and the 68 others (controls, space, DEL, NBSP, soft hyphen, ...)
// as U+0100, U+0101, ... in ascending byte order, so space (0x20) is U+0120 'Ġ'. The plugin
// turns every token back into raw bytes when it loads the files and works on bytes after.
#pragma once

#include <array>
#include <cstdint>

namespace gpt2bpe {

// Smallest code point outside the map's image: every mapped character is below it.
inline constexpr char32_t kMappedLimit = 256 + 68;

constexpr bool keeps_code_point(unsigned b) {
  return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

constexpr std::array<char32_t, 256> make_byte_to_char() {
  std::array<char32_t, 256> m{};
  char32_t next = 256;
  for (unsigned b = 0; b < 256; ++b) m[b] = keeps_code_point(b) ? b : next++;
  return m;
}

// The character byte b is written as.
inline constexpr std::array<char32_t, 256> kByteToChar = make_byte_to_char();

constexpr std::array<int16_t, kMappedLimit> make_char_to_byte() {
  std::array<int16_t, kMappedLimit> m{};
  for (auto& v : m) v = -1;
  for (unsigned b = 0; b < 256; ++b) m[kByteToChar[b]] = static_cast<int16_t>(b);
  return m;
}

// The byte character c stands for, or -1 when c is not in the map.
inline int char_to_byte(char32_t c) {
  static constexpr std::array<int16_t, kMappedLimit> kInverse = make_char_to_byte();
  return c < kMappedLimit ? kInverse[c] : -1;
}

}  // namespace gpt2bpe
