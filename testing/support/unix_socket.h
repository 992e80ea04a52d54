// BindUnixSocket: a unix stream socket bound at `path` (the socket file
// appears there), for tests that need one: a kubelet that never answers, a
// driver daemon's socket in a fake driver root. Returns the descriptor, or -1
// (the path too long for sun_path, or bind failed). The caller closes it;
// the file stays until removed.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <string>

namespace danqing::testing {

inline int BindUnixSocket(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return -1;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  addr.sun_family = AF_UNIX;
  path.copy(addr.sun_path, path.size());
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace danqing::testing
