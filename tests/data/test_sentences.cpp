// The rule-based splitter of `loom preprocess --split-sentences` (rules in docs/data.md).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "data/preprocess_sentences.hpp"

namespace {

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  for (std::string_view s : loom::engine::split_sentences(text)) out.emplace_back(s);
  return out;
}

using V = std::vector<std::string>;

}  // namespace

TEST_CASE("sentences end at . ! ? before whitespace and a capital, digit or quote") {
  CHECK(split("Hello world. This is it! Is it? Yes.") ==
        V{"Hello world.", "This is it!", "Is it?", "Yes."});
  CHECK(split("One. 2 is a number. \"Quoted,\" she said. (Aside.) Done") ==
        V{"One.", "2 is a number.", "\"Quoted,\" she said.", "(Aside.)", "Done"});
  CHECK(split("He said \"Stop!\" Then left.") == V{"He said \"Stop!\"", "Then left."});
  CHECK(split("Wait... What?! Really?") == V{"Wait...", "What?!", "Really?"});
}

TEST_CASE("no split before lower case, without whitespace, or inside numbers and URLs") {
  CHECK(split("It costs 3.50 dollars. ok? fine.") == V{"It costs 3.50 dollars. ok? fine."});
  CHECK(split("See loom.dev.Then") == V{"See loom.dev.Then"});
}

TEST_CASE("no split after abbreviations, initials, or words with inner dots") {
  CHECK(split("Mr. Smith met Dr. Jones. They talked.") ==
        V{"Mr. Smith met Dr. Jones.", "They talked."});
  CHECK(split("J. R. R. Tolkien wrote it. The end.") ==
        V{"J. R. R. Tolkien wrote it.", "The end."});
  CHECK(split("Made in the U.S. Then shipped, e.g. Boxes.") ==
        V{"Made in the U.S. Then shipped, e.g. Boxes."});
  // Only `.` is suppressed: an abbreviation-like word before ! or ? still ends a sentence.
  CHECK(split("Go, Mr! Now.") == V{"Go, Mr!", "Now."});
}

TEST_CASE("blank lines always split; whitespace is trimmed; empty sentences dropped") {
  CHECK(split("first paragraph\n\nsecond one\n  \n\nthird") ==
        V{"first paragraph", "second one", "third"});
  CHECK(split("line one\nline two") == V{"line one\nline two"});
  CHECK(split("   ") == V{});
  CHECK(split("") == V{});
  CHECK(split("  Padded.   Next.  ") == V{"Padded.", "Next."});
}

TEST_CASE("UTF-8: curly quotes and accented capitals") {
  CHECK(split("Il dit \xE2\x80\x9CNon.\xE2\x80\x9D \xC3\x89lise part.") ==
        V{"Il dit \xE2\x80\x9CNon.\xE2\x80\x9D", "\xC3\x89lise part."});
}
