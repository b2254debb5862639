// Sentence splitting without a model (Megatron uses NLTK's punkt; Loom uses fixed rules so
// results never depend on a downloaded model). A boundary is placed:
//  1. after a run of sentence terminators `.`, `!`, `?` (and any closing quotes or
//     brackets right after them: " ' ) ] ” ’), when whitespace follows and the next
//     character starts a sentence: an uppercase letter (ASCII or Latin-1 À-Þ), a digit, or
//     an opening quote or bracket (" ' ( [ “ ‘) — except
//  2. not after `.` that ends a common abbreviation (Mr., Dr., e.g., etc., Jan., ...), a
//     single letter (an initial: "J. R. R. Tolkien"), or a word with inner dots ("U.S.");
//  3. and always at a blank line (a paragraph break: two newlines with only whitespace
//     between them).
// Each sentence is trimmed of surrounding whitespace; empty sentences are dropped.
#include "data/preprocess_sentences.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>

namespace loom::engine {

namespace {

bool is_space(unsigned char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Lower-case, without the trailing dot.
constexpr std::array<std::string_view, 52> kAbbreviations = {
    "mr",   "mrs",  "ms",  "dr",  "prof", "sr",  "jr",  "st",  "mt",   "rev", "hon",
    "gen",  "col",  "lt",  "sgt", "capt", "gov", "sen", "rep", "pres", "vs",  "etc",
    "al",   "inc",  "ltd", "co",  "corp", "no",  "vol", "fig", "eq",   "cf",  "approx",
    "dept", "univ", "jan", "feb", "mar",  "apr", "jun", "jul", "aug",  "sep", "sept",
    "oct",  "nov",  "dec", "e.g", "i.e",  "ca",  "op",  "p"};

// The length in bytes of a closing quote/bracket at text[i], 0 if none.
size_t closing_at(std::string_view t, size_t i) {
  const unsigned char c = static_cast<unsigned char>(t[i]);
  if (c == '"' || c == '\'' || c == ')' || c == ']') return 1;
  // ” U+201D, ’ U+2019: E2 80 9D / E2 80 99
  if (c == 0xE2 && i + 2 < t.size() && static_cast<unsigned char>(t[i + 1]) == 0x80 &&
      (static_cast<unsigned char>(t[i + 2]) == 0x9D ||
       static_cast<unsigned char>(t[i + 2]) == 0x99))
    return 3;
  return 0;
}

// Whether text[i] starts a sentence (rule 1).
bool starts_sentence(std::string_view t, size_t i) {
  const unsigned char c = static_cast<unsigned char>(t[i]);
  if ((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  if (c == '"' || c == '\'' || c == '(' || c == '[') return true;
  if (i + 1 < t.size()) {
    const unsigned char d = static_cast<unsigned char>(t[i + 1]);
    if (c == 0xC3 && d >= 0x80 && d <= 0x9E && d != 0x97) return true;  // À-Þ except ×
    // “ U+201C, ‘ U+2018: E2 80 9C / E2 80 98
    if (c == 0xE2 && d == 0x80 && i + 2 < t.size() &&
        (static_cast<unsigned char>(t[i + 2]) == 0x9C ||
         static_cast<unsigned char>(t[i + 2]) == 0x98))
      return true;
  }
  return false;
}

// Whether the `.` at text[dot] ends an abbreviation or initial (rule 2).
bool abbreviation_before(std::string_view t, size_t dot) {
  size_t b = dot;
  while (b > 0) {
    const unsigned char c = static_cast<unsigned char>(t[b - 1]);
    if (std::isalpha(c) || c == '.') {
      --b;
    } else {
      break;
    }
  }
  std::string_view word = t.substr(b, dot - b);
  if (word.empty()) return false;
  if (word.size() == 1) return true;               // an initial
  if (word.find('.') != std::string_view::npos) {  // "U.S", "e.g"
    return true;
  }
  std::string lower(word);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return std::find(kAbbreviations.begin(), kAbbreviations.end(), lower) != kAbbreviations.end();
}

void push_trimmed(std::vector<std::string_view>& out, std::string_view t, size_t b, size_t e) {
  while (b < e && is_space(static_cast<unsigned char>(t[b]))) ++b;
  while (e > b && is_space(static_cast<unsigned char>(t[e - 1]))) --e;
  if (e > b) out.push_back(t.substr(b, e - b));
}

}  // namespace

std::vector<std::string_view> split_sentences(std::string_view t) {
  std::vector<std::string_view> out;
  size_t start = 0, i = 0;
  const size_t n = t.size();
  while (i < n) {
    const char c = t[i];
    if (c == '\n') {
      // Rule 3: a blank line.
      size_t j = i + 1;
      while (j < n && is_space(static_cast<unsigned char>(t[j])) && t[j] != '\n') ++j;
      if (j < n && t[j] == '\n') {
        push_trimmed(out, t, start, i);
        while (j < n && is_space(static_cast<unsigned char>(t[j]))) ++j;
        start = i = j;
        continue;
      }
      ++i;
      continue;
    }
    if (c != '.' && c != '!' && c != '?') {
      ++i;
      continue;
    }
    const size_t first = i;
    bool only_dots = true;
    while (i < n && (t[i] == '.' || t[i] == '!' || t[i] == '?')) only_dots &= t[i++] == '.';
    while (i < n) {
      const size_t k = closing_at(t, i);
      if (k == 0) break;
      i += k;
    }
    const size_t end = i;  // the sentence ends here if it ends
    size_t j = i;
    while (j < n && is_space(static_cast<unsigned char>(t[j]))) ++j;
    if (j == i || j == n || !starts_sentence(t, j)) continue;
    if (only_dots && i - first == 1 && abbreviation_before(t, first)) continue;
    push_trimmed(out, t, start, end);
    start = j;
    i = j;
  }
  push_trimmed(out, t, start, n);
  return out;
}

}  // namespace loom::engine
