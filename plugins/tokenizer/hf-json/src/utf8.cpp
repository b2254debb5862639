// UTF-8 decoding/encoding and the byte-level alphabet; see utf8.hpp.
#include "utf8.hpp"

namespace hfjson {

size_t next_code_point(std::string_view s, size_t i, char32_t& cp) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  cp = 0xFFFD;
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  size_t need = 0;
  char32_t v = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
    v = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    v = c & 0x0F;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    v = c & 0x07;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 1;  // a continuation byte or an impossible lead byte
  }
  size_t k = 1;
  for (; k <= need; ++k) {
    if (i + k >= s.size()) return k;
    const unsigned char t = b(i + k);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (t < l || t > h) return k;  // the maximal subpart ends before this byte
    v = (v << 6) | (t & 0x3F);
  }
  cp = v;
  return k;
}

namespace {

// Calls fn(i, n, cp) for each code point of s in order: cp from the bytes [i, i + n), as
// next_code_point reads it (U+FFFD for each maximal subpart of an ill-formed sequence).
template <class Fn>
void for_each_code_point(std::string_view s, Fn fn) {
  for (size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    const size_t n = next_code_point(s, i, cp);
    fn(i, n, cp);
    i += n;
  }
}

}  // namespace

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for_each_code_point(s, [&](size_t i, size_t n, char32_t cp) {
    if (cp == 0xFFFD && !(n == 3 && s.compare(i, 3, "\xEF\xBF\xBD") == 0))
      append_utf8(out, cp);
    else
      out.append(s.substr(i, n));
  });
  return out;
}

std::u32string to_u32(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for_each_code_point(s, [&](size_t, size_t, char32_t cp) { out.push_back(cp); });
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string to_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

bool is_white_space(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0D) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

const std::array<char32_t, 256>& byte_to_char() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      t[b] = keep ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

int char_to_byte(char32_t c) {
  static const std::array<int, 324> inverse = [] {
    std::array<int, 324> inv{};
    inv.fill(-1);
    for (int b = 0; b < 256; ++b) inv[byte_to_char()[b]] = b;
    return inv;
  }();
  return c < inverse.size() ? inverse[c] : -1;
}

}  // namespace hfjson
