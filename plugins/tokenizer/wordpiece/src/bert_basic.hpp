// BERT's "basic tokenizer": the text clean-up and word splitting that come before WordPiece.
//
// Steps, in BERT's order (Megatron's bert_tokenization.py behaves this way):
//   1. decode UTF-8 (the plugin refuses ill-formed UTF-8 before this, as Python's strict
//      decoding of Megatron's input would; here an invalid byte would become U+FFFD, which
//      step 2 drops);
//   2. drop U+0000, U+FFFD and control characters (category C*, except \t \n \r), turn
//      whitespace (\t \n \r, ' ', category Zs) into ' ';
//   3. put spaces around CJK ideographs (the CJK Unified Ideographs blocks and extensions,
//      and the compatibility blocks);
//   4. split on whitespace as Python's str.split() does (category Zs or bidi class WS, B, S:
//      so U+2028/U+2029 also separate words, as they do in Python);
//   5. when lower-casing: lower-case each word (Python str.lower semantics, see below), then
//      Unicode NFD and drop every nonspacing mark (Mn);
//   6. split every punctuation character (ASCII 33-47, 58-64, 91-96, 123-126, or any
//      category P*) into its own word.
//
// Lower-casing uses utf8proc's simple per-code-point mapping plus the two places where
// Python's str.lower differs from it: U+0130 becomes "i" + U+0307 (full mapping), and a
// capital sigma in the final-sigma context becomes U+03C2. Python decides "cased" and
// "case-ignorable" from derived Unicode properties; here "cased" is category Lu/Ll/Lt and
// "case-ignorable" is Mn/Me/Cf/Lm/Sk plus the apostrophes, periods and colons of the
// Word_Break MidLetter/MidNumLet/Single_Quote classes, which agrees on every assigned
// letter we know of. utf8proc's Unicode version (13 for 2.6) may differ from the Python
// that produced a reference on code points assigned later.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace wordpiece {

// The words of `text` after steps 1-6, each as code points.
std::vector<std::u32string> bert_basic_split(std::string_view text, bool lower_case);

// Byte offset of the first ill-formed UTF-8 sequence in `text`, or npos when it is valid.
size_t first_invalid_utf8(std::string_view text);

// Code points of UTF-8 `text`; each byte of an invalid sequence becomes U+FFFD.
std::u32string decode_utf8(std::string_view text);

// Python's str.isspace for one code point (category Zs, or bidi class WS, B or S).
bool is_python_space(char32_t c);

// UTF-8 of `cps`, appended to `out`.
void append_utf8(std::string& out, std::u32string_view cps);

}  // namespace wordpiece
