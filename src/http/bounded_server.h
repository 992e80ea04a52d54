// BoundedServer: an httplib::Server (cpp-httplib 0.11, Debian bookworm) whose
// connections are read through a stream that bounds what one request can
// make the server hold in memory.
//
// Why: httplib 0.11 reads a request line or header line into a buffer that
// grows until a newline comes, and a body without Content-Length until the
// client closes, with no limit (a 300 MB request line without a newline took
// a server to 550 MB). One client could so make a pod run out of memory.
//
// What it does, per request on a connection:
//   * the request line and headers may take at most `max_header_bytes`; past
//     that the client gets 431 (JSON) and the connection is closed;
//   * the body may take at most the payload limit (set_payload_max_length)
//     plus `max_header_bytes`; past that the connection is closed. The
//     handlers refuse, before reading, a body of unknown or too large length.
//   * a handler that answered without reading the body (a refusal) calls
//     CloseAfterResponse(): the connection is then closed after the answer,
//     instead of the unread body being parsed as the next request (httplib
//     0.11 keeps the connection open whatever the response's Connection
//     header says); so is one answered 400, 408, 411, 413, 414 or 431, which
//     httplib sends when it could not read the request as framed (leftover
//     bytes would otherwise run as requests of their own);
//   * the request line and headers must arrive within a deadline (10 s), not
//     only each read within the read timeout: a client trickling a header
//     line every few seconds no longer holds a server thread indefinitely;
//   * Range headers are ignored (the whole response, 200): httplib 0.11 would
//     build any number of ranges of a response in memory.
// It also binds its port alone: httplib's default sets SO_REUSEPORT as well,
// with which a second server on the same port starts without error and takes
// half the connections. An IPv6 socket it binds takes IPv4 too. Keep-alive, timeouts and stop()
// behave as in httplib.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

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

// Binds `s` to `host`:`port` (port 0: any free port) and returns the port,
// or -1. An empty host or "::" means every address: one IPv6 socket that takes IPv4 too, so the server answers
// on IPv4, IPv6 and dual-stack clusters alike; where the kernel has no IPv6,
// 0.0.0.0. "0.0.0.0" means IPv4 only.
int BindEveryAddress(httplib::Server& s, const std::string& host, int port);

class BoundedServer : public httplib::Server {
 public:
  // `header_deadline`: a request's line and headers must all arrive within
  // it from the request's first read (each read also within the read
  // timeout), or the connection is closed.
  explicit BoundedServer(size_t max_header_bytes = 64 * 1024,
                         std::chrono::milliseconds header_deadline = std::chrono::seconds(10));

  // On a handler's thread: close this connection once the response is sent.
  static void CloseAfterResponse();

  // Hides httplib's: `handler` (may be empty) runs after the request's Range
  // is dropped (see the .cc). Set it through a BoundedServer, not a base
  // reference, or the Range guard is lost.
  BoundedServer& set_pre_routing_handler(HandlerWithResponse handler);

  size_t max_header_bytes() const { return max_header_bytes_; }

 private:
  bool process_and_close_socket(socket_t sock) override;
  // Waits up to the keep-alive timeout for the next request's first byte;
  // false when none comes, the client closed, or the server stops.
  bool NextRequestArrives(socket_t sock) const;

  const size_t max_header_bytes_;
  const std::chrono::milliseconds header_deadline_;
};

}  // namespace danqing::http
