#include "http/bounded_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace danqing::http {
namespace {

thread_local bool t_close_after_response = false;

int TimeoutMs(time_t sec, time_t usec) { return static_cast<int>(sec * 1000 + usec / 1000); }

// poll() one socket for `events`, retrying on EINTR; > 0 when ready.
int PollOne(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  int rc = 0;
  do {
    rc = ::poll(&p, 1, timeout_ms);
  } while (rc < 0 && errno == EINTR);
  if (rc > 0 && (p.revents & (POLLERR | POLLNVAL)) != 0 && (p.revents & events) == 0) return -1;
  return rc;
}

void AddressOf(const sockaddr_storage& addr, std::string& ip, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(addr);
    ::inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf);
    port = ntohs(a.sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(addr);
    ::inet_ntop(AF_INET6, &a.sin6_addr, buf, sizeof buf);
    port = ntohs(a.sin6_port);
  }
  ip = buf;
}

// A socket stream like httplib's own, counting what each request reads.
class BoundedStream final : public httplib::Stream {
 public:
  BoundedStream(int sock, int read_timeout_ms, int write_timeout_ms, size_t max_header_bytes,
                size_t max_body_bytes, std::chrono::milliseconds header_deadline)
      : sock_(sock),
        read_timeout_ms_(read_timeout_ms),
        write_timeout_ms_(write_timeout_ms),
        max_header_bytes_(max_header_bytes),
        max_body_bytes_(max_body_bytes),
        header_deadline_(header_deadline) {}

  // A new request starts: its request line and headers come next, within
  // the header deadline.
  void BeginRequest() {
    in_headers_ = true;
    header_bytes_ = body_bytes_ = 0;
    line_length_ = 0;
    last_was_cr_ = false;
    headers_due_ = std::chrono::steady_clock::now() + header_deadline_;
    status_.clear();
  }
  bool buffered() const { return off_ < len_; }
  bool over_limit() const { return over_limit_; }
  // The status code of the response written to this request; 0 if none yet.
  int status() const {
    return status_.size() >= 12 && std::isdigit(static_cast<unsigned char>(status_[9]))
               ? std::atoi(&status_[9])
               : 0;
  }

  bool is_readable() const override {
    if (buffered()) return true;
    int timeout = read_timeout_ms_;
    if (in_headers_) {
      // A client that sends its headers a line at a time, each inside the
      // read timeout, still has to finish them by the deadline (slowloris).
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(
          headers_due_ - std::chrono::steady_clock::now());
      timeout = static_cast<int>(std::clamp<int64_t>(left.count(), 0, timeout));
    }
    return PollOne(sock_, POLLIN, timeout) > 0;
  }
  bool is_writable() const override { return PollOne(sock_, POLLOUT, write_timeout_ms_) > 0; }

