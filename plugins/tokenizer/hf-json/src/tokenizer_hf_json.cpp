// tokenizer/hf-json: a Hugging Face tokenizer.json with a BPE model (byte-level as GPT-2,
// GPT-NeoX, Llama-3 and Qwen; or with byte_fallback as Llama-2's HF conversion), giving the
// ids that Megatron-LM's HuggingFaceTokenizer gets from `tokenizer(text).input_ids`.
//
// encode, as the `tokenizers` crate does it:
//   1. ill-formed UTF-8 becomes U+FFFD (Python callers could not pass it at all);
//   2. added tokens with normalized=false are matched in the raw text (leftmost-longest;
//      lstrip/rstrip absorb neighbouring whitespace; single_word needs non-word neighbours);
//   3. each remaining segment is normalized, then searched for the normalized=true added
//      tokens;
//   4. each remaining segment is pre-tokenized into words, and each word is BPE-encoded;
//   5. the post_processor (TemplateProcessing, BertProcessing, RobertaProcessing,
//      ByteLevel, Sequence) adds its special tokens when add_special_tokens is true (the
//      default, as transformers' tokenizer(text)).
// decode: each id's token (added tokens first), the decoder chain, concatenated; no
// decoder joins the tokens with spaces. Special tokens are decoded like any token
// (transformers' decode default, skip_special_tokens=False).
//
// vocab_size is the largest id (model vocab or added token) + 1. The end-of-document id
// is eod_token's, or when that is empty the first of "<|endoftext|>", "</s>",
// "<|end_of_text|>" that exists; -1 when none does.
#include <algorithm>
#include <cctype>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bpe.hpp"
#include "components.hpp"
#include "loom/cpp/plugin_files.hpp"
#include "loom/cpp/tokenizer.hpp"
#include "utf8.hpp"

namespace hfjson {
namespace {

struct AddedToken {
  int32_t id;
  std::string content;
  bool single_word, lstrip, rstrip, normalized, special;
};

// A stretch of text, or an added token's id (id >= 0).
struct Segment {
  std::string text;
  int32_t id = -1;
  bool at_start = false;
};

bool word_char(char32_t c) {
  if (c == '_') return true;
  if (c < 0x80) return std::isalnum(static_cast<int>(c)) != 0;
  return !is_white_space(c) && c > 0x7F && c != 0xFFFD && !(c >= 0x2000 && c <= 0x206F) &&
         !(c >= 0x3000 && c <= 0x303F);  // approximation of Rust's is_alphanumeric
}

char32_t last_char(std::string_view s) {
  size_t i = s.size();
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
  if (i == 0) return 0;
  char32_t cp = 0;
  next_code_point(s, i - 1, cp);
  return cp;
}

char32_t first_char(std::string_view s) {
  if (s.empty()) return 0;
  char32_t cp = 0;
  next_code_point(s, 0, cp);
  return cp;
}

class Matcher {
 public:
  void add(const AddedToken* t) {
    if (!t->content.empty()) by_first_[static_cast<unsigned char>(t->content[0])].push_back(t);
  }
  void finish() {
    for (auto& list : by_first_)
      std::stable_sort(list.begin(), list.end(), [](const AddedToken* a, const AddedToken* b) {
        return a->content.size() > b->content.size();
      });
  }
  bool empty() const {
    for (const auto& l : by_first_)
      if (!l.empty()) return false;
    return true;
  }

  // Splits every text segment of `in` at the added tokens.
  std::vector<Segment> split(std::vector<Segment> in) const {
    if (empty()) return in;
    std::vector<Segment> out;
    for (auto& seg : in) {
      if (seg.id >= 0) {
        out.push_back(std::move(seg));
        continue;
      }
      const std::string& s = seg.text;
      size_t emitted = 0;  // text before this offset is already in `out`
      for (size_t i = 0; i < s.size();) {
        const AddedToken* hit = nullptr;
        for (const AddedToken* t : by_first_[static_cast<unsigned char>(s[i])]) {
          if (s.compare(i, t->content.size(), t->content) != 0) continue;
          if (t->single_word &&
              (word_char(last_char(std::string_view(s).substr(0, i))) ||
               word_char(first_char(std::string_view(s).substr(i + t->content.size())))))
            continue;
          hit = t;
          break;
        }
        if (!hit) {
          ++i;
          continue;
        }
        size_t b = i, e = i + hit->content.size();
        if (hit->lstrip)
          while (b > emitted && is_white_space(last_char(std::string_view(s).substr(0, b)))) {
            do --b;
            while (b > emitted && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80);
          }
        if (hit->rstrip)
          while (e < s.size() && is_white_space(first_char(std::string_view(s).substr(e)))) {
            char32_t cp = 0;
            e += next_code_point(s, e, cp);
          }
        if (b > emitted)
          out.push_back({s.substr(emitted, b - emitted), -1, seg.at_start && emitted == 0});
        out.push_back({std::string(), hit->id, false});
        emitted = e;
        i = e;
      }
      if (emitted < s.size()) out.push_back({s.substr(emitted), -1, seg.at_start && emitted == 0});
    }
    return out;
  }

