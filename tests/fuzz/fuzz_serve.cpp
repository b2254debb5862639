// libFuzzer harness: what `loom serve` does with a request before and after the model runs:
// the HTTP request parsed as serve_http.cpp parses it (Boost.Beast, the same body limit),
// then ServeApi::handle (serve_api.cpp, serve_openai.cpp, serve_fields.cpp): routing,
// strict JSON field checks, chat templates, tokenizing the prompt, and the response or the
// stream built from the generated tokens. No socket.
//
// The model and the batcher are stand-ins defined here (decode_model.cpp and
// serve_batch.cpp are not linked): a byte tokenizer (id = byte + 1, 0 = end of document,
// vocabulary 257), and a batcher that finishes each job at once with max_new tokens
// derived from its prompt (or, when the input's first byte says so, refuses it as busy).
// Any 5xx from handle() is a finding: a bad request must get a 4xx naming the problem.
//
// Input: byte 0 options (bit 0: the batcher refuses; bit 1: serve.chat_format = mistral
// instead of the chat template keys), then the raw HTTP request.
#include <boost/beast/http.hpp>

#include "fuzz_host.hpp"
#include "serve/serve_api.hpp"

namespace loom::engine {

// The stand-in model: the state kv_reset sets is all these calls read.
std::vector<int32_t> DecodeModel::encode(const std::string& text) const {
  std::vector<int32_t> ids;
  for (unsigned char c : text) ids.push_back(c + 1);
  return ids;
}
std::string DecodeModel::detokenize(const int32_t* ids, size_t n) const {
  std::string s;
  for (size_t i = 0; i < n; ++i)
    if (ids[i] > 0) s += static_cast<char>(ids[i] - 1);
  return s;
}
// Here: "become a model of vocabulary `vocab`, end of document 0" (see raw_model below).
void DecodeModel::kv_reset(int64_t vocab, int64_t) {
  vocab_ = vocab;
  eod_ = 0;
}

namespace {
bool g_refuse = false;
}  // namespace

Batcher::Batcher(DecodeModel& m, int64_t slots, int64_t max_len, int64_t max_queue)
    : m_(m), slots_(slots), max_len_(max_len), max_queue_(max_queue) {}
Batcher::~Batcher() = default;
void Batcher::drain() {}
BatchStats Batcher::stats() { return BatchStats{0, 0, slots_, 0, 0, 0}; }
void Batcher::cancel(const std::vector<std::shared_ptr<Job>>& jobs) {
  for (const auto& j : jobs) j->cancel = true;
}
bool Batcher::submit(const std::vector<std::shared_ptr<Job>>& jobs) {
  if (g_refuse) return false;
  for (const auto& j : jobs) {
    std::lock_guard<std::mutex> lock(j->mu);
    const GenParams& p = j->params;
    for (int64_t i = 0; i < p.max_new; ++i) {
      const int32_t t = static_cast<int32_t>((j->prompt.size() * 31 + i * 7 + p.seed) % 257);
      j->tokens.push_back(t);
      j->logprobs.push_back(-0.5);
      if (p.top_logprobs >= 0) j->top.push_back({{t, -0.5}, {(t + 1) % 257, -1.5}});
      j->text += m_.detokenize(&t, 1);
    }
    if (p.prompt_logprobs)
      j->prompt_logprobs.assign(j->prompt.empty() ? 0 : j->prompt.size() - 1, -1.0);
    j->finish = "length";
    j->cv.notify_all();
  }
  return true;
}

}  // namespace loom::engine

namespace {

namespace le = loom::engine;
namespace http = boost::beast::http;

// Keeps what handle() answered; a 5xx aborts.
class Recorder : public le::Responder {
 public:
  void json(int status, const nlohmann::json& body) override {
    const std::string text = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (status != 200) loomfuzz::note(std::to_string(status) + " " + text);
    if (status >= 500 && status != 503) {
      std::fprintf(stderr, "handle() answered %d: %s\n", status, body.dump().c_str());
      std::abort();
    }
  }
  bool start_events() override { return true; }
  bool event(const std::string& data) override {
    if (data != "[DONE]") (void)nlohmann::json::parse(data);  // each event is one JSON value
    return true;
  }
  void end_events() override {}
  bool client_gone() override { return false; }
};

// Storage for the stand-in model, never constructed as the real one (see above).
le::DecodeModel& raw_model() {
  alignas(le::DecodeModel) static unsigned char storage[sizeof(le::DecodeModel)] = {};
  auto& m = *reinterpret_cast<le::DecodeModel*>(storage);
  m.kv_reset(257, 0);
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static le::DecodeModel& model = raw_model();
  static le::Batcher batch(model, 4, 256, 8);
  static std::atomic<bool> draining{false};
  static le::ServeApi api(
      model, batch,
      le::ServeConfig{"fuzz", 128, 16, "<|im_start|>{role}\n{content}<|im_end|>\n",
                      "<|im_start|>assistant\n", "<|im_end|>", std::nullopt},
      draining);
  // serve.chat_format: Mistral's, whose refusals (roles that do not alternate) are 400s
  static le::ServeApi formatted(
      model, batch,
      le::ServeConfig{"fuzz", 128, 16, "", "", "</s>", le::ChatFormat::named("mistral")}, draining);
  if (size == 0) return 0;
  le::g_refuse = data[0] & 1;
  le::ServeApi& chosen = data[0] & 2 ? formatted : api;
  http::request_parser<http::string_body> parser;
  parser.body_limit(1 << 20);
  parser.eager(true);
  boost::beast::error_code ec;
  parser.put(boost::asio::buffer(data + 1, size - 1), ec);
  if (!ec && !parser.is_done()) parser.put_eof(ec);
  if (ec || !parser.is_done()) {  // serve answers 400 or 413 and closes
    (void)le::error_body(
        {400, "malformed HTTP request: " + ec.message(), "", "invalid_request_error"});
    return 0;
  }
  const auto& req = parser.get();
  Recorder out;
  chosen.handle(std::string(req.method_string()), std::string(req.target()), req.body(), out);
  return 0;
}
