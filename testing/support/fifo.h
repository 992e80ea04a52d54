// FifoGuard: a FIFO for tests of code that must not block on one (issue 31).
//
// Code that opens a FIFO for reading blocks in open() until a writer comes.
// So that such a test fails instead of hanging, the guard's thread waits
// (bounded) for the test to call Done(); if it has not by then, it opens the
// FIFO's other ends (whichever a blocked open waits for), which releases the
// blocked call, and records that it had to.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace danqing::testing {

class FifoGuard {
 public:
  explicit FifoGuard(std::string path, std::chrono::milliseconds patience = std::chrono::seconds(3))
      : path_(std::move(path)) {
    made_ = ::mkfifo(path_.c_str(), 0644) == 0;
    thread_ = std::thread([this, patience] {
      std::unique_lock lock(mu_);
      const auto until = std::chrono::steady_clock::now() + patience;
      while (!done_) {
        if (cv_.wait_until(lock, until, [this] { return done_; })) break;
        // Past patience: release whatever open() waits, every 50 ms until Done().
        had_to_release_ = true;
        // A reader blocked in open() gets EOF: a writer comes and goes. A
        // writer blocked in open() gets a reader, kept open until Done() so
        // that its writes do not raise SIGPIPE.
        if (const int fd = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC); fd >= 0)
          ::close(fd);
        if (reader_ < 0) reader_ = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        cv_.wait_for(lock, std::chrono::milliseconds(50), [this] { return done_; });
      }
    });
  }
  ~FifoGuard() {
    Done();
    thread_.join();
    if (reader_ >= 0) ::close(reader_);
  }
  FifoGuard(const FifoGuard&) = delete;
  FifoGuard& operator=(const FifoGuard&) = delete;

  bool made() const { return made_; }  // false: mkfifo failed
  const std::string& path() const { return path_; }

  // The code under test returned. True when it did without the guard having
  // to release it.
  bool Done() {
    std::lock_guard lock(mu_);
    done_ = true;
    cv_.notify_all();
    return !had_to_release_;
  }

 private:
  std::string path_;
  bool made_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  bool had_to_release_ = false;
  int reader_ = -1;
  std::thread thread_;
};

}  // namespace danqing::testing
