// tokenizer/wordpiece: BERT's WordPiece, as Megatron-LM's BertWordPieceLowerCase /
// BertWordPieceCase tokenizers produce it.
//
// The vocabulary file has one token per line; a token's id is its line index (0-based),
// and each line is stripped of surrounding whitespace (Python's str.strip). Lines end at
// \n, \r\n or \r (Python's universal newlines). [UNK], [CLS], [SEP], [PAD] and [MASK] must
// be present. Like Megatron's _BertWordPieceTokenizer, [BOS] and then [EOS] are appended
// (ids = current vocabulary size) when the file lacks them, so vocab_size may exceed the
// line count by up to 2. The end-of-document id is [EOS]'s, as Megatron's `eod`. Then,
// with vocab_extra_ids = n (Megatron's --vocab-extra-ids, T5's sentinels), <extra_id_0> ..
// <extra_id_{n-1}> are appended the same way (each only when absent).
// Duplicate tokens are refused (Python's dict would keep the last index and report a
// vocabulary smaller than the largest id).
//
// encode: ill-formed UTF-8 is refused (INVALID_ARGUMENT naming the byte offset: Megatron
// reads text with Python's strict UTF-8 decoding, so it never tokenizes such input); then
// bert_basic_split (bert_basic.hpp), then greedy longest-match-first WordPiece per
// word with "##" marking a continuation; a word of more than 200 code points, or one with
// any part that matches nothing, becomes the single id of [UNK]. Text that spells a special
// token ("[SEP]") is split like any other text, as in BERT.
//
// decode: tokens joined with spaces, " ##" removed, surrounding spaces stripped (BERT's
// convert_tokens_to_string; lossy: case, accents and spacing around punctuation are gone).
#include <algorithm>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "bert_basic.hpp"
#include "loom/cpp/plugin.hpp"
#include "loom/cpp/plugin_files.hpp"
#include "loom/cpp/tokenizer.hpp"

namespace {

constexpr size_t kMaxWordChars = 200;

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

std::string strip_python(std::string_view line) {
  std::u32string cps = wordpiece::decode_utf8(line);
  size_t b = 0, e = cps.size();
  while (b < e && wordpiece::is_python_space(cps[b])) ++b;
  while (e > b && wordpiece::is_python_space(cps[e - 1])) --e;
  std::string out;
  wordpiece::append_utf8(out, std::u32string_view(cps).substr(b, e - b));
  return out;
}

class WordPieceTokenizer {
 public:
  WordPieceTokenizer(const loom_host* host, const std::string& vocab_file, bool lower_case,
                     int64_t extra_ids)
      : host_(host), lower_case_(lower_case) {
    load_vocab(vocab_file);
    for (int64_t i = 0; i < extra_ids; ++i)
      append_if_absent("<extra_id_" + std::to_string(i) + ">");
  }
  const loom_host* host() const { return host_; }
  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }
  int64_t eod_id() const { return eos_; }

  void encode(const char* text, size_t len, const int32_t** ids, size_t* num_ids) {
    loom::require(text != nullptr || len == 0, "tokenizer/wordpiece: encode got NULL text");
    ids_.clear();
    const std::string_view view(text == nullptr ? "" : text, len);
    if (const size_t bad = wordpiece::first_invalid_utf8(view); bad != std::string_view::npos)
      throw loom::Error(LOOM_ERR_INVALID_ARGUMENT,
                        "tokenizer/wordpiece: the text is not valid UTF-8 (byte " +
                            std::to_string(bad) +
                            "); BERT tokenization, like Megatron's Python, needs valid text");
    for (const std::u32string& word : wordpiece::bert_basic_split(view, lower_case_))
      encode_word(word);
    static const int32_t kEmpty = 0;
    *ids = ids_.empty() ? &kEmpty : ids_.data();
    *num_ids = ids_.size();
  }

  void decode(const int32_t* ids, size_t num_ids, const char** text, size_t* len) {
    loom::require(ids != nullptr || num_ids == 0, "tokenizer/wordpiece: decode got NULL ids");
    std::string joined;
    for (size_t i = 0; i < num_ids; ++i) {
      const int32_t id = ids[i];
      if (id < 0 || id >= vocab_size())
        throw loom::Error(LOOM_ERR_INVALID_ARGUMENT,
                          "tokenizer/wordpiece: id " + std::to_string(id) + " at position " +
                              std::to_string(i) + " is outside the vocabulary [0, " +
                              std::to_string(vocab_size()) + ")");
      if (i > 0) joined.push_back(' ');
      joined += tokens_[static_cast<size_t>(id)];
    }
    text_.clear();
    for (size_t i = 0; i < joined.size();) {
      if (joined.compare(i, 3, " ##") == 0) {
        i += 3;
      } else {
        text_.push_back(joined[i++]);
      }
    }
    const size_t b = text_.find_first_not_of(" \t\n\r\v\f");
    const size_t e = text_.find_last_not_of(" \t\n\r\v\f");
    text_ = b == std::string::npos ? std::string() : text_.substr(b, e - b + 1);
    *text = text_.c_str();
    *len = text_.size();
  }

  // ABI 2.3: the vocabulary as stored ("##" marks a word's continuation pieces).
  int64_t token_to_id(const char* token, size_t len) const {
    if (token == nullptr) return -1;
    auto it = vocab_.find(std::string_view(token, len));
    return it == vocab_.end() ? -1 : it->second;
  }
  void id_to_token(int32_t id, const char** token, size_t* len) const {
    if (id < 0 || id >= vocab_size())
      throw loom::Error(LOOM_ERR_INVALID_ARGUMENT, "tokenizer/wordpiece: id " + std::to_string(id) +
                                                       " is outside the vocabulary [0, " +
                                                       std::to_string(vocab_size()) + ")");
    loom::require(token != nullptr && len != nullptr,
                  "tokenizer/wordpiece: id_to_token outputs are NULL");
    *token = tokens_[static_cast<size_t>(id)].c_str();
    *len = tokens_[static_cast<size_t>(id)].size();
  }

