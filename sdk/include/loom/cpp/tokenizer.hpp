// Loom SDK C++ helpers: the C function table of a tokenizer class.
#pragma once

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom/cpp/plugin.hpp"

namespace loom {

// `Tok` has host(), vocab_size(), eod_id(), encode(text, len, ids, num_ids) and
// decode(ids, num_ids, text, len) with the contracts of loom_tokenizer_api, and optionally
// (ABI 2.3) token_to_id(token, len) and id_to_token(id, token, len); the plugin
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
  // ABI 2.3, when Tok has token_to_id(token, len) and id_to_token(id, token, len).
  template <class T, class = void>
  struct HasVocab : std::false_type {};
  template <class T>
  struct HasVocab<T, std::void_t<decltype(std::declval<const T&>().token_to_id("", 0)),
                                 decltype(std::declval<const T&>().id_to_token(
                                     0, (const char**)nullptr, (size_t*)nullptr))>>
      : std::true_type {};
  static int64_t token_to_id(loom_tokenizer* t, const char* token, size_t len) {
    if constexpr (HasVocab<Tok>::value)
      return self(t)->token_to_id(token, len);
    else
      return -1;
  }
  static loom_error* id_to_token(loom_tokenizer* t, int32_t id, const char** token, size_t* len) {
    return guard(self(t)->host(), [&] {
      if constexpr (HasVocab<Tok>::value) self(t)->id_to_token(id, token, len);
    });
  }
  static constexpr loom_tokenizer_api api(CreateFn create) {
    const bool vocab = HasVocab<Tok>::value;
    return {LOOM_TOKENIZER_API_SIZE_V2_3,
            create,
            destroy,
            vocab_size,
            eod_id,
            encode,
            decode,
            vocab ? token_to_id : nullptr,
            vocab ? id_to_token : nullptr};
  }
};

// For a plugin that uses the run's tokenizer (a dataset): the tokenizer, or an error naming
// `who` and why there is none.
inline loom_tokenizer_ref host_tokenizer(const loom_host* host, const std::string& who) {
  loom_tokenizer_ref tok{nullptr, nullptr};
  if (loom_error* err = host->get_tokenizer(host->ctx, &tok)) {
    const std::string why = host->error_message(err);
    host->error_free(err);
    throw Error(LOOM_ERR_INVALID_ARGUMENT, who + " needs a [tokenizer] (" + why + ")");
  }
  return tok;
}

// True when the tokenizer has ABI 2.3's vocabulary of strings (token_to_id, id_to_token).
inline bool has_vocabulary(const loom_tokenizer_ref& tok) {
  return tok.api->struct_size >= LOOM_TOKENIZER_API_SIZE_V2_3 && tok.api->token_to_id &&
         tok.api->id_to_token;
}

// The id of the vocabulary entry `token` ("[CLS]"), or an error naming `who`.
inline int32_t token_id(const loom_tokenizer_ref& tok, const std::string& token,
                        const std::string& who) {
  require(has_vocabulary(tok), who +
                                   " needs a tokenizer with a vocabulary of strings "
                                   "(token_to_id, id_to_token: tokenizer/wordpiece has them)");
  const int64_t id = tok.api->token_to_id(tok.self, token.data(), token.size());
  require(id >= 0, who + ": the tokenizer's vocabulary has no " + token);
  return (int32_t)id;
}

// The ids of `text`.
inline std::vector<int32_t> encode(const loom_host* host, const loom_tokenizer_ref& tok,
                                   const std::string& text) {
  const int32_t* ids = nullptr;
  size_t n = 0;
  check(host, tok.api->encode(tok.self, text.data(), text.size(), &ids, &n));
  return std::vector<int32_t>(ids, ids + n);
}

}  // namespace loom
