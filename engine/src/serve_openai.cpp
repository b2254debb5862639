// OpenAI-compatible /v1/completions and /v1/chat/completions for `loom serve`: the request
// and response shapes of OpenAI's API, streamed as server-sent events when "stream" is true
// ("data: {chunk}" per piece of text, then "data: [DONE]").
#include <chrono>
#include <ctime>

#include "serve_api.hpp"
#include "serve_fields.hpp"

namespace loom::engine {

using json = nlohmann::json;

namespace {

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

// The chat template applied to `messages` (serve.chat_template and friends).
std::string chat_prompt(const json& messages, const ServeConfig& c) {
  if (!messages.is_array() || messages.empty())
    throw ApiError{400, "'messages' must be a non-empty array of {role, content}", "messages"};
  std::string text;
  for (const json& msg : messages) {
    if (!msg.is_object())
      throw ApiError{400, "each of 'messages' must be an object {role, content}", "messages"};
    Fields f(msg, "a message", {"role", "content", "name"});
    const std::string role = f.string("role", "");
    if (role != "system" && role != "user" && role != "assistant")
      throw ApiError{400,
                     "a message's 'role' must be system, user or assistant, not '" + role + "'",
                     "messages"};
    std::string content;
    const json& cv = msg.contains("content") ? msg["content"] : json(nullptr);
    if (cv.is_string()) {
      content = cv.get<std::string>();
    } else if (cv.is_array()) {  // [{"type": "text", "text": ...}]
      for (const json& part : cv) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string())
          throw ApiError{400, "message content parts must be {\"type\": \"text\", \"text\": ...}",
                         "messages"};
        content += part["text"].get<std::string>();
      }
    } else if (!cv.is_null()) {
      throw ApiError{400, "a message's 'content' must be a string or an array of text parts",
                     "messages"};
    }
    text += replace_all(replace_all(c.chat_template, "{role}", role), "{content}", content);
  }
  return text + c.chat_generation_prompt;
}

// How much of `text` a stream may send now: whole UTF-8 characters only, and nothing that
// could be the start of a stop string still being generated.
size_t sendable(const std::string& text, const std::vector<std::string>& stops, bool done) {
  if (done) return text.size();
  size_t n = utf8_complete(text);
  for (const std::string& s : stops)
    for (size_t k = std::min(s.size() - 1, n); k > 0; --k)
      if (text.compare(n - k, k, s, 0, k) == 0) {
        n -= k;
        break;
      }
  return n;
}

json usage(const std::vector<std::shared_ptr<Job>>& jobs) {
  int64_t prompt = 0, completion = 0;
  for (auto& j : jobs) {
    prompt += (int64_t)j->prompt.size();
    completion += (int64_t)j->tokens.size();
  }
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion}};
}

}  // namespace

