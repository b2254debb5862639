// HTTP for `loom serve` through Boost.Beast (synchronous, one thread per connection: a
// connection's thread blocks while its request waits for the decode loop, which is the
// only place the model runs), and the server's life: start, signals, drain.
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <fstream>
#include <map>
#include <thread>

#include "errors.hpp"
#include "serve.hpp"
#include "serve_api.hpp"

namespace loom::engine {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
namespace fs = std::filesystem;

namespace {

// One client connection's side of a response (serve_api.hpp's Responder).
class Connection : public Responder {
 public:
  Connection(tcp::socket& s, unsigned version, bool keep_alive)
      : sock_(s), version_(version), keep_alive_(keep_alive) {}

  void json(int status, const nlohmann::json& body) override {
    http::response<http::string_body> res{static_cast<http::status>(status), version_};
    res.set(http::field::server, "loom");
    res.set(http::field::content_type, "application/json");
    if (status == 503) res.set(http::field::retry_after, "1");
    res.keep_alive(keep_alive_);
    res.body() = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    res.prepare_payload();
    beast::error_code ec;
    http::write(sock_, res, ec);
    if (ec) keep_alive_ = false;
  }
  bool start_events() override {
    http::response<http::empty_body> res{http::status::ok, version_};
    res.set(http::field::server, "loom");
    res.set(http::field::content_type, "text/event-stream");
    res.set(http::field::cache_control, "no-cache");
    chunked_ = version_ >= 11;  // HTTP/1.0: the body ends when the connection closes
    if (chunked_) res.chunked(true);
    keep_alive_ = keep_alive_ && chunked_;
    res.keep_alive(keep_alive_);
    http::response_serializer<http::empty_body> sr{res};
    beast::error_code ec;
    http::write_header(sock_, sr, ec);
    return ok(ec);
  }
  bool event(const std::string& data) override {
    const std::string s = "data: " + data + "\n\n";
    beast::error_code ec;
    if (chunked_)
      net::write(sock_, http::make_chunk(net::buffer(s)), ec);
    else
      net::write(sock_, net::buffer(s), ec);
    return ok(ec);
  }
  void end_events() override {
    beast::error_code ec;
    if (chunked_) net::write(sock_, http::make_chunk_last(), ec);
    ok(ec);
  }
  bool client_gone() override {
    pollfd p{sock_.native_handle(), POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
    char c;  // readable: the next request (pipelined), or the end of the stream
    return ::recv(p.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }
  bool keep_alive() const { return keep_alive_; }

 private:
  bool ok(const beast::error_code& ec) {
    if (ec) keep_alive_ = false;
    return !ec;
  }
  tcp::socket& sock_;
  unsigned version_;
  bool keep_alive_, chunked_ = false;
};

class HttpServer {
 public:
  HttpServer(ServeApi& api, const ServeOptions& o, const std::atomic<bool>& draining)
      : api_(api), opts_(o), draining_(draining), acceptor_(ioc_) {
    beast::error_code ec;
    const auto addr = net::ip::make_address(o.host, ec);
    if (ec) throw UsageError("loom serve: --host " + o.host + " is not an IP address");
    const tcp::endpoint ep{addr, (unsigned short)o.port};
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec)
      throw RunError("loom serve: cannot listen on " + o.host + ":" + std::to_string(o.port) +
                     ": " + ec.message());
  }
  int port() const { return acceptor_.local_endpoint().port(); }

  // Accepts until stop_accepting(); each connection on its own thread.
  void accept_loop() {
    for (;;) {
      tcp::socket sock(ioc_);
      beast::error_code ec;
      acceptor_.accept(sock, ec);
      if (draining_) break;
      if (ec) {
        spdlog::warn("serve: accept: {}", ec.message());
        continue;
      }
      std::unique_lock<std::mutex> lock(mu_);
      if ((int64_t)conns_.size() >= opts_.max_connections) {
        lock.unlock();
        Connection c(sock, 11, false);
        c.json(503, error_body({503,
                                "too many connections (serve --max-connections " +
                                    std::to_string(opts_.max_connections) + ")",
                                "", "server_busy"}));
        continue;
      }
      const int fd = sock.native_handle();
      conns_[fd] = false;
      std::thread([this, s = std::move(sock)]() mutable { session(std::move(s)); }).detach();
    }
  }
  // From the signal thread: the blocked accept returns.
  void stop_accepting() { ::shutdown(acceptor_.native_handle(), SHUT_RDWR); }
  // After the decode loop drained: connections waiting for a next request are closed; the
  // others finish writing first.
  void close_connections() {
    std::unique_lock<std::mutex> lock(mu_);
    for (auto& [fd, busy] : conns_)
      if (!busy) ::shutdown(fd, SHUT_RD);
    cv_.wait_for(lock, std::chrono::seconds(30), [&] { return conns_.empty(); });
  }

 private:
  void session(tcp::socket sock) {
    const int fd = sock.native_handle();
    beast::flat_buffer buf;
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.body_limit((uint64_t)opts_.max_body);
      beast::error_code ec;
      http::read(sock, buf, parser, ec);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (draining_ && !ec) ec = http::error::end_of_stream;  // read during the drain
        conns_[fd] = !ec;
      }
      if (ec == http::error::end_of_stream || ec == net::error::eof ||
          ec == net::error::connection_reset || ec == net::error::not_connected ||
          ec == net::error::operation_aborted || ec == net::error::bad_descriptor)
        break;
      if (ec) {  // answered, then closed: the stream may be out of step
        const bool big = ec == http::error::body_limit;
        Connection c(sock, 11, false);
        c.json(big ? 413 : 400,
               error_body({big ? 413 : 400,
                           big ? "the request body is larger than " +
                                     std::to_string(opts_.max_body) + " bytes (serve --max-body)"
                               : "malformed HTTP request: " + ec.message(),
                           "", "invalid_request_error"}));
        linger(sock);
        break;
      }
      const auto& req = parser.get();
      Connection c(sock, req.version(), req.keep_alive() && !draining_);
      api_.handle(std::string(req.method_string()), std::string(req.target()), req.body(), c);
      {
        std::lock_guard<std::mutex> lock(mu_);
        conns_[fd] = false;
      }
      if (!c.keep_alive() || draining_) break;
    }
    beast::error_code ec;
    sock.shutdown(tcp::socket::shutdown_send, ec);
    std::lock_guard<std::mutex> lock(mu_);
    conns_.erase(fd);
    sock.close(ec);
    cv_.notify_all();
  }

