// The endpoints of `loom serve`: Megatron's PUT /api, OpenAI's /v1/completions and
// /v1/chat/completions (streamed as server-sent events on request), /v1/models and
// /health. Requests are checked field by field; a bad one gets a 4xx JSON error naming the
// problem. HTTP itself is serve_http.cpp's.
#pragma once

#include <atomic>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "data/chat_format.hpp"
#include "serve/serve_batch.hpp"

namespace loom::engine {

// What a handler writes back: one JSON response, or a stream of server-sent events.
class Responder {
 public:
  virtual ~Responder() = default;
  virtual void json(int status, const nlohmann::json& body) = 0;
  // 200 text/event-stream; each event() writes "data: <data>\n\n"; false: the client is gone.
  virtual bool start_events() = 0;
  virtual bool event(const std::string& data) = 0;
  virtual void end_events() = 0;
  // True once the client has gone (checked while a request waits): a read or a write failed.
  virtual bool client_gone() = 0;

  // For the request log: the status answered (0: none, the client left first), and the
  // request's sequences once they were queued.
  int status = 0;
  std::vector<std::shared_ptr<Job>> jobs;
};

// A request refused: the HTTP status and what was wrong.
struct ApiError {
  ApiError(int status_, std::string message_, std::string param_ = "",
           std::string type_ = "invalid_request_error")
      : status(status_),
        message(std::move(message_)),
        param(std::move(param_)),
        type(std::move(type_)) {}
  int status;
  std::string message;
  std::string param;  // the offending field, "" when none
  std::string type;
};
nlohmann::json error_body(const ApiError& e);

struct ServeConfig {
  std::string model_name;
  int64_t max_prompts = 128;        // Megatron's limit per PUT /api
  int64_t default_max_tokens = 16;  // OpenAI's max_tokens default
  std::string chat_template, chat_generation_prompt, chat_stop;
  // serve.chat_format: a model family's chat format (data/chat_format.hpp), which then
  // renders the messages and stops the reply instead of the three strings above.
  std::optional<ChatFormat> chat_format;
};

struct Completion;  // an OpenAI request, checked (serve_openai.cpp)

class ServeApi {
 public:
  ServeApi(DecodeModel& m, Batcher& b, ServeConfig cfg, const std::atomic<bool>& draining);
  void handle(const std::string& method, const std::string& target, const std::string& body,
              Responder& out);

 private:
  void megatron(const nlohmann::json& req, Responder& out);
  void completions(const nlohmann::json& req, Responder& out, bool chat);
  Completion parse_completion(const nlohmann::json& req, bool chat);
  void completion_prompts(const nlohmann::json& req, Completion& c);
  void answer_completion(const Completion& c, const std::vector<std::shared_ptr<Job>>& jobs,
                         Responder& out);
  void stream_completion(const Completion& c, const std::vector<std::shared_ptr<Job>>& jobs,
                         Responder& out);
  size_t tokens_within(const Job& j, size_t bytes);
  nlohmann::json logprobs_json(const Job& j, size_t from, size_t to, bool chat, size_t offset);
  nlohmann::json model_card() const;
  // Queues all the jobs or throws 503 (full, or shutting down).
  void submit(const std::vector<std::shared_ptr<Job>>& jobs, Responder& out);
  // submit, then wait for all; a client that goes away cancels them (ClientGone).
  void run_jobs(const std::vector<std::shared_ptr<Job>>& jobs, Responder& out);
  std::vector<int32_t> tokenize_prompt(const std::string& text, bool add_bos,
                                       const std::string& param, int64_t max_new);
  // A 400 naming `param` when the prompt and max_new tokens do not fit in a sequence.
  void check_length(const std::vector<int32_t>& ids, int64_t max_new, const std::string& param);

  DecodeModel& m_;
  Batcher& batch_;
  ServeConfig cfg_;
  const std::atomic<bool>& draining_;
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace loom::engine
