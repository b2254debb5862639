// `loom serve`'s routes, Megatron's PUT /api, and the request checks every endpoint shares.
// The OpenAI endpoints are serve_openai.cpp's.
#include "serve/serve_api.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>

#include "recipe/recipe.hpp"
#include "serve/serve_fields.hpp"

namespace loom::engine {

using json = nlohmann::json;

json error_body(const ApiError& e) {
  return {{"error",
           {{"message", e.message},
            {"type", e.type},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.status}}}};
}

namespace {

// A path segment's %XX escapes decoded (a model id may hold '/', sent as %2F).
std::string url_decode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit((unsigned char)s[i + 1]) &&
        std::isxdigit((unsigned char)s[i + 2])) {
      out += (char)std::stoi(s.substr(i + 1, 2), nullptr, 16);
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

ServeApi::ServeApi(DecodeModel& m, Batcher& b, ServeConfig cfg, const std::atomic<bool>& draining)
    : m_(m), batch_(b), cfg_(std::move(cfg)), draining_(draining) {}

void ServeApi::handle(const std::string& method, const std::string& target, const std::string& body,
                      Responder& out) {
  const std::string path = target.substr(0, target.find('?'));
  struct Route {
    const char* path;
    const char* method;
  };
  static const Route routes[] = {{"/health", "GET"},
                                 {"/v1/models", "GET"},
                                 {"/api", "PUT"},
                                 {"/v1/completions", "POST"},
                                 {"/v1/chat/completions", "POST"}};
  try {
    const Route* route = nullptr;
    const bool model_path = path.rfind("/v1/models/", 0) == 0;  // /v1/models/{id}
    for (const Route& r : routes)
      if (path == r.path || (model_path && std::string(r.path) == "/v1/models")) route = &r;
    if (!route)
      throw ApiError{404,
                     "no endpoint " + path + "; this server has /api (PUT), " +
                         "/v1/completions, /v1/chat/completions (POST), " +
                         "/v1/models, /v1/models/{id} and /health (GET)",
                     "", "not_found_error"};
    if (method != route->method)
      throw ApiError{405, path + " takes " + route->method + ", not " + method, "",
                     "invalid_request_error"};
    if (path == "/health") {
      const BatchStats s = batch_.stats();
      json h = {{"status", draining_ ? "draining" : "ok"},
                {"running", s.active},
                {"queued", s.queued},
                {"slots", s.slots},
                {"decode_steps", s.steps},
                {"generated_tokens", s.tokens},
                {"cancelled", s.cancelled}};
      out.json(draining_ ? 503 : 200, h);
      return;
    }
    if (path == "/v1/models") {
      out.json(200, json{{"object", "list"}, {"data", json::array({model_card()})}});
      return;
    }
    if (model_path) {
      const std::string id = url_decode(path.substr(std::strlen("/v1/models/")));
      if (id != cfg_.model_name)
        throw ApiError{
            404, "model '" + id + "' does not exist; this server has '" + cfg_.model_name + "'",
            "model", "not_found_error"};
      out.json(200, model_card());
      return;
    }
    const json req = parse_body(body);
    if (path == "/api")
      megatron(req, out);
    else
      completions(req, out, path == "/v1/chat/completions");
  } catch (const ApiError& e) {
    out.json(e.status, error_body(e));
  } catch (const ClientGone&) {  // nobody to answer
  } catch (const std::exception& e) {
    spdlog::error("serve: {} {}: {}", method, path, e.what());
    out.json(500, error_body({500, e.what(), "", "server_error"}));
  }
}

json ServeApi::model_card() const {
  return {{"id", cfg_.model_name},
          {"object", "model"},
          {"created", 0},
          {"owned_by", "loom"},
          {"max_model_len", batch_.max_len()}};
}

std::vector<int32_t> ServeApi::tokenize_prompt(const std::string& text, bool add_bos,
                                               const std::string& param, int64_t max_new) {
  std::vector<int32_t> ids = m_.encode(text);
  if (add_bos || ids.empty()) {  // an empty prompt starts a fresh document
    if (m_.eod() < 0)
      throw ApiError{400,
                     "the prompt is empty and the tokenizer has no "
                     "end-of-document token to start from",
                     param};
    ids.insert(ids.begin(), (int32_t)m_.eod());
  }
  check_length(ids, max_new, param);
  return ids;
}

void ServeApi::check_length(const std::vector<int32_t>& ids, int64_t max_new,
                            const std::string& param) {
  const int64_t limit = batch_.max_len();
  if ((int64_t)ids.size() + max_new > limit)
    throw ApiError{400,
                   "the prompt is " + std::to_string(ids.size()) + " tokens and " +
                       std::to_string(max_new) + " more are asked for: more than the " +
                       "model's context of " + std::to_string(limit) + " tokens",
                   param};
}

void ServeApi::submit(const std::vector<std::shared_ptr<Job>>& jobs, Responder& out) {
  if (batch_.submit(jobs)) {
    out.jobs = jobs;
  } else {
    if (draining_) throw ApiError{503, "the server is shutting down", "", "unavailable"};
    const BatchStats s = batch_.stats();
    throw ApiError{503,
                   "the server is busy: " + std::to_string(s.active) + " running and " +
                       std::to_string(s.queued) + " queued (serve --max-queue); retry later",
                   "", "server_busy"};
  }
}

void ServeApi::run_jobs(const std::vector<std::shared_ptr<Job>>& jobs, Responder& out) {
  submit(jobs, out);
  for (auto& j : jobs) {
    std::unique_lock<std::mutex> lock(j->mu);
    while (!j->cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return j->done(); })) {
      lock.unlock();
      if (out.client_gone()) {
        batch_.cancel(jobs);
        throw ClientGone{};
      }
      lock.lock();
    }
    if (j->finish == "error")
      throw ApiError{500, "generation failed: " + j->error, "", "server_error"};
  }
}

