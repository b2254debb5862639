// Text generation: loads the checkpoint (decode_model.hpp) and samples with the model's KV
// cache, printing the text as it comes.
#include "serve/generate.hpp"

#include <spdlog/spdlog.h>

#include <cstdio>

#include "base/errors.hpp"
#include "base/tool_output.hpp"
#include "checkpoint/safetensors.hpp"
#include "serve/decode_model.hpp"

namespace loom::engine {

namespace {

// An encoder-decoder model (loom.encode/1, T5): the prompt is encoded once, and the decoder
// writes the answer from its start token until the end token ([EOS], or the tokenizer's EOD)
// or max_new tokens. The answer is printed on the line after the prompt.
void generate_encoded(const GenerateOptions& opts, DecodeModel& m) {
  if (!opts.logits_out.empty()) throw UsageError("--logits-out is for decoder-only models");
  const std::vector<int32_t> prompt = m.encode(opts.prompt);
  if (prompt.empty()) throw UsageError("an encoder-decoder model needs a non-empty prompt");
  const int64_t limit = m.max_context();
  if (limit > 0 && (int64_t)prompt.size() > limit)
    throw UsageError("the prompt is " + std::to_string(prompt.size()) +
                     " tokens; the model's encoder takes " + std::to_string(limit));
  const int64_t start = m.enc->decoder_start(m.model);
  if (start < 0)
    throw RunError("the model names no decoder start token for this tokenizer (T5's is [BOS])");
  int64_t max_new = opts.max_new_tokens;
  if (limit > 0 && max_new + 1 > limit) {
    max_new = limit - 1;
    spdlog::warn("generating {} tokens, not {}: the decoder's context is {} tokens", max_new,
                 opts.max_new_tokens, limit);
  }
  check(m.dec->kv_reset(m.model, 1, max_new + 1), "allocating the KV cache");
  check(m.enc->encode(m.model, 0, prompt.data(), (int64_t)prompt.size()), "encode");
  const int64_t end = m.token_id("[EOS]");
  std::vector<float> logits((size_t)m.vocab());
  std::mt19937_64 rng(opts.seed);
  std::fwrite(opts.prompt.data(), 1, opts.prompt.size(), stdout);
  std::fputc('\n', stdout);
  std::vector<int32_t> answer;
  int32_t next = (int32_t)start;
  const SamplingParams sp{opts.temperature, opts.top_k, opts.top_p};
  for (int64_t i = 0; i < max_new; ++i) {
    check(m.dec->decode(m.model, &next, 1, logits.data()), "decode");
    next = sample_token(logits.data(), logits.size(), sp, rng);
    if (next == end || next == m.eod()) break;
    answer.push_back(next);
  }
  const std::string text = m.detokenize(answer.data(), answer.size());
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
}

}  // namespace

void generate(const GenerateOptions& opts, Registry& registry) {
  DecodeModel m(opts.checkpoint, opts.overrides, registry, "`loom generate`");
  if (m.enc) return generate_encoded(opts, m);
  std::vector<int32_t> prompt = m.encode(opts.prompt);
  if (prompt.empty()) {
    if (m.eod() < 0) throw UsageError("the prompt is empty and the tokenizer has no EOD token");
    prompt.push_back((int32_t)m.eod());  // start a fresh document
  }
  int64_t max_new = opts.max_new_tokens;
  const int64_t limit = m.max_context();
  if (limit > 0 && (int64_t)prompt.size() + max_new > limit) {
    if ((int64_t)prompt.size() >= limit)
      throw UsageError("the prompt is " + std::to_string(prompt.size()) +
                       " tokens; the model's context is " + std::to_string(limit));
    max_new = limit - (int64_t)prompt.size();
    spdlog::warn("generating {} tokens, not {}: the model's context is {} tokens", max_new,
                 opts.max_new_tokens, limit);
  }
  const int64_t max_len = (int64_t)prompt.size() + max_new;
  check(m.dec->kv_reset(m.model, 1, max_len), "allocating the KV cache");
  std::vector<float> logits((size_t)m.vocab());
  std::mt19937_64 rng(opts.seed);
  std::fwrite(opts.prompt.data(), 1, opts.prompt.size(), stdout);
  std::fflush(stdout);
  if (opts.logits_out.empty()) {
    check(m.dec->decode(m.model, prompt.data(), (int64_t)prompt.size(), logits.data()), "decode");
  } else {  // one position at a time, keeping each position's logits
    StTensor all{"F32", {(int64_t)prompt.size(), m.vocab()}, {}};
    for (int32_t t : prompt) {
      check(m.dec->decode(m.model, &t, 1, logits.data()), "decode");
      const uint8_t* b = reinterpret_cast<const uint8_t*>(logits.data());
      all.data.insert(all.data.end(), b, b + logits.size() * sizeof(float));
    }
    write_file_atomically(opts.logits_out, [&](const std::filesystem::path& tmp) {
      write_safetensors(tmp, {{"logits", all}});
    });
  }
  const SamplingParams sp{opts.temperature, opts.top_k, opts.top_p};
  for (int64_t i = 0; i < max_new; ++i) {
    int32_t next = sample_token(logits.data(), logits.size(), sp, rng);
    if (next == m.eod()) break;
    const std::string text = m.detokenize(&next, 1);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    if (i + 1 < max_new) check(m.dec->decode(m.model, &next, 1, logits.data()), "decode");
  }
  std::fputc('\n', stdout);
}

}  // namespace loom::engine
