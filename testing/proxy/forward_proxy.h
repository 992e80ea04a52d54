// A real HTTP forward proxy for tests (tinyproxy from Debian), started by
// testing/proxy/start-tinyproxy.sh on 127.0.0.1 with a free port and a
// temporary directory; stopped (SIGTERM) when destroyed. ConnectCount() reads
// its log: one "CONNECT host:port" request line per tunnel asked for.
//
// Thread-safety: one test thread.
#pragma once

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "testing/cluster/redis_server.h"

namespace danqing::testing {

struct ForwardProxyOptions {
  std::string username;  // both set: Basic proxy authentication required (else 407)
  std::string password;
  int connect_port = 0;  // not 0: CONNECT only to this port (others: 403)
};

class ForwardProxy {
 public:
  explicit ForwardProxy(ForwardProxyOptions options = {}) : options_(std::move(options)) {
    char tmpl[] = "/tmp/dq-proxy-XXXXXX";
    const char* d = ::mkdtemp(tmpl);
    dir_ = d ? d : "/tmp";
    port_ = RedisServer::FreePort();
  }
  ~ForwardProxy() {
    Stop();
    std::string cmd = "rm -rf '" + dir_ + "'";
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir_.c_str());
  }
  ForwardProxy(const ForwardProxy&) = delete;
  ForwardProxy& operator=(const ForwardProxy&) = delete;

  // True once it accepts connections.
  bool Start() {
    std::string cmd = std::string(DANQING_SOURCE_DIR) + "/testing/proxy/start-tinyproxy.sh '" +
                      dir_ + "' " + std::to_string(port_) + " '" + options_.username + "' '" +
                      options_.password + "' " +
                      (options_.connect_port != 0 ? std::to_string(options_.connect_port) : "");
    return std::system(cmd.c_str()) == 0;
  }
  void Stop() {
    std::ifstream in(dir_ + "/tinyproxy.pid");
    pid_t pid = 0;
    if (!(in >> pid) || pid <= 0) return;
    ::kill(pid, SIGTERM);
    for (int i = 0; i < 400 && ::kill(pid, 0) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ::unlink((dir_ + "/tinyproxy.pid").c_str());
  }
  int port() const { return port_; }
  // "http://127.0.0.1:PORT", with "user:password@" when given.
  std::string url(const std::string& userinfo = "") const {
    return "http://" + (userinfo.empty() ? "" : userinfo + "@") +
           "127.0.0.1:" + std::to_string(port_);
  }
  std::string Log() const {
    std::ifstream in(dir_ + "/tinyproxy.log");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // CONNECT requests to `target` ("127.0.0.1:6443") the proxy has read.
  int ConnectCount(const std::string& target) const {
    const std::string needle = "CONNECT " + target + " ";
    const std::string log = Log();
    int n = 0;
    for (auto at = log.find(needle); at != std::string::npos; at = log.find(needle, at + 1)) ++n;
    return n;
  }

 private:
  ForwardProxyOptions options_;
  std::string dir_;
  int port_ = 0;
};

}  // namespace danqing::testing