// Megatron's text-generation server, field for field (megatron/inference/
// text_generation_server.py): the same request keys, defaults and limits, and the response
// {"text", "segments", "logprobs"} with the prompt included, as Megatron returns it.
void ServeApi::megatron(const json& req, Responder& out) {
  Fields f(req, "PUT /api",
           {"prompts", "tokens_to_generate", "logprobs", "temperature", "top_k", "top_p", "add_BOS",
            "stop_on_double_eol", "stop_on_eol", "stop_token", "random_seed", "no_log"},
           {{"max_len", "max_len is no longer used; use tokens_to_generate"},
            {"sentences", "sentences is no longer used; use prompts"},
            {"beam_width", "beam search is not supported by loom serve"},
            {"length_penalty", "beam search is not supported by loom serve"},
            {"prevent_newline_after_colon", "prevent_newline_after_colon is not supported"},
            {"top_p_decay", "top_p_decay is not supported"},
            {"top_p_bound", "top_p_bound is not supported"}});
  const std::vector<std::string> prompts = f.strings("prompts", true);
  if ((int64_t)prompts.size() > cfg_.max_prompts)
    throw ApiError{400, "at most " + std::to_string(cfg_.max_prompts) + " prompts per request",
                   "prompts"};
  GenParams p;
  p.max_new = f.integer("tokens_to_generate", 64, 0, batch_.max_len());
  const bool logprobs = f.boolean("logprobs", false);
  if (p.max_new == 0 && !logprobs)
    throw ApiError{400, "tokens_to_generate=0 implies logprobs should be true",
                   "tokens_to_generate"};
  p.sampling.temperature = f.number("temperature", 1.0, 0.0, 100.0, false);
  p.sampling.top_k = f.integer("top_k", 0, 0, 1000);
  p.sampling.top_p = f.number("top_p", 0.0, 0.0, 1.0, true);
  if (p.sampling.top_k > 0 && p.sampling.top_p > 0)
    throw ApiError{400, "cannot set both top-k and top-p samplings", "top_p"};
  if (p.sampling.top_p == 0) p.sampling.top_p = 1.0;
  const bool add_bos = f.boolean("add_BOS", false);
  p.stop_on_eol = f.boolean("stop_on_eol", false);
  p.stop_on_double_eol = f.boolean("stop_on_double_eol", false);
  if (req.contains("stop_token"))
    p.stop_tokens.push_back((int32_t)f.integer("stop_token", 0, 0, m_.vocab() - 1));
  const int64_t seed = f.integer("random_seed", -1, 0, INT64_MAX);
  f.boolean("no_log", false);
  for (const std::string& s : prompts)
    if (s.empty() && !add_bos) throw ApiError{400, "empty prompts require add_BOS=true", "prompts"};
  p.prompt_logprobs = logprobs;
  p.top_logprobs = logprobs ? 0 : -1;
  std::vector<std::shared_ptr<Job>> jobs;
  const uint64_t base = seed >= 0 ? (uint64_t)seed : next_id_.fetch_add(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto j = std::make_shared<Job>();
    j->params = p;
    j->params.seed = base + i;
    j->prompt = tokenize_prompt(prompts[i], add_bos, "prompts", p.max_new);
    jobs.push_back(j);
  }
  run_jobs(jobs, out);
  json text = json::array(), segments = json::array(), lps = json::array();
  for (auto& j : jobs) {
    std::lock_guard<std::mutex> lock(j->mu);
    std::vector<int32_t> all = j->prompt;
    all.insert(all.end(), j->tokens.begin(), j->tokens.end());
    text.push_back(m_.detokenize(j->prompt.data(), j->prompt.size()) + j->text);
    json seg = json::array();
    for (int32_t t : all) seg.push_back(m_.detokenize(&t, 1));
    segments.push_back(seg);
    std::vector<double> l = j->prompt_logprobs;
    l.insert(l.end(), j->logprobs.begin(), j->logprobs.end());
    lps.push_back(l);
  }
  out.json(200,
           {{"text", text}, {"segments", segments}, {"logprobs", logprobs ? lps : json(nullptr)}});
}

}  // namespace loom::engine
