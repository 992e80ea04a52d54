// fake-nvml-ctl: sends one control command to a running fake NVML library and
// prints the reply.
//
//   fake-nvml-ctl [--socket PATH] [--timeout-ms N] 'JSON'
//
// The socket defaults to $FAKE_NVML_CONTROL. The reply line goes to stdout.
// Exit status: 0 when the reply says {"ok":true}, 1 otherwise (the error, or
// the reason no reply came, goes to stderr).
//
// Thread-safety: single-threaded program.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace {

using json = nlohmann::json;

void usage() {
  std::fprintf(stderr,
               "usage: fake-nvml-ctl [--socket PATH] [--timeout-ms N] 'JSON'\n"
               "  Sends one command to the fake NVML control socket (default: $FAKE_NVML_CONTROL)\n"
               "  and prints the reply. Example:\n"
               "    fake-nvml-ctl --socket /tmp/fake-nvml.sock '{\"cmd\":\"xid\",\"gpu\":0,\"xid\":79}'\n");
}

int fail(const std::string& message) {
  std::fprintf(stderr, "fake-nvml-ctl: %s\n", message.c_str());
  return 1;
}

// Connects, sends `line` + '\n' and reads one reply line (without the '\n').
bool exchange(const std::string& path, const std::string& line, int timeout_ms, std::string& reply,
              std::string& error) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) {
    error = "socket path too long: " + path;
    return false;
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);

  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = std::string("socket(): ") + std::strerror(errno);
    return false;
  }
  const timeval timeout{timeout_ms / 1000, static_cast<suseconds_t>((timeout_ms % 1000) * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));

  bool ok = false;
  // sockaddr_un -> sockaddr is how the sockets API is meant to be used.
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    error = "cannot connect to " + path + ": " + std::strerror(errno);
  } else {
    std::string_view out = line;
    while (!out.empty()) {
      const ssize_t n = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      out.remove_prefix(static_cast<std::size_t>(n));
    }
    if (!out.empty()) {
      error = "cannot send to " + path + ": " + std::strerror(errno);
    } else {
      for (;;) {
        char chunk[4096];
        const ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          error = n == 0 ? "connection closed before a reply" : std::string("no reply: ") + std::strerror(errno);
          break;
        }
        reply.append(chunk, static_cast<std::size_t>(n));
        if (const auto newline = reply.find('\n'); newline != std::string::npos) {
          reply.resize(newline);
          ok = true;
          break;
        }
      }
    }
  }
  ::close(fd);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const char* env_socket = std::getenv("FAKE_NVML_CONTROL");
  std::string socket_path = env_socket != nullptr ? env_socket : "";
  int timeout_ms = 5000;
  std::string command;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if ((arg == "--socket" || arg == "-s") && i + 1 < argc) {
      socket_path = argv[++i];
    } else if (arg == "--timeout-ms" && i + 1 < argc) {
      timeout_ms = std::atoi(argv[++i]);
      if (timeout_ms <= 0) return fail("--timeout-ms wants a positive number");
    } else if (arg == "--help" || arg == "-h") {
      usage();
      return 0;
    } else if (command.empty() && !arg.starts_with("--")) {
      command = arg;
    } else {
      usage();
      return 1;
    }
  }
  if (command.empty()) {
    usage();
    return 1;
  }
  if (socket_path.empty()) return fail("no socket: pass --socket PATH or set FAKE_NVML_CONTROL");

  // Re-serialise valid JSON onto one line; send anything else as typed and
  // let the server explain what is wrong with it.
  std::string line = command;
  if (const json parsed = json::parse(command, nullptr, false); !parsed.is_discarded()) line = parsed.dump();
  for (char& ch : line) {
    if (ch == '\n' || ch == '\r') ch = ' ';
  }

  std::string reply;
  std::string error;
  if (!exchange(socket_path, line + "\n", timeout_ms, reply, error)) return fail(error);
  std::printf("%s\n", reply.c_str());

  const json parsed = json::parse(reply, nullptr, false);
  if (parsed.is_object() && parsed.value("ok", false)) return 0;
  if (parsed.is_object() && parsed.contains("error") && parsed["error"].is_string()) {
    return fail(parsed["error"].get<std::string>());
  }
  return fail("unexpected reply: " + reply);
}
