// Raw TCP to a server under test on 127.0.0.1, for tests that must send
// bytes no HTTP client would (a malformed head, a body that never ends, a
// connection left half-sent).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstddef>
#include <string>

namespace danqing::testing {

// A new connection to 127.0.0.1:`port`; -1 if it failed.
inline int ConnectLoopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// True when all of `bytes` went in one send (no SIGPIPE if the peer closed).
inline bool SendAll(int fd, const std::string& bytes) {
  return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}

// Up to `bytes` of `fill` sent in 16 KiB pieces while the peer takes them
// (at most 10 s per piece); the number sent.
inline size_t SendFiller(int fd, size_t bytes, char fill = 'a') {
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  const std::string piece(16 * 1024, fill);
  size_t sent = 0;
  while (sent < bytes) {
    const ssize_t n = ::send(fd, piece.data(), piece.size(), MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  return sent;
}

// Everything the peer sends until it closes (or `seconds` pass in one wait).
inline std::string ReadToClose(int fd, int seconds = 10) {
  timeval tv{seconds, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string answer;
  char buf[4096];
  ssize_t n = 0;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) answer.append(buf, static_cast<size_t>(n));
  return answer;
}

// Sends `bytes` (then up to `filler` bytes of 'a' while the server takes
// them) on a new connection to `port`, and returns what came back until the
// server closed it (at most 10 s per wait). Empty when it could not connect.
inline std::string RawExchange(int port, const std::string& bytes, size_t filler = 0) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return {};
  ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  if (filler > 0) SendFiller(fd, filler);
  std::string answer = ReadToClose(fd);
  ::close(fd);
  return answer;
}

}  // namespace danqing::testing
