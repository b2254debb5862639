// A connection's socket for `loom serve` with a deadline on every read and write, so that a
// client that sends nothing, stops halfway through a request or reads none of its answer
// cannot hold a connection's thread (and its place under --max-connections) for ever.
// Beast's own timeouts (beast::tcp_stream) apply to asynchronous operations only, and a
// blocking socket's SO_RCVTIMEO is undone by Asio, which polls again on EAGAIN; so the
// socket is non-blocking and each operation waits in poll() until its deadline.
#pragma once

#include <poll.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <chrono>

namespace loom::engine {

class TimedSocket {
 public:
  using executor_type = boost::asio::ip::tcp::socket::executor_type;
  using clock = std::chrono::steady_clock;

  explicit TimedSocket(boost::asio::ip::tcp::socket& s) : s_(s) {
    boost::system::error_code ec;
    s_.non_blocking(true, ec);
  }
  executor_type get_executor() { return s_.get_executor(); }
  boost::asio::ip::tcp::socket& socket() { return s_; }
  int fd() { return s_.native_handle(); }
  // Operations from now on fail with beast::error::timeout once `d` has passed.
  void expires_after(clock::duration d) { deadline_ = clock::now() + d; }

  template <class Buffers>
  size_t read_some(const Buffers& b, boost::system::error_code& ec) {
    for (;;) {
      const size_t n = s_.read_some(b, ec);
      if (ec != boost::asio::error::would_block || !wait(POLLIN, ec)) return n;
    }
  }
  template <class Buffers>
  size_t write_some(const Buffers& b, boost::system::error_code& ec) {
    for (;;) {
      const size_t n = s_.write_some(b, ec);
      if (ec != boost::asio::error::would_block || !wait(POLLOUT, ec)) return n;
    }
  }
  template <class Buffers>
  size_t read_some(const Buffers& b) {
    boost::system::error_code ec;
    const size_t n = read_some(b, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }
  template <class Buffers>
  size_t write_some(const Buffers& b) {
    boost::system::error_code ec;
    const size_t n = write_some(b, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

 private:
  // Waits for `events` until the deadline: false (ec = timeout or the poll error) when not.
  bool wait(short events, boost::system::error_code& ec) {
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - clock::now()).count();
      if (left <= 0) {
        ec = boost::beast::error::timeout;
        return false;
      }
      pollfd p{s_.native_handle(), events, 0};
      const int r = ::poll(&p, 1, (int)std::min<long long>(left, 1 << 30));
      if (r > 0) {
        ec = {};
        return true;
      }
      if (r < 0 && errno != EINTR) {
        ec = boost::system::error_code(errno, boost::system::system_category());
        return false;
      }
    }
  }

  boost::asio::ip::tcp::socket& s_;
  clock::time_point deadline_ = clock::now() + std::chrono::seconds(30);
};

}  // namespace loom::engine
