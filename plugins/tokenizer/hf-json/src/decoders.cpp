// Decoders of tokenizer.json: Sequence, ByteLevel, Metaspace, ByteFallback, Replace, Fuse,
// Strip. They work on the list of token strings, as HF's decode_chain does.
#include <cstdio>

#include "components.hpp"
#include "regex.hpp"
#include "utf8.hpp"

namespace hfjson {
namespace {

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts)
      : parts_(std::move(parts)) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->apply(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

// All tokens to one string: each byte-level character back to its byte; a token with a
// character outside the byte alphabet (an added token such as "<|im_start|>" is inside
// it, but "ü" is not) contributes its UTF-8 as is. Ill-formed UTF-8 in the result becomes
// U+FFFD (HF: String::from_utf8_lossy).
class ByteLevelDecoder : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const auto& t : tokens) {
      const std::u32string u = to_u32(t);
      std::string mapped;
      bool ok = true;
      for (char32_t c : u) {
        const int b = char_to_byte(c);
        if (b < 0) {
          ok = false;
          break;
        }
        mapped.push_back(static_cast<char>(b));
      }
      bytes += ok ? mapped : t;
    }
    tokens.assign(1, sanitize_utf8(bytes));
  }
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string rep, bool strip_first)
      : rep_(std::move(rep)), strip_first_(strip_first) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (size_t k = 0; k < t.size();) {
        if (t.compare(k, rep_.size(), rep_) == 0) {
          // HF drops every replacement character of the first token (not only a leading
          // one) unless prepend_scheme is "never": after Fuse, "▁a▁b" decodes to "ab".
          if (!(i == 0 && strip_first_)) out.push_back(' ');
          k += rep_.size();
        } else {
          out.push_back(t[k++]);
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string rep_;
  bool strip_first_;
};

// Runs of "<0xXX>" tokens become the text of their bytes when those are valid UTF-8, and
// one U+FFFD per byte token when not.
class ByteFallbackDecoder : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    size_t count = 0;
    auto flush = [&] {
      if (count == 0) return;
      if (sanitize_utf8(bytes) == bytes) {
        out.push_back(bytes);
      } else {
        for (size_t k = 0; k < count; ++k) out.push_back("\xEF\xBF\xBD");
      }
      bytes.clear();
      count = 0;
    };
    for (auto& t : tokens) {
      unsigned v = 0;
      char tail = 0;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 &&
          std::sscanf(t.c_str() + 3, "%2X%c", &v, &tail) == 2 && tail == '>') {
        bytes.push_back(static_cast<char>(v));
        ++count;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(const std::string& pattern, bool literal, std::string content,
                 const std::string& where)
      : re_(pattern, literal, where), content_(std::move(content)) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      std::string out;
      size_t last = 0;
      for (const auto& [b, e] : re_.find_all(t)) {
        out.append(t, last, b - last);
        out += content_;
        last = e;
      }
      out.append(t, last, std::string::npos);
      t = std::move(out);
    }
  }

 private:
  Regex re_;
  std::string content_;
};

class FuseDecoder : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing copies of the character `content`.
class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void apply(std::vector<std::string>& tokens) const override {
    const size_t n = content_.size();
    for (auto& t : tokens) {
      for (size_t k = 0; k < start_ && t.compare(0, n, content_) == 0; ++k) t.erase(0, n);
      for (size_t k = 0; k < stop_ && t.size() >= n && t.compare(t.size() - n, n, content_) == 0;
           ++k)
        t.erase(t.size() - n);
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const json& j, const std::string& where) {
  const std::string type = type_of(j, where);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> parts;
    const json list = member<json>(j, "decoders", json::array(), where);
    for (size_t i = 0; i < list.size(); ++i)
      parts.push_back(make_decoder(list[i], where + ".decoders[" + std::to_string(i) + "]"));
    return std::make_unique<SequenceDecoder>(std::move(parts));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    std::string scheme = member<bool>(j, "add_prefix_space", true, where) ? "always" : "never";
    scheme = member<std::string>(j, "prepend_scheme", scheme, where);
    return std::make_unique<MetaspaceDecoder>(
        member<std::string>(j, "replacement", "\xE2\x96\x81", where), scheme != "never");
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Replace") {
    bool literal = false;
    const std::string pattern =
        pattern_of(member<json>(j, "pattern", json(), where), where, literal);
    return std::make_unique<ReplaceDecoder>(pattern, literal,
                                            member<std::string>(j, "content", "", where), where);
  }
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip")
    return std::make_unique<StripDecoder>(member<std::string>(j, "content", " ", where),
                                          member<size_t>(j, "start", 0, where),
                                          member<size_t>(j, "stop", 0, where));
  throw loom::Error(LOOM_ERR_UNIMPLEMENTED,
                    where + ": decoder type \"" + type +
                        "\" is not supported (supported: Sequence, ByteLevel, Metaspace, "
                        "ByteFallback, Replace, Fuse, Strip)");
}

}  // namespace hfjson