  ssize_t read(char* ptr, size_t size) override {
    if (over_limit_) return -1;
    if (!buffered()) {
      if (!is_readable()) return -1;
      ssize_t n = 0;
      do {
        n = ::recv(sock_, buf_.data(), buf_.size(), 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      off_ = 0;
      len_ = static_cast<size_t>(n);
    }
    // In the headers, hand out at most up to the end of the headers, so that
    // what follows is counted as body.
    size_t n = std::min(size, len_ - off_);
    if (in_headers_) n = Headers(n);
    else {
      if (body_bytes_ + n > max_body_bytes_) {
        over_limit_ = true;
        return -1;
      }
      body_bytes_ += n;
    }
    if (over_limit_) return -1;
    std::memcpy(ptr, buf_.data() + off_, n);
    off_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    // Past a limit the answer was sent already, or none is due.
    if (over_limit_ || !is_writable()) return -1;
    // "HTTP/1.1 400": the status line's start, for the connection's fate
    // (after a "100 Continue", the final response's).
    if (status_.size() >= 12 && status_[9] == '1') status_.clear();
    if (status_.size() < 12) status_.append(ptr, std::min(size, 12 - status_.size()));
    ssize_t n = 0;
    do {
      n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (::getpeername(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) AddressOf(addr, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (::getsockname(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) AddressOf(addr, ip, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  // Of the next `n` buffered bytes, how many belong to the headers (up to and
  // including the empty line that ends them). Past the header limit the
  // client is told so and the stream fails.
  size_t Headers(size_t n) {
    size_t take = 0;
    // httplib ends the headers only at a line that is exactly CR LF (it
    // skips a bare LF line and reads on): so does the count.
    while (take < n && in_headers_) {
      const char c = buf_[off_ + take++];
      if (c == '\n') {
        if (line_length_ == 1 && last_was_cr_) in_headers_ = false;  // the empty line
        line_length_ = 0;
      } else {
        ++line_length_;
      }
      last_was_cr_ = c == '\r';
    }
    header_bytes_ += take;
    if (header_bytes_ > max_header_bytes_) {
      over_limit_ = true;
      const std::string body = R"({"error":"the request line and headers are too long","status":431})";
      const std::string answer =
          "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: application/json\r\n"
          "Connection: close\r\nContent-Length: " +
          std::to_string(body.size()) + "\r\n\r\n" + body;
      [[maybe_unused]] ssize_t sent = ::send(sock_, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    return take;
  }

  const int sock_;
  const int read_timeout_ms_;
  const int write_timeout_ms_;
  const size_t max_header_bytes_;
  const size_t max_body_bytes_;
  std::array<char, 16 * 1024> buf_{};
  size_t off_ = 0;
  size_t len_ = 0;
  bool in_headers_ = true;
  size_t line_length_ = 0;  // bytes of the current line so far
  bool last_was_cr_ = false;
  size_t header_bytes_ = 0;
  size_t body_bytes_ = 0;
  bool over_limit_ = false;
  const std::chrono::milliseconds header_deadline_;
  std::chrono::steady_clock::time_point headers_due_{};
  std::string status_;  // the first bytes of the response, up to its status code
};

// Statuses httplib answers when it could not read a request as sent (a bad
// request line or header, a URI or body too long, a body that stopped
// coming): what is left on the connection is not a request boundary, and
// must not be parsed as the next request.
bool FramingLost(int status) {
  return status == 400 || status == 408 || status == 411 || status == 413 || status == 414 ||
         status == 431;
}

// Closes a connection whose client may still be sending a body that was
// refused unread. Closing at once with unread data makes the kernel reset the
// connection, and the client may then lose the answer it was sent; so the
// sending side is shut first, and what still comes is read and dropped for a
// while (2 s, 64 MiB at most), as web servers do ("lingering close").
void LingeringClose(int sock) {
  ::shutdown(sock, SHUT_WR);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  std::array<char, 64 * 1024> sink;
  for (size_t dropped = 0; dropped < (64u << 20);) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0 || PollOne(sock, POLLIN, static_cast<int>(left)) <= 0) break;
    const ssize_t n = ::recv(sock, sink.data(), sink.size(), 0);
    if (n <= 0 && !(n < 0 && errno == EINTR)) break;  // the client closed too
    if (n > 0) dropped += static_cast<size_t>(n);
  }
  ::close(sock);
}

}  // namespace

std::optional<BodyRefusal> RefuseBody(const httplib::Request& req, size_t max_body) {
  const std::string te = req.get_header_value("Transfer-Encoding");
  if (!te.empty() && te != "identity") {
    return BodyRefusal{411, "send the upload with a Content-Length (Transfer-Encoding " + te + " is not accepted)",
                       "encoding"};
  }
  const std::string ce = req.get_header_value("Content-Encoding");
  if (!ce.empty() && ce != "identity") {
    return BodyRefusal{415, "send the upload uncompressed (Content-Encoding " + ce + " is not accepted)",
                       "encoding"};
  }
  // The methods whose body httplib reads, with or without a length.
  const bool body_read = req.method == "POST" || req.method == "PUT" || req.method == "PATCH" ||
                         req.method == "DELETE" || req.method == "PRI";
  if (!req.has_header("Content-Length")) {
    if (!body_read) return std::nullopt;
    return BodyRefusal{411, "send the upload with a Content-Length", "encoding"};
  }
  const std::string cl = req.get_header_value("Content-Length");
  uint64_t length = 0;
  const auto [end, ec] = std::from_chars(cl.data(), cl.data() + cl.size(), length);
  if (ec != std::errc() || end != cl.data() + cl.size()) {
    return BodyRefusal{400, "Content-Length '" + cl + "' is not a number", "encoding"};
  }
  if (!body_read && length > 0) {
    // httplib leaves it unread, and would take it for the next request.
    return BodyRefusal{400, "a " + req.method + " request takes no body", "encoding"};
  }
  if (length > max_body) {
    if (max_body == 0) return BodyRefusal{413, "this server takes no request body", "too_large"};
    char mb[32];
    std::snprintf(mb, sizeof mb, "%.1f", static_cast<double>(max_body) / (1 << 20));
    return BodyRefusal{413, "the upload (" + std::to_string(length) + " bytes) is over the " + mb + " MiB limit",
                       "too_large"};
  }
  return std::nullopt;
}

BoundedServer::BoundedServer(size_t max_header_bytes, std::chrono::milliseconds header_deadline)
    : max_header_bytes_(max_header_bytes), header_deadline_(header_deadline) {
  set_pre_routing_handler(nullptr);
  set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    // Dual-stack whatever net.ipv6.bindv6only says (fails harmlessly on IPv4).
    int no = 0;
    ::setsockopt(sock, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof no);
  });
}

int BindEveryAddress(httplib::Server& s, const std::string& host, int port) {
  auto bind = [&](const std::string& h) {
    if (port == 0) return s.bind_to_any_port(h);
    return s.bind_to_port(h, port) ? port : -1;
  };
  if (!host.empty() && host != "::") return bind(host);
  const int bound = bind("::");
  if (bound > 0) return bound;
  // Failed: a port in use, or no IPv6 in this kernel (ipv6.disable=1), where
  // IPv4 alone is every address.
  const int probe = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (probe >= 0) {
    ::close(probe);
    return -1;
  }
  return bind("0.0.0.0");
}

void BoundedServer::CloseAfterResponse() { t_close_after_response = true; }

BoundedServer& BoundedServer::set_pre_routing_handler(HandlerWithResponse handler) {
  httplib::Server::set_pre_routing_handler(
      [handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
        // httplib 0.11 answers a Range of any number of parts, each built in
        // memory from the whole response: 20,000 ranges of one image asked for
        // 20 GB. Range is ignored, as RFC 9110 allows (the whole response,
        // 200). The request is httplib's own, not const: only its parsed
        // ranges are cleared.
        const_cast<httplib::Request&>(req).ranges.clear();
        return handler ? handler(req, res) : httplib::Server::HandlerResponse::Unhandled;
      });
  return *this;
}

bool BoundedServer::NextRequestArrives(socket_t sock) const {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::seconds(keep_alive_timeout_sec_);
  // In slices, so that a stopping server does not wait out the keep-alive.
  while (svr_sock_ != INVALID_SOCKET) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    const int rc = PollOne(sock, POLLIN, static_cast<int>(std::min<int64_t>(left, 100)));
    if (rc < 0) return false;
    if (rc > 0) return true;  // data, or the client closed (the read will say)
  }
  return false;
}

bool BoundedServer::process_and_close_socket(socket_t sock) {
  // Saturating: httplib's default payload limit is the largest size_t.
  const size_t max_body = payload_max_length_ > SIZE_MAX - max_header_bytes_ ? SIZE_MAX
                                                                             : payload_max_length_ + max_header_bytes_;
  BoundedStream strm(sock, TimeoutMs(read_timeout_sec_, read_timeout_usec_),
                     TimeoutMs(write_timeout_sec_, write_timeout_usec_), max_header_bytes_,
                     max_body, header_deadline_);
  bool ok = false;
  for (size_t left = keep_alive_max_count_; left > 0; --left) {
    if (!strm.buffered() && !NextRequestArrives(sock)) break;
    strm.BeginRequest();
    t_close_after_response = false;
    bool connection_closed = false;
    ok = process_request(strm, left == 1, connection_closed, nullptr);
    const bool close = t_close_after_response;
    t_close_after_response = false;
    if (close || strm.over_limit() || FramingLost(strm.status())) {
      LingeringClose(sock);
      return ok;
    }
    if (!ok || connection_closed) break;
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace danqing::http
