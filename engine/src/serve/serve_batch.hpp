// Continuous batching for `loom serve`: every admitted request holds one KV-cache slot of
// the model, and one thread runs a single decode loop over all of them. A request joins
// (its prompt is prefilled into a free slot) or leaves (finished, cancelled) between two
// decode steps while the others go on; waiting requests queue up to a bound.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "serve/decode_model.hpp"

namespace loom::engine {

struct GenParams {
  int64_t max_new = 16;
  SamplingParams sampling;
  uint64_t seed = 0;
  bool prompt_logprobs = false;   // log p of each prompt token after the first
  int64_t top_logprobs = -1;      // -1: none; k >= 0: each generated token's log p and the
                                  // k most likely alternatives
  std::vector<std::string> stop;  // the text ends before the first of these
  bool stop_on_eol = false, stop_on_double_eol = false;  // Megatron's: ends after "\n"/"\n\n"
  std::vector<int32_t> stop_tokens;  // these ids end it too (as the end-of-document id does)
};

// One sequence from prompt to finish. The HTTP thread that made it waits on it; the batch
// thread fills it.
struct Job {
  std::vector<int32_t> prompt;
  GenParams params;

  std::mutex mu;
  std::condition_variable cv;
  // under mu, growing:
  std::vector<int32_t> tokens;  // generated
  std::string text;             // detokenized generated tokens, cut at a stop string
  std::vector<double> prompt_logprobs, logprobs;  // per prompt token after the first; per token
  std::vector<std::vector<std::pair<int32_t, double>>> top;  // per generated token
  std::string finish;  // "" while running; "length", "stop", "cancelled" or "error"
  std::string error;
  std::atomic<bool> cancel{false};  // the client went away: free the slot at the next step

  bool done() const { return !finish.empty(); }
};

struct BatchStats {
  int64_t active = 0, queued = 0, slots = 0;
  int64_t steps = 0, tokens = 0;  // decode steps and generated tokens since start
  int64_t cancelled = 0;          // sequences whose client went away before they finished
};

class Batcher {
 public:
  // `slots` sequences decode together, each of at most `max_len` tokens; at most
  // `max_queue` more wait.
  Batcher(DecodeModel& m, int64_t slots, int64_t max_len, int64_t max_queue);
  ~Batcher();
  // Queues all of `jobs` or none: false when the queue has no room for them or the server
  // is draining.
  bool submit(const std::vector<std::shared_ptr<Job>>& jobs);
  // The client of `jobs` has gone. A queued job leaves the queue now (its place is free and
  // it counts as cancelled at once, not when a slot would have taken it); a running one is
  // cancelled at the next step.
  void cancel(const std::vector<std::shared_ptr<Job>>& jobs);
  // Stops accepting and returns once every queued and running job has finished.
  void drain();
  BatchStats stats();
  int64_t max_len() const { return max_len_; }

 private:
  void loop();
  void admit(std::shared_ptr<Job> j, int64_t slot);
  void take(Job& j, const float* logits, std::mt19937_64& rng);
  void finish_all(const std::string& why);
  void finish_cancelled(Job& j);
  // Sets j's finish reason; the caller holds j.mu, so a waiter that sees it finished also
  // sees its place free for the next submit.
  void end(Job& j, const std::string& finish);

  DecodeModel& m_;
  const int64_t slots_, max_len_, max_queue_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool accepting_ = true, stopping_ = false;
  // the batch thread's own
  struct Running {
    std::shared_ptr<Job> job;
    std::mt19937_64 rng;
  };
  std::vector<std::unique_ptr<Running>> running_;  // per slot; null = free
  std::atomic<int64_t> active_{0}, steps_{0}, tokens_{0}, cancelled_{0};
  std::atomic<int64_t> open_{0};  // jobs submitted and not finished: queued or running
  std::thread thread_;
};

}  // namespace loom::engine
