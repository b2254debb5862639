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

#include "checkpoint/hf_interop.hpp"
#include "loader/registry.hpp"
#include "recipe/recipe.hpp"
#include "session/host.hpp"

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

struct TrainRun;

class DecodeModel {
 public:
  // `checkpoint`: a Loom checkpoint directory (or its parent with `latest`), or a Hugging
  // Face model directory (imported on the fly). By default any layout is merged onto one
  // rank; with `--set parallel.tensor=N` (and comm/mpi or nccl) every rank of the world
  // holds its tensor-parallel shard, cut as checkpoint.finetune cuts it. `who` names the
  // command in errors.
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
  int rank() const { return rank_; }
  int ranks() const { return ranks_; }
  bool batches() const { return slots != nullptr; }  // loom.decode-slots/1

  // The decode loop's model calls (loom.decode/1 and loom.decode-slots/1; a model without
  // the latter has one slot, reset at each kv_clear). With several ranks, rank 0 makes them
  // and each is first sent to the other ranks, which repeat it in follow().
  void kv_reset(int64_t batch, int64_t max_len);
  void kv_clear(int64_t slot);
  void decode_slots(const int64_t* slot_ids, int64_t num, const int32_t* tokens, int64_t n,
                    float* logits);
  // Ranks > 0: repeat rank 0's calls until it calls stop_followers().
  void follow();
  void stop_followers();

  loom_model* model = nullptr;
  const loom_decode_ext* dec = nullptr;
  const loom_decode_slots_ext* slots = nullptr;  // NULL: the model cannot batch continuously
  const loom_encode_ext* enc = nullptr;          // loom.encode/1: an encoder-decoder model (T5)
  // The id of the vocabulary entry `text` ("[EOS]"), or -1 (no such entry, or a tokenizer
  // without a vocabulary of strings).
  int64_t token_id(const std::string& text) const;

 private:
  void load_one_rank(Registry& registry);
  void send(std::vector<double>& words);  // rank 0's words to every rank (COLLECTIVE)

  std::unique_ptr<CheckpointSource> source_;
  std::filesystem::path dir_;
  std::unique_ptr<Recipe> recipe_;
  std::unique_ptr<Session> session_;  // one rank
  std::unique_ptr<TrainRun> run_;     // tensor parallelism
  loom_tokenizer_ref tok_{};
  loom_backend_ref be_{};
  loom_comm_ref comm_{};
  mutable std::mutex tok_mu_;
  int64_t vocab_ = 0, eod_ = -1, max_len_ = 0;
  int rank_ = 0, ranks_ = 1;
};

}  // namespace loom::engine