  // After an error answered before the body was read: the client may still be sending it.
  // Closing now would reset the connection before it reads the answer, so read and drop
  // what comes (bounded in bytes and time) until it closes its end.
  static void linger(tcp::socket& sock) {
    beast::error_code ec;
    sock.shutdown(tcp::socket::shutdown_send, ec);
    timeval tv{2, 0};
    ::setsockopt(sock.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[65536];
    for (size_t total = 0; total < ((size_t)64 << 20);) {
      const size_t n = sock.read_some(net::buffer(buf), ec);
      if (ec) break;
      total += n;
    }
  }

  ServeApi& api_;
  const ServeOptions& opts_;
  const std::atomic<bool>& draining_;
  net::io_context ioc_;
  tcp::acceptor acceptor_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, bool> conns_;  // open connections: fd -> busy with a request
};

}  // namespace

void serve(const ServeOptions& o, Registry& registry) {
  // SIGTERM and SIGINT go to one thread (sigwait) that starts the drain; a write to a client
  // that has gone fails with EPIPE instead of killing the server.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  DecodeModel m(o.checkpoint, o.overrides, registry, "`loom serve`");
  if (m.enc)
    throw UsageError("`loom serve` does not serve encoder-decoder models (" +
                     std::string(LOOM_EXT_ENCODE) + ") yet; `loom generate` runs them");
  if (m.rank() != 0) {  // tensor parallelism: repeat rank 0's model calls until it stops
    m.follow();
    return;
  }
  struct StopFollowers {  // however rank 0 leaves, the other ranks return too
    DecodeModel& m;
    ~StopFollowers() { m.stop_followers(); }
  } stop_followers{m};
  int64_t max_len = o.max_len;
  const int64_t context =
      m.max_context() > 0 ? m.max_context() : m.recipe().get_int("train", "seq_len");
  if (max_len <= 0) max_len = context;
  if (m.max_context() > 0 && max_len > m.max_context())
    throw UsageError("loom serve: --max-len " + std::to_string(max_len) +
                     " exceeds the model's context of " + std::to_string(m.max_context()));
  Batcher batch(m, o.max_batch, max_len, o.max_queue);
  ServeConfig cfg;
  cfg.model_name = o.model_name;
  if (cfg.model_name.empty()) {
    fs::path named = fs::absolute(o.checkpoint).lexically_normal();
    if (named.filename().empty()) named = named.parent_path();
    cfg.model_name = named.filename().string();
  }
  cfg.chat_template = m.recipe().get_string("serve", "chat_template");
  cfg.chat_generation_prompt = m.recipe().get_string("serve", "chat_generation_prompt");
  cfg.chat_stop = m.recipe().get_string("serve", "chat_stop");
  std::atomic<bool> draining{false};
  ServeApi api(m, batch, cfg, draining);
  HttpServer server(api, o, draining);
  if (!o.port_file.empty()) std::ofstream(o.port_file) << server.port() << "\n";
  spdlog::info(
      "serving '{}' on http://{}:{} ({} sequences at once, up to {} tokens each, {} more queued)",
      cfg.model_name, o.host, server.port(), batch.stats().slots, max_len, o.max_queue);
  std::thread signals([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    spdlog::info("signal {}: no new requests; finishing what is in flight", sig);
    draining = true;
    server.stop_accepting();
  });
  server.accept_loop();
  batch.drain();
  server.close_connections();
  signals.join();
  const BatchStats s = batch.stats();
  spdlog::info("stopped after {} decode steps, {} generated tokens", s.steps, s.tokens);
}

}  // namespace loom::engine
