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
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>

#include "base/errors.hpp"
#include "serve/serve.hpp"
#include "serve/serve_api.hpp"
#include "serve/serve_socket.hpp"

namespace loom::engine {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
namespace fs = std::filesystem;

namespace {

using clock = std::chrono::steady_clock;

std::chrono::milliseconds seconds(double s) {
  return std::chrono::milliseconds((int64_t)(s * 1e3));
}

// One client connection's side of a response (serve_api.hpp's Responder). Each write must
// make progress within `write_timeout`, or the client counts as gone.
class Connection : public Responder {
 public:
  Connection(TimedSocket& s, unsigned version, bool keep_alive, clock::duration write_timeout)
      : sock_(s), version_(version), keep_alive_(keep_alive), write_timeout_(write_timeout) {}

  void json(int code, const nlohmann::json& body) override {
    status = code;
    http::response<http::string_body> res{static_cast<http::status>(code), version_};
    res.set(http::field::server, "loom");
    res.set(http::field::content_type, "application/json");
    if (code == 503) res.set(http::field::retry_after, "1");
    res.keep_alive(keep_alive_);
    res.body() = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    res.prepare_payload();
    beast::error_code ec;
    sock_.expires_after(write_timeout_);
    http::write(sock_, res, ec);
    ok(ec);
  }
  bool start_events() override {
    status = 200;
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
    sock_.expires_after(write_timeout_);
    http::write_header(sock_, sr, ec);
    streaming_ = ok(ec);
    return streaming_;
  }
  bool event(const std::string& data) override { return send("data: " + data + "\n\n"); }
  void end_events() override {
    beast::error_code ec;
    sock_.expires_after(write_timeout_);
    if (chunked_) net::write(sock_, http::make_chunk_last(), ec);
    ok(ec);
  }
  // Only a failed read or write says that a client has gone. A client that has shut down
  // its sending side after the request (end of stream on read) may still be reading, so
  // then one write that it ignores tells: a connection closed for good answers it with a
  // reset, seen here as POLLHUP/POLLERR at the next check.
  bool client_gone() override {
    pollfd p{sock_.fd(), POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLHUP | POLLERR)) return true;
    if (!(p.revents & POLLRDHUP) || probed_) return false;
    probed_ = true;
    if (streaming_) return !send(":\n\n");  // an event-stream comment, which clients skip
    if (version_ < 11) return false;        // HTTP/1.0 has no interim responses
    // an interim response before the final one, which HTTP/1.1 clients must skip
    beast::error_code ec;
    sock_.expires_after(write_timeout_);
    net::write(sock_, net::buffer(std::string_view("HTTP/1.1 100 Continue\r\n\r\n")), ec);
    return !ok(ec);
  }
  bool keep_alive() const { return keep_alive_; }

