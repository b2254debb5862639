// BERT's basic tokenizer over utf8proc's character database; see bert_basic.hpp.
#include "bert_basic.hpp"

#include <utf8proc.h>

#include <algorithm>

namespace wordpiece {
namespace {

utf8proc_category_t category(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}

bool is_control_category(utf8proc_category_t cat) {
  return cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF ||
         cat == UTF8PROC_CATEGORY_CN || cat == UTF8PROC_CATEGORY_CO || cat == UTF8PROC_CATEGORY_CS;
}

// BERT's _is_whitespace.
bool is_bert_whitespace(char32_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || category(c) == UTF8PROC_CATEGORY_ZS;
}

// BERT's _is_control: the C* categories, except the three whitespace controls.
bool is_bert_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  return is_control_category(category(c));
}

bool is_cjk(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool is_punctuation(char32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
      (c >= 123 && c <= 126))
    return true;
  switch (category(c)) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      return true;
    default:
      return false;
  }
}

bool is_cased(char32_t c) {
  const utf8proc_category_t cat = category(c);
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

bool is_case_ignorable(char32_t c) {
  switch (c) {
    case 0x0027:
    case 0x002E:
    case 0x003A:
    case 0x00B7:
    case 0x0387:
    case 0x05F4:
    case 0x2018:
    case 0x2019:
    case 0x2024:
    case 0x2027:
    case 0xFE13:
    case 0xFE52:
    case 0xFE55:
    case 0xFF07:
    case 0xFF0E:
    case 0xFF1A:
      return true;
    default:
      break;
  }
  const utf8proc_category_t cat = category(c);
  return cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_ME ||
         cat == UTF8PROC_CATEGORY_CF || cat == UTF8PROC_CATEGORY_LM || cat == UTF8PROC_CATEGORY_SK;
}

// Python's rule for U+03A3: final form when a cased letter precedes it (skipping
// case-ignorables) and none follows it (likewise).
bool final_sigma(const std::u32string& w, size_t i) {
  size_t j = i;
  while (j > 0 && is_case_ignorable(w[j - 1])) --j;
  if (j == 0 || !is_cased(w[j - 1])) return false;
  size_t k = i + 1;
  while (k < w.size() && is_case_ignorable(w[k])) ++k;
  return k == w.size() || !is_cased(w[k]);
}

std::u32string python_lower(const std::u32string& w) {
  std::u32string out;
  out.reserve(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    const char32_t c = w[i];
    if (c == 0x0130) {
      out.push_back(U'i');
      out.push_back(0x0307);
    } else if (c == 0x03A3) {
      out.push_back(final_sigma(w, i) ? 0x03C2 : 0x03C3);
    } else {
      out.push_back(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
    }
  }
  return out;
}

// NFD (full canonical decomposition, then canonical ordering of combining marks) with
// every Mn dropped.
std::u32string nfd_strip_marks(const std::u32string& w) {
  std::u32string out;
  utf8proc_int32_t buf[32];
  for (char32_t c : w) {
    const utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), buf, 32,
                                                       UTF8PROC_DECOMPOSE, nullptr);
    if (n < 0 || n > 32) {
      out.push_back(c);  // cannot happen for valid code points; keep the character
      continue;
    }
    for (utf8proc_ssize_t k = 0; k < n; ++k) out.push_back(static_cast<char32_t>(buf[k]));
  }
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  auto ccc = [](char32_t c) {
    return utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class;
  };
  for (size_t i = 0; i < out.size();) {
    if (ccc(out[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < out.size() && ccc(out[j]) != 0) ++j;
    std::stable_sort(out.begin() + i, out.begin() + j,
                     [&](char32_t a, char32_t b) { return ccc(a) < ccc(b); });
    i = j;
  }
  std::u32string kept;
  kept.reserve(out.size());
  for (char32_t c : out)
    if (category(c) != UTF8PROC_CATEGORY_MN) kept.push_back(c);
  return kept;
}

}  // namespace

size_t first_invalid_utf8(std::string_view text) {
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  for (size_t i = 0; i < text.size();) {
    utf8proc_int32_t cp = 0;
    const utf8proc_ssize_t n =
        utf8proc_iterate(p + i, static_cast<utf8proc_ssize_t>(text.size() - i), &cp);
    if (n <= 0) return i;
    i += static_cast<size_t>(n);
  }
  return std::string_view::npos;
}

std::u32string decode_utf8(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(text.size());
  while (left > 0) {
    utf8proc_int32_t cp = 0;
    utf8proc_ssize_t n = utf8proc_iterate(p, left, &cp);
    if (n <= 0) {
      n = 1;
      cp = 0xFFFD;
    }
    p += n;
    left -= n;
    out.push_back(static_cast<char32_t>(cp));
  }
  return out;
}

bool is_python_space(char32_t c) {
  const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(c));
  return p->category == UTF8PROC_CATEGORY_ZS || p->bidi_class == UTF8PROC_BIDI_CLASS_WS ||
         p->bidi_class == UTF8PROC_BIDI_CLASS_B || p->bidi_class == UTF8PROC_BIDI_CLASS_S;
}

void append_utf8(std::string& out, std::u32string_view cps) {
  utf8proc_uint8_t buf[4];
  for (char32_t c : cps) {
    const utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buf);
    out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
  }
}

std::vector<std::u32string> bert_basic_split(std::string_view text, bool lower_case) {
  // Steps 1-3: decode, clean, space out CJK.
  std::u32string cleaned;
  cleaned.reserve(text.size());
  for (char32_t c : decode_utf8(text)) {
    if (c == 0 || c == 0xFFFD || is_bert_control(c)) continue;
    if (is_bert_whitespace(c)) {
      cleaned.push_back(U' ');
    } else if (is_cjk(c)) {
      cleaned.push_back(U' ');
      cleaned.push_back(c);
      cleaned.push_back(U' ');
    } else {
      cleaned.push_back(c);
    }
  }

  // Step 4: whitespace split; steps 5-6 per word.
  std::vector<std::u32string> words;
  size_t i = 0;
  while (i < cleaned.size()) {
    while (i < cleaned.size() && is_python_space(cleaned[i])) ++i;
    size_t j = i;
    while (j < cleaned.size() && !is_python_space(cleaned[j])) ++j;
    if (j == i) break;
    std::u32string word = cleaned.substr(i, j - i);
    i = j;
    if (lower_case) word = nfd_strip_marks(python_lower(word));
    std::u32string current;
    for (char32_t c : word) {
      if (is_punctuation(c)) {
        if (!current.empty()) words.push_back(std::move(current));
        current.clear();
        words.push_back(std::u32string(1, c));
      } else if (is_python_space(c)) {  // BERT re-splits on whitespace at the end
        if (!current.empty()) words.push_back(std::move(current));
        current.clear();
      } else {
        current.push_back(c);
      }
    }
    if (!current.empty()) words.push_back(std::move(current));
  }
  return words;
}

}  // namespace wordpiece
