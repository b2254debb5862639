// The BPE model of tokenizer.json; see bpe.hpp.
#include "bpe.hpp"

#include <cstdio>
#include <queue>

#include "utf8.hpp"

namespace hfjson {
namespace {

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

constexpr size_t kCacheLimit = 1 << 17;

}  // namespace

Bpe::Bpe(const json& model, const std::string& where) {
  const double dropout = member<double>(model, "dropout", 0.0, where);
  if (dropout != 0.0)
    throw loom::Error(LOOM_ERR_UNIMPLEMENTED,
                      where + ".dropout = " + std::to_string(dropout) +
                          ": BPE dropout is not supported (it makes encoding random)");
  const json vocab = member<json>(model, "vocab", json::object(), where);
  loom::require(vocab.is_object(), where + ".vocab must be an object of token: id");
  for (const auto& [token, id] : vocab.items()) {
    loom::require(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < INT32_MAX,
                  where + ".vocab[\"" + token + "\"] is not a valid id");
    vocab_.emplace(token, id.get<int32_t>());
  }
  prefix_ = member<std::string>(model, "continuing_subword_prefix", "", where);
  suffix_ = member<std::string>(model, "end_of_word_suffix", "", where);
  fuse_unk_ = member<bool>(model, "fuse_unk", false, where);
  byte_fallback_ = member<bool>(model, "byte_fallback", false, where);
  ignore_merges_ = member<bool>(model, "ignore_merges", false, where);
  const std::string unk = member<std::string>(model, "unk_token", "", where);
  if (!unk.empty()) {
    auto it = vocab_.find(unk);
    loom::require(it != vocab_.end(),
                  where + ".unk_token \"" + unk + "\" is not in the model's vocab");
    unk_ = it->second;
  }
  const json merges = member<json>(model, "merges", json::array(), where);
  loom::require(merges.is_array(), where + ".merges must be an array");
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    const std::string at = where + ".merges[" + std::to_string(rank) + "]";
    std::string a, b;
    if (m.is_string()) {  // "a b"
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      loom::require(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos,
                    at + " \"" + s + "\" is not two tokens separated by one space");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      throw loom::Error(LOOM_ERR_INVALID_ARGUMENT, at + " must be \"a b\" or [\"a\", \"b\"]");
    }
    const std::string merged = a + b.substr(std::min(prefix_.size(), b.size()));
    auto ia = vocab_.find(a), ib = vocab_.find(b), im = vocab_.find(merged);
    loom::require(ia != vocab_.end() && ib != vocab_.end() && im != vocab_.end(),
                  at + " (\"" + a + "\", \"" + b + "\") uses or makes a token not in the vocab");
    merges_.emplace(pair_key(ia->second, ib->second),
                    std::make_pair(static_cast<int32_t>(rank), im->second));
  }
}

void Bpe::encode_word(const std::string& word, std::vector<int32_t>& out) {
  if (auto hit = cache_.find(word); hit != cache_.end()) {
    out.insert(out.end(), hit->second.begin(), hit->second.end());
    return;
  }
  std::vector<int32_t> symbols;
  auto whole = vocab_.find(std::string_view(word));
  if (ignore_merges_ && whole != vocab_.end()) {
    symbols.push_back(whole->second);
  } else {
    bool pending_unk = false;
    std::string piece;
    for (size_t i = 0; i < word.size();) {
      char32_t cp = 0;
      const size_t n = next_code_point(word, i, cp);
      piece.assign(i > 0 ? prefix_ : std::string());
      piece.append(word, i, n);
      if (i + n == word.size()) piece += suffix_;
      auto it = vocab_.find(std::string_view(piece));
      if (it != vocab_.end()) {
        if (pending_unk) symbols.push_back(unk_);
        pending_unk = false;
        symbols.push_back(it->second);
      } else {
        bool done = false;
        if (byte_fallback_) {
          std::vector<int32_t> bytes;
          char name[8];
          for (size_t k = 0; k < n; ++k) {
            std::snprintf(name, sizeof(name), "<0x%02X>", static_cast<unsigned char>(word[i + k]));
            auto bt = vocab_.find(std::string_view(name));
            if (bt == vocab_.end()) break;
            bytes.push_back(bt->second);
          }
          if (bytes.size() == n) {
            if (pending_unk) symbols.push_back(unk_);
            pending_unk = false;
            symbols.insert(symbols.end(), bytes.begin(), bytes.end());
            done = true;
          }
        }
        if (!done && unk_ >= 0) {  // without an unk_token the character is dropped, as HF
          if (pending_unk && !fuse_unk_) symbols.push_back(unk_);
          pending_unk = true;
        }
      }
      i += n;
    }
    if (pending_unk) symbols.push_back(unk_);
    merge(symbols);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (cache_.size() >= kCacheLimit) cache_.clear();
  cache_.emplace(word, std::move(symbols));
}

// Lowest rank first, leftmost first among equal ranks; a queued pair is skipped when either
// side has changed since it was queued.
void Bpe::merge(std::vector<int32_t>& symbols) const {
  const int n = static_cast<int>(symbols.size());
  if (n < 2) return;
  std::vector<int> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Cand {
    int32_t rank;
    int pos;
    int32_t id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> queue;
  auto consider = [&](int left) {
    if (left < 0 || next[left] < 0) return;
    auto it = merges_.find(pair_key(symbols[left], symbols[next[left]]));
    if (it != merges_.end()) queue.push({it->second.first, left, it->second.second});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);
  while (!queue.empty()) {
    const Cand c = queue.top();
    queue.pop();
    if (!alive[c.pos] || next[c.pos] < 0) continue;
    const int right = next[c.pos];
    auto it = merges_.find(pair_key(symbols[c.pos], symbols[right]));
    if (it == merges_.end() || it->second.second != c.id || it->second.first != c.rank) continue;
    symbols[c.pos] = c.id;
    alive[right] = false;
    next[c.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.pos;
    consider(prev[c.pos]);
    consider(c.pos);
  }
  std::vector<int32_t> merged;
  for (int i = 0; i >= 0; i = next[i]) merged.push_back(symbols[i]);
  symbols = std::move(merged);
}

}  // namespace hfjson
