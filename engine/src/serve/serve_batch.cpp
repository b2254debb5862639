// The decode loop of `loom serve` (serve_batch.hpp): admit queued jobs into free slots
// (prefill), then one decode step over every running slot, pick each one's next token, and
// let finished or cancelled jobs leave.
#include "serve/serve_batch.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "base/errors.hpp"

namespace loom::engine {

Batcher::Batcher(DecodeModel& m, int64_t slots, int64_t max_len, int64_t max_queue)
    : m_(m), slots_(m.batches() ? slots : 1), max_len_(max_len), max_queue_(max_queue) {
  if (!m.batches() && slots > 1)
    spdlog::warn(
        "the model does not implement {}: requests are served one at a time, without "
        "continuous batching",
        LOOM_EXT_DECODE_SLOTS);
  m_.kv_reset(slots_, max_len_);
  running_.resize(slots_);
  thread_ = std::thread([this] { loop(); });
}

Batcher::~Batcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    accepting_ = false;
  }
  cv_.notify_all();
  thread_.join();
}

bool Batcher::submit(const std::vector<std::shared_ptr<Job>>& jobs) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // every unfinished job holds a slot or waits: at most slots + max_queue of them. Counted
    // by `open_`, which a job leaves when its finish is set, not active_, which the decode
    // loop recounts only at its next turn: a client answered may ask again before that turn.
    if (!accepting_ || open_.load() + (int64_t)jobs.size() > slots_ + max_queue_) return false;
    for (auto& j : jobs) queue_.push_back(j);
    open_ += (int64_t)jobs.size();
  }
  cv_.notify_all();
  return true;
}

void Batcher::cancel(const std::vector<std::shared_ptr<Job>>& jobs) {
  {
    // under mu_: stats() sees the job queued, or cancelled, never neither
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& j : jobs) {
      j->cancel = true;
      const auto at = std::find(queue_.begin(), queue_.end(), j);
      if (at == queue_.end()) continue;
      queue_.erase(at);
      finish_cancelled(*j);
    }
  }
  cv_.notify_all();  // drain() waits for an empty queue
}

void Batcher::finish_cancelled(Job& j) {
  {
    std::lock_guard<std::mutex> lock(j.mu);
    end(j, "cancelled");
    cancelled_++;
  }
  j.cv.notify_all();
}

void Batcher::end(Job& j, const std::string& finish) {
  if (j.finish.empty()) open_--;
  j.finish = finish;
}

void Batcher::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  accepting_ = false;
  cv_.wait(lock, [&] { return queue_.empty() && active_.load() == 0; });
}

BatchStats Batcher::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  // running = open and not queued, exact at once. active_ is recounted only at the decode
  // loop's next turn: /health read just after a job finished saw it still running (a client
  // that waited for "running": 1 then raced the previous job's end, a CI failure once).
  const int64_t queued = (int64_t)queue_.size();
  return {open_.load() - queued, queued, slots_, steps_.load(), tokens_.load(), cancelled_.load()};
}