 private:
  bool send(const std::string& s) {
    beast::error_code ec;
    sock_.expires_after(write_timeout_);
    if (chunked_)
      net::write(sock_, http::make_chunk(net::buffer(s)), ec);
    else
      net::write(sock_, net::buffer(s), ec);
    return ok(ec);
  }
  bool ok(const beast::error_code& ec) {
    if (ec) keep_alive_ = false;
    return !ec;
  }
  TimedSocket& sock_;
  unsigned version_;
  bool keep_alive_, chunked_ = false, streaming_ = false, probed_ = false;
  clock::duration write_timeout_;
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
      // A stream writes one small event per token: with Nagle's algorithm each waited for the
      // client's delayed ACK of the one before, about 40 ms on Linux, so the first token of a
      // streamed answer came 40 ms late (tools/bench/serve_load.py --stream, one client, a
      // 2-layer model on 2 cores: time to first token p50 43.5 ms, 1.3 ms with no delay).
      sock.set_option(tcp::no_delay(true), ec);
      std::unique_lock<std::mutex> lock(mu_);
      if ((int64_t)conns_.size() >= opts_.max_connections) {
        lock.unlock();
        TimedSocket ts(sock);
        Connection c(ts, 11, false, seconds(opts_.idle_timeout));
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
  // Reads one request: its first byte within --idle-timeout (else the connection is closed
  // without an answer), the rest of its header within --header-timeout, its body within
  // --body-timeout. Returns the option whose time ran out when ec is a timeout.
  const char* read_request(TimedSocket& s, beast::flat_buffer& buf,
                           http::request_parser<http::string_body>& parser, beast::error_code& ec) {
    if (buf.size() == 0) {  // else a pipelined request has begun
      s.expires_after(seconds(opts_.idle_timeout));
      buf.commit(s.read_some(buf.prepare(8192), ec));
      if (ec == net::error::eof) ec = http::error::end_of_stream;
      if (ec) return "--idle-timeout";
    }
    s.expires_after(seconds(opts_.header_timeout));
    http::read_header(s, buf, parser, ec);
    if (ec) return "--header-timeout";
    if (beast::iequals(parser.get()[http::field::expect], "100-continue")) {
      s.expires_after(seconds(opts_.idle_timeout));
      net::write(s, net::buffer(std::string_view("HTTP/1.1 100 Continue\r\n\r\n")), ec);
      if (ec) return "--idle-timeout";
    }
    s.expires_after(seconds(opts_.body_timeout));
    http::read(s, buf, parser, ec);
    return "--body-timeout";
  }

  // A request read wrongly gets its 4xx and the connection closes: the stream may be out of
  // step.
  void refuse(TimedSocket& s, const beast::error_code& ec, const char* timeout) {
    int code = 400;
    std::string why = "malformed HTTP request: " + ec.message();
    if (ec == http::error::body_limit) {
      code = 413;
      why = "the request body is larger than " + std::to_string(opts_.max_body) +
            " bytes (serve --max-body)";
    } else if (ec == beast::error::timeout) {
      code = 408;
      const bool header = std::string_view(timeout) == "--header-timeout";
      why = std::string("the request's ") + (header ? "header" : "body") +
            " did not arrive in time (serve " + timeout + " " +
            fmt::format("{:g}", header ? opts_.header_timeout : opts_.body_timeout) + " s)";
    }
    Connection c(s, 11, false, seconds(opts_.idle_timeout));
    c.json(code, error_body({code, why, "", "invalid_request_error"}));
    log_request(peer(s), "-", "-", c, clock::now());
    linger(s);
  }

  void session(tcp::socket sock) {
    const int fd = sock.native_handle();
    TimedSocket s(sock);
    const std::string client = peer(s);
    beast::flat_buffer buf;
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.body_limit((uint64_t)opts_.max_body);
      beast::error_code ec;
      const char* timeout = read_request(s, buf, parser, ec);
      const auto t0 = clock::now();
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (draining_ && !ec) ec = http::error::end_of_stream;  // read during the drain
        conns_[fd] = !ec;
      }
      if (ec == http::error::end_of_stream || ec == net::error::eof ||
          ec == net::error::connection_reset || ec == net::error::not_connected ||
          ec == net::error::operation_aborted || ec == net::error::bad_descriptor ||
          (ec == beast::error::timeout && std::string_view(timeout) == "--idle-timeout"))
        break;
      if (ec) {
        refuse(s, ec, timeout);
        break;
      }
      const auto& req = parser.get();
      Connection c(s, req.version(), req.keep_alive() && !draining_, seconds(opts_.idle_timeout));
      api_.handle(std::string(req.method_string()), std::string(req.target()), req.body(), c);
      log_request(client, std::string(req.method_string()), std::string(req.target()), c, t0);
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

  // The request log: one line per request (LOOM_LOG_LEVEL=warn hides them), as web servers
  // write them: client, request, status ("-" when the client left before its answer),
  // prompt and generated tokens, and the time from the request's arrival to its answer.
  static std::string peer(TimedSocket& s) {
    beast::error_code ec;
    const auto p = s.socket().remote_endpoint(ec);
    return ec ? "?" : p.address().to_string() + ":" + std::to_string(p.port());
  }
  static void log_request(const std::string& client, std::string_view method,
                          std::string_view target, const Responder& out, clock::time_point t0) {
    int64_t prompt = 0, generated = 0;
    for (const auto& j : out.jobs) {
      std::lock_guard<std::mutex> lock(j->mu);
      prompt += (int64_t)j->prompt.size();
      generated += (int64_t)j->tokens.size();
    }
    const double ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    spdlog::info("{} \"{} {}\" {} {} prompt + {} generated tokens, {:.1f} ms", client, method,
                 target, out.status ? std::to_string(out.status) : std::string("-"), prompt,
                 generated, ms);
  }

  // After an error answered before the body was read: the client may still be sending it.
  // Closing now would reset the connection before it reads the answer, so read and drop
  // what comes (bounded in bytes and time) until it closes its end.
  static void linger(TimedSocket& s) {
    beast::error_code ec;
    s.socket().shutdown(tcp::socket::shutdown_send, ec);
    s.expires_after(std::chrono::seconds(2));
    char buf[65536];
    for (size_t total = 0; total < ((size_t)64 << 20);) {
      const size_t n = s.read_some(net::buffer(buf), ec);
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

// A supervisor waits for this file: one it cannot have is an error, not a silent wait.
void write_port_file(const fs::path& path, int port) {
  errno = 0;
  std::ofstream f(path);
  if (f) f << port << "\n" << std::flush;
  if (!f)
    throw UsageError("loom serve: cannot write --port-file " + path.string() + ": " +
                     (errno ? std::strerror(errno) : "write failed"));
}

// The checks that need no model, before the model loads (which can take minutes).
void check_port_file(const fs::path& path) {
  std::error_code ec;
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  if (fs::is_directory(path, ec))
    throw UsageError("loom serve: --port-file " + path.string() + " is a directory");
  if (!fs::is_directory(dir, ec))
    throw UsageError("loom serve: cannot write --port-file " + path.string() + ": no folder " +
                     dir.string());
}

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

  if (!o.port_file.empty()) check_port_file(o.port_file);
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
  if (const std::string f = m.recipe().get_string("serve", "chat_format"); !f.empty()) {
    cfg.chat_format = ChatFormat::named(f);  // (UsageError: not a format, exit 2)
    cfg.chat_stop = cfg.chat_format->stop();
  }
  std::atomic<bool> draining{false};
  ServeApi api(m, batch, cfg, draining);
  HttpServer server(api, o, draining);
  if (!o.port_file.empty()) write_port_file(o.port_file, server.port());
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
