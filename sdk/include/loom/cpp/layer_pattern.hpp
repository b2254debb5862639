// Loom C++ SDK: a per-layer pattern as Megatron writes --moe-layer-freq (header-only; the layer
// library reads model/gpt's moe_layer_freq with it, the host's Hugging Face mapping writes and
// reads it). The text is an integer N (every N-th layer from layer 0), or a list expression
// of 0 and 1, one per layer: lists "[a, b, ...]", repeated "x*N", concatenated "x+y",
// grouped "(...)", e.g. "[0]*3+[1]*58" (DeepSeek-V3's three dense layers first).
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>
#include <vector>

#include "loom/cpp/plugin.hpp"

namespace loom {

namespace detail {
class LayerPattern {
 public:
  LayerPattern(const std::string& text, const std::string& who) : t_(text), who_(who) {}
  std::vector<uint8_t> parse(int64_t n_layer) {
    skip();
    if (pos_ < t_.size() && std::isdigit((unsigned char)t_[pos_])) {  // every N-th layer
      const int64_t every = number();
      end();
      loom::require(every >= 1, who_ + " = 0; an integer N means every N-th layer");
      std::vector<uint8_t> out((size_t)n_layer);
      for (int64_t l = 0; l < n_layer; ++l) out[(size_t)l] = l % every == 0;
      return out;
    }
    std::vector<uint8_t> out = sum();
    end();
    loom::require((int64_t)out.size() == n_layer,
                  who_ + " \"" + t_ + "\" gives " + std::to_string(out.size()) +
                      " layers; the model has n_layer = " + std::to_string(n_layer));
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    throw loom::Error(LOOM_ERR_INVALID_ARGUMENT, who_ + " \"" + t_ + "\": " + what +
                                                     " at character " + std::to_string(pos_ + 1));
  }
  void skip() {
    while (pos_ < t_.size() && std::isspace((unsigned char)t_[pos_])) ++pos_;
  }
  bool eat(char c) {
    skip();
    if (pos_ < t_.size() && t_[pos_] == c) return ++pos_, true;
    return false;
  }
  void end() {
    skip();
    if (pos_ != t_.size()) fail("unexpected text");
  }
  int64_t number() {
    skip();
    int64_t v = 0;
    const size_t start = pos_;
    while (pos_ < t_.size() && std::isdigit((unsigned char)t_[pos_]) && v < (1 << 20))
      v = v * 10 + (t_[pos_++] - '0');
    if (pos_ == start) fail("expected a number");
    return v;
  }
  std::vector<uint8_t> sum() {
    std::vector<uint8_t> out = product();
    while (eat('+')) {
      const std::vector<uint8_t> more = product();
      out.insert(out.end(), more.begin(), more.end());
    }
    return out;
  }
  std::vector<uint8_t> product() {
    std::vector<uint8_t> one = atom(), out = one;
    while (eat('*')) {
      const int64_t n = number();
      if (n * (int64_t)one.size() > (1 << 20)) fail("too many layers");
      out.clear();
      for (int64_t i = 0; i < n; ++i) out.insert(out.end(), one.begin(), one.end());
      one = out;
    }
    return out;
  }
  std::vector<uint8_t> atom() {
    if (eat('(')) {
      std::vector<uint8_t> inner = sum();
      if (!eat(')')) fail("expected ')'");
      return inner;
    }
    if (!eat('[')) fail("expected '[' or '('");
    std::vector<uint8_t> out;
    do {
      const int64_t v = number();
      if (v > 1) fail("a layer is 0 (dense) or 1 (MoE)");
      out.push_back((uint8_t)v);
    } while (eat(','));
    if (!eat(']')) fail("expected ']'");
    return out;
  }
  const std::string& t_;
  std::string who_;
  size_t pos_ = 0;
};

}  // namespace detail

// One 0 or 1 per layer of `text`; `what` ("model/gpt: moe_layer_freq") names the key in the
// loom::Error (LOOM_ERR_INVALID_ARGUMENT) that refuses text that is neither form, a value
// other than 0 or 1, or a list whose length is not n_layer.
inline std::vector<uint8_t> layer_pattern(const std::string& text, int64_t n_layer,
                                          const std::string& what) {
  return detail::LayerPattern(text, what).parse(n_layer);
}

// The shortest text of `pattern`: "1" when every layer is 1, else runs such as "[0]*3+[1]*5".
inline std::string layer_pattern_text(const std::vector<uint8_t>& pattern) {
  if (!pattern.empty() &&
      std::all_of(pattern.begin(), pattern.end(), [](uint8_t v) { return v == 1; }))
    return "1";
  std::string out;
  for (size_t i = 0; i < pattern.size();) {
    size_t j = i;
    while (j < pattern.size() && pattern[j] == pattern[i]) ++j;
    if (!out.empty()) out.push_back('+');
    out.append(pattern[i] ? "[1]*" : "[0]*");
    out.append(std::to_string(j - i));
    i = j;
  }
  return out;
}

}  // namespace loom
