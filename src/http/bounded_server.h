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
//     header says).
// It also binds its port alone: httplib's default sets SO_REUSEPORT as well,
// with which a second server on the same port starts without error and takes
// half the connections. An IPv6 socket it binds takes IPv4 too. Keep-alive, timeouts and stop() behave as in httplib.
#pragma once

#include <httplib.h>

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
  explicit BoundedServer(size_t max_header_bytes = 64 * 1024);

  // On a handler's thread: close this connection once the response is sent.
  static void CloseAfterResponse();

  size_t max_header_bytes() const { return max_header_bytes_; }

 private:
  bool process_and_close_socket(socket_t sock) override;
  // Waits up to the keep-alive timeout for the next request's first byte;
  // false when none comes, the client closed, or the server stops.
  bool NextRequestArrives(socket_t sock) const;

  const size_t max_header_bytes_;
};

}  // namespace danqing::http