 private:
  void load_vocab(const std::string& path) {
    const std::string data = loom::read_recipe_file(path, "tokenizer/wordpiece", "vocab_file");
    for (size_t pos = 0; pos < data.size();) {
      size_t end = data.find_first_of("\r\n", pos);
      if (end == std::string::npos) end = data.size();
      add(strip_python(std::string_view(data).substr(pos, end - pos)), path);
      pos = end;
      if (pos < data.size() && data[pos] == '\r') {
        ++pos;
        if (pos < data.size() && data[pos] == '\n') ++pos;  // \r\n is one line end
      } else if (pos < data.size()) {
        ++pos;  // \n
      }
    }
    std::string missing;
    for (const char* t : {"[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"})
      if (!vocab_.count(t)) missing += std::string(missing.empty() ? "" : ", ") + t;
    loom::require(missing.empty(), "tokenizer/wordpiece: vocab_file \"" + path +
                                       "\" lacks the special token(s) " + missing +
                                       " that BERT tokenization needs");
    unk_ = vocab_.at("[UNK]");
    for (const auto& t : tokens_) max_token_bytes_ = std::max(max_token_bytes_, t.size());
    for (const char* t : {"[BOS]", "[EOS]"}) append_if_absent(t);
    eos_ = vocab_.at("[EOS]");
  }

  // Megatron's add_token: a new id at the end, unless the vocabulary has the token.
  void append_if_absent(const std::string& t) {
    if (vocab_.count(t)) return;
    vocab_.emplace(t, static_cast<int32_t>(tokens_.size()));
    tokens_.push_back(t);
    max_token_bytes_ = std::max(max_token_bytes_, t.size());
  }

  void add(std::string token, const std::string& path) {
    const int32_t id = static_cast<int32_t>(tokens_.size());
    auto [it, fresh] = vocab_.emplace(token, id);
    loom::require(fresh, "tokenizer/wordpiece: vocab_file \"" + path + "\" line " +
                             std::to_string(id + 1) + " repeats the token \"" + token +
                             "\" of line " + std::to_string(it->second + 1));
    tokens_.push_back(std::move(token));
  }

  // Greedy longest-match-first over code points; all of the word or [UNK].
  void encode_word(const std::u32string& word) {
    if (word.size() > kMaxWordChars) {
      ids_.push_back(unk_);
      return;
    }
    std::string utf8;
    std::vector<size_t> offset;  // byte offset of each code point, plus the end
    offset.reserve(word.size() + 1);
    for (size_t i = 0; i < word.size(); ++i) {
      offset.push_back(utf8.size());
      wordpiece::append_utf8(utf8, std::u32string_view(word).substr(i, 1));
    }
    offset.push_back(utf8.size());
    const size_t mark = ids_.size();
    std::string piece;
    for (size_t start = 0; start < word.size();) {
      int32_t found = -1;
      size_t end = word.size();
      for (; end > start; --end) {
        const size_t bytes = offset[end] - offset[start];
        if (bytes + (start > 0 ? 2 : 0) > max_token_bytes_) continue;
        piece.assign(start > 0 ? "##" : "");
        piece.append(utf8, offset[start], bytes);
        auto it = vocab_.find(std::string_view(piece));
        if (it != vocab_.end()) {
          found = it->second;
          break;
        }
      }
      if (found < 0) {
        ids_.resize(mark);
        ids_.push_back(unk_);
        return;
      }
      ids_.push_back(found);
      start = end;
    }
  }

  const loom_host* host_;
  bool lower_case_;
  TokenMap vocab_;
  std::vector<std::string> tokens_;
  size_t max_token_bytes_ = 0;
  int32_t unk_ = 0;
  int32_t eos_ = 0;
  std::vector<int32_t> ids_;
  std::string text_;
};

loom_error* create(const loom_host* host, const loom_config* cfg, loom_tokenizer** out) {
  return loom::guard(host, [&] {
    loom::Config c(host, cfg);
    const std::string path = c.get_string("vocab_file");
    loom::require(!path.empty(), "tokenizer/wordpiece: set vocab_file to a BERT vocab.txt");
    *out = reinterpret_cast<loom_tokenizer*>(
        new WordPieceTokenizer(host, path, c.get_bool("lower_case"), c.get_int("vocab_extra_ids")));
  });
}
const loom_tokenizer_api kApi = loom::TokenizerTable<WordPieceTokenizer>::api(create);

const loom_param_spec kParams[] = {
    loom::param("vocab_file", LOOM_PARAM_STRING, nullptr,
                "BERT vocab.txt: one token per line, id = line index"),
    loom::param("lower_case", LOOM_PARAM_BOOL, "true",
                "lower-case, NFD and strip accents before WordPiece (BertWordPieceLowerCase); "
                "false keeps case and accents (BertWordPieceCase)"),
    loom::param("vocab_extra_ids", LOOM_PARAM_INT, "0",
                "sentinel tokens <extra_id_0> .. <extra_id_{n-1}> appended after [BOS]/[EOS] "
                "(Megatron's --vocab-extra-ids; T5 uses 100)",
                0, 100000),
};

}  // namespace

LOOM_PLUGIN(.description =
                "BERT WordPiece as Megatron-LM's BertWordPiece tokenizers; EOD = [EOS] (appended "
                "if absent)",
            .params = kParams, .api = &kApi)
