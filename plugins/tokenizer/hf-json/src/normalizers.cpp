// Normalizers of tokenizer.json: Sequence, NFC, NFD, NFKC, NFKD, Lowercase, StripAccents,
// Prepend, Replace, Strip. Unicode data comes from utf8proc.
#include <utf8proc.h>

#include <cstdlib>

#include "components.hpp"
#include "regex.hpp"
#include "utf8.hpp"

namespace hfjson {

std::string type_of(const json& j, const std::string& where) {
  if (!j.is_object())
    throw loom::Error(LOOM_ERR_INVALID_ARGUMENT,
                      where + " must be an object, not " + std::string(j.type_name()));
  auto it = j.find("type");
  if (it == j.end() || !it->is_string())
    throw loom::Error(LOOM_ERR_INVALID_ARGUMENT, where + " has no \"type\" string");
  return it->get<std::string>();
}

std::string pattern_of(const json& j, const std::string& where, bool& literal) {
  if (j.is_object() && j.contains("String") && j["String"].is_string()) {
    literal = true;
    return j["String"].get<std::string>();
  }
  if (j.is_object() && j.contains("Regex") && j["Regex"].is_string()) {
    literal = false;
    return j["Regex"].get<std::string>();
  }
  throw loom::Error(LOOM_ERR_INVALID_ARGUMENT,
                    where + ".pattern must be {\"String\": ...} or {\"Regex\": ...}");
}

namespace {

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  void apply(std::string& s) const override {
    for (const auto& p : parts_) p->apply(s);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(utf8proc_option_t options) : options_(options) {}
  void apply(std::string& s) const override {
    if (s.empty()) return;
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                     static_cast<utf8proc_ssize_t>(s.size()), &out, options_);
    if (n < 0)
      throw loom::Error(LOOM_ERR_INTERNAL,
                        std::string("tokenizer/hf-json: normalization: ") + utf8proc_errmsg(n));
    s.assign(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
    std::free(out);
  }

 private:
  utf8proc_option_t options_;
};

// Rust's char::to_lowercase per character: the simple mapping, plus U+0130's full mapping.
// (Unlike Python's str.lower there is no final-sigma rule.)
class LowercaseNormalizer : public Normalizer {
 public:
  void apply(std::string& s) const override {
    std::string out;
    out.reserve(s.size());
    for (char32_t c : to_u32(s)) {
      if (c == 0x0130) {
        out += "i\xCC\x87";
      } else {
        append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
      }
    }
    s = std::move(out);
  }
};

// Drops nonspacing marks (use after NFD/NFKD, as HF's configurations do).
class StripAccentsNormalizer : public Normalizer {
 public:
  void apply(std::string& s) const override {
    std::string out;
    out.reserve(s.size());
    for (char32_t c : to_u32(s))
      if (utf8proc_category(static_cast<utf8proc_int32_t>(c)) != UTF8PROC_CATEGORY_MN)
        append_utf8(out, c);
    s = std::move(out);
  }
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void apply(std::string& s) const override {
    if (!s.empty()) s.insert(0, prefix_);  // HF prepends to non-empty text only
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(const std::string& pattern, bool literal, std::string content,
                    const std::string& where)
      : regex_(pattern, literal, where), content_(std::move(content)) {}
  void apply(std::string& s) const override {
    const auto matches = regex_.find_all(s);
    if (matches.empty()) return;
    std::string out;
    size_t last = 0;
    for (const auto& [b, e] : matches) {
      out.append(s, last, b - last);
      out += content_;
      last = e;
    }
    out.append(s, last, std::string::npos);
    s = std::move(out);
  }

 private:
  Regex regex_;
  std::string content_;
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void apply(std::string& s) const override {
    std::u32string u = to_u32(s);
    const auto space = is_white_space;
    size_t b = 0, e = u.size();
    if (left_)
      while (b < e && space(u[b])) ++b;
    if (right_)
      while (e > b && space(u[e - 1])) --e;
    s = to_utf8(std::u32string_view(u).substr(b, e - b));
  }

 private:
  bool left_, right_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const json& j, const std::string& where) {
  const std::string type = type_of(j, where);
  const auto stable = static_cast<utf8proc_option_t>(UTF8PROC_STABLE);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> parts;
    const json list = member<json>(j, "normalizers", json::array(), where);
    for (size_t i = 0; i < list.size(); ++i)
      parts.push_back(make_normalizer(list[i], where + ".normalizers[" + std::to_string(i) + "]"));
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  if (type == "NFC")
    return std::make_unique<UnicodeNormalizer>(
        static_cast<utf8proc_option_t>(stable | UTF8PROC_COMPOSE));
  if (type == "NFD")
    return std::make_unique<UnicodeNormalizer>(
        static_cast<utf8proc_option_t>(stable | UTF8PROC_DECOMPOSE));
  if (type == "NFKC")
    return std::make_unique<UnicodeNormalizer>(
        static_cast<utf8proc_option_t>(stable | UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
  if (type == "NFKD")
    return std::make_unique<UnicodeNormalizer>(
        static_cast<utf8proc_option_t>(stable | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT));
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "StripAccents") return std::make_unique<StripAccentsNormalizer>();
  if (type == "Prepend")
    return std::make_unique<PrependNormalizer>(member<std::string>(j, "prepend", "", where));
  if (type == "Replace") {
    bool literal = false;
    const std::string pattern =
        pattern_of(member<json>(j, "pattern", json(), where), where, literal);
    return std::make_unique<ReplaceNormalizer>(pattern, literal,
                                               member<std::string>(j, "content", "", where), where);
  }
  if (type == "Strip")
    return std::make_unique<StripNormalizer>(member<bool>(j, "strip_left", true, where),
                                             member<bool>(j, "strip_right", true, where));
  throw loom::Error(LOOM_ERR_UNIMPLEMENTED,
                    where + ": normalizer type \"" + type +
                        "\" is not supported (supported: Sequence, NFC, NFD, NFKC, NFKD, "
                        "Lowercase, StripAccents, Prepend, Replace, Strip)");
}

}  // namespace hfjson
