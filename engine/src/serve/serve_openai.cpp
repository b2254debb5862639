// OpenAI-compatible /v1/completions and /v1/chat/completions for `loom serve`: the request
// and response shapes of OpenAI's API, streamed as server-sent events when "stream" is true
// ("data: {chunk}" per piece of text, then "data: [DONE]").
#include <chrono>
#include <ctime>

#include "base/strings.hpp"
#include "serve/serve_api.hpp"
#include "serve/serve_fields.hpp"

namespace loom::engine {

using json = nlohmann::json;

// A request of either endpoint, checked.
struct Completion {
  bool chat = false, stream = false, echo = false, include_usage = false;
  int64_t n = 1, seed = -1;  // seed -1: none
  int64_t logprobs = -1;     // -1: none; else the alternatives per token (top_logprobs)
  GenParams params;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> prompt_texts;  // what echo repeats
  json head;                              // id, object, created, model
};

namespace {

// The chat template applied to `messages` (serve.chat_template and friends).
std::string chat_prompt(const json& messages, const ServeConfig& c) {
  if (!messages.is_array() || messages.empty())
    throw ApiError{400, "'messages' must be a non-empty array of {role, content}", "messages"};
  std::string text;
  std::vector<ChatMessage> chat;  // for a chat format
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& msg = messages[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object()) throw ApiError{400, at + " must be an object {role, content}", at};
    Fields f(msg, at, {"role", "content", "name"});
    std::string role = f.string("role", "");
    if (role == "developer") role = "system";  // OpenAI's newer name for the system role
    if (role != "system" && role != "user" && role != "assistant")
      throw ApiError{400,
                     at + ".role must be system, developer, user or assistant, not '" + role + "'",
                     at + ".role"};
    std::string content;
    const json& cv = msg.contains("content") ? msg["content"] : json(nullptr);
    if (cv.is_string()) {
      content = cv.get<std::string>();
    } else if (cv.is_array()) {  // [{"type": "text", "text": ...}]
      for (const json& part : cv) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string())
          throw ApiError{400, at + ".content parts must be {\"type\": \"text\", \"text\": ...}",
                         at + ".content"};
        content += part["text"].get<std::string>();
      }
    } else if (cv.is_null()) {  // tool calls, which would make it optional, are not supported
      throw ApiError{400, at + ".content is required", at + ".content"};
    } else {
      throw ApiError{400, at + ".content must be a string or an array of text parts",
                     at + ".content"};
    }
    text += replace_all(replace_all(c.chat_template, "{role}", role), "{content}", content);
    chat.push_back({role, content});
  }
  if (!c.chat_format) return text + c.chat_generation_prompt;
  try {
    return join_text(c.chat_format->render(chat, true));
  } catch (const ChatRefused& e) {
    throw ApiError{400, "chat format " + c.chat_format->name() + ": " + e.what(), "messages"};
  }
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
    std::lock_guard<std::mutex> lock(j->mu);
    prompt += (int64_t)j->prompt.size();
    completion += (int64_t)j->tokens.size();
  }
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion}};
}

json utf8_bytes(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back((int)c);
  return b;
}

}  // namespace

// How many of j's first generated tokens begin within its text's first `bytes` bytes: the
// tokens that text shows (a stop string cuts the text, not the tokens). Called with j.mu held.
size_t ServeApi::tokens_within(const Job& j, size_t bytes) {
  size_t n = 0;
  for (size_t at = 0; n < j.tokens.size() && at < bytes; ++n)
    at += m_.detokenize(&j.tokens[n], 1).size();
  return n;
}

