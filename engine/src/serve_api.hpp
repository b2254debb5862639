// The endpoints of `loom serve`: Megatron's PUT /api, OpenAI's /v1/completions and
// /v1/chat/completions (streamed as server-sent events on request), /v1/models and
// /health. Requests are checked field by field; a bad one gets a 4xx JSON error naming the
// problem. HTTP itself is serve_http.cpp's.
#pragma once

#include <atomic>
#include <nlohmann/json.hpp>
#include <string>

#include "serve_batch.hpp"

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
  // True once the client has closed its end (checked while a request waits).
  virtual bool client_gone() = 0;
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
};

class ServeApi {
 public:
  ServeApi(DecodeModel& m, Batcher& b, ServeConfig cfg, const std::atomic<bool>& draining);
  void handle(const std::string& method, const std::string& target, const std::string& body,
              Responder& out);

 private:
  void megatron(const nlohmann::json& req, Responder& out);
  void completions(const nlohmann::json& req, Responder& out, bool chat);
  // Queues all the jobs or throws 503 (full, or shutting down).
  void submit(const std::vector<std::shared_ptr<Job>>& jobs);
  // submit, then wait for all; a client that goes away cancels them (ClientGone).
  void run_jobs(const std::vector<std::shared_ptr<Job>>& jobs, Responder& out);
  std::vector<int32_t> tokenize_prompt(const std::string& text, bool add_bos,
                                       const std::string& param, int64_t max_new);

  DecodeModel& m_;
  Batcher& batch_;
  ServeConfig cfg_;
  const std::atomic<bool>& draining_;
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace loom::engine
