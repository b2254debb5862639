// A tokenizer plugin created straight from command-line flags, outside a recipe, for
// `loom preprocess` and `loom data inspect`: Megatron's flags (--tokenizer-type NAME,
// --vocab-file, --merge-file, --tokenizer-model) map onto the plugin's schema keys
// (vocab_file, merge_file, model_file or tokenizer_file); --tokenizer-option KEY=VALUE sets
// any other declared key. Instances are single-threaded (tokenizer.h): a multi-threaded
// caller makes one per thread from the same factory.
#pragma once

#include <boost/program_options/options_description.hpp>
#include <memory>
#include <string>
#include <vector>

#include "loom/loom.h"
#include "recipe/recipe.hpp"

namespace loom::engine {

class Registry;

struct TokenizerFlags {
  std::string name;  // --tokenizer / --tokenizer-type; "" = none given
  std::string vocab_file, merge_file, model_file;
  std::vector<std::string> options;  // KEY=VALUE
  // KEY=VALUE set where the plugin declares KEY and no --tokenizer-option sets it (chat
  // data: add_special_tokens=false, as the rendered text carries the BOS itself)
  std::vector<std::string> defaults;
  bool given() const { return !name.empty(); }
};

// Adds --tokenizer, --tokenizer-type (same), --vocab-file, --merge-file, --tokenizer-model
// and --tokenizer-option to `desc`, stored into `flags` (call finish_tokenizer_flags after
// parsing to merge the two name spellings).
void add_tokenizer_options(boost::program_options::options_description& desc, TokenizerFlags& flags,
                           std::string& type_alias);
void finish_tokenizer_flags(TokenizerFlags& flags, const std::string& type_alias,
                            const std::string& command);

// Megatron's tokenizer type names mapped to Loom plugins (GPT2BPETokenizer -> gpt2-bpe ...);
// any other name is returned as given.
std::string tokenizer_plugin_name(const std::string& name);

class Tokenizer {
 public:
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;
  int64_t vocab_size() const;
  int64_t eod_id() const;  // -1 when none
  // The ids of `text`, valid until the next call on this instance.
  std::pair<const int32_t*, size_t> encode(const char* text, size_t len);
  std::string decode(const int32_t* ids, size_t n);

 private:
  friend class TokenizerFactory;
  Tokenizer(const loom_tokenizer_api* api, loom_tokenizer* self, std::string who)
      : api_(api), self_(self), who_(std::move(who)) {}
  const loom_tokenizer_api* api_;
  loom_tokenizer* self_;
  std::string who_;
};

class TokenizerFactory {
 public:
  // Resolves the plugin and builds its config. Throws UsageError naming the flag for an
  // unknown plugin, a key the plugin does not declare, a missing required key or file.
  TokenizerFactory(Registry& registry, const TokenizerFlags& flags, const std::string& command);
  ~TokenizerFactory();
  // A new instance (UsageError when the plugin refuses its config, e.g. a malformed vocab).
  std::unique_ptr<Tokenizer> create();
  const std::string& who() const { return who_; }  // "tokenizer/gpt2-bpe"

 private:
  struct Host;
  std::unique_ptr<Host> host_;
  const loom_tokenizer_api* api_ = nullptr;
  loom_config cfg_;
  std::string who_, command_;
};

}  // namespace loom::engine
