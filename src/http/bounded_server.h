// BoundedServer: an httplib::Server (cpp-httplib 0.11, Debian bookworm) whose
// connections are read through a stream that bounds what one request can
// make the server hold (memory, threads, time), and whose request heads are
// checked for framing before httplib parses them.
//
// Why: httplib 0.11 reads a request line or header line into a buffer that
// grows until a newline comes, and a body without Content-Length until the
// client closes, with no limit (a 300 MB request line without a newline took
// a server to 550 MB). Each connection holds one of its pool's threads from
// accept to close, idle or not: a few idle or trickling connections starved
// the probe ports. It frames some heads differently from a proxy in front
// (request smuggling, see request_head.h). One client could so take a pod's
// memory, its threads, or hand its requests to other clients.
//
// What it does, per connection:
//   * a connection that has no bytes waiting (before its first request and
//     between keep-alive requests) and one whose request head is incomplete
//     hold no thread: they wait in a poller (one thread per server, epoll)
//     that hands them to the pool when bytes come, and closes them when the
//     keep-alive timeout (no byte of a request yet) or the header deadline
//     (a head begun) passes; at most `max_idle_connections` wait, past that
//     the one waiting longest is closed. A connection closed after a refusal
//     lingers there too (its unread bytes dropped for up to 2 s, so that the
//     client gets the answer). A pool thread is held only while a complete
//     head is answered and its body read;
//   * the request line and headers are read without waiting, checked as they
//     come (RequestHeadParser: RFC 9112 framing, Host), and must arrive
//     within `max_header_bytes` and the header deadline; a request refused
//     there is answered (400, 431, 501 or 505, JSON) and its connection
//     closed, before httplib sees it;
//   * the body may take at most the payload limit (set_payload_max_length)
//     plus `max_header_bytes`; past that the connection is closed. The
//     handlers refuse, before reading, a body of unknown or too large length.
//     It must keep pace: by `body_deadline` + n / `body_min_rate` after the
//     head, n bytes must have come (each read also within the read timeout),
//     or the connection is closed: a body trickled a byte every few seconds
//     no longer holds a thread for as long as the client likes. A chunked
//     body must be framed strictly (ChunkedBodyParser), or it is refused
//     (400) and the connection closed;
//   * a handler that answered without reading the body (a refusal) calls
//     CloseAfterResponse(): the connection is then closed after the answer,
//     instead of the unread body being parsed as the next request (httplib
//     0.11 keeps the connection open whatever the response's Connection
//     header says); so is any request whose declared body was not read
//     whole (a GET with a body, for one), and one answered 400, 408, 411,
//     413, 414 or 431, which httplib sends when it could not read the
//     request as framed (leftover bytes would otherwise run as requests of
//     their own);
//   * a path that has handlers, but none for the request's method, is
//     answered 405 with an Allow header naming the methods it has (GET
//     implies HEAD), before any body is read; an absolute-form target
//     ("GET http://host/healthz HTTP/1.1") is routed by its path;
//   * Range headers are ignored (the whole response, 200): httplib 0.11 would
//     build any number of ranges of a response in memory.
// It also binds its port alone: httplib's default sets SO_REUSEPORT as well,
// with which a second server on the same port starts without error and takes
// half the connections. An IPv6 socket it binds takes IPv4 too. Its listen
// backlog is SOMAXCONN, not httplib's 5. Keep-alive (count and timeout),
// read and write timeouts behave as in httplib.
//
// Several httplib functions are hidden, not overridden (httplib's are not
// virtual): the handlers (Get, Post, ...), set_pre_routing_handler,
// set_logger, bind_to_port, bind_to_any_port, listen and listen_after_bind.
// Call them through a BoundedServer, not an httplib::Server reference: else
// the 405 answers, the Range guard, the logging of refused heads, the
// backlog or the poller are lost (without the poller, waiting connections
// hold their threads as in httplib).
//
// Thread-safety: configure (handlers, limits, timeouts) before listening, on
// one thread. listen_after_bind() runs on one thread until stop(), which any
// thread may call; it returns after the poller and every pool thread have
// stopped and every connection is closed: connections still being served
// get the stop grace to finish, then their sockets are shut down, so a slow
// client (a trickled upload, an unread answer, an event stream) cannot hold
// the stop past it. Handlers and the logger run on
// pool threads. A connection belongs to one thread at a time: the pool
// thread serving it, or the poller while it waits.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

namespace danqing::http {

// Why the body of a request must not be read, if it must not: httplib 0.11
// applies its payload limit only to a declared Content-Length; a chunked body
// it reads whole, a gzip or br one it inflates whole, and one without a
// length it reads until the client closes. A declared length over
// `max_body` is refused before the body is sent.
struct BodyRefusal {
  int code = 0;
  std::string message;
  const char* reason = "";  // "encoding" or "too_large"
};
std::optional<BodyRefusal> RefuseBody(const httplib::Request& req, size_t max_body);

class BoundedServer : public httplib::Server {
 public:
  // `header_deadline`: a request's line and headers must all arrive within
  // it from the request's first byte, or the connection is closed.
  explicit BoundedServer(size_t max_header_bytes = 64 * 1024,
                         std::chrono::milliseconds header_deadline = std::chrono::seconds(10));
  ~BoundedServer() override;

