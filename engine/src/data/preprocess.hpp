// `loom preprocess`: JSON lines (plain, .gz or .zst) -> Megatron indexed datasets
// `<output-prefix>_<key>_document.{bin,idx}` (or `_sentence` with --split-sentences), one
// per --json-keys key, byte-identical to Megatron's tools/preprocess_data.py for the same
// token ids. Streaming: memory stays bounded by the chunks in flight plus the index
// arrays (12 bytes per sequence, 8 per document).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/preprocess_tokenizer.hpp"

namespace loom::engine {

class Registry;

struct PreprocessOptions {
  std::string input, output_prefix;
  std::vector<std::string> json_keys{"text"};
  TokenizerFlags tokenizer;
  bool append_eod = false;
  bool split_sentences = false;
  bool skip_bad_lines = false;
  bool overwrite = false;  // replace existing .bin/.idx outputs (refused otherwise)
  int workers = 1;
  size_t chunk_bytes = size_t{1} << 20;  // input lines are handed to workers in chunks
  double log_interval_s = 10;            // progress lines when stderr is not a terminal
  // Conversations (data/preprocess_chat.hpp): --chat-format NAME or tokenizer_config.json,
  // or --chat-template TEXT; then the outputs are chat_output_keys (preprocess_chat.hpp).
  std::string chat_format, chat_template;
  bool preference = false;  // --preference-pairs: lines are prompt/chosen/rejected
  bool chat() const { return !chat_format.empty() || !chat_template.empty(); }
};

struct PreprocessOutput {
  std::string key, prefix;  // prefix of the .bin/.idx pair written
  int64_t sequences = 0, documents = 0, tokens = 0;
};

struct PreprocessStats {
  int64_t lines = 0, documents = 0, bad_lines = 0, blank_lines = 0;
  uint64_t bytes = 0;  // decompressed input bytes
  double seconds = 0;
  std::string first_bad;  // "<input>:<line>: ..." of the first skipped line
  std::vector<PreprocessOutput> outputs;
};

// Throws UsageError for bad options (exit 2) and RunError for I/O and data failures (exit 1).
PreprocessStats preprocess(const PreprocessOptions& options, Registry& registry);

// The `loom preprocess` command line.
int cmd_preprocess(const std::vector<std::string>& args);

}  // namespace loom::engine