void ServeApi::completions(const json& req, Responder& out, bool chat) {
  std::vector<std::string> fields = {
      "model", "max_tokens", "temperature",      "top_p",
      "top_k", "n",          "stream",           "stop",
      "seed",  "user",       "presence_penalty", "frequency_penalty"};
  fields.push_back(chat ? "messages" : "prompt");
  if (chat) fields.push_back("max_completion_tokens");
  if (!chat) fields.insert(fields.end(), {"logprobs", "echo"});
  const std::string where = chat ? "POST /v1/chat/completions" : "POST /v1/completions";
  Fields f(req, where, fields,
           {{"logit_bias", "logit_bias is not supported"},
            {"best_of", "best_of is not supported; use n"},
            {"suffix", "suffix is not supported"},
            {"logprobs", "logprobs is supported by /v1/completions only"},
            {"top_logprobs", "top_logprobs is not supported"},
            {"tools", "tools are not supported"},
            {"response_format", "response_format is not supported"}});
  const std::string model = f.string("model", cfg_.model_name);
  if (model != cfg_.model_name)
    throw ApiError{
        404, "model '" + model + "' does not exist; this server has '" + cfg_.model_name + "'",
        "model", "not_found_error"};
  for (const char* k : {"presence_penalty", "frequency_penalty"})
    if (f.number(k, 0, -2, 2, true) != 0)
      throw ApiError{400, std::string(k) + " is not supported (only 0)", k};
  GenParams p;
  const int64_t limit = batch_.max_len();
  p.max_new = f.integer("max_tokens", cfg_.default_max_tokens, 0, limit);
  if (chat) p.max_new = f.integer("max_completion_tokens", p.max_new, 0, limit);
  p.sampling.temperature = f.number("temperature", 1.0, 0.0, 2.0, true);
  p.sampling.top_p = f.number("top_p", 1.0, 0.0, 1.0, false);
  p.sampling.top_k = f.integer("top_k", 0, 0, m_.vocab());
  const int64_t n = f.integer("n", 1, 1, 16);
  const bool stream = f.boolean("stream", false);
  p.stop = f.strings("stop", false);
  if (p.stop.size() > 4) throw ApiError{400, "'stop' takes at most 4 strings", "stop"};
  for (const std::string& s : p.stop)
    if (s.empty()) throw ApiError{400, "'stop' strings must not be empty", "stop"};
  const int64_t seed = f.integer("seed", -1, INT64_MIN, INT64_MAX);
  f.string("user", "");
  const int64_t logprobs = chat ? -1 : f.integer("logprobs", -1, 0, 5);
  const bool echo = !chat && f.boolean("echo", false);
  p.top_logprobs = logprobs;
  std::vector<std::string> prompts;
  if (chat) {
    prompts = {chat_prompt(req.contains("messages") ? req["messages"] : json(nullptr), cfg_)};
    if (!cfg_.chat_stop.empty()) p.stop.push_back(cfg_.chat_stop);
  } else {
    prompts = f.strings("prompt", true);
  }
  std::vector<std::shared_ptr<Job>> jobs;
  const uint64_t base = seed >= 0 ? (uint64_t)seed : next_id_.fetch_add(prompts.size() * n);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t> ids =
        tokenize_prompt(prompts[i], false, chat ? "messages" : "prompt", p.max_new);
    for (int64_t k = 0; k < n; ++k) {
      auto j = std::make_shared<Job>();
      j->params = p;
      j->params.seed = base + jobs.size();
      j->prompt = ids;
      jobs.push_back(j);
    }
  }
  const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_++);
  const int64_t created = (int64_t)std::time(nullptr);
  json head = {{"id", id},
               {"object", chat ? "chat.completion" : "text_completion"},
               {"created", created},
               {"model", cfg_.model_name}};
  auto prefix = [&](size_t i) { return echo ? prompts[i / n] : std::string(); };
  if (!stream) {
    run_jobs(jobs, out);
    json choices = json::array();
    for (size_t i = 0; i < jobs.size(); ++i) {
      Job& j = *jobs[i];
      json c = {{"index", i}, {"finish_reason", j.finish}};
      if (chat) {
        c["message"] = {{"role", "assistant"}, {"content", j.text}};
      } else {
        c["text"] = prefix(i) + j.text;
        json lp = nullptr;
        if (logprobs >= 0) {
          json toks = json::array(), tops = json::array(), offs = json::array();
          size_t at = prefix(i).size();
          for (size_t t = 0; t < j.tokens.size(); ++t) {
            const std::string s = m_.detokenize(&j.tokens[t], 1);
            toks.push_back(s);
            offs.push_back(at);
            at += s.size();
            json top = json::object();
            for (auto [tok, l] : j.top[t]) top[m_.detokenize(&tok, 1)] = l;
            tops.push_back(top);
          }
          lp = {{"tokens", toks},
                {"token_logprobs", j.logprobs},
                {"top_logprobs", tops},
                {"text_offset", offs}};
        }
        c["logprobs"] = lp;
      }
      choices.push_back(c);
    }
    head["choices"] = choices;
    head["usage"] = usage(jobs);
    out.json(200, head);
    return;
  }
  // streamed: one chunk per piece of new text of any choice, then each one's finish
  submit(jobs);
  head["object"] = chat ? "chat.completion.chunk" : "text_completion";
  auto chunk = [&](size_t i, const std::string& text, const json& finish, bool first) {
    json c = {{"index", i}, {"finish_reason", finish}};
    if (chat) {
      c["delta"] = first ? json{{"role", "assistant"}, {"content", text}}
                         : (finish.is_null() ? json{{"content", text}} : json::object());
    } else {
      c["text"] = text;
      c["logprobs"] = nullptr;
    }
    json e = head;
    e["choices"] = json::array({c});
    return e.dump(-1, ' ', false, json::error_handler_t::replace);
  };
  auto cancel = [&] {
    for (auto& j : jobs) j->cancel = true;
  };
  if (!out.start_events()) return cancel();
  std::vector<size_t> sent(jobs.size(), 0);
  std::vector<bool> closed(jobs.size(), false);
  for (size_t i = 0; i < jobs.size(); ++i)
    if ((chat || echo) && !out.event(chunk(i, prefix(i), nullptr, true))) return cancel();
  for (;;) {
    bool all = true;
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (closed[i]) continue;
      Job& j = *jobs[i];
      std::string piece, finish;
      {
        std::unique_lock<std::mutex> lock(j.mu);
        j.cv.wait_for(lock, std::chrono::milliseconds(jobs.size() == 1 ? 100 : 5),
                      [&] { return j.done() || sendable(j.text, j.params.stop, false) > sent[i]; });
        const size_t upto = sendable(j.text, j.params.stop, j.done());
        if (upto > sent[i]) piece = j.text.substr(sent[i], upto - sent[i]);
        sent[i] = std::max(sent[i], upto);
        finish = j.finish;
      }
      if (finish == "error") {
        out.event(json{{"error", {{"message", "generation failed: " + j.error}}}}.dump());
        out.end_events();
        return cancel();
      }
      if (!piece.empty() && !out.event(chunk(i, piece, nullptr, false))) return cancel();
      if (!finish.empty()) {
        if (!out.event(chunk(i, "", finish, false))) return cancel();
        closed[i] = true;
      } else {
        all = false;
      }
    }
    if (all) break;
    if (out.client_gone()) return cancel();
  }
  out.event("[DONE]");
  out.end_events();
}

}  // namespace loom::engine
