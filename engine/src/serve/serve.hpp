// `loom serve`: a checkpoint behind HTTP — Megatron's PUT /api, OpenAI's /v1/completions and
// /v1/chat/completions (server-sent events when streamed), /v1/models, /health — with
// continuous batching over one KV-cached decode loop. SIGTERM or SIGINT stops accepting,
// finishes what is in flight, and exits 0.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace loom::engine {

class Registry;

struct ServeOptions {
  std::filesystem::path checkpoint;  // Loom checkpoint, or a Hugging Face directory
  std::string host = "127.0.0.1";
  int port = 5000;                  // 0: any free port (see port_file)
  std::filesystem::path port_file;  // "" = none; else the bound port is written here
  std::string model_name;           // "" = the checkpoint folder's name
  int64_t max_batch = 16;           // sequences decoded together (KV-cache slots)
  int64_t max_queue = 64;           // requests waiting beyond them; then 503
  int64_t max_len = 0;              // tokens per sequence; 0 = the model's context
  int64_t max_body = 1 << 20;       // request bytes; then 413
  int64_t max_connections = 512;    // open connections; then 503
  // Seconds a connection may take: for the first byte of a request (a new or kept-alive
  // connection; then it is closed) and for each write of an answer to make progress; for the
  // rest of a request's header, and for its body, once they have begun (then 408).
  double idle_timeout = 30, header_timeout = 30, body_timeout = 30;
  std::vector<std::string> overrides;  // --set section.key=value over the saved recipe
};

void serve(const ServeOptions& opts, Registry& registry);

}  // namespace loom::engine
