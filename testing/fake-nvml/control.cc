// Fake NVML: control socket server (see control.h).
// Thread-safety: all socket state below is touched by the server thread only,
// except listen_fd_/wake_fd_, which the constructor sets before the thread
// starts and the destructor closes after joining it.
#include "control.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <system_error>
#include <utility>
#include <vector>

namespace fake_nvml {
namespace {

constexpr std::size_t kMaxClients = 64;
constexpr std::size_t kMaxLineBytes = 1 << 20;  // a client sending more is cut off

[[noreturn]] void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

struct Client {
  int fd = -1;
  std::string buffer;  // bytes received but not yet ending in '\n'
};

// Writes all of `data`; false when the peer went away or stalled (the socket
// has a send timeout, so a client that never reads cannot block shutdown).
bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

}  // namespace

ControlServer::ControlServer(std::string path, Handler handler)
    : path_(std::move(path)), handler_(std::move(handler)) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path_.empty() || path_.size() >= sizeof(address.sun_path)) {
    throw std::invalid_argument("control socket path \"" + path_ + "\" is empty or longer than " +
                                std::to_string(sizeof(address.sun_path) - 1) + " bytes");
  }
  std::memcpy(address.sun_path, path_.c_str(), path_.size() + 1);

  // A socket file left by a crashed run is removed; anything else is not ours.
  struct stat info {};
  if (::lstat(path_.c_str(), &info) == 0) {
    if (!S_ISSOCK(info.st_mode)) {
      throw std::invalid_argument("control socket path \"" + path_ + "\" exists and is not a socket");
    }
    ::unlink(path_.c_str());
  }

  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw_errno("socket() for control socket " + path_);
  // sockaddr_un -> sockaddr is how the sockets API is meant to be used.
  if (::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0 ||
      ::listen(listen_fd_, 16) != 0) {
    const int saved = errno;
    ::close(listen_fd_);
    errno = saved;
    throw_errno("cannot listen on control socket " + path_);
  }
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    const int saved = errno;
    ::close(listen_fd_);
    ::unlink(path_.c_str());
    errno = saved;
    throw_errno("eventfd() for control socket " + path_);
  }
  try {
    thread_ = std::thread([this] { run(); });
  } catch (...) {
    ::close(wake_fd_);
    ::close(listen_fd_);
    ::unlink(path_.c_str());
    throw;
  }
}

ControlServer::~ControlServer() {
  const std::uint64_t one = 1;
  // The eventfd cannot be full here (it is written once), so this succeeds.
  [[maybe_unused]] const ssize_t written = ::write(wake_fd_, &one, sizeof(one));
  thread_.join();
  ::close(wake_fd_);
  ::close(listen_fd_);
  ::unlink(path_.c_str());
}

void ControlServer::run() {
  std::vector<Client> clients;
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, clients.size() < kMaxClients ? static_cast<short>(POLLIN) : short{0}, 0});
    for (const Client& c : clients) fds.push_back({c.fd, POLLIN, 0});

    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;  // cannot happen with valid descriptors; give up serving
    }
    if ((fds[0].revents & POLLIN) != 0) break;

    // Existing clients first (their indices match fds[2...]).
    std::vector<bool> closed(clients.size(), false);
    for (std::size_t i = 0; i < clients.size(); ++i) {
      if (fds[i + 2].revents == 0) continue;
      Client& c = clients[i];
      char chunk[4096];
      const ssize_t n = ::recv(c.fd, chunk, sizeof(chunk), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        closed[i] = true;
        continue;
      }
      c.buffer.append(chunk, static_cast<std::size_t>(n));
      std::size_t newline = 0;
      while ((newline = c.buffer.find('\n')) != std::string::npos) {
        std::string line = c.buffer.substr(0, newline);
        c.buffer.erase(0, newline + 1);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t") == std::string::npos) continue;
        if (!send_all(c.fd, handler_(line) + "\n")) {
          closed[i] = true;
          break;
        }
      }
      if (!closed[i] && c.buffer.size() > kMaxLineBytes) {
        send_all(c.fd, R"({"ok":false,"error":"command line too long"})" "\n");
        closed[i] = true;
      }
    }
    for (std::size_t i = clients.size(); i-- > 0;) {
      if (!closed[i]) continue;
      ::close(clients[i].fd);
      clients.erase(clients.begin() + static_cast<std::ptrdiff_t>(i));
    }

    if ((fds[1].revents & POLLIN) != 0) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        const timeval send_timeout{1, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof(send_timeout));
        clients.push_back(Client{fd, {}});
      }
    }
  }
  for (const Client& c : clients) ::close(c.fd);
}

}  // namespace fake_nvml
