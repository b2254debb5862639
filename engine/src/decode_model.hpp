// A checkpoint loaded on one rank for generation, shared by `loom generate` and `loom serve`:
// the saved recipe's plugins, the tokenizer, and the model with its KV-cache tables.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "hf_interop.hpp"
#include "host.hpp"
#include "recipe.hpp"
#include "registry.hpp"

namespace loom::engine {

// How the next token is picked from a distribution.
struct SamplingParams {
  double temperature = 1.0;  // 0 = greedy
  int64_t top_k = 0;         // 0 = off
  double top_p = 1.0;        // 1 = off
};

// Picks the next token from `logits` (vocab entries, read only).
int32_t sample_token(const float* logits, size_t vocab, const SamplingParams& p,
                     std::mt19937_64& rng);
// log softmax(logits)[token], in float64.
double token_logprob(const float* logits, size_t vocab, int32_t token);

class DecodeModel {
 public:
  // `checkpoint`: a Loom checkpoint directory (or its parent with `latest`), or a Hugging
  // Face model directory (imported on the fly). Any layout is merged into full tensors: the
  // model runs at tensor = pipeline = 1. `who` names the command in errors.
  DecodeModel(const std::filesystem::path& checkpoint, const std::vector<std::string>& overrides,
              Registry& registry, const std::string& who);
  ~DecodeModel();  // the session goes before the scratch import it read
  DecodeModel(const DecodeModel&) = delete;
  DecodeModel& operator=(const DecodeModel&) = delete;

  // Thread-safe (one tokenizer call at a time: its contract is "owner").
  std::vector<int32_t> encode(const std::string& text) const;
  std::string detokenize(const int32_t* ids, size_t n) const;
  int64_t vocab() const { return vocab_; }
  int64_t eod() const { return eod_; }  // -1: the tokenizer has none
  // The longest sequence the model takes (prompt + generation), 0 = no fixed limit.
  int64_t max_context() const { return dec->max_context(model); }
  const Recipe& recipe() const { return *recipe_; }
  const std::filesystem::path& dir() const { return dir_; }

  loom_model* model = nullptr;
  const loom_decode_ext* dec = nullptr;
  const loom_decode_slots_ext* slots = nullptr;  // NULL: the model cannot batch continuously

 private:
  std::unique_ptr<CheckpointSource> source_;
  std::filesystem::path dir_;
  std::unique_ptr<Recipe> recipe_;
  std::unique_ptr<Session> session_;
  loom_tokenizer_ref tok_{};
  mutable std::mutex tok_mu_;
  int64_t vocab_ = 0, eod_ = -1;
};

}  // namespace loom::engine
