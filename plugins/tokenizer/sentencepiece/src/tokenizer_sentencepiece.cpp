// tokenizer/sentencepiece: a SentencePiece model (.model, BPE or unigram) through the
// system libsentencepiece, as Megatron-LM's GPTSentencePieceTokenizer / Llama2Tokenizer use
// it: encode = the model's EncodeAsIds, decode = DecodeIds, vocab_size = the model's piece
// count, and the end-of-document id = the model's </s> (eos_id; -1 when the model has
// none). Nothing is added to the vocabulary.
//
// add_bos / add_eos put the model's <s> / </s> around each encoded text (Llama2Tokenizer's
// tokenize(bos=True) is add_bos = true); a model without that piece refuses the setting at
// create. Text that spells "<s>" or "</s>" is encoded as text, never as the control ids.
// decode drops control pieces (<s>, </s>) the way SentencePiece does; ids outside
// [0, vocab_size) are errors naming the id and its position.
#include <sentencepiece_processor.h>

#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "loom/cpp/plugin.hpp"
#include "loom/cpp/plugin_files.hpp"
#include "loom/cpp/tokenizer.hpp"

namespace {

class SentencePieceTokenizer {
 public:
  SentencePieceTokenizer(const loom_host* host, const std::string& path, bool add_bos, bool add_eos)
      : host_(host), add_bos_(add_bos), add_eos_(add_eos) {
    loom::require(!path.empty(),
                  "tokenizer/sentencepiece: set model_file to a SentencePiece "
                  ".model file (e.g. Llama-2's tokenizer.model)");
    // libsentencepiece reports a missing file as NOT_FOUND; checking first gives the
    // recipe key and an I/O code.
    loom::require_regular_file(path, "tokenizer/sentencepiece: model_file: ");
    if (!std::ifstream(path, std::ios::binary))
      throw loom::Error(LOOM_ERR_IO,
                        "tokenizer/sentencepiece: cannot open model_file \"" + path + "\"");
    const sentencepiece::util::Status st = sp_.Load(path);
    if (!st.ok())
      throw loom::Error(LOOM_ERR_INVALID_ARGUMENT, "tokenizer/sentencepiece: model_file \"" + path +
                                                       "\" is not a SentencePiece model (" +
                                                       st.ToString() + ")");
    loom::require(!add_bos_ || sp_.bos_id() >= 0,
                  "tokenizer/sentencepiece: add_bos is set but model_file \"" + path +
                      "\" has no <s> piece (trained with bos_id=-1)");
    loom::require(!add_eos_ || sp_.eos_id() >= 0,
                  "tokenizer/sentencepiece: add_eos is set but model_file \"" + path +
                      "\" has no </s> piece (trained with eos_id=-1)");
  }
  const loom_host* host() const { return host_; }
  int64_t vocab_size() const { return sp_.GetPieceSize(); }
  int64_t eod_id() const { return sp_.eos_id(); }

  void encode(const char* text, size_t len, const int32_t** ids, size_t* num_ids) {
    loom::require(text != nullptr || len == 0, "tokenizer/sentencepiece: encode got NULL text");
    pieces_.clear();
    const sentencepiece::util::Status st =
        sp_.Encode(std::string_view(text == nullptr ? "" : text, len), &pieces_);
    if (!st.ok())
      throw loom::Error(LOOM_ERR_INVALID_ARGUMENT,
                        "tokenizer/sentencepiece: encode failed: " + st.ToString());
    ids_.clear();
    ids_.reserve(pieces_.size() + 2);
    if (add_bos_) ids_.push_back(sp_.bos_id());
    ids_.insert(ids_.end(), pieces_.begin(), pieces_.end());
    if (add_eos_) ids_.push_back(sp_.eos_id());
    static const int32_t kEmpty = 0;
    *ids = ids_.empty() ? &kEmpty : ids_.data();
    *num_ids = ids_.size();
  }

  void decode(const int32_t* ids, size_t num_ids, const char** text, size_t* len) {
    loom::require(ids != nullptr || num_ids == 0, "tokenizer/sentencepiece: decode got NULL ids");
    pieces_.assign(ids, ids + num_ids);
    for (size_t i = 0; i < num_ids; ++i)
      if (ids[i] < 0 || ids[i] >= vocab_size())
        throw loom::Error(LOOM_ERR_INVALID_ARGUMENT, "tokenizer/sentencepiece: id " +
                                                         std::to_string(ids[i]) + " at position " +
                                                         std::to_string(i) +
                                                         " is outside the vocabulary [0, " +
                                                         std::to_string(vocab_size()) + ")");
    text_.clear();
    const sentencepiece::util::Status st = sp_.Decode(pieces_, &text_);
    if (!st.ok())
      throw loom::Error(LOOM_ERR_INVALID_ARGUMENT,
                        "tokenizer/sentencepiece: decode failed: " + st.ToString());
    *text = text_.c_str();
    *len = text_.size();
  }

 private:
  const loom_host* host_;
  bool add_bos_, add_eos_;
  sentencepiece::SentencePieceProcessor sp_;
  std::vector<int> pieces_;
  std::vector<int32_t> ids_;
  std::string text_;
};

loom_error* create(const loom_host* host, const loom_config* cfg, loom_tokenizer** out) {
  return loom::guard(host, [&] {
    loom::Config c(host, cfg);
    *out = reinterpret_cast<loom_tokenizer*>(new SentencePieceTokenizer(
        host, c.get_string("model_file"), c.get_bool("add_bos"), c.get_bool("add_eos")));
  });
}
const loom_tokenizer_api kApi = loom::TokenizerTable<SentencePieceTokenizer>::api(create);

const loom_param_spec kParams[] = {
    loom::param("model_file", LOOM_PARAM_STRING, nullptr,
                "SentencePiece .model file (e.g. Llama-2's tokenizer.model)"),
    loom::param("add_bos", LOOM_PARAM_BOOL, "false",
                "put the model's <s> before each encoded text (Megatron's Llama2Tokenizer)"),
    loom::param("add_eos", LOOM_PARAM_BOOL, "false", "put the model's </s> after each text"),
};

}  // namespace

LOOM_PLUGIN(
        .description =
            "SentencePiece models (BPE or unigram) via libsentencepiece; EOD = the model's </s>",
        .params = kParams, .api = &kApi)