  // On a handler's thread: close this connection once the response is sent.
  static void CloseAfterResponse();

  // A body must have come n bytes by `deadline` + n / `min_rate` (bytes per
  // second) after its head; 0 for `min_rate`: `deadline` for the whole
  // body. Defaults: 10 s, 16 KiB/s.
  BoundedServer& set_body_deadline(std::chrono::milliseconds deadline, size_t min_rate);
  // At most this many connections wait for bytes (default 512); the one
  // waiting longest is closed to make room.
  BoundedServer& set_max_idle_connections(size_t n);

  // After stop(), how long connections being served may take to finish
  // before their sockets are shut down (default 5 s; any thread, before
  // stop()).
  BoundedServer& set_stop_grace(std::chrono::milliseconds grace);

  // Hide httplib's (see above): the handlers are also noted for 405 answers.
  BoundedServer& Get(const std::string& pattern, Handler handler);
  BoundedServer& Post(const std::string& pattern, Handler handler);
  BoundedServer& Post(const std::string& pattern, HandlerWithContentReader handler);
  BoundedServer& Put(const std::string& pattern, Handler handler);
  BoundedServer& Put(const std::string& pattern, HandlerWithContentReader handler);
  BoundedServer& Patch(const std::string& pattern, Handler handler);
  BoundedServer& Patch(const std::string& pattern, HandlerWithContentReader handler);
  BoundedServer& Delete(const std::string& pattern, Handler handler);
  BoundedServer& Delete(const std::string& pattern, HandlerWithContentReader handler);
  BoundedServer& Options(const std::string& pattern, Handler handler);
  // `handler` (may be empty) runs after the request's Range is dropped and an
  // absolute-form target is routed by its path; when it leaves the request
  // unhandled, a known path with no handler for the method is answered 405.
  BoundedServer& set_pre_routing_handler(HandlerWithResponse handler);
  // Also told of the requests refused before httplib reads them (a bad or
  // overlong head): their Request has only the method and path, if known.
  BoundedServer& set_logger(httplib::Logger logger);
  // Bind as httplib's, then raise the listen backlog (httplib's is 5: a
  // burst of connects filled it, and the next SYN, a probe's, was dropped
  // and retried only after a second).
  bool bind_to_port(const std::string& host, int port, int socket_flags = 0);
  int bind_to_any_port(const std::string& host, int socket_flags = 0);
  // Serve with the poller around httplib's task queue (new_task_queue).
  bool listen_after_bind();
  bool listen(const std::string& host, int port, int socket_flags = 0);

  size_t max_header_bytes() const { return max_header_bytes_; }
  // Connections still being served when the stop grace ran out, and so
  // shut down (any thread; final once listen_after_bind() returned).
  size_t cut_at_stop() const { return cut_at_stop_.load(); }
  // Connections waiting for bytes now, held by no thread (any thread).
  size_t idle_connections() const { return idle_connections_.load(); }

 private:
  class Connection;
  class Poller;
  class ServingQueue;
  class ActiveSockets;

  bool process_and_close_socket(socket_t sock) override;
  // Serves `c`'s requests while their bytes come without waiting; then
  // hands it to the poller (or, without one, waits here).
  void Serve(std::unique_ptr<Connection> c);
  // Closes `c` after its answer, dropping what the client still sends for a
  // while (in the poller, or without one here).
  void Linger(std::unique_ptr<Connection> c);
  // Without a poller: waits until `sock` is readable, `due` passes or the
  // server stops; true when readable.
  bool WaitReadable(socket_t sock, std::chrono::steady_clock::time_point due) const;
  // The methods with a handler whose pattern matches `path`, for Allow;
  // empty when one of them is `method` (HEAD: GET's), or none matches.
  std::string AllowedMethods(const std::string& path, const std::string& method) const;
  void Note(const char* method, const std::string& pattern);

  const size_t max_header_bytes_;
  const std::chrono::milliseconds header_deadline_;
  std::chrono::milliseconds body_deadline_{10'000};
  size_t body_min_rate_ = 16 * 1024;
  size_t max_idle_connections_ = 512;
  struct Route {
    const char* method;
    std::regex pattern;
  };
  std::vector<Route> routes_;  // written before listening, then read only
  httplib::Logger logger_;     // likewise
  // Set by the listener thread before the pool's threads start, reset after
  // they are joined; the pool threads only read it.
  std::unique_ptr<Poller> poller_;
  std::atomic<size_t> idle_connections_{0};
  // The sockets of connections held by pool threads, shut down when the
  // stop grace is over.
  std::unique_ptr<ActiveSockets> active_;
  std::atomic<int64_t> stop_grace_ms_{5000};
  std::atomic<size_t> cut_at_stop_{0};
};

// Binds `s` to `host`:`port` (port 0: any free port) and returns the port,
// or -1. An empty host or "::" means every address: one IPv6 socket that
// takes IPv4 too, so the server answers on IPv4, IPv6 and dual-stack
// clusters alike; where the kernel has no IPv6, 0.0.0.0. "0.0.0.0" means
// IPv4 only.
int BindEveryAddress(BoundedServer& s, const std::string& host, int port);

}  // namespace danqing::http