// Log-probabilities of j's generated tokens [from, to) in the endpoint's shape: chat's
// {"content": [{token, logprob, bytes, top_logprobs}]}, or completions' parallel lists with
// each token's text offset (the text starting at `offset`: the echoed prompt's length).
// Called with j.mu held.
json ServeApi::logprobs_json(const Job& j, size_t from, size_t to, bool chat, size_t offset) {
  json toks = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  for (size_t t = 0; t < from; ++t) offset += m_.detokenize(&j.tokens[t], 1).size();
  for (size_t t = from; t < to; ++t) {
    const std::string s = m_.detokenize(&j.tokens[t], 1);
    if (chat) {
      json top = json::array();
      for (auto [tok, l] : j.top[t]) {
        const std::string ts = m_.detokenize(&tok, 1);
        top.push_back({{"token", ts}, {"logprob", l}, {"bytes", utf8_bytes(ts)}});
      }
      toks.push_back({{"token", s},
                      {"logprob", j.logprobs[t]},
                      {"bytes", utf8_bytes(s)},
                      {"top_logprobs", top}});
      continue;
    }
    toks.push_back(s);
    lps.push_back(j.logprobs[t]);
    offs.push_back(offset);
    offset += s.size();
    json top = json::object();
    for (auto [tok, l] : j.top[t]) top[m_.detokenize(&tok, 1)] = l;
    tops.push_back(top);
  }
  if (chat) return {{"content", toks}};
  return {{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

// The prompts of /v1/completions: a string, an array of strings, an array of token ids, or
// an array of such arrays (OpenAI's four forms), each as token ids and as text for echo.
void ServeApi::completion_prompts(const json& req, Completion& c) {
  const json& v = req.contains("prompt") ? req["prompt"] : json(nullptr);
  const auto ids = [&](const json& a, const std::string& param) {
    if (a.empty()) throw ApiError{400, "'" + param + "' must not be an empty array", "prompt"};
    std::vector<int32_t> out;
    for (const json& t : a) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= m_.vocab())
        throw ApiError{400,
                       "'" + param + "' holds " + t.dump() + ", not a token id from 0 to " +
                           std::to_string(m_.vocab() - 1),
                       "prompt"};
      out.push_back((int32_t)t.get<int64_t>());
    }
    check_length(out, c.params.max_new, "prompt");
    c.prompt_texts.push_back(m_.detokenize(out.data(), out.size()));
    c.prompts.push_back(std::move(out));
  };
  if (v.is_array() && !v.empty() && v[0].is_number_integer()) return ids(v, "prompt");
  if (v.is_array() && !v.empty() && v[0].is_array()) {
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_array())
        throw ApiError{400, "'prompt' mixes token-id arrays with " + std::string(v[i].type_name()),
                       "prompt"};
      ids(v[i], "prompt[" + std::to_string(i) + "]");
    }
    return;
  }
  const json only = {{"prompt", v}};  // the other fields were checked by the caller
  for (const std::string& s : Fields(only, "", {"prompt"}).strings("prompt", true)) {
    c.prompts.push_back(tokenize_prompt(s, false, "prompt", c.params.max_new));
    c.prompt_texts.push_back(s);
  }
}

