// `loom eval`: Megatron's zero-shot evaluations of a checkpoint (tasks/zeroshot_gpt) —
// WikiText perplexity over overlapping windows, adjusted to words by the token ratio, and
// LAMBADA cloze accuracy — on one rank or under any tensor/pipeline/data layout: the
// samples go through the run's pipeline schedule, forward only.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace loom::engine {

class Registry;

struct EvalOptions {
  std::filesystem::path checkpoint;  // Loom checkpoint (any layout) or Hugging Face directory
  std::string task;                  // "wikitext" | "lambada"
  std::filesystem::path data;        // wikitext: the raw text file; lambada: JSON lines {"text"}
  int64_t seq_len = 0;               // tokens per window; 0 = the checkpoint's train.seq_len
  int64_t overlapping = 32;          // Megatron's --overlapping-eval (stride of the windows)
  bool strict = false;               // Megatron's --strict-lambada: the whole last word
  int64_t micro_batch = 0;           // samples per micro-batch; 0 = train.micro_batch_size
  std::filesystem::path output;      // "" = none; else the results as one JSON object
  bool overwrite = false;            // an existing output may be replaced
  // DPO: the preference pairs whose chosen half is this prefix (<p>_chosen_document): their
  // log-probabilities under the checkpoint, written beside them as <p>_dpo_reference.bin (the
  // reference of train.objective = "dpo" runs that start from this checkpoint) instead of a task
  std::filesystem::path logprobs;
  std::vector<std::string> overrides;
};

void evaluate_checkpoint(const EvalOptions& opts, Registry& registry);

// `loom eval --help`'s word on the data: nothing is downloaded, so it says where the files
// Megatron scores come from and what else each task reads.
inline constexpr const char* kEvalDataNotes =
    "data (nothing is downloaded; docs/evaluation.md):\n"
    "  wikitext  a raw text file, scored whole: WikiText-103's test set is\n"
    "            wikitext-103/wiki.test.tokens in wikitext-103-v1.zip (Salesforce Research's\n"
    "            WikiText, the archive Megatron-LM's README names); any UTF-8 text works.\n"
    "  lambada   JSON lines, one passage a line: {\"text\": \"...\"}, the last word to be\n"
    "            predicted; Megatron scores lambada_test.jsonl (OpenAI's detokenized LAMBADA\n"
    "            test set, 5,153 passages; the copy Megatron-LM's README names is in\n"
    "            github.com/cybertronai/bflm).\n";

// ----- the samples (eval_data.cpp) --------------------------------------------------------
// One window: tokens(T) and targets(T) (the next token, -1 where nothing is scored).
struct EvalSample {
  std::vector<int32_t> tokens, targets;
};

// Megatron's wikitext_detokenizer (tasks/zeroshot_gpt/detokenizer.py), rule for rule.
std::string wikitext_detokenize(std::string text);
// Megatron's _LMDataset: windows of seq_len tokens every `overlapping` tokens; a window
// after the first scores only its last `overlapping` targets; the last is padded with `pad`.
std::vector<EvalSample> lm_windows(const std::vector<int32_t>& tokens, int64_t seq_len,
                                   int64_t overlapping, int32_t pad);
// Megatron's _LambadaDataset split of one passage: the context and the tokens to predict
// (strict: the whole last word, tokenised with a leading space; else the last token).
template <class Encode>
std::pair<std::vector<int32_t>, std::vector<int32_t>> lambada_split(const std::string& text,
                                                                    bool strict, Encode encode);
// A passage as one sample of seq_len (the context cut from the left when it is longer).
EvalSample cloze_sample(std::vector<int32_t> context, const std::vector<int32_t>& answer,
                        int64_t seq_len, int32_t pad);
// Python's str.split() and str.strip() over ASCII whitespace.
std::vector<std::string> split_words(const std::string& s);
std::string strip(const std::string& s);

template <class Encode>
std::pair<std::vector<int32_t>, std::vector<int32_t>> lambada_split(const std::string& text,
                                                                    bool strict, Encode encode) {
  if (!strict) {
    std::vector<int32_t> all = encode(text);
    if (all.size() < 2) return {{}, {}};
    std::vector<int32_t> last = {all.back()};
    all.pop_back();
    return {all, last};
  }
  const std::vector<std::string> words = split_words(text);
  if (words.empty()) return {{}, {}};
  const std::string& last = words.back();
  const size_t at = text.rfind(last);
  return {encode(strip(text.substr(0, at))), encode(" " + last)};
}

}  // namespace loom::engine