// Picks j's next token from `logits` and decides whether j goes on. Called with j.mu free.
void Batcher::take(Job& j, const float* logits, std::mt19937_64& rng) {
  const size_t V = (size_t)m_.vocab();
  const GenParams& p = j.params;
  if (j.cancel) return finish_cancelled(j);
  const int32_t next = sample_token(logits, V, p.sampling, rng);
  std::vector<std::pair<int32_t, double>> top;
  double lp = 0;
  if (p.top_logprobs >= 0) {
    lp = token_logprob(logits, V, next);
    std::vector<int32_t> idx(V);
    for (size_t i = 0; i < V; ++i) idx[i] = (int32_t)i;
    const size_t k = std::min<size_t>((size_t)p.top_logprobs, V);
    std::partial_sort(idx.begin(), idx.begin() + (ptrdiff_t)k, idx.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    for (size_t i = 0; i < k; ++i) top.emplace_back(idx[i], token_logprob(logits, V, idx[i]));
  }
  const bool ends = next == m_.eod() || std::find(p.stop_tokens.begin(), p.stop_tokens.end(),
                                                  next) != p.stop_tokens.end();
  std::vector<int32_t> tokens;
  {
    std::lock_guard<std::mutex> lock(j.mu);
    if (ends) {
      end(j, "stop");
      return;
    }
    j.tokens.push_back(next);
    if (p.top_logprobs >= 0) {
      j.logprobs.push_back(lp);
      j.top.push_back(std::move(top));
    }
    tokens = j.tokens;
  }
  tokens_++;
  std::string text = m_.detokenize(tokens.data(), tokens.size());
  std::string finish;
  for (const std::string& s : p.stop) {
    const size_t at = text.find(s);
    if (!s.empty() && at != std::string::npos) {
      text.resize(at);
      finish = "stop";
    }
  }
  const auto ends_with = [&](const char* tail) {
    const size_t n = std::char_traits<char>::length(tail);
    return text.size() >= n && text.compare(text.size() - n, n, tail) == 0;
  };
  if (finish.empty() &&
      ((p.stop_on_eol && ends_with("\n")) || (p.stop_on_double_eol && ends_with("\n\n"))))
    finish = "stop";
  if (finish.empty() && (int64_t)tokens.size() >= p.max_new) finish = "length";
  std::lock_guard<std::mutex> lock(j.mu);
  j.text = std::move(text);
  if (!finish.empty()) end(j, finish);
}

// Prefills j's prompt into `slot` and takes its first token (or finishes it at once).
void Batcher::admit(std::shared_ptr<Job> j, int64_t slot) {
  auto r = std::make_unique<Running>();
  r->job = j;
  r->rng.seed(j->params.seed);
  m_.kv_clear(slot);
  const size_t V = (size_t)m_.vocab();
  std::vector<float> logits(V);
  auto run = [&](const int32_t* t, int64_t n) { m_.decode_slots(&slot, 1, t, n, logits.data()); };
  const std::vector<int32_t>& p = j->prompt;
  if (j->params.prompt_logprobs) {  // one position at a time, keeping each one's log p
    std::vector<double> lps;
    for (size_t i = 0; i < p.size(); ++i) {
      run(&p[i], 1);
      if (i + 1 < p.size()) lps.push_back(token_logprob(logits.data(), V, p[i + 1]));
    }
    std::lock_guard<std::mutex> lock(j->mu);
    j->prompt_logprobs = std::move(lps);
  } else {
    run(p.data(), (int64_t)p.size());
  }
  if (j->params.max_new == 0) {
    std::lock_guard<std::mutex> lock(j->mu);
    end(*j, "length");
  } else {
    take(*j, logits.data(), r->rng);
  }
  j->cv.notify_all();
  if (!j->done()) running_[slot] = std::move(r);
}

void Batcher::finish_all(const std::string& why) {
  for (auto& r : running_) {
    if (!r) continue;
    {
      std::lock_guard<std::mutex> lock(r->job->mu);
      end(*r->job, "error");
      r->job->error = why;
    }
    r->job->cv.notify_all();
    r.reset();
  }
}

void Batcher::loop() {
  const size_t V = (size_t)m_.vocab();
  std::vector<float> logits;
  std::vector<int64_t> slots;
  std::vector<int32_t> feed;
  for (;;) {
    std::vector<std::pair<std::shared_ptr<Job>, int64_t>> joining;
    {
      std::unique_lock<std::mutex> lock(mu_);
      active_ = (int64_t)std::count_if(running_.begin(), running_.end(),
                                       [](auto& r) { return r != nullptr; });
      cv_.notify_all();  // drain() waits on the counts
      cv_.wait(lock, [&] { return stopping_ || active_ > 0 || !queue_.empty(); });
      if (stopping_ && active_ == 0 && queue_.empty()) return;
      for (int64_t s = 0; s < slots_ && !queue_.empty(); ++s)
        if (!running_[s]) {
          joining.emplace_back(queue_.front(), s);
          queue_.pop_front();
          ++active_;
        }
    }
    try {
      for (auto& [j, s] : joining) {
        if (j->cancel)
          finish_cancelled(*j);
        else
          admit(j, s);
      }
      // one decode step over every running slot: each feeds its last token
      slots.clear();
      feed.clear();
      for (int64_t s = 0; s < slots_; ++s)
        if (running_[s]) {
          std::lock_guard<std::mutex> lock(running_[s]->job->mu);
          slots.push_back(s);
          feed.push_back(running_[s]->job->tokens.back());
        }
      if (slots.empty()) continue;
      logits.resize(slots.size() * V);
      m_.decode_slots(slots.data(), (int64_t)slots.size(), feed.data(), 1, logits.data());
      steps_++;
      for (size_t i = 0; i < slots.size(); ++i) {
        Running& r = *running_[slots[i]];
        take(*r.job, logits.data() + i * V, r.rng);
        r.job->cv.notify_all();
        if (r.job->done()) running_[slots[i]].reset();
      }
    } catch (const std::exception& e) {
      spdlog::error("serve: {}", e.what());
      finish_all(e.what());
    }
  }
}

}  // namespace loom::engine
