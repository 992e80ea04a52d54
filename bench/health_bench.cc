// GPU health figures for issue 5, on the fake NVML 8xA100 node with the
// kubelet emulator over real unix sockets:
//   - event to ListAndWatch: time from the XID entering the fake NVML's event
//     queue (its control reply says when) until the kubelet emulator has read
//     a device list with that GPU Unhealthy off its ListAndWatch stream,
//     p50/p99/max over N events: what a node sees between the driver and the
//     kubelet. Also from the bench's write to the control socket (one more
//     socket hand-off, the harness's), and until the bench thread saw it;
//   - the agent's own share: NVML event returned to the agent until the list
//     is handed to gRPC, from danqing_health_event_publish_duration_seconds
//     (histogram buckets, so "p99 <= bucket bound");
//   - polled condition to ListAndWatch at the default 1 s poll interval;
//   - CPU use of the danqing-device-plugin process while idle-polling 8 GPUs
//     (utime+stime from /proc/<pid>/stat over a window).
// Usage: [HB_NO_METRICS=1] health_bench [events] [idle-seconds] [poll-ms]
//   (HB_NO_METRICS: the in-process agent without its metrics endpoint, to
//   rule the collector's NVML reads and gRPC client out of the event path)
//   (default 300 events, 20 s, 20 ms polling during the event figure: each GPU
//   recovers at the next poll, ready for its next event)
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/agent.h"
#include "bench/support/stats.h"
#include "config/config.h"
#include "metrics/agent_metrics.h"
#include "testing/kubelet/kubelet_emulator.h"
#include "testing/support/fake_node.h"

namespace {

using danqing::bench::Clock;
using danqing::testing::KubeletEmulator;
using namespace std::chrono_literals;
using Devices = std::vector<::v1beta1::Device>;

using danqing::bench::Ms;
using danqing::bench::Stats;
using danqing::bench::Summarize;

// One command on the fake NVML's control socket, without a helper process.
class Control {
 public:
  explicit Control(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    if (::connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
      std::perror("control connect");
      std::exit(1);
    }
  }
  ~Control() { ::close(fd_); }
  std::string Send(const std::string& json) {
    const std::string line = json + "\n";
    if (::write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) std::exit(1);
    std::string reply;
    char c = 0;
    while (::read(fd_, &c, 1) == 1 && c != '\n') reply += c;
    return reply;
  }

 private:
  int fd_ = -1;
};

bool Unhealthy(const Devices& devs, const std::string& uuid) {
  for (const auto& d : devs) {
    if (d.id() == uuid) return d.health() == KubeletEmulator::kUnhealthy;
  }
  return false;
}
bool AllHealthy(const Devices& devs) {
  return !devs.empty() && std::all_of(devs.begin(), devs.end(), [](const auto& d) {
    return d.health() == KubeletEmulator::kHealthy;
  });
}

long CpuTicks(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(in, text);
  std::istringstream fields(text.substr(text.rfind(')') + 2));
  std::string f;
  long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14) utime = std::stol(f);
    if (i == 15) stime = std::stol(f);
  }
  return utime + stime;
}

}  // namespace

