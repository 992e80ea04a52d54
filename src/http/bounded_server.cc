#include "http/bounded_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "http/request_head.h"

namespace danqing::http {
namespace {

using Clock = std::chrono::steady_clock;

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

// The reason phrase of the statuses a refused head is answered with.
const char* Reason(int code) {
  switch (code) {
    case 400: return "Bad Request";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
  }
}

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
// while (2 s, 64 MiB at most), as web servers do ("lingering close"). Without
// a poller only: with one the connection lingers there, holding no thread.
constexpr auto kLinger = std::chrono::seconds(2);
constexpr size_t kLingerMaxBytes = 64u << 20;
void LingeringClose(int sock) {
  ::shutdown(sock, SHUT_WR);
  const auto deadline = std::chrono::steady_clock::now() + kLinger;
  std::array<char, 64 * 1024> sink;
  for (size_t dropped = 0; dropped < kLingerMaxBytes;) {
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

// The sockets of the connections being served. Connection registers its
// socket for its life and leaves before closing it, under the lock that
// CutAll holds: CutAll never touches a closed (and maybe reused) number.
class BoundedServer::ActiveSockets {
 public:
  void Add(int fd) {
    std::lock_guard<std::mutex> lock(mu_);
    fds_.insert(fd);
    if (cut_) ::shutdown(fd, SHUT_RDWR);
  }
  void Remove(int fd) {
    std::lock_guard<std::mutex> lock(mu_);
    fds_.erase(fd);
    if (fds_.empty()) empty_.notify_all();
  }
  // Waits up to `grace` for every connection to end, then shuts down the
  // sockets of those left (their reads and writes fail at once) and of any
  // registered later. The number shut down.
  size_t CutAllAfter(std::chrono::milliseconds grace) {
    std::unique_lock<std::mutex> lock(mu_);
    empty_.wait_for(lock, grace, [this] { return fds_.empty(); });
    cut_ = true;
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    return fds_.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable empty_;
  std::unordered_set<int> fds_;  // guarded by mu_
  bool cut_ = false;             // guarded by mu_
};

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
    : max_header_bytes_(max_header_bytes),
      header_deadline_(header_deadline),
      active_(std::make_unique<ActiveSockets>()) {
  set_pre_routing_handler(nullptr);
  set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    // Dual-stack whatever net.ipv6.bindv6only says (fails harmlessly on IPv4).
    int no = 0;
    ::setsockopt(sock, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof no);
  });
}

BoundedServer::~BoundedServer() = default;

int BindEveryAddress(BoundedServer& s, const std::string& host, int port) {
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

// One accepted socket: its read buffer, the state of its current request,
// and the httplib::Stream the request is processed through. Owns the socket
// (closed when destroyed, unless released). Used by one thread at a time.
class BoundedServer::Connection final : public httplib::Stream {
 public:
  struct Limits {
    int read_timeout_ms;
    int write_timeout_ms;
    size_t max_header_bytes;
    size_t max_body_bytes;
    std::chrono::milliseconds header_deadline;
    std::chrono::milliseconds body_deadline;
    size_t body_min_rate;
    std::chrono::milliseconds keep_alive;
    size_t max_requests;
  };

  // `active` (may be null) holds the socket while this connection does.
  Connection(int sock, const Limits& limits, ActiveSockets* active)
      : sock_(sock),
        limits_(limits),
        requests_left_(limits.max_requests),
        parser_(limits.max_header_bytes),
        idle_due_(Clock::now() + limits.keep_alive),
        active_(active) {
    if (active_ != nullptr) active_->Add(sock_);
  }
  ~Connection() override {
    if (sock_ >= 0) {
      if (active_ != nullptr) active_->Remove(sock_);
      ::shutdown(sock_, SHUT_RDWR);
      ::close(sock_);
    }
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // The socket, no longer closed by this connection.
  int Release() {
    if (active_ != nullptr && sock_ >= 0) active_->Remove(sock_);
    return std::exchange(sock_, -1);
  }

  enum class Head { kComplete, kWaiting, kClosed, kRefused };
  // Reads and checks the next request's head as far as bytes have come,
  // without waiting. kComplete: httplib may process it; kWaiting: more is
  // due by due(); kRefused: head() says why.
  Head ReadHead() {
    for (;;) {
      if (scan_ < len_) {
        if (!head_started_) {
          head_started_ = true;
          headers_due_ = Clock::now() + limits_.header_deadline;
        }
        scan_ += parser_.Feed(std::string_view(buf_.data() + scan_, len_ - scan_));
        if (parser_.failed()) return Head::kRefused;
        if (parser_.done()) {
          off_ += parser_.skipped();
          head_end_ = scan_;
          in_head_ = true;
          return Head::kComplete;
        }
      }
      Room();
      const ssize_t n = ::recv(sock_, buf_.data() + len_, buf_.size() - len_, MSG_DONTWAIT);
      if (n > 0) {
        len_ += static_cast<size_t>(n);
      } else if (n == 0) {
        return Head::kClosed;
      } else if (errno != EINTR) {
        return errno == EAGAIN || errno == EWOULDBLOCK ? Head::kWaiting : Head::kClosed;
      }
    }
  }
  const RequestHeadParser& head() const { return parser_; }
  // When the wait for bytes ends: the keep-alive timeout before a request's
  // first byte, the header deadline after it.
  Clock::time_point due() const { return head_started_ ? headers_due_ : idle_due_; }
  bool last_request() const { return requests_left_ <= 1; }

  // The request was answered: the next one may begin (its bytes may be
  // buffered already).
  void NextRequest() {
    if (requests_left_ > 0) --requests_left_;
    parser_.Reset();
    scan_ = off_;
    head_started_ = in_head_ = false;
    body_bytes_ = 0;
    chunked_ = ChunkedBodyParser();
    status_.clear();
    idle_due_ = Clock::now() + limits_.keep_alive;
  }
  // Lingering close (see LingeringClose): the answer sent, the sending side
  // is shut; Drain() then drops what still comes.
  void StartLinger() {
    ::shutdown(sock_, SHUT_WR);
    lingering_ = true;
    std::vector<char>().swap(buf_);
    off_ = len_ = scan_ = 0;
  }
  bool lingering() const { return lingering_; }
  // Reads and drops what has come, without waiting; true when the
  // connection is done (the client closed, an error, or the byte limit).
  bool Drain() {
    std::array<char, 16 * 1024> sink;
    for (int i = 0; i < 16; ++i) {
      const ssize_t n = ::recv(sock_, sink.data(), sink.size(), MSG_DONTWAIT);
      if (n > 0) {
        dropped_ += static_cast<size_t>(n);
        if (dropped_ >= kLingerMaxBytes) return true;
      } else if (n == 0) {
        return true;
      } else if (errno != EINTR) {
        return errno != EAGAIN && errno != EWOULDBLOCK;
      }
    }
    return false;
  }

  // Keeps only the unread bytes (a part of a head, at most the header
  // limit): a waiting connection takes no more memory than it was sent.
  void Shrink() {
    std::vector<char> unread(buf_.begin() + static_cast<ptrdiff_t>(off_),
                             buf_.begin() + static_cast<ptrdiff_t>(len_));
    scan_ -= off_;
    len_ -= off_;
    off_ = 0;
    buf_.swap(unread);
  }

  // Answers a refused head (JSON, Connection: close).
  void SendRefusal() {
    const int code = parser_.error_status();
    std::string body = "{\"error\":\"";
    for (char c : parser_.error()) {
      if (c == '"' || c == '\\') body += '\\';
      if (static_cast<unsigned char>(c) >= 0x20) body += c;
    }
    body += "\",\"status\":" + std::to_string(code) + "}";
    const std::string answer =
        "HTTP/1.1 " + std::to_string(code) + " " + Reason(code) +
        "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    [[maybe_unused]] ssize_t sent =
        ::send(sock_, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }

  bool over_limit() const { return over_limit_; }
  // The request declared a body that was not read (httplib reads none for
  // a GET, for one): its bytes must not be taken for the next request.
  bool body_unread() const {
    const auto length = parser_.content_length();
    return (length && body_bytes_ < *length) || (parser_.chunked() && body_bytes_ == 0);
  }
  // The status code of the response written to this request; 0 if none yet.
  int status() const {
    return status_.size() >= 12 && std::isdigit(static_cast<unsigned char>(status_[9]))
               ? std::atoi(&status_[9])
               : 0;
  }

  bool is_readable() const override {
    return off_ < len_ || (!in_head_ && PollOne(sock_, POLLIN, BodyWaitMs()) > 0);
  }
  bool is_writable() const override {
    return PollOne(sock_, POLLOUT, limits_.write_timeout_ms) > 0;
  }

  ssize_t read(char* ptr, size_t size) override {
    if (over_limit_) return -1;
    if (in_head_) {
      // The head, checked and buffered whole; then the body begins.
      const size_t n = std::min(size, head_end_ - off_);
      std::memcpy(ptr, buf_.data() + off_, n);
      off_ += n;
      if (off_ == head_end_) {
        in_head_ = false;
        body_start_ = Clock::now();
      }
      return static_cast<ssize_t>(n);
    }
    if (off_ == len_) {
      if (!is_readable()) return -1;
      off_ = len_ = 0;
      Room();
      ssize_t n = 0;
      do {
        n = ::recv(sock_, buf_.data(), buf_.size(), 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      len_ = static_cast<size_t>(n);
    }
    const size_t n = std::min(size, len_ - off_);
    if (body_bytes_ + n > limits_.max_body_bytes) {
      over_limit_ = true;
      return -1;
    }
    // A chunked body whose framing httplib would read otherwise than a proxy:
    // the read fails, httplib answers 400, and the connection is closed.
    if (parser_.chunked() && !chunked_.Feed(std::string_view(buf_.data() + off_, n))) return -1;
    body_bytes_ += n;
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
    if (::getpeername(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
      AddressOf(addr, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (::getsockname(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
      AddressOf(addr, ip, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  static constexpr size_t kChunk = 16 * 1024;

  // At least kChunk free bytes after len_, what is unread moved to the front.
  void Room() {
    if (buf_.size() - len_ >= kChunk) return;
    if (off_ > 0) {
      std::memmove(buf_.data(), buf_.data() + off_, len_ - off_);
      len_ -= off_;
      scan_ -= off_;
      head_end_ = head_end_ > off_ ? head_end_ - off_ : 0;
      off_ = 0;
    }
    if (buf_.size() - len_ < kChunk) buf_.resize(len_ + kChunk);
  }

  // How long a body read may wait: within the read timeout, and until the
  // body falls behind its pace (body_deadline + bytes so far / min rate).
  int BodyWaitMs() const {
    auto due = body_start_ + limits_.body_deadline;
    if (limits_.body_min_rate > 0) {
      const double secs = std::min(
          1e7, static_cast<double>(body_bytes_) / static_cast<double>(limits_.body_min_rate));
      due += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(secs));
    }
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(due - Clock::now()).count();
    return static_cast<int>(std::clamp<int64_t>(left, 0, limits_.read_timeout_ms));
  }

  int sock_;
  const Limits limits_;
  size_t requests_left_;
  RequestHeadParser parser_;
  ChunkedBodyParser chunked_;
  std::vector<char> buf_;
  size_t off_ = 0;   // the next byte to hand out
  size_t len_ = 0;   // bytes received into buf_
  size_t scan_ = 0;  // the next byte the parser has not seen
  size_t head_end_ = 0;
  bool head_started_ = false;
  bool in_head_ = false;  // handing out a complete head
  Clock::time_point idle_due_;
  Clock::time_point headers_due_{};
  Clock::time_point body_start_{};
  size_t body_bytes_ = 0;
  bool over_limit_ = false;
  std::string status_;  // the first bytes of the response, up to its status code
  bool lingering_ = false;
  size_t dropped_ = 0;  // bytes drained while lingering
  ActiveSockets* const active_;
};

// Connections waiting for bytes, in an epoll set watched by one thread: a
// readable one is handed to `dispatch` (the pool), or, when it is lingering
// (closing), drained here; one whose due time passed is closed, and past
// `max` the one waiting longest is closed. Each waiting
// connection is in `waiting_` and registered in the epoll set, both under
// mu_; an epoll event carries the fd and a generation, so an event for a
// connection closed and replaced by another on the same fd is ignored.
class BoundedServer::Poller {
 public:
  using Dispatch = std::function<void(std::unique_ptr<Connection>)>;

  Poller(size_t max, std::atomic<size_t>& count, Dispatch dispatch)
      : max_(std::max<size_t>(1, max)), count_(count), dispatch_(std::move(dispatch)) {
    epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
    wakefd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kWake;
    if (epfd_ < 0 || wakefd_ < 0 || ::epoll_ctl(epfd_, EPOLL_CTL_ADD, wakefd_, &ev) != 0) return;
    thread_ = std::thread([this] { Loop(); });
  }
  ~Poller() {
    Stop();
    if (epfd_ >= 0) ::close(epfd_);
    if (wakefd_ >= 0) ::close(wakefd_);
  }
  bool ok() const { return thread_.joinable(); }

  // Takes `c` until its socket is readable or `due` passes; closes it at
  // once when stopping.
  void Park(std::unique_ptr<Connection> c, Clock::time_point due) {
    std::unique_ptr<Connection> evicted;
    bool wake = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      if (waiting_.size() >= max_) evicted = Remove(waiting_.find(by_age_.front()));
      const int fd = c->socket();
      const uint32_t gen = ++gen_;
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.u64 = (static_cast<uint64_t>(gen) << 32) | static_cast<uint32_t>(fd);
      if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) return;
      Waiting w;
      w.gen = gen;
      w.by_due = by_due_.emplace(due, fd);
      w.by_age = by_age_.insert(by_age_.end(), fd);
      w.conn = std::move(c);
      waiting_.emplace(fd, std::move(w));
      count_.fetch_add(1);
      wake = due < wake_at_;
    }
    if (wake) Wake();
  }

  // Closes every waiting connection and joins the thread; Park then closes
  // what it is given.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    if (!thread_.joinable()) return;
    Wake();
    thread_.join();
    std::vector<std::unique_ptr<Connection>> left;
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (!waiting_.empty()) left.push_back(Remove(waiting_.begin()));
    }
  }

 private:
  static constexpr uint64_t kWake = ~uint64_t{0};
  struct Waiting {
    std::unique_ptr<Connection> conn;
    uint32_t gen = 0;
    std::multimap<Clock::time_point, int>::iterator by_due;
    std::list<int>::iterator by_age;
  };

  void Wake() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wakefd_, &one, sizeof one);
  }

  // Caller holds mu_.
  std::unique_ptr<Connection> Remove(std::unordered_map<int, Waiting>::iterator it) {
    ::epoll_ctl(epfd_, EPOLL_CTL_DEL, it->first, nullptr);
    by_due_.erase(it->second.by_due);
    by_age_.erase(it->second.by_age);
    std::unique_ptr<Connection> c = std::move(it->second.conn);
    waiting_.erase(it);
    count_.fetch_sub(1);
    return c;
  }

  void Loop() {
    std::array<epoll_event, 64> events{};
    std::vector<std::unique_ptr<Connection>> ready;
    std::vector<std::unique_ptr<Connection>> expired;
    for (;;) {
      int timeout = -1;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return;
        wake_at_ = by_due_.empty() ? Clock::time_point::max() : by_due_.begin()->first;
        if (!by_due_.empty()) {
          const auto left =
              std::chrono::ceil<std::chrono::milliseconds>(wake_at_ - Clock::now()).count();
          timeout = static_cast<int>(std::clamp<int64_t>(left, 0, 60'000));
        }
      }
      const int n = ::epoll_wait(epfd_, events.data(), static_cast<int>(events.size()), timeout);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return;
        for (int i = 0; i < n; ++i) {
          const uint64_t tag = events[static_cast<size_t>(i)].data.u64;
          if (tag == kWake) {
            uint64_t drained = 0;
            [[maybe_unused]] ssize_t r = ::read(wakefd_, &drained, sizeof drained);
            continue;
          }
          auto it = waiting_.find(static_cast<int>(tag & 0xffffffffu));
          if (it == waiting_.end() || it->second.gen != static_cast<uint32_t>(tag >> 32)) continue;
          if (!it->second.conn->lingering()) {
            ready.push_back(Remove(it));
          } else if (it->second.conn->Drain()) {
            expired.push_back(Remove(it));
          }
        }
        const auto now = Clock::now();
        while (!by_due_.empty() && by_due_.begin()->first <= now) {
          expired.push_back(Remove(waiting_.find(by_due_.begin()->second)));
        }
      }
      expired.clear();  // closes them
      for (auto& c : ready) dispatch_(std::move(c));
      ready.clear();
    }
  }

  const size_t max_;
  std::atomic<size_t>& count_;
  const Dispatch dispatch_;
  int epfd_ = -1;
  int wakefd_ = -1;
  std::mutex mu_;
  bool stopping_ = false;                                 // guarded by mu_
  uint32_t gen_ = 0;                                      // guarded by mu_
  std::unordered_map<int, Waiting> waiting_;              // guarded by mu_
  std::multimap<Clock::time_point, int> by_due_;          // guarded by mu_
  std::list<int> by_age_;                                 // guarded by mu_, oldest first
  Clock::time_point wake_at_ = Clock::time_point::max();  // guarded by mu_
  std::thread thread_;
};

// httplib's task queue (the pool) with the poller beside it: the poller
// hands readable connections to the pool, and is stopped (its connections
// closed) before the pool is joined.
class BoundedServer::ServingQueue final : public httplib::TaskQueue {
 public:
  ServingQueue(BoundedServer& server, const std::function<httplib::TaskQueue*()>& new_pool)
      : server_(server) {
    auto poller = std::make_unique<Poller>(
        server.max_idle_connections_, server.idle_connections_,
        [this](std::unique_ptr<Connection> c) {
          auto box = std::make_shared<std::unique_ptr<Connection>>(std::move(c));
          pool_->enqueue([this, box] { server_.Serve(std::move(*box)); });
        });
    if (poller->ok()) server_.poller_ = std::move(poller);
    pool_.reset(new_pool ? new_pool() : new httplib::ThreadPool(CPPHTTPLIB_THREAD_POOL_COUNT));
  }
  void enqueue(std::function<void()> fn) override { pool_->enqueue(std::move(fn)); }
  void shutdown() override {
    if (server_.poller_) server_.poller_->Stop();
    const auto grace = std::chrono::milliseconds(server_.stop_grace_ms_.load());
    server_.cut_at_stop_ += server_.active_->CutAllAfter(grace);
    pool_->shutdown();
  }
  void on_idle() override { pool_->on_idle(); }

 private:
  BoundedServer& server_;
  std::unique_ptr<httplib::TaskQueue> pool_;
};

void BoundedServer::CloseAfterResponse() { t_close_after_response = true; }

BoundedServer& BoundedServer::set_body_deadline(std::chrono::milliseconds deadline,
                                                size_t min_rate) {
  body_deadline_ = deadline;
  body_min_rate_ = min_rate;
  return *this;
}

BoundedServer& BoundedServer::set_stop_grace(std::chrono::milliseconds grace) {
  stop_grace_ms_ = std::max<int64_t>(0, grace.count());
  return *this;
}

BoundedServer& BoundedServer::set_max_idle_connections(size_t n) {
  max_idle_connections_ = std::max<size_t>(1, n);
  return *this;
}

void BoundedServer::Note(const char* method, const std::string& pattern) {
  routes_.push_back(Route{method, std::regex(pattern)});
}

BoundedServer& BoundedServer::Get(const std::string& pattern, Handler handler) {
  Note("GET", pattern);
  httplib::Server::Get(pattern, std::move(handler));
  return *this;
}
BoundedServer& BoundedServer::Post(const std::string& pattern, Handler handler) {
  Note("POST", pattern);
  httplib::Server::Post(pattern, std::move(handler));
  return *this;
}
BoundedServer& BoundedServer::Post(const std::string& pattern, HandlerWithContentReader handler) {
  Note("POST", pattern);
  httplib::Server::Post(pattern, std::move(handler));
  return *this;
}
BoundedServer& BoundedServer::Put(const std::string& pattern, Handler handler) {
  Note("PUT", pattern);
  httplib::Server::Put(pattern, std::move(handler));
  return *this;
}
BoundedServer& BoundedServer::Put(const std::string& pattern, HandlerWithContentReader handler) {
  Note("PUT", pattern);
  httplib::Server::Put(pattern, std::move(handler));
  return *this;
}
BoundedServer& BoundedServer::Patch(const std::string& pattern, Handler handler) {
  Note("PATCH", pattern);
  httplib::Server::Patch(pattern, std::move(handler));
  return *this;
}
BoundedServer& BoundedServer::Patch(const std::string& pattern, HandlerWithContentReader handler) {
  Note("PATCH", pattern);
  httplib::Server::Patch(pattern, std::move(handler));
  return *this;
}
BoundedServer& BoundedServer::Delete(const std::string& pattern, Handler handler) {
  Note("DELETE", pattern);
  httplib::Server::Delete(pattern, std::move(handler));
  return *this;
}
BoundedServer& BoundedServer::Delete(const std::string& pattern, HandlerWithContentReader handler) {
  Note("DELETE", pattern);
  httplib::Server::Delete(pattern, std::move(handler));
  return *this;
}
BoundedServer& BoundedServer::Options(const std::string& pattern, Handler handler) {
  Note("OPTIONS", pattern);
  httplib::Server::Options(pattern, std::move(handler));
  return *this;
}

std::string BoundedServer::AllowedMethods(const std::string& path,
                                          const std::string& method) const {
  const std::string own = method == "HEAD" ? "GET" : method;
  std::string allowed;  // of kOrder, in its order
  static constexpr std::array<const char*, 6> kOrder = {"GET",   "POST",   "PUT",
                                                        "PATCH", "DELETE", "OPTIONS"};
  std::array<bool, kOrder.size()> has{};
  bool any = false;
  for (const Route& r : routes_) {
    if (!std::regex_match(path, r.pattern)) continue;
    if (own == r.method) return "";
    for (size_t i = 0; i < kOrder.size(); ++i)
      has[i] = has[i] || std::strcmp(kOrder[i], r.method) == 0;
    any = true;
  }
  if (!any) return "";
  for (size_t i = 0; i < kOrder.size(); ++i) {
    if (!has[i]) continue;
    if (!allowed.empty()) allowed += ", ";
    allowed += kOrder[i];
    if (i == 0) allowed += ", HEAD";
  }
  return allowed;
}

namespace {

// "http://host/path?query": routed by "/path" (RFC 9112 section 3.2.2); the
// query was parsed from the target already.
void RouteAbsoluteForm(httplib::Request& req) {
  const std::string& t = req.target;
  const size_t scheme_end = t.find("://");
  if (scheme_end == std::string::npos || t.empty() || t.front() == '/') return;
  std::string scheme = t.substr(0, scheme_end);
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (scheme != "http" && scheme != "https") return;
  const size_t path_start = t.find_first_of("/?#", scheme_end + 3);
  std::string path = "/";
  if (path_start != std::string::npos && t[path_start] == '/') {
    path = t.substr(path_start, t.find_first_of("?#", path_start) - path_start);
  }
  req.path = httplib::detail::decode_url(path, false);
}

}  // namespace

BoundedServer& BoundedServer::set_pre_routing_handler(HandlerWithResponse handler) {
  httplib::Server::set_pre_routing_handler(
      [this, handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
        // The request is httplib's own, not const: only its parsed ranges
        // and an absolute-form target's path are changed.
        auto& own = const_cast<httplib::Request&>(req);
        // httplib 0.11 answers a Range of any number of parts, each built in
        // memory from the whole response: 20,000 ranges of one image asked for
        // 20 GB. Range is ignored, as RFC 9110 allows (the whole response,
        // 200).
        own.ranges.clear();
        RouteAbsoluteForm(own);
        if (handler && handler(req, res) == HandlerResponse::Handled)
          return HandlerResponse::Handled;
        const std::string allowed = AllowedMethods(req.path, req.method);
        if (allowed.empty()) return HandlerResponse::Unhandled;
        res.status = 405;
        res.set_header("Allow", allowed);
        // Answered before any body is read: one that may follow must not run
        // as the next request.
        const std::string length = req.get_header_value("Content-Length");
        if (req.has_header("Transfer-Encoding") || (!length.empty() && length != "0")) {
          res.set_header("Connection", "close");
          CloseAfterResponse();
        }
        return HandlerResponse::Handled;
      });
  return *this;
}

BoundedServer& BoundedServer::set_logger(httplib::Logger logger) {
  logger_ = logger;
  httplib::Server::set_logger(std::move(logger));
  return *this;
}

bool BoundedServer::listen_after_bind() {
  const auto pool = new_task_queue;
  new_task_queue = [this, pool] { return new ServingQueue(*this, pool); };
  const bool ok = httplib::Server::listen_after_bind();
  new_task_queue = pool;
  poller_.reset();  // its thread and the pool's are joined
  return ok;
}

// httplib 0.11 listens with a backlog of 5: a burst of connections (idle
// ones reconnecting) filled it, and the kernel dropped the next SYN, the
// kubelet's probe's included, which was retried only after a second. Linux
// takes a second listen() on a listening socket as a new backlog. Here, on
// the thread that binds, before any listener runs.
bool BoundedServer::bind_to_port(const std::string& host, int port, int socket_flags) {
  if (!httplib::Server::bind_to_port(host, port, socket_flags)) return false;
  ::listen(svr_sock_, SOMAXCONN);
  return true;
}

int BoundedServer::bind_to_any_port(const std::string& host, int socket_flags) {
  const int port = httplib::Server::bind_to_any_port(host, socket_flags);
  if (port > 0) ::listen(svr_sock_, SOMAXCONN);
  return port;
}

bool BoundedServer::listen(const std::string& host, int port, int socket_flags) {
  return bind_to_port(host, port, socket_flags) && listen_after_bind();
}

bool BoundedServer::WaitReadable(socket_t sock, std::chrono::steady_clock::time_point due) const {
  // In slices, so that a stopping server does not wait out the keep-alive.
  while (svr_sock_ != INVALID_SOCKET) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(due - Clock::now()).count();
    if (left <= 0) return false;
    const int rc = PollOne(sock, POLLIN, static_cast<int>(std::min<int64_t>(left, 100)));
    if (rc < 0) return false;
    if (rc > 0) return true;  // data, or the client closed (the read will say)
  }
  return false;
}

void BoundedServer::Linger(std::unique_ptr<Connection> c) {
  if (!poller_) return LingeringClose(c->Release());
  c->StartLinger();
  poller_->Park(std::move(c), Clock::now() + kLinger);
}

void BoundedServer::Serve(std::unique_ptr<Connection> c) {
  for (;;) {
    switch (c->ReadHead()) {
      case Connection::Head::kClosed: return;
      case Connection::Head::kRefused: {
        c->SendRefusal();
        if (logger_) {
          httplib::Request req;
          req.method = c->head().method();
          req.target = c->head().target();
          req.path = req.target;
          httplib::Response res;
          res.status = c->head().error_status();
          logger_(req, res);
        }
        Linger(std::move(c));
        return;
      }
      case Connection::Head::kWaiting: {
        const auto due = c->due();
        if (Clock::now() >= due || svr_sock_ == INVALID_SOCKET) return;
        if (poller_) {
          c->Shrink();
          poller_->Park(std::move(c), due);
          return;
        }
        if (!WaitReadable(c->socket(), due)) return;
        continue;
      }
      case Connection::Head::kComplete: break;
    }
    t_close_after_response = false;
    bool connection_closed = false;
    const bool last = c->last_request();
    const bool ok = process_request(*c, last, connection_closed, nullptr);
    const bool close = std::exchange(t_close_after_response, false);
    if (close || c->over_limit() || FramingLost(c->status()) || c->body_unread()) {
      Linger(std::move(c));
      return;
    }
    if (!ok || connection_closed || last) return;
    c->NextRequest();
  }
}

bool BoundedServer::process_and_close_socket(socket_t sock) {
  // Saturating: httplib's default payload limit is the largest size_t.
  const size_t max_body = payload_max_length_ > SIZE_MAX - max_header_bytes_
                              ? SIZE_MAX
                              : payload_max_length_ + max_header_bytes_;
  const Connection::Limits limits{TimeoutMs(read_timeout_sec_, read_timeout_usec_),
                                  TimeoutMs(write_timeout_sec_, write_timeout_usec_),
                                  max_header_bytes_,
                                  max_body,
                                  header_deadline_,
                                  body_deadline_,
                                  body_min_rate_,
                                  std::chrono::seconds(keep_alive_timeout_sec_),
                                  keep_alive_max_count_};
  Serve(std::make_unique<Connection>(sock, limits, active_.get()));
  return true;
}

}  // namespace danqing::http
