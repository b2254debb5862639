// The stages of a Hugging Face tokenizer.json pipeline other than the model, built from
// their JSON objects: normalizers (normalizers.cpp), pre-tokenizers (pre_tokenizers.cpp)
// and decoders (decoders.cpp). Each factory throws loom::Error: UNIMPLEMENTED naming a
// `type` it does not support, INVALID_ARGUMENT for a malformed object; `where` (file and
// JSON path) starts every message.
//
// Differences from the Rust `tokenizers` crate: no offsets are tracked, only text. The one
// offset-dependent rule that changes ids (Metaspace's prepend_scheme "first": prepend only
// to the piece that starts the original text) is kept with a flag on each piece.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loom/cpp/plugin.hpp"

namespace hfjson {

using json = nlohmann::json;

// A piece of text between pre-tokenizer splits. `at_start`: it begins the input text.
struct Piece {
  std::string text;
  bool at_start = false;
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void apply(std::string& s) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void apply(std::vector<Piece>& pieces) const = 0;
};

// Decoders map a list of token strings to a list of strings (HF's decode_chain); the
// final text is their concatenation.
class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void apply(std::vector<std::string>& tokens) const = 0;
};

std::unique_ptr<Normalizer> make_normalizer(const json& j, const std::string& where);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j, const std::string& where);
std::unique_ptr<Decoder> make_decoder(const json& j, const std::string& where);

// Shared JSON helpers: the member `key` of object `j` as T, or `def` when absent or null;
// a wrong type is an INVALID_ARGUMENT error naming `where` and the key.
template <class T>
T member(const json& j, const char* key, const T& def, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  try {
    return it->get<T>();
  } catch (const json::exception& e) {
    throw loom::Error(LOOM_ERR_INVALID_ARGUMENT,
                      where + "." + key + " has the wrong type (" + it->type_name() + ")");
  }
}
// The object's "type" string.
std::string type_of(const json& j, const std::string& where);
// HF's pattern object {"String": s} or {"Regex": r}: returns the text, sets `literal`.
std::string pattern_of(const json& j, const std::string& where, bool& literal);

}  // namespace hfjson