 private:
  std::vector<const AddedToken*> by_first_[256];
};

// The post_processor's ids before and after a single sequence.
void post_processor(const json& j, const std::string& where, std::vector<int32_t>& before,
                    std::vector<int32_t>& after) {
  const std::string type = type_of(j, where);
  if (type == "ByteLevel") return;  // only trims offsets
  if (type == "Sequence") {
    const json list = member<json>(j, "processors", json::array(), where);
    for (size_t i = 0; i < list.size(); ++i)
      post_processor(list[i], where + ".processors[" + std::to_string(i) + "]", before, after);
    return;
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    auto id_of = [&](const char* key) {
      const json v = member<json>(j, key, json(), where);
      loom::require(v.is_array() && v.size() == 2 && v[1].is_number_integer(),
                    where + "." + key + " must be [token, id]");
      return v[1].get<int32_t>();
    };
    before.insert(before.begin(), id_of("cls"));
    after.push_back(id_of("sep"));
    return;
  }
  if (type == "TemplateProcessing") {
    const json single = member<json>(j, "single", json::array(), where);
    const json specials = member<json>(j, "special_tokens", json::object(), where);
    std::vector<int32_t> pre, post;
    bool seen_sequence = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const json& item = single[i];
      const std::string at = where + ".single[" + std::to_string(i) + "]";
      if (item.contains("Sequence")) {
        loom::require(!seen_sequence, at + ": the template names the sequence twice");
        seen_sequence = true;
      } else if (item.contains("SpecialToken")) {
        const std::string name = member<std::string>(item["SpecialToken"], "id", "", at);
        auto sp = specials.find(name);
        loom::require(sp != specials.end() && sp->contains("ids"),
                      at + ": special token \"" + name + "\" is not in special_tokens");
        for (const auto& id : (*sp)["ids"])
          (seen_sequence ? post : pre).push_back(id.get<int32_t>());
      } else {
        throw loom::Error(LOOM_ERR_INVALID_ARGUMENT, at + " is neither Sequence nor SpecialToken");
      }
    }
    before.insert(before.begin(), pre.begin(), pre.end());
    after.insert(after.end(), post.begin(), post.end());
    return;
  }
  throw loom::Error(LOOM_ERR_UNIMPLEMENTED,
                    where + ": post_processor type \"" + type +
                        "\" is not supported (supported: TemplateProcessing, ByteLevel, "
                        "BertProcessing, RobertaProcessing, Sequence)");
}

class HfJsonTokenizer {
 public:
  HfJsonTokenizer(const loom_host* host, const std::string& path, const std::string& eod_token,
                  bool add_special_tokens)
      : host_(host), add_special_(add_special_tokens) {
    loom::require(!path.empty(), "tokenizer/hf-json: set tokenizer_file to a tokenizer.json");
    const std::string text = loom::read_recipe_file(path, "tokenizer/hf-json", "tokenizer_file");
    json j;
    try {
      j = json::parse(text);
    } catch (const json::parse_error& e) {
      // "[json.exception.parse_error.101] parse error at line 3, column 7: ..." -> from "at".
      std::string why = e.what();
      if (const size_t at = why.find("at line "); at != std::string::npos) why = why.substr(at);
      throw loom::Error(LOOM_ERR_INVALID_ARGUMENT, "tokenizer/hf-json: tokenizer_file \"" + path +
                                                       "\" is not valid JSON: " + why);
    }
    const std::string where = "tokenizer/hf-json: " + path;
    loom::require(j.is_object(), where + ": the top level must be an object");
    build(j, where);
    resolve_eod(eod_token, where);
  }
  const loom_host* host() const { return host_; }
  int64_t vocab_size() const { return static_cast<int64_t>(id_to_token_.size()); }
  int64_t eod_id() const { return eod_; }

