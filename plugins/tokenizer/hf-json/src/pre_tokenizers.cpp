// Pre-tokenizers of tokenizer.json: Sequence, ByteLevel, Split, Metaspace, Digits,
// Punctuation, Whitespace, WhitespaceSplit. Each splits every piece with HF's delimiter
// behaviours (Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous) and drops
// empty pieces, as NormalizedString::split does.
#include <algorithm>
#include <string_view>

#include "components.hpp"
#include "regex.hpp"
#include "utf8.hpp"

namespace hfjson {
namespace {

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

Behavior behavior_of(const std::string& name, const std::string& where) {
  if (name == "Removed") return Behavior::Removed;
  if (name == "Isolated") return Behavior::Isolated;
  if (name == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::MergedWithNext;
  if (name == "Contiguous") return Behavior::Contiguous;
  throw loom::Error(LOOM_ERR_UNIMPLEMENTED, where + ": split behavior \"" + name +
                                                "\" is not supported (Removed, Isolated, "
                                                "MergedWithPrevious, MergedWithNext, Contiguous)");
}

struct Span {
  size_t b, e;
  bool match;
};

// Splits `p` at the matches of `re` (or, with `invert`, at the text between them).
void split_piece(const Piece& p, const Regex& re, Behavior behavior, bool invert,
                 std::vector<Piece>& out) {
  std::vector<Span> spans;
  size_t last = 0;
  for (const auto& [b, e] : re.find_all(p.text)) {
    if (b > last) spans.push_back({last, b, false});
    spans.push_back({b, e, true});
    last = e;
  }
  if (last < p.text.size()) spans.push_back({last, p.text.size(), false});
  if (invert)
    for (auto& s : spans) s.match = !s.match;

  std::vector<Span> kept;
  bool previous = false;
  switch (behavior) {
    case Behavior::Isolated:
      kept = spans;
      break;
    case Behavior::Removed:
      for (const auto& s : spans)
        if (!s.match) kept.push_back(s);
      break;
    case Behavior::MergedWithPrevious:
      for (const auto& s : spans) {
        if (s.match && !previous && !kept.empty())
          kept.back().e = s.e;
        else
          kept.push_back(s);
        previous = s.match;
      }
      break;
    case Behavior::MergedWithNext:
      for (size_t i = spans.size(); i-- > 0;) {
        const Span& s = spans[i];
        if (s.match && !previous && !kept.empty())
          kept.back().b = s.b;
        else
          kept.push_back(s);
        previous = s.match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    case Behavior::Contiguous:
      for (const auto& s : spans) {
        if (s.match == previous && !kept.empty())
          kept.back().e = s.e;
        else
          kept.push_back(s);
        previous = s.match;
      }
      break;
  }
  for (const auto& s : kept)
    if (s.e > s.b) out.push_back({p.text.substr(s.b, s.e - s.b), p.at_start && s.b == 0});
}

class SequencePre : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  void apply(std::vector<Piece>& pieces) const override {
    for (const auto& p : parts_) p->apply(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

class SplitPre : public PreTokenizer {
 public:
  SplitPre(const std::string& pattern, bool literal, Behavior behavior, bool invert,
           const std::string& where)
      : re_(pattern, literal, where), behavior_(behavior), invert_(invert) {}
  void apply(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (const auto& p : pieces) split_piece(p, re_, behavior_, invert_, out);
    pieces = std::move(out);
  }

 private:
  Regex re_;
  Behavior behavior_;
  bool invert_;
};

// GPT-2's pre-tokenization pattern, applied by ByteLevel when use_regex is true.
constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

class ByteLevelPre : public PreTokenizer {
 public:
  ByteLevelPre(bool add_prefix_space, bool use_regex, const std::string& where)
      : add_prefix_space_(add_prefix_space),
        re_(use_regex ? std::make_unique<Regex>(kGpt2Pattern, false, where) : nullptr) {}
  void apply(std::vector<Piece>& pieces) const override {
    std::vector<Piece> split;
    for (Piece p : pieces) {
      if (add_prefix_space_ && (p.text.empty() || p.text[0] != ' '))
        p.text = " " + p.text;  // (insert(0, " ") trips GCC 12 -Wrestrict)
      if (re_)
        split_piece(p, *re_, Behavior::Isolated, false, split);
      else if (!p.text.empty())
        split.push_back(std::move(p));
    }
    const auto& table = byte_to_char();
    for (auto& p : split) {
      std::string mapped;
      mapped.reserve(p.text.size() * 2);
      for (unsigned char b : p.text) append_utf8(mapped, table[b]);
      p.text = std::move(mapped);
    }
    pieces = std::move(split);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> re_;
};

class MetaspacePre : public PreTokenizer {
 public:
  enum class Prepend { Always, First, Never };
  MetaspacePre(std::string replacement, Prepend scheme, bool split, const std::string& where)
      : rep_(std::move(replacement)), scheme_(scheme), split_(split), re_(rep_, true, where) {}
  void apply(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (Piece p : pieces) {
      std::string replaced;
      for (char c : p.text) {
        if (c == ' ')
          replaced += rep_;
        else
          replaced.push_back(c);
      }
      p.text = std::move(replaced);
      const bool starts = p.text.compare(0, rep_.size(), rep_) == 0;
      if (!starts && (scheme_ == Prepend::Always || (scheme_ == Prepend::First && p.at_start)))
        p.text.insert(0, rep_);
      if (split_)
        split_piece(p, re_, Behavior::MergedWithNext, false, out);
      else if (!p.text.empty())
        out.push_back(std::move(p));
    }
    pieces = std::move(out);
  }

 private:
  std::string rep_;
  Prepend scheme_;
  bool split_;
  Regex re_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j, const std::string& where) {
  const std::string type = type_of(j, where);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    const json list = member<json>(j, "pretokenizers", json::array(), where);
    for (size_t i = 0; i < list.size(); ++i)
      parts.push_back(
          make_pre_tokenizer(list[i], where + ".pretokenizers[" + std::to_string(i) + "]"));
    return std::make_unique<SequencePre>(std::move(parts));
  }
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelPre>(member<bool>(j, "add_prefix_space", true, where),
                                          member<bool>(j, "use_regex", true, where), where);
  if (type == "Split") {
    bool literal = false;
    const std::string pattern =
        pattern_of(member<json>(j, "pattern", json(), where), where, literal);
    return std::make_unique<SplitPre>(
        pattern, literal, behavior_of(member<std::string>(j, "behavior", "Isolated", where), where),
        member<bool>(j, "invert", false, where), where);
  }
  if (type == "Metaspace") {
    const std::string rep = member<std::string>(j, "replacement", "\xE2\x96\x81", where);
    loom::require(to_u32(rep).size() == 1, where + ".replacement must be one character");
    // Older files have add_prefix_space instead of prepend_scheme.
    std::string scheme = member<bool>(j, "add_prefix_space", true, where) ? "always" : "never";
    scheme = member<std::string>(j, "prepend_scheme", scheme, where);
    MetaspacePre::Prepend p = MetaspacePre::Prepend::Always;
    if (scheme == "first")
      p = MetaspacePre::Prepend::First;
    else if (scheme == "never")
      p = MetaspacePre::Prepend::Never;
    else
      loom::require(scheme == "always", where + ".prepend_scheme \"" + scheme +
                                            "\" is not one of always, first, never");
    return std::make_unique<MetaspacePre>(rep, p, member<bool>(j, "split", true, where), where);
  }
  if (type == "Digits")
    return std::make_unique<SplitPre>("\\p{N}", false,
                                      member<bool>(j, "individual_digits", false, where)
                                          ? Behavior::Isolated
                                          : Behavior::Contiguous,
                                      false, where);
  if (type == "Punctuation")
    return std::make_unique<SplitPre>(
        "\\p{P}|[!-/:-@\\[-`{-~]", false,
        behavior_of(member<std::string>(j, "behavior", "Isolated", where), where), false, where);
  if (type == "Whitespace")
    return std::make_unique<SplitPre>("\\w+|[^\\w\\s]+", false, Behavior::Removed, true, where);
  if (type == "WhitespaceSplit")
    return std::make_unique<SplitPre>("\\s", false, Behavior::Removed, false, where);
  throw loom::Error(LOOM_ERR_UNIMPLEMENTED,
                    where + ": pre_tokenizer type \"" + type +
                        "\" is not supported (supported: Sequence, ByteLevel, Split, Metaspace, "
                        "Digits, Punctuation, Whitespace, WhitespaceSplit)");
}

}  // namespace hfjson