Completion ServeApi::parse_completion(const json& req, bool chat) {
  std::vector<std::string> fields = {"model",
                                     "max_tokens",
                                     "temperature",
                                     "top_p",
                                     "top_k",
                                     "n",
                                     "stream",
                                     "stop",
                                     "stream_options",
                                     "seed",
                                     "user",
                                     "logprobs",
                                     "presence_penalty",
                                     "frequency_penalty"};
  fields.push_back(chat ? "messages" : "prompt");
  if (chat) fields.insert(fields.end(), {"max_completion_tokens", "top_logprobs"});
  if (!chat) fields.push_back("echo");
  const std::string where = chat ? "POST /v1/chat/completions" : "POST /v1/completions";
  Fields f(
      req, where, fields,
      {{"logit_bias", "logit_bias is not supported"},
       {"best_of", "best_of is not supported; use n"},
       {"suffix", "suffix is not supported"},
       {"top_logprobs", "top_logprobs is for /v1/chat/completions; here logprobs is the count"},
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
  Completion c;
  c.chat = chat;
  GenParams& p = c.params;
  const int64_t limit = batch_.max_len();
  p.max_new = f.integer("max_tokens", cfg_.default_max_tokens, 0, limit);
  if (chat) p.max_new = f.integer("max_completion_tokens", p.max_new, 0, limit);
  p.sampling.temperature = f.number("temperature", 1.0, 0.0, 2.0, true);
  p.sampling.top_p = f.number("top_p", 1.0, 0.0, 1.0, false);
  p.sampling.top_k = f.integer("top_k", 0, 0, m_.vocab());
  c.n = f.integer("n", 1, 1, 16);
  c.stream = f.boolean("stream", false);
  if (f.has("stream_options")) {
    if (!c.stream)
      throw ApiError{400, "'stream_options' is only allowed when 'stream' is true",
                     "stream_options"};
    const json& so = req["stream_options"];
    if (!so.is_object())
      throw ApiError{400, "'stream_options' must be an object {include_usage}", "stream_options"};
    c.include_usage =
        Fields(so, "stream_options", {"include_usage"}).boolean("include_usage", false);
  }
  p.stop = f.strings("stop", false);
  if (p.stop.size() > 4) throw ApiError{400, "'stop' takes at most 4 strings", "stop"};
  for (const std::string& s : p.stop)
    if (s.empty()) throw ApiError{400, "'stop' strings must not be empty", "stop"};
  c.seed = f.integer("seed", -1, INT64_MIN, INT64_MAX);
  f.string("user", "");
  if (chat) {  // logprobs: true/false, top_logprobs: how many alternatives (OpenAI's 0-20)
    const bool want = f.boolean("logprobs", false);
    const int64_t top = f.integer("top_logprobs", -1, 0, 20);
    if (top >= 0 && !want)
      throw ApiError{400, "'top_logprobs' needs 'logprobs': true", "top_logprobs"};
    c.logprobs = want ? std::max<int64_t>(top, 0) : -1;
  } else {
    c.logprobs = f.integer("logprobs", -1, 0, 5);
    c.echo = f.boolean("echo", false);
  }
  p.top_logprobs = c.logprobs;
  if (chat) {
    const std::string text =
        chat_prompt(req.contains("messages") ? req["messages"] : json(nullptr), cfg_);
    c.prompts = {tokenize_prompt(text, false, "messages", p.max_new)};
    c.prompt_texts = {text};
    if (!cfg_.chat_stop.empty()) p.stop.push_back(cfg_.chat_stop);
  } else {
    completion_prompts(req, c);
  }
  return c;
}

void ServeApi::completions(const json& req, Responder& out, bool chat) {
  Completion c = parse_completion(req, chat);
  std::vector<std::shared_ptr<Job>> jobs;
  const uint64_t base = c.seed >= 0 ? (uint64_t)c.seed : next_id_.fetch_add(c.prompts.size() * c.n);
  for (const std::vector<int32_t>& ids : c.prompts)
    for (int64_t k = 0; k < c.n; ++k) {
      auto j = std::make_shared<Job>();
      j->params = c.params;
      j->params.seed = base + jobs.size();
      j->prompt = ids;
      jobs.push_back(j);
    }
  c.head = {{"id", (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_++)},
            {"object", chat ? "chat.completion" : "text_completion"},
            {"created", (int64_t)std::time(nullptr)},
            {"model", cfg_.model_name}};
  if (c.stream)
    stream_completion(c, jobs, out);
  else
    answer_completion(c, jobs, out);
}

void ServeApi::answer_completion(const Completion& c, const std::vector<std::shared_ptr<Job>>& jobs,
                                 Responder& out) {
  run_jobs(jobs, out);
  json choices = json::array();
  for (size_t i = 0; i < jobs.size(); ++i) {
    Job& j = *jobs[i];
    std::lock_guard<std::mutex> lock(j.mu);
    json ch = {{"index", i}, {"finish_reason", j.finish}};
    const std::string prefix = c.echo ? c.prompt_texts[i / c.n] : std::string();
    if (c.chat)
      ch["message"] = {{"role", "assistant"}, {"content", j.text}};
    else
      ch["text"] = prefix + j.text;
    ch["logprobs"] = c.logprobs >= 0 ? logprobs_json(j, 0, tokens_within(j, j.text.size()), c.chat,
                                                     prefix.size())
                                     : json();
    choices.push_back(ch);
  }
  json body = c.head;
  body["choices"] = choices;
  body["usage"] = usage(jobs);
  out.json(200, body);
}

// One chunk per piece of new text of any choice, then each one's finish; with
// stream_options.include_usage, every chunk has "usage": null and a last one, with no
// choices, the usage (OpenAI's shape).
void ServeApi::stream_completion(const Completion& c, const std::vector<std::shared_ptr<Job>>& jobs,
                                 Responder& out) {
  submit(jobs, out);
  json head = c.head;
  head["object"] = c.chat ? "chat.completion.chunk" : "text_completion";
  if (c.include_usage) head["usage"] = nullptr;
  const auto send = [&](json choice) {
    json e = head;
    e["choices"] = json::array({std::move(choice)});
    return out.event(e.dump(-1, ' ', false, json::error_handler_t::replace));
  };
  const auto cancel = [&] { batch_.cancel(jobs); };
  if (!out.start_events()) return cancel();
  const size_t k = jobs.size();
  std::vector<size_t> sent(k, 0), sent_tokens(k, 0), echoed(k, 0);
  std::vector<bool> closed(k, false);
  for (size_t i = 0; i < k; ++i) {
    const std::string prefix = c.echo ? c.prompt_texts[i / c.n] : std::string();
    echoed[i] = prefix.size();
    if (c.chat && !send({{"index", i},
                         {"delta", {{"role", "assistant"}, {"content", ""}}},
                         {"logprobs", nullptr},
                         {"finish_reason", nullptr}}))
      return cancel();
    if (c.echo &&
        !send({{"index", i}, {"text", prefix}, {"logprobs", nullptr}, {"finish_reason", nullptr}}))
      return cancel();
  }
  for (;;) {
    bool all = true;
    for (size_t i = 0; i < k; ++i) {
      if (closed[i]) continue;
      Job& j = *jobs[i];
      std::string piece, finish;
      json lp;
      {
        std::unique_lock<std::mutex> lock(j.mu);
        j.cv.wait_for(lock, std::chrono::milliseconds(k == 1 ? 100 : 5),
                      [&] { return j.done() || sendable(j.text, j.params.stop, false) > sent[i]; });
        const size_t upto = sendable(j.text, j.params.stop, j.done());
        if (upto > sent[i]) piece = j.text.substr(sent[i], upto - sent[i]);
        sent[i] = std::max(sent[i], upto);
        finish = j.finish;
        // the tokens of this chunk's text go with it
        if (c.logprobs >= 0 && (!piece.empty() || !finish.empty())) {
          const size_t upto_tokens = std::max(sent_tokens[i], tokens_within(j, sent[i]));
          lp = logprobs_json(j, sent_tokens[i], upto_tokens, c.chat, echoed[i]);
          sent_tokens[i] = upto_tokens;
        }
      }
      if (finish == "error") {
        out.event(json{{"error", {{"message", "generation failed: " + j.error}}}}.dump());
        out.end_events();
        return cancel();
      }
      // the text, then the finish in a chunk of its own (with any log-probabilities left)
      for (const bool last : {false, true}) {
        if (last ? finish.empty() : piece.empty()) continue;
        json ch = {{"index", i}, {"logprobs", lp}, {"finish_reason", nullptr}};
        const std::string text = last ? "" : piece;
        if (c.chat)
          ch["delta"] = last ? json::object() : json{{"content", text}};
        else
          ch["text"] = text;
        if (last) ch["finish_reason"] = finish;
        if (!send(ch)) return cancel();
        lp = nullptr;  // sent with this chunk
      }
      closed[i] = !finish.empty();
      all = all && closed[i];
    }
    if (all) break;
    if (out.client_gone()) return cancel();
  }
  if (c.include_usage) {
    json e = head;
    e["choices"] = json::array();
    e["usage"] = usage(jobs);
    if (!out.event(e.dump())) return;
  }
  out.event("[DONE]");
  out.end_events();
}

}  // namespace loom::engine