  void encode(const char* text, size_t len, const int32_t** ids, size_t* num_ids) {
    loom::require(text != nullptr || len == 0, "tokenizer/hf-json: encode got NULL text");
    ids_.clear();
    std::vector<Segment> segs;
    segs.push_back({sanitize_utf8(std::string_view(text == nullptr ? "" : text, len)), -1, true});
    segs = raw_tokens_.split(std::move(segs));
    if (normalizer_)
      for (auto& s : segs)
        if (s.id < 0) normalizer_->apply(s.text);
    segs = normalized_tokens_.split(std::move(segs));
    if (add_special_) ids_ = prefix_;
    std::vector<Piece> pieces;
    for (auto& s : segs) {
      if (s.id >= 0) {
        ids_.push_back(s.id);
        continue;
      }
      if (s.text.empty()) continue;
      pieces.clear();
      pieces.push_back({std::move(s.text), s.at_start});
      if (pre_) pre_->apply(pieces);
      for (const auto& p : pieces) bpe_->encode_word(p.text, ids_);
    }
    if (add_special_) ids_.insert(ids_.end(), suffix_.begin(), suffix_.end());
    static const int32_t kEmpty = 0;
    *ids = ids_.empty() ? &kEmpty : ids_.data();
    *num_ids = ids_.size();
  }

  void decode(const int32_t* ids, size_t num_ids, const char** text, size_t* len) {
    loom::require(ids != nullptr || num_ids == 0, "tokenizer/hf-json: decode got NULL ids");
    std::vector<std::string> tokens;
    tokens.reserve(num_ids);
    for (size_t i = 0; i < num_ids; ++i) {
      const int32_t id = ids[i];
      if (id < 0 || id >= vocab_size() || !assigned_[static_cast<size_t>(id)])
        throw loom::Error(LOOM_ERR_INVALID_ARGUMENT, "tokenizer/hf-json: id " + std::to_string(id) +
                                                         " at position " + std::to_string(i) +
                                                         " is not in the vocabulary (size " +
                                                         std::to_string(vocab_size()) + ")");
      tokens.push_back(id_to_token_[static_cast<size_t>(id)]);
    }
    text_.clear();
    if (decoder_) {
      decoder_->apply(tokens);
      for (const auto& t : tokens) text_ += t;
    } else {
      for (size_t i = 0; i < tokens.size(); ++i) text_ += (i ? " " : "") + tokens[i];
    }
    *text = text_.c_str();
    *len = text_.size();
  }

