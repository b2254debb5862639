// Tokenizer plugins created from command-line flags (see preprocess_tokenizer.hpp).
#include "data/preprocess_tokenizer.hpp"

#include <spdlog/spdlog.h>

#include <boost/program_options.hpp>
#include <filesystem>
#include <map>
#include <set>

#include "base/errors.hpp"
#include "base/require_regular.hpp"
#include "loader/registry.hpp"
#include "session/host.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace loom::engine {

namespace {

// The host context of a standalone tokenizer: only its kind/name, for log lines. The
// opaque loom_host_context type is never defined here; pointers are cast to and from it.
struct StandaloneContext {
  std::string who;
};

using namespace host_abi;

void log(loom_host_context* ctx, loom_log_level level, const char* message) noexcept {
  const auto* c = reinterpret_cast<const StandaloneContext*>(ctx);
  log_as(c ? c->who.c_str() : "tokenizer", level, message);
}

template <class Ref>
loom_error* none(loom_host_context*, Ref*) noexcept {
  return error_new(LOOM_ERR_INVALID_ARGUMENT,
                   "a tokenizer created from command-line flags has no other plugins");
}

const std::map<std::string, std::string>& aliases() {
  static const std::map<std::string, std::string> m = {
      {"GPT2BPETokenizer", "gpt2-bpe"},
      {"BertWordPieceLowerCase", "wordpiece"},
      {"BertWordPieceCase", "wordpiece"},
      {"SentencePieceTokenizer", "sentencepiece"},
      {"GPTSentencePieceTokenizer", "sentencepiece"},
      {"Llama2Tokenizer", "sentencepiece"},
      {"HuggingFaceTokenizer", "hf-json"},
      {"NullTokenizer", "null"},
  };
  return m;
}

const loom_param_spec* find_param(const loom_plugin_descriptor* d, const std::string& key) {
  for (size_t i = 0; i < d->num_params; ++i)
    if (key == d->params[i].name) return &d->params[i];
  return nullptr;
}

std::string key_list(const loom_plugin_descriptor* d) {
  std::string out;
  for (size_t i = 0; i < d->num_params; ++i)
    out += (out.empty() ? "" : ", ") + std::string(d->params[i].name);
  return out.empty() ? "none" : out;
}

}  // namespace

struct TokenizerFactory::Host {
  StandaloneContext ctx;
  loom_host host{};
};

void add_tokenizer_options(po::options_description& desc, TokenizerFlags& flags,
                           std::string& type_alias) {
  desc.add_options()("tokenizer", po::value<std::string>(&flags.name),
                     "tokenizer plugin (byte, gpt2-bpe, ...; Megatron names such as "
                     "GPT2BPETokenizer are accepted)")("tokenizer-type",
                                                       po::value<std::string>(&type_alias),
                                                       "same as --tokenizer (Megatron's name)")(
      "vocab-file", po::value<std::string>(&flags.vocab_file),
      "the tokenizer's vocab_file (GPT-2 vocab.json, WordPiece vocab.txt)")(
      "merge-file", po::value<std::string>(&flags.merge_file),
      "the tokenizer's merge_file (GPT-2 merges.txt)")(
      "tokenizer-model", po::value<std::string>(&flags.model_file),
      "the tokenizer's model_file (SentencePiece) or tokenizer_file (tokenizer.json)")(
      "tokenizer-option", po::value<std::vector<std::string>>(&flags.options)->composing(),
      "KEY=VALUE: any other key the tokenizer plugin declares (repeatable)");
}

void finish_tokenizer_flags(TokenizerFlags& flags, const std::string& type_alias,
                            const std::string& command) {
  if (!type_alias.empty()) {
    if (!flags.name.empty() && flags.name != type_alias)
      throw UsageError(command + ": --tokenizer " + flags.name + " and --tokenizer-type " +
                       type_alias + " disagree; give one");
    flags.name = type_alias;
  }
}

std::string tokenizer_plugin_name(const std::string& name) {
  auto it = aliases().find(name);
  return it == aliases().end() ? name : it->second;
}

