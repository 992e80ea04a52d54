// Fake NVML: the control socket server. It listens on a unix stream socket
// and hands every newline-terminated line a client sends to a handler,
// writing the handler's reply back followed by a newline. The command
// language itself lives in commands.cc (State::handle_control).
//
// Thread-safety: the server owns one background thread that does all socket
// I/O with poll(); the handler is called on that thread. The constructor and
// destructor must be called from one thread (the library's init/shutdown).
// The destructor wakes the thread through an eventfd, joins it, closes every
// descriptor and removes the socket file, so it returns promptly even with
// idle clients connected.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <thread>

namespace fake_nvml {

class ControlServer {
 public:
  using Handler = std::function<std::string(std::string_view line)>;

  // Binds `path` (removing a stale socket file there first), listens and
  // starts the thread. Throws std::system_error / std::invalid_argument with
  // a message naming the path when that fails.
  ControlServer(std::string path, Handler handler);
  ~ControlServer();

  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  const std::string& path() const { return path_; }

 private:
  void run();

  std::string path_;
  Handler handler_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd; written by the destructor to stop run()
  std::thread thread_;
};

}  // namespace fake_nvml