 private:
  void build(const json& j, const std::string& where) {
    const json model = member<json>(j, "model", json(), where);
    loom::require(model.is_object(), where + ": no \"model\" object");
    const std::string model_type =
        model.contains("type") ? type_of(model, where + ": model") : std::string("BPE");
    if (model_type != "BPE")
      throw loom::Error(LOOM_ERR_UNIMPLEMENTED, where + ": model type \"" + model_type +
                                                    "\" is not supported (supported: BPE)");
    bpe_ = std::make_unique<Bpe>(model, where + ": model");

    const json added = member<json>(j, "added_tokens", json::array(), where);
    for (size_t i = 0; i < added.size(); ++i) {
      const std::string at = where + ": added_tokens[" + std::to_string(i) + "]";
      const json& a = added[i];
      loom::require(a.is_object() && a.contains("id") && a["id"].is_number_integer() &&
                        a.contains("content") && a["content"].is_string(),
                    at + " needs an integer id and a string content");
      added_.push_back({a["id"].get<int32_t>(), a["content"].get<std::string>(),
                        member<bool>(a, "single_word", false, at),
                        member<bool>(a, "lstrip", false, at), member<bool>(a, "rstrip", false, at),
                        member<bool>(a, "normalized", true, at),
                        member<bool>(a, "special", false, at)});
    }
    for (const auto& t : added_) (t.normalized ? normalized_tokens_ : raw_tokens_).add(&t);
    raw_tokens_.finish();
    normalized_tokens_.finish();

    int64_t size = 0;
    for (const auto& [tok, id] : bpe_->vocab()) size = std::max<int64_t>(size, id + 1);
    for (const auto& t : added_) size = std::max<int64_t>(size, int64_t{t.id} + 1);
    id_to_token_.assign(static_cast<size_t>(size), std::string());
    assigned_.assign(static_cast<size_t>(size), false);
    for (const auto& [tok, id] : bpe_->vocab()) {
      id_to_token_[static_cast<size_t>(id)] = tok;
      assigned_[static_cast<size_t>(id)] = true;
    }
    for (const auto& t : added_) {
      id_to_token_[static_cast<size_t>(t.id)] = t.content;
      assigned_[static_cast<size_t>(t.id)] = true;
    }

    if (auto n = member<json>(j, "normalizer", json(), where); !n.is_null())
      normalizer_ = make_normalizer(n, where + ": normalizer");
    if (auto p = member<json>(j, "pre_tokenizer", json(), where); !p.is_null())
      pre_ = make_pre_tokenizer(p, where + ": pre_tokenizer");
    if (auto d = member<json>(j, "decoder", json(), where); !d.is_null())
      decoder_ = make_decoder(d, where + ": decoder");
    if (auto p = member<json>(j, "post_processor", json(), where); !p.is_null())
      post_processor(p, where + ": post_processor", prefix_, suffix_);
    for (int32_t id : prefix_)
      loom::require(
          id >= 0 && id < vocab_size(),
          where + ": post_processor adds id " + std::to_string(id) + ", outside the vocabulary");
    for (int32_t id : suffix_)
      loom::require(
          id >= 0 && id < vocab_size(),
          where + ": post_processor adds id " + std::to_string(id) + ", outside the vocabulary");
  }

  int32_t find_token(const std::string& s) const {
    for (const auto& t : added_)
      if (t.content == s) return t.id;
    auto it = bpe_->vocab().find(s);
    return it == bpe_->vocab().end() ? -1 : it->second;
  }

  void resolve_eod(const std::string& eod_token, const std::string& where) {
    if (!eod_token.empty()) {
      eod_ = find_token(eod_token);
      loom::require(eod_ >= 0, where + ": eod_token \"" + eod_token +
                                   "\" is neither an added token nor in the model's vocab");
      return;
    }
    for (const char* t : {"<|endoftext|>", "</s>", "<|end_of_text|>"})
      if ((eod_ = find_token(t)) >= 0) return;
  }

  const loom_host* host_;
  bool add_special_;
  std::unique_ptr<Bpe> bpe_;
  std::vector<AddedToken> added_;
  Matcher raw_tokens_, normalized_tokens_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_;
  std::unique_ptr<Decoder> decoder_;
  std::vector<int32_t> prefix_, suffix_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> assigned_;
  int32_t eod_ = -1;
  std::vector<int32_t> ids_;
  std::string text_;
};

loom_error* create(const loom_host* host, const loom_config* cfg, loom_tokenizer** out) {
  return loom::guard(host, [&] {
    loom::Config c(host, cfg);
    *out = reinterpret_cast<loom_tokenizer*>(
        new HfJsonTokenizer(host, c.get_string("tokenizer_file"), c.get_string("eod_token"),
                            c.get_bool("add_special_tokens")));
  });
}
const loom_tokenizer_api kApi = loom::TokenizerTable<HfJsonTokenizer>::api(create);

const loom_param_spec kParams[] = {
    loom::param("tokenizer_file", LOOM_PARAM_STRING, nullptr,
                "Hugging Face tokenizer.json with a BPE model"),
    loom::param("eod_token", LOOM_PARAM_STRING, "",
                "end-of-document token; empty = the first of <|endoftext|>, </s>, "
                "<|end_of_text|> that exists"),
    loom::param("add_special_tokens", LOOM_PARAM_BOOL, "true",
                "apply the post_processor (e.g. Llama's BOS), as transformers' tokenizer(text)"),
};

const loom_plugin_descriptor kDescriptor = loom::describe_plugin(
    {LOOM_PLUGIN_IDENTITY,
     .description =
         "Hugging Face tokenizer.json (BPE: byte-level or byte_fallback) with added tokens",
     .params = kParams, .api = &kApi});

}  // namespace
}  // namespace hfjson

LOOM_PLUGIN_ENTRY(hfjson::kDescriptor)