TokenizerFactory::TokenizerFactory(Registry& registry, const TokenizerFlags& flags,
                                   const std::string& command)
    : host_(std::make_unique<Host>()), command_(command) {
  const std::string name = tokenizer_plugin_name(flags.name);
  const PluginInfo& info = registry.get(LOOM_KIND_TOKENIZER, name);
  const loom_plugin_descriptor* d = info.desc;
  who_ = "tokenizer/" + name;
  api_ = static_cast<const loom_tokenizer_api*>(d->api);
  if (!api_ || api_->struct_size < LOOM_TOKENIZER_API_SIZE_V2)
    throw UsageError("plugin " + who_ + " (" + info.path.string() +
                     ") has a function table smaller than ABI 2.0 requires");

  cfg_.section = "tokenizer";
  for (size_t i = 0; i < d->num_params; ++i) {
    Value v;
    if (d->params[i].default_value && parse_default(d->params[i], v).empty())
      cfg_.values[d->params[i].name] = v;
  }
  auto set = [&](const std::string& key, const std::string& text, const std::string& flag) {
    const loom_param_spec* spec = find_param(d, key);
    if (!spec)
      throw UsageError(command + ": " + who_ + " takes no " + key + " (" + flag +
                       "); its keys: " + key_list(d));
    loom_param_spec typed = *spec;
    typed.default_value = text.c_str();
    Value v;
    std::string problem = parse_default(typed, v);
    if (!problem.empty()) {
      // parse_default words problems as "default ..."; say "value" here.
      if (problem.rfind("default ", 0) == 0) problem = "value " + problem.substr(8);
      throw UsageError(command + ": " + flag + ": " + who_ + " key " + key + ": " + problem);
    }
    v.file = "<command line>";
    if (spec->type == LOOM_PARAM_STRING) v.s = text;  // as written, never TOML-unquoted
    if (key.size() > 5 && key.ends_with("_file") && !text.empty()) {
      require_regular_file(text, command + ": " + flag + ": ");
      if (!fs::exists(text)) throw UsageError(command + ": " + flag + ": no such file: " + text);
    }
    cfg_.values[key] = v;
  };
  if (!flags.vocab_file.empty()) set("vocab_file", flags.vocab_file, "--vocab-file");
  if (!flags.merge_file.empty()) set("merge_file", flags.merge_file, "--merge-file");
  if (!flags.model_file.empty())
    set(find_param(d, "model_file") || !find_param(d, "tokenizer_file") ? "model_file"
                                                                        : "tokenizer_file",
        flags.model_file, "--tokenizer-model");
  // Megatron's BertWordPieceLowerCase / BertWordPieceCase choose the case handling.
  if (find_param(d, "lower_case") &&
      (flags.name == "BertWordPieceLowerCase" || flags.name == "BertWordPieceCase"))
    set("lower_case", flags.name == "BertWordPieceLowerCase" ? "true" : "false", "--tokenizer");
  std::set<std::string> given;
  for (const std::string& kv : flags.options) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      throw UsageError(command + ": --tokenizer-option expects KEY=VALUE, got '" + kv + "'");
    set(kv.substr(0, eq), kv.substr(eq + 1), "--tokenizer-option " + kv.substr(0, eq));
    given.insert(kv.substr(0, eq));
  }
  for (const std::string& kv : flags.defaults) {
    const std::string key = kv.substr(0, kv.find('='));
    if (find_param(d, key) && !given.count(key)) set(key, kv.substr(key.size() + 1), command);
  }
  for (size_t i = 0; i < d->num_params; ++i) {
    const std::string key = d->params[i].name;
    if (cfg_.values.count(key)) continue;
    const std::string flag = key == "vocab_file"   ? "--vocab-file FILE"
                             : key == "merge_file" ? "--merge-file FILE"
                             : key == "model_file" || key == "tokenizer_file"
                                 ? "--tokenizer-model FILE"
                                 : "--tokenizer-option " + key + "=VALUE";
    throw UsageError(command + ": " + who_ + " needs " + key + ": pass " + flag);
  }

  host_->ctx.who = who_;
  loom_host& h = host_->host;
  h = common_table(reinterpret_cast<loom_host_context*>(&host_->ctx), log);
  h.get_backend = none<loom_backend_ref>;
  h.get_attention = none<loom_attention_ref>;
  h.get_tokenizer = none<loom_tokenizer_ref>;
  h.get_comm = none<loom_comm_ref>;
  h.rng_seed = [](loom_host_context*, const char* stream) noexcept -> uint64_t {
    return stream_seed(1234, stream ? stream : "");
  };
}

TokenizerFactory::~TokenizerFactory() = default;

std::unique_ptr<Tokenizer> TokenizerFactory::create() {
  loom_tokenizer* self = nullptr;
  if (loom_error* err = api_->create(&host_->host, &cfg_, &self)) {
    std::string msg = err->message;
    delete err;
    throw UsageError(command_ + ": creating " + who_ + ": " + msg);
  }
  return std::unique_ptr<Tokenizer>(new Tokenizer(api_, self, who_));
}

Tokenizer::~Tokenizer() { api_->destroy(self_); }
int64_t Tokenizer::vocab_size() const { return api_->vocab_size(self_); }
int64_t Tokenizer::eod_id() const { return api_->eod_id(self_); }

std::pair<const int32_t*, size_t> Tokenizer::encode(const char* text, size_t len) {
  const int32_t* ids = nullptr;
  size_t n = 0;
  check(api_->encode(self_, text, len, &ids, &n), who_ + " encode");
  return {ids, n};
}

std::string Tokenizer::decode(const int32_t* ids, size_t n) {
  const char* text = nullptr;
  size_t len = 0;
  check(api_->decode(self_, ids, n, &text, &len), who_ + " decode");
  return std::string(text ? text : "", len);
}

}  // namespace loom::engine
