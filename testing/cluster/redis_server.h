// A real redis-server for tests, started by testing/cluster/start-redis.sh on
// 127.0.0.1 with a free port and a temporary directory (AOF, fsync always).
// Kill() stops it at once (SIGKILL, as a crash); Start() again restarts it on
// the same port and data.
//
// Thread-safety: one test thread.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

namespace danqing::testing {

class RedisServer {
 public:
  RedisServer() {
    char tmpl[] = "/tmp/dq-redis-XXXXXX";
    const char* d = ::mkdtemp(tmpl);
    dir_ = d ? d : "/tmp";
    port_ = FreePort();
  }
  ~RedisServer() {
    Kill();
    std::string cmd = "rm -rf '" + dir_ + "'";
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir_.c_str());
  }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  // True once it answers.
  bool Start() {
    const std::string cmd = std::string(DANQING_SOURCE_DIR) + "/testing/cluster/start-redis.sh '" +
                            dir_ + "' " + std::to_string(port_);
    return std::system(cmd.c_str()) == 0;
  }
  // SIGKILL, and waits until it is gone.
  void Kill() {
    std::ifstream in(dir_ + "/redis.pid");
    pid_t pid = 0;
    if (!(in >> pid) || pid <= 0) return;
    ::kill(pid, SIGKILL);
    for (int i = 0; i < 400 && ::kill(pid, 0) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ::unlink((dir_ + "/redis.pid").c_str());
  }
  // A redis-cli command's output (for tests that reach into the data).
  std::string Cli(const std::string& args) const {
    const std::string cmd = "redis-cli -h 127.0.0.1 -p " + std::to_string(port_) + " " + args;
    std::string out;
    if (FILE* p = ::popen(cmd.c_str(), "r")) {
      char buf[4096];
      size_t n;
      while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
      ::pclose(p);
    }
    return out;
  }
  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  const std::string& dir() const { return dir_; }

  // A port free now (bound, read, released); redis-server takes it next.
  static int FreePort() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      port = ntohs(a.sin_port);
    }
    ::close(fd);
    return port;
  }

 private:
  std::string dir_;
  int port_ = 0;
};

}  // namespace danqing::testing
