// Soak of the node agent (issue 10): the real danqing-device-plugin process
// under the kubelet emulator and the fake NVML for N minutes, with a mix of
// Allocate and GetPreferredAllocation traffic, kubelet restarts, config
// reloads, injected XIDs, lost GPUs and recoveries, and a metrics scrape
// every second. Prints a report and exits non-zero when something went wrong:
// an unexpected error, a crash, a sanitizer report, file descriptors or
// resident memory growing.
//
// Usage: agent_soak [--minutes M] [--binary PATH]    (default 10 minutes)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "testing/kubelet/kubelet_emulator.h"
#include "bench/soak/proc_stat.h"
#include "testing/support/fake_node.h"

namespace {

using Clock = std::chrono::steady_clock;
using danqing::testing::KubeletEmulator;
using namespace std::chrono_literals;
using danqing::soak::KeepPeak;
using danqing::soak::ProcStat;
using danqing::soak::Sample;
using Devices = std::vector<::v1beta1::Device>;

constexpr char kGpu[] = "nvidia.com/gpu";

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// GET http://127.0.0.1:port/path; the status code, or -1 when nothing answered.
int HttpGet(int port, const std::string& path, size_t* bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  if (::write(fd, req.data(), req.size()) < 0) {
    ::close(fd);
    return -1;
  }
  std::string resp;
  char buf[16384];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) resp.append(buf, static_cast<size_t>(n));
  ::close(fd);
  if (bytes) *bytes = resp.size();
  if (resp.rfind("HTTP/1.1 ", 0) != 0) return -1;
  return std::atoi(resp.c_str() + 9);
}

class Counters {
 public:
  void Add(const std::string& key) {
    std::lock_guard lock(mu_);
    ++c_[key];
  }
  std::map<std::string, long> Get() const {
    std::lock_guard lock(mu_);
    return c_;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, long> c_;
};

std::string Classify(const grpc::Status& st) {
  if (st.ok()) return "ok";
  const std::string& m = st.error_message();
  if (m.find("unhealthy") != std::string::npos) return "expected: device unhealthy";
  if (m.find("unknown device") != std::string::npos || m.find("not advertised") != std::string::npos) {
    return "expected: device list changed (reload)";
  }
  if (st.error_code() == grpc::StatusCode::UNAVAILABLE || st.error_code() == grpc::StatusCode::CANCELLED ||
      m.find("not registered") != std::string::npos || m.find("no plugin") != std::string::npos) {
    return "expected: kubelet or plugin restarting";
  }
  return "UNEXPECTED: " + std::to_string(st.error_code()) + " " + m.substr(0, 120);
}

std::string ConfigText(int replicas) {
  return "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: " +
         std::to_string(replicas) + "\ndanqing:\n  xidQuietPeriod: 2s\n  healthCheckInterval: 200ms\n";
}

}  // namespace

