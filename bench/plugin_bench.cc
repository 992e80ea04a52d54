// Device plugin figures for issue 3, measured against the kubelet emulator
// over real unix sockets, on the fake NVML node profiles:
//   - start to registered: in-process (PluginManager::Start → Register seen by
//     the kubelet) and as a process (exec of danqing-device-plugin → Register);
//   - Allocate and GetPreferredAllocation latency from the client side (p50,
//     p99, max) for 8 and 16 GPUs;
//   - re-registration after each of 100 kubelet restarts (max, p50);
//   - resident memory of the serving daemon process.
// Usage: plugin_bench [iterations]   (default 2000 calls per latency figure)
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench/support/stats.h"
#include "deviceplugin/plugin_manager.h"
#include "deviceplugin/resource.h"
#include "gpu/nvml_backend.h"
#include "testing/kubelet/kubelet_emulator.h"
#include "testing/support/fake_node.h"

namespace {

using danqing::bench::Clock;
using danqing::testing::KubeletEmulator;
using namespace std::chrono_literals;
namespace dp = danqing::deviceplugin;

using danqing::bench::Stats;
using danqing::bench::Summarize;
using danqing::bench::Us;

std::string TempDir(const char* tag) {
  std::string d = "/tmp/dqbench-" + std::string(tag) + "-" + std::to_string(getpid());
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

std::shared_ptr<const dp::ResourceSet> Resources(danqing::gpu::NodeInventory& inv) {
  auto b = danqing::gpu::NvmlBackend::Create(danqing::testing::FakeNvmlLibrary());
  if (!b.ok()) {
    std::fprintf(stderr, "%s\n", b.status().ToString().c_str());
    std::exit(1);
  }
  inv = std::move((*b)->Discover()).value();
  return std::move(dp::BuildResources(inv, {})).value();
}

void LatencyFor(const char* profile, int iterations) {
  danqing::testing::FakeNode node(profile);
  danqing::gpu::NodeInventory inv;
  auto set = Resources(inv);
  const std::string dir = TempDir("lat");
  KubeletEmulator kubelet(dir);
  if (!kubelet.Start().ok()) std::exit(1);
  dp::ManagerOptions mo;
  mo.plugin_dir = dir;
  dp::PluginManager manager(mo);
  const auto t0 = Clock::now();
  if (!manager.Start(set).ok()) std::exit(1);
  kubelet.WaitForRegistration("nvidia.com/gpu", 10s);
  const double start_us = Us(*kubelet.LastRegistrationTime("nvidia.com/gpu") - t0);

  std::vector<std::string> all;
  for (const auto& g : inv.gpus) all.push_back(g.uuid);
  const size_t n = all.size();
  std::vector<double> alloc, pref4, pref_half, noop;
  for (int i = 0; i < iterations; ++i) {
    // GetDevicePluginOptions only copies two flags: the floor of one RPC here.
    auto n0 = Clock::now();
    v1beta1::DevicePluginOptions options;
    (void)kubelet.GetDevicePluginOptions("nvidia.com/gpu", &options);
    noop.push_back(Us(Clock::now() - n0));
    auto a0 = Clock::now();
    auto r = kubelet.Allocate("nvidia.com/gpu", {all[static_cast<size_t>(i) % n]});
    alloc.push_back(Us(Clock::now() - a0));
    if (!r.status.ok()) std::exit(2);
    auto p0 = Clock::now();
    auto p = kubelet.GetPreferredAllocation("nvidia.com/gpu", all, {}, 4);
    pref4.push_back(Us(Clock::now() - p0));
    if (!p.status.ok()) std::exit(3);
    auto h0 = Clock::now();
    auto h = kubelet.GetPreferredAllocation("nvidia.com/gpu", all, {}, static_cast<int>(n / 2));
    pref_half.push_back(Us(Clock::now() - h0));
    if (!h.status.ok()) std::exit(3);
  }
  auto a = Summarize(alloc), p = Summarize(pref4), h = Summarize(pref_half), z = Summarize(noop);
  std::printf("%-18s start->registered (in-process) %8.0f us\n", profile, start_us);
  std::printf("%-18s no-op RPC (floor)        p50 %6.0f us  p99 %6.0f us  max %6.0f us\n", profile, z.p50,
              z.p99, z.max);
  std::printf("%-18s Allocate(1)              p50 %6.0f us  p99 %6.0f us  max %6.0f us  (n=%d)\n", profile,
              a.p50, a.p99, a.max, iterations);
  std::printf("%-18s GetPreferred(4 of %2zu)    p50 %6.0f us  p99 %6.0f us  max %6.0f us\n", profile, n, p.p50,
              p.p99, p.max);
  std::printf("%-18s GetPreferred(%zu of %2zu)    p50 %6.0f us  p99 %6.0f us  max %6.0f us\n", profile, n / 2, n,
              h.p50, h.p99, h.max);
  manager.Stop();
  kubelet.Stop();
  std::filesystem::remove_all(dir);
}

void Restarts(int restarts) {
  danqing::testing::FakeNode node("a100-8x-nvswitch");
  danqing::gpu::NodeInventory inv;
  auto set = Resources(inv);
  const std::string dir = TempDir("rst");
  KubeletEmulator kubelet(dir);
  if (!kubelet.Start().ok()) std::exit(1);
  dp::ManagerOptions mo;
  mo.plugin_dir = dir;
  dp::PluginManager manager(mo);
  if (!manager.Start(set).ok()) std::exit(1);
  kubelet.WaitForRegistration("nvidia.com/gpu", 10s);
  std::vector<double> lat;
  int missed = 0;
  for (int i = 0; i < restarts; ++i) {
    if (!kubelet.Restart().ok()) std::exit(4);
    if (!kubelet.WaitForRegistration("nvidia.com/gpu", 5s)) {
      ++missed;
      continue;
    }
    lat.push_back(Us(*kubelet.LastRegistrationTime("nvidia.com/gpu") - *kubelet.LastRestartTime()));
  }
  auto s = Summarize(lat);
  std::printf("kubelet restarts: %d, re-registered %zu, missed %d; re-registration p50 %.1f ms, max %.1f ms\n",
              restarts, lat.size(), missed, s.p50 / 1000, s.max / 1000);
  manager.Stop();
  kubelet.Stop();
  std::filesystem::remove_all(dir);
}

long RssKib(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

void Process(int iterations) {
  danqing::testing::FakeNode node("a100-8x-nvswitch");
  const std::string dir = TempDir("proc");
  KubeletEmulator kubelet(dir);
  if (!kubelet.Start().ok()) std::exit(1);
  const auto t0 = Clock::now();
  danqing::testing::ChildProcess daemon({DANQING_DEVICE_PLUGIN_BIN, "--device-plugin-path", dir, "--nvml-lib",
                                          danqing::testing::FakeNvmlLibrary(), "--log-level", "warn"});
  if (!kubelet.WaitForRegistration("nvidia.com/gpu", 10s)) {
    std::fprintf(stderr, "daemon did not register: %s\n", daemon.Output().c_str());
    std::exit(5);
  }
  const double start_ms = Us(*kubelet.LastRegistrationTime("nvidia.com/gpu") - t0) / 1000;
  kubelet.WaitForDevices("nvidia.com/gpu", [](const auto& d) { return d.size() == 8; }, 5s);
  const long rss_idle = RssKib(daemon.pid());
  auto devs = kubelet.Devices("nvidia.com/gpu");
  std::vector<std::string> all;
  for (const auto& d : devs) all.push_back(d.id());
  for (int i = 0; i < iterations; ++i) {
    kubelet.Allocate("nvidia.com/gpu", {all[static_cast<size_t>(i) % all.size()]});
    kubelet.GetPreferredAllocation("nvidia.com/gpu", all, {}, 4);
  }
  for (int i = 0; i < 20; ++i) {
    kubelet.Restart();
    kubelet.WaitForRegistration("nvidia.com/gpu", 5s);
  }
  const long rss_busy = RssKib(daemon.pid());
  std::printf("daemon process: exec->registered %.1f ms; RSS serving %ld KiB idle, %ld KiB after %d "
              "Allocate+GetPreferred and 20 kubelet restarts\n",
              start_ms, rss_idle, rss_busy, iterations);
  daemon.Signal(SIGTERM);
  daemon.Wait(10'000);
  kubelet.Stop();
  std::filesystem::remove_all(dir);
}

// Config reload → updated ListAndWatch: the daemon watches its config file;
// each round rewrites it (write + rename, like a ConfigMap update) with a
// different replica count and times until the kubelet holds the new list.
void Reload(int rounds) {
  danqing::testing::FakeNode node("a100-8x-nvswitch");
  const std::string dir = TempDir("reload");
  const std::string config = dir + "/config.yaml";
  auto write = [&](int replicas) {
    std::ofstream(config + ".tmp") << "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                                      "    - name: nvidia.com/gpu\n      replicas: "
                                   << replicas << "\n";
    std::filesystem::rename(config + ".tmp", config);
  };
  write(2);
  KubeletEmulator kubelet(dir);
  if (!kubelet.Start().ok()) std::exit(1);
  danqing::testing::ChildProcess daemon({DANQING_DEVICE_PLUGIN_BIN, "--device-plugin-path", dir, "--nvml-lib",
                                          danqing::testing::FakeNvmlLibrary(), "--config-file", config,
                                          "--log-level", "warn"});
  if (!kubelet.WaitForDevices("nvidia.com/gpu", [](const auto& d) { return d.size() == 16; }, 10s)) {
    std::fprintf(stderr, "daemon did not serve: %s\n", daemon.Output().c_str());
    std::exit(6);
  }
  std::vector<double> lat;
  for (int i = 0; i < rounds; ++i) {
    const int replicas = i % 2 == 0 ? 4 : 2;
    const size_t want = 8u * static_cast<size_t>(replicas);
    const auto t0 = Clock::now();
    write(replicas);
    if (!kubelet.WaitForDevices("nvidia.com/gpu", [want](const auto& d) { return d.size() == want; }, 10s)) {
      std::fprintf(stderr, "reload %d not seen\n", i);
      std::exit(7);
    }
    lat.push_back(Us(Clock::now() - t0));
  }
  auto s = Summarize(lat);
  std::printf("config file change -> ListAndWatch updated (%d rounds): p50 %.1f ms, max %.1f ms "
              "(includes the watcher's 20 ms quiet period)\n",
              rounds, s.p50 / 1000, s.max / 1000);
  daemon.Signal(SIGTERM);
  daemon.Wait(10'000);
  kubelet.Stop();
  std::filesystem::remove_all(dir);
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 2000;
  LatencyFor("a100-8x-nvswitch", iterations);
  LatencyFor("v100-8x-dgx1", iterations);
  LatencyFor("v100-16x-dgx2", iterations);
  Restarts(100);
  Process(iterations);
  Reload(20);
  return 0;
}
