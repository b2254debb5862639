// Loom SDK C++ helpers: the C function table of a tokenizer class.
#pragma once

#include "loom/cpp/plugin.hpp"

namespace loom {

// `Tok` has host(), vocab_size(), eod_id(), encode(text, len, ids, num_ids) and
// decode(ids, num_ids, text, len) with the contracts of loom_tokenizer_api; the plugin
// writes only `create` (it reads the plugin's own keys). Every call that can fail goes
// through loom::guard, so exceptions become ABI errors.
template <class Tok>
struct TokenizerTable {
  using CreateFn = loom_error* (*)(const loom_host*, const loom_config*, loom_tokenizer**);
  static Tok* self(loom_tokenizer* t) { return reinterpret_cast<Tok*>(t); }
  static void destroy(loom_tokenizer* t) { delete self(t); }
  static int64_t vocab_size(loom_tokenizer* t) { return self(t)->vocab_size(); }
  static int64_t eod_id(loom_tokenizer* t) { return self(t)->eod_id(); }
  static loom_error* encode(loom_tokenizer* t, const char* text, size_t len, const int32_t** ids,
                            size_t* num_ids) {
    return guard(self(t)->host(), [&] { self(t)->encode(text, len, ids, num_ids); });
  }
  static loom_error* decode(loom_tokenizer* t, const int32_t* ids, size_t num_ids,
                            const char** text, size_t* len) {
    return guard(self(t)->host(), [&] { self(t)->decode(ids, num_ids, text, len); });
  }
  static constexpr loom_tokenizer_api api(CreateFn create) {
    return {LOOM_TOKENIZER_API_SIZE_V2, create, destroy, vocab_size, eod_id, encode, decode};
  }
};

}  // namespace loom
