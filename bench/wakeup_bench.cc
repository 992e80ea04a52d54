// The machine's floor under bench/health_bench: how long it takes to wake a
// thread that sleeps while the node is idle, with no Danqing code involved.
//
// A token is passed along a chain of threads, after an idle gap of 50-150 ms
// (health events arrive on an otherwise quiet node). Two kinds of chain:
//   futex  each thread waits on a condition variable (the agent's own
//          hand-offs: NVML event wait, locks);
//   socket each thread waits in epoll_wait on a unix socket and reads one byte
//          (gRPC's pollers, the fake NVML's control socket).
// For each, the round trip over `hops` threads: p50/p90/p99/max.
//
// Usage: wakeup_bench [samples] [hops]   (default 300 samples, 3 hops: the
// socket hand-offs between an event and the kubelet in health_bench)
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

void Report(const char* kind, int hops, std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))]; };
  std::printf("%-6s chain of %d wake-ups after 50-150 ms idle, %zu samples: p50 %.3f ms  p90 %.3f ms  p99 %.3f ms  "
              "max %.3f ms\n",
              kind, hops, v.size(), at(0.5), at(0.9), at(0.99), v.back());
}

void IdleGap(std::mt19937& rng) { std::this_thread::sleep_for(std::chrono::milliseconds(50 + rng() % 101)); }

std::vector<double> FutexChain(int samples, int hops) {
  struct Slot {
    std::mutex mu;
    std::condition_variable cv;
    bool full = false;
    void Put() {
      {
        std::lock_guard l(mu);
        full = true;
      }
      cv.notify_one();
    }
    void Take() {
      std::unique_lock l(mu);
      cv.wait(l, [this] { return full; });
      full = false;
    }
  };
  std::vector<Slot> slots(static_cast<size_t>(hops) + 1);
  std::vector<std::thread> threads;
  for (int h = 0; h < hops; ++h) {
    threads.emplace_back([&, h] {
      for (int i = 0; i < samples; ++i) {
        slots[static_cast<size_t>(h)].Take();
        slots[static_cast<size_t>(h) + 1].Put();
      }
    });
  }
  std::vector<double> out;
  std::mt19937 rng(1);
  for (int i = 0; i < samples; ++i) {
    IdleGap(rng);
    const auto t0 = Clock::now();
    slots[0].Put();
    slots[static_cast<size_t>(hops)].Take();
    out.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  for (auto& t : threads) t.join();
  return out;
}

std::vector<double> SocketChain(int samples, int hops) {
  std::vector<int> rd(static_cast<size_t>(hops) + 1), wr(static_cast<size_t>(hops) + 1);
  for (size_t h = 0; h < rd.size(); ++h) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      std::perror("socketpair");
      std::exit(1);
    }
    rd[h] = sv[0];
    wr[h] = sv[1];
  }
  auto pass = [](int from, int to) {
    char c = 0;
    if (::read(from, &c, 1) != 1 || ::write(to, &c, 1) != 1) {
      std::perror("token");
      std::exit(1);
    }
  };
  std::vector<std::thread> threads;
  for (int h = 0; h < hops; ++h) {
    threads.emplace_back([&, h] {
      const int ep = ::epoll_create1(EPOLL_CLOEXEC);
      epoll_event want{};
      want.events = EPOLLIN;
      ::epoll_ctl(ep, EPOLL_CTL_ADD, rd[static_cast<size_t>(h)], &want);
      for (int i = 0; i < samples; ++i) {
        epoll_event got{};
        while (::epoll_wait(ep, &got, 1, -1) != 1) {
        }
        pass(rd[static_cast<size_t>(h)], wr[static_cast<size_t>(h) + 1]);
      }
      ::close(ep);
    });
  }
  std::vector<double> out;
  std::mt19937 rng(1);
  for (int i = 0; i < samples; ++i) {
    IdleGap(rng);
    const auto t0 = Clock::now();
    const char c = 'x';
    char back = 0;
    if (::write(wr[0], &c, 1) != 1 || ::read(rd[static_cast<size_t>(hops)], &back, 1) != 1) std::exit(1);
    out.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  for (auto& t : threads) t.join();
  for (size_t h = 0; h < rd.size(); ++h) {
    ::close(rd[h]);
    ::close(wr[h]);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const int samples = argc > 1 ? std::max(1, std::atoi(argv[1])) : 300;
  const int hops = argc > 2 ? std::max(1, std::atoi(argv[2])) : 3;
  Report("futex", hops, FutexChain(samples, hops));
  Report("socket", hops, SocketChain(samples, hops));
  return 0;
}