int main(int argc, char** argv) {
  double minutes = 10;
  std::string binary = DANQING_DEVICE_PLUGIN_BIN;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--minutes") minutes = std::atof(argv[i + 1]);
    if (a == "--binary") binary = argv[i + 1];
  }
  const auto duration = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(minutes * 60));
  const std::string dir = "/tmp/dqsoak-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const std::string config = dir + "/config.yaml";
  std::ofstream(config) << ConfigText(2);

  danqing::testing::FakeNode node("a100-8x-nvswitch");
  KubeletEmulator kubelet(dir);
  if (!kubelet.Start().ok()) return 1;
  const int metrics_port = FreePort();
  danqing::testing::ChildProcess daemon({binary, "--device-plugin-path", dir, "--nvml-lib",
                                         danqing::testing::FakeNvmlLibrary(), "--cdi-root", dir + "/cdi",
                                         "--config-file", config, "--node-features-file", "",
                                         "--metrics-addr", "127.0.0.1:" + std::to_string(metrics_port)});
  if (!kubelet.WaitForDevices(kGpu, [](const Devices& d) { return d.size() == 16; }, 20s)) {
    std::fprintf(stderr, "agent did not come up:\n%s\n", daemon.Output().c_str());
    return 1;
  }
  std::this_thread::sleep_for(3s);
  const ProcStat start = Sample(daemon.pid());
  ProcStat peak = start;

  Counters counters;
  std::atomic<bool> stop{false};
  std::atomic<long> restarts{0}, reloads{0}, xids{0}, losses{0};
  std::atomic<double> max_rereg_ms{0};

  auto traffic = [&](unsigned seed) {
    std::mt19937 rng(seed);
    while (!stop) {
      Devices devs = kubelet.Devices(kGpu);
      std::vector<std::string> healthy;
      for (const auto& d : devs) {
        if (d.health() == KubeletEmulator::kHealthy) healthy.push_back(d.id());
      }
      if (healthy.size() < 2) {
        std::this_thread::sleep_for(5ms);
        continue;
      }
      const auto& pick = healthy[rng() % healthy.size()];
      counters.Add("Allocate " + Classify(kubelet.Allocate(kGpu, {pick}).status));
      auto pref = kubelet.GetPreferredAllocation(kGpu, healthy, {}, 2);
      counters.Add("GetPreferredAllocation " + Classify(pref.status));
    }
  };
  auto scrape = [&] {
    while (!stop) {
      size_t bytes = 0;
      const int code = HttpGet(metrics_port, "/metrics", &bytes);
      counters.Add(code == 200 ? "metrics scrape ok" : code < 0 ? "metrics: not served" : "metrics scrape HTTP " + std::to_string(code));
      std::this_thread::sleep_for(1s);
    }
  };
  std::vector<std::thread> threads;
  threads.emplace_back(traffic, 1u);
  threads.emplace_back(traffic, 2u);
  threads.emplace_back(scrape);

  // Chaos on this thread: a kubelet restart every `restart_every`, and on
  // their own cadences XIDs, lost GPUs and config reloads.
  const auto restart_every = std::max<Clock::duration>(1s, duration / 110);
  std::mt19937 rng(42);
  const auto t0 = Clock::now();
  auto next_restart = t0 + restart_every, next_xid = t0 + 3s, next_loss = t0 + 11s, next_reload = t0 + 17s;
  int lost_gpu = -1;
  auto recover_at = Clock::time_point::max();
  int replicas = 2;
  while (Clock::now() - t0 < duration) {
    const auto now = Clock::now();
    if (now >= next_restart) {
      const int before = kubelet.RegistrationCount(kGpu);
      const auto r0 = Clock::now();
      if (!kubelet.Restart().ok()) counters.Add("UNEXPECTED: kubelet restart failed");
      if (kubelet.WaitForRegistrationCount(kGpu, before + 1, 10s)) {
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - r0).count();
        if (ms > max_rereg_ms) max_rereg_ms = ms;
        ++restarts;
      } else {
        counters.Add("UNEXPECTED: no re-registration within 10 s of a kubelet restart");
      }
      next_restart = Clock::now() + restart_every;
    }
    if (now >= next_xid) {
      node.Control(R"({"cmd":"xid","gpu":)" + std::to_string(rng() % 8) + R"(,"xid":62})");
      ++xids;
      next_xid = now + 7s;
    }
    if (now >= next_loss && lost_gpu < 0) {
      lost_gpu = static_cast<int>(rng() % 8);
      node.Control(R"({"cmd":"lost","gpu":)" + std::to_string(lost_gpu) + R"(,"xid":false})");
      ++losses;
      recover_at = now + 3s;
      next_loss = now + 23s;
    }
    if (now >= recover_at) {
      node.Control(R"({"cmd":"lost","gpu":)" + std::to_string(lost_gpu) + R"(,"lost":false})");
      lost_gpu = -1;
      recover_at = Clock::time_point::max();
    }
    if (now >= next_reload) {
      replicas = replicas == 2 ? 3 : 2;
      std::ofstream(config + ".tmp") << ConfigText(replicas);
      std::filesystem::rename(config + ".tmp", config);
      ++reloads;
      next_reload = now + 31s;
    }
    const ProcStat s = Sample(daemon.pid());
    KeepPeak(peak, s);
    std::this_thread::sleep_for(100ms);
  }
  if (lost_gpu >= 0) node.Control(R"({"cmd":"lost","gpu":)" + std::to_string(lost_gpu) + R"(,"lost":false})");
  std::this_thread::sleep_for(3s);  // let the last changes settle before the end sample
  stop = true;
  for (auto& t : threads) t.join();
  const ProcStat end = Sample(daemon.pid());
  const bool alive = ::kill(daemon.pid(), 0) == 0;
  daemon.Signal(SIGTERM);
  const int rc = daemon.Wait(15'000);
  const std::string out = daemon.Output();
  const bool sanitizer = out.find("Sanitizer") != std::string::npos || out.find("runtime error:") != std::string::npos;

  long unexpected = 0, served = 0;
  std::printf("== agent soak: %.1f minutes, binary %s\n", minutes, binary.c_str());
  for (const auto& [k, v] : counters.Get()) {
    std::printf("  %-70s %ld\n", k.c_str(), v);
    if (k.find("UNEXPECTED") != std::string::npos) unexpected += v;
    if (k.ends_with(" ok")) served += v;
  }
  std::printf("  requests and scrapes served ok: %ld\n", served);
  std::printf("  kubelet restarts survived: %ld (slowest re-registration %.0f ms)\n", restarts.load(),
              max_rereg_ms.load());
  std::printf("  config reloads: %ld, XIDs injected: %ld, GPUs lost and recovered: %ld\n", reloads.load(),
              xids.load(), losses.load());
  danqing::soak::PrintProcStats("agent", start, end, peak);
  std::printf("  agent alive at the end: %s; exit code after SIGTERM: %d; sanitizer report: %s\n",
              alive ? "yes" : "NO", rc, sanitizer ? "YES" : "none");
  // Flat: no descriptor leak; memory within 25% (and 4 MiB) of the start.
  const bool fds_flat = end.fds <= start.fds;
  const bool rss_flat = end.rss_kib <= start.rss_kib + std::max<long>(4096, start.rss_kib / 4);
  const bool ok = alive && rc == 0 && !sanitizer && unexpected == 0 && fds_flat && rss_flat &&
                  restarts >= 100 * minutes / 10;
  std::printf("  verdict: %s\n", ok ? "CLEAN" : "PROBLEMS (see above)");
  if (!ok && sanitizer) std::fprintf(stderr, "%s\n", out.c_str());
  std::filesystem::remove_all(dir);
  return ok ? 0 : 1;
}