int main(int argc, char** argv) {
  const int events = argc > 1 ? std::atoi(argv[1]) : 300;
  const int idle_s = argc > 2 ? std::atoi(argv[2]) : 20;
  const int poll_ms = argc > 3 ? std::atoi(argv[3]) : 20;
  const std::string dir = "/tmp/dqbench-health-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  danqing::testing::FakeNode node("a100-8x-nvswitch");
  KubeletEmulator kubelet(dir);
  if (!kubelet.Start().ok()) return 1;

  danqing::config::Config cfg;
  cfg.danqing.device_plugin_path = dir;
  cfg.danqing.cdi_root = dir + "/cdi";
  cfg.danqing.nvml_lib = danqing::testing::FakeNvmlLibrary();
  cfg.danqing.node_features_file = "";
  if (std::getenv("HB_NO_METRICS")) cfg.danqing.metrics_addr = "";
  cfg.danqing.xid_quiet_period = 0s;  // recovers at the next poll, ready for the next event
  cfg.danqing.health_check_interval = std::chrono::milliseconds(poll_ms);
  {
    danqing::agent::Agent agent;
    if (auto st = agent.Start(cfg); !st.ok()) {
      std::fprintf(stderr, "%s\n", st.ToString().c_str());
      return 1;
    }
    if (!kubelet.WaitForDevices("nvidia.com/gpu", [](const Devices& d) { return d.size() == 8; }, 10s)) return 1;
    std::vector<std::string> uuids;
    for (const auto& d : kubelet.Devices("nvidia.com/gpu")) uuids.push_back(d.id());
    Control ctl(node.control_socket());
    std::vector<double> lat, from_queue, seen;
    auto& hist = danqing::metrics::AgentMetrics().health_event_publish_seconds.WithLabels({});
    std::vector<uint64_t> before_counts;
    double before_sum = 0;
    hist.Read(before_counts, before_sum);
    for (int i = 0; i < events; ++i) {
      const int gpu = i % 8;
      if (!kubelet.WaitForDevices("nvidia.com/gpu", AllHealthy, 5s)) return 1;
      const auto t0 = Clock::now();
      const auto reply =
          nlohmann::json::parse(ctl.Send(R"({"cmd":"xid","gpu":)" + std::to_string(gpu) + R"(,"xid":62})"));
      const Clock::time_point queued{std::chrono::nanoseconds(reply.at("queued_ns").get<int64_t>())};
      if (!kubelet.WaitForDevices("nvidia.com/gpu", [&](const Devices& d) { return Unhealthy(d, uuids[gpu]); }, 5s)) {
        std::fprintf(stderr, "event %d not seen\n", i);
        return 1;
      }
      seen.push_back(Ms(Clock::now() - t0));
      const auto read = kubelet.LastUpdateTime("nvidia.com/gpu");
      lat.push_back(Ms(read - t0));
      from_queue.push_back(Ms(read - queued));
    }
    const Stats fq = Summarize(from_queue);
    const Stats s = Summarize(lat);
    const Stats w = Summarize(seen);
    std::printf("event (XID) queued in NVML -> ListAndWatch read by the kubelet, %d events, polling every %d ms: "
                "p50 %.2f ms  p99 %.2f ms  max %.2f ms\n",
                events, poll_ms, fq.p50, fq.p99, fq.max);
    std::printf("  from the control socket write: p50 %.2f ms  p99 %.2f ms  max %.2f ms\n", s.p50, s.p99, s.max);
    std::printf("  ... until the bench thread saw it: p50 %.2f ms  p99 %.2f ms  max %.2f ms\n", w.p50, w.p99, w.max);
    std::vector<uint64_t> counts;
    double sum = 0;
    hist.Read(counts, sum);
    const uint64_t n = counts.back() - before_counts.back();
    auto bucket_at = [&](double q) {
      for (size_t b = 0; b < hist.bounds().size(); ++b) {
        if (static_cast<double>(counts[b] - before_counts[b]) >= q * static_cast<double>(n)) return hist.bounds()[b] * 1e3;
      }
      return -1.0;
    };
    std::printf("  agent's share (NVML event out -> list handed to gRPC), %llu events: mean %.3f ms  "
                "p50 <= %.3g ms  p99 <= %.3g ms\n",
                static_cast<unsigned long long>(n), n ? (sum - before_sum) * 1e3 / static_cast<double>(n) : 0.0,
                bucket_at(0.5), bucket_at(0.99));
    agent.Stop();
  }

  // Polled condition at the default interval.
  cfg.danqing.health_check_interval = 1s;
  {
    danqing::agent::Agent agent;
    if (!agent.Start(cfg).ok()) return 1;
    if (!kubelet.WaitForDevices("nvidia.com/gpu", AllHealthy, 10s)) return 1;
    std::vector<std::string> uuids;
    for (const auto& d : kubelet.Devices("nvidia.com/gpu")) uuids.push_back(d.id());
    Control ctl(node.control_socket());
    std::vector<double> lat;
    for (int i = 0; i < 10; ++i) {
      const std::string g = std::to_string(i % 8);
      const auto t0 = Clock::now();
      ctl.Send(R"({"cmd":"set","gpu":)" + g + R"(,"sensors":{"temperature_c":95,"throttle_reasons":64}})");
      if (!kubelet.WaitForDevices("nvidia.com/gpu", [&](const Devices& d) { return Unhealthy(d, uuids[i % 8]); }, 5s)) {
        return 1;
      }
      lat.push_back(Ms(Clock::now() - t0));
      ctl.Send(R"({"cmd":"set","gpu":)" + g + R"(,"sensors":{"temperature_c":60,"throttle_reasons":0}})");
      if (!kubelet.WaitForDevices("nvidia.com/gpu", AllHealthy, 5s)) return 1;
    }
    const Stats s = Summarize(lat);
    std::printf("polled (thermal) -> ListAndWatch at 1 s polling, 10 samples: p50 %.0f ms  max %.0f ms\n", s.p50,
                s.max);
    agent.Stop();
  }

  // Idle CPU of the daemon process polling 8 GPUs every second.
  {
    danqing::testing::ChildProcess daemon({DANQING_DEVICE_PLUGIN_BIN, "--device-plugin-path", dir, "--nvml-lib",
                                           danqing::testing::FakeNvmlLibrary(), "--cdi-root", dir + "/cdi",
                                           "--node-features-file", "", "--log-level", "warn"});
    if (!kubelet.WaitForRegistrationCount("nvidia.com/gpu", 3, 10s)) {
      std::fprintf(stderr, "daemon did not register: %s\n", daemon.Output().c_str());
      return 1;
    }
    std::this_thread::sleep_for(2s);  // start-up done
    const long hz = sysconf(_SC_CLK_TCK);
    const long before = CpuTicks(daemon.pid());
    const auto t0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(idle_s));
    const long after = CpuTicks(daemon.pid());
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    const double cpu = static_cast<double>(after - before) / static_cast<double>(hz);
    std::printf("idle daemon, 8 GPUs polled every 1 s, %d s: CPU %.3f s = %.3f%% of one core\n", idle_s, cpu,
                100.0 * cpu / wall);
  }
  std::filesystem::remove_all(dir);
  return 0;
}
