// Resident memory of the real danqing-device-plugin process with metrics on
// (issue 6: "agent resident memory under 20 MiB with metrics on").
//
// The node: the a100-mig-mixed profile's 4 GPUs twice over (8 A100s, 16 MIG
// devices, written to a temporary profile), served with migStrategy mixed, a
// kubelet emulator for registration, and a pod-resources server holding 200
// pods spread over the MIG devices. The bench scrapes /metrics every 100 ms
// (text and OpenMetrics in turn) and samples VmRSS every second; at the end it
// prints start/peak/end and the split of the last sample into anonymous memory
// and pages of the binary and its shared libraries (/proc/<pid>/smaps_rollup).
//
// With `dra` (issue 25: "agent RSS in dra mode < 25 MiB"): the same node
// served in dra mode instead (no device plugin), its API client from a
// kubeconfig pointing at the API server emulator (HTTPS on loopback) where it
// publishes the node's ResourceSlice (28 devices), registered with the DRA
// kubelet emulator, which prepares and unprepares 200 1-GPU claims read from
// the API server before the sampling starts; the metrics are scraped as above.
//
// Usage: agent_memory_bench [seconds] [dra]   (default 30, device-plugin mode)
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "bench/soak/proc_stat.h"
#include "podresources/v1/api.pb.h"
#include "testing/kubelet/dra_kubelet_emulator.h"
#include "testing/kubelet/kubelet_emulator.h"
#include "testing/support/fake_node.h"
#include "tests/dra/slice_fixtures.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using nlohmann::json;

// A UUID of the same shape that differs in its last two hex digits.
std::string Twin(std::string uuid) {
  uuid[uuid.size() - 2] = '7';
  uuid.back() = uuid.back() == 'f' ? 'e' : 'f';
  return uuid;
}

// The a100-mig-mixed profile with each GPU cloned once: 8 GPUs. Returns the
// profile's path and, through `mig`, every MIG device UUID with its resource.
std::string EightGpuProfile(const std::string& dir, std::vector<std::pair<std::string, std::string>>& mig) {
  std::ifstream in(danqing::testing::ProfilePath("a100-mig-mixed"));
  json profile = json::parse(in);
  json& gpus = profile["gpus"];
  const size_t n = gpus.size();
  for (size_t i = 0; i < n; ++i) {
    json g = gpus[i];
    g["uuid"] = Twin(g["uuid"]);
    g["minor_number"] = g["minor_number"].get<int>() + static_cast<int>(n);
    char bus[32];
    std::snprintf(bus, sizeof bus, "00000000:%02X:00.0", 0xA0 + static_cast<unsigned>(i));  // free bus numbers
    g["pci"]["bus_id"] = bus;
    if (g["mig"].contains("devices")) {
      for (json& m : g["mig"]["devices"]) m["uuid"] = Twin(m["uuid"]);
    }
    g.erase("processes");
    gpus.push_back(std::move(g));
  }
  for (const json& g : gpus) {
    if (!g["mig"].contains("devices")) continue;
    for (const json& m : g["mig"]["devices"]) {
      mig.emplace_back(m["uuid"].get<std::string>(), "nvidia.com/mig-" + m["profile"].get<std::string>());
    }
  }
  const std::string path = dir + "/a100-mig-mixed-8x.json";
  std::ofstream(path) << profile.dump(1);
  return path;
}

long SmapsField(int pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps_rollup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  const int seconds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 30;
  const std::string dir = "/tmp/dqbench-mem-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::vector<std::pair<std::string, std::string>> mig;
  danqing::testing::FakeNode node(EightGpuProfile(dir, mig));

  danqing::testing::KubeletEmulator kubelet(dir);
  if (!kubelet.Start().ok()) return 1;
  danqing::testing::PodResourcesEmulator pod_resources(dir + "/pod-resources.sock");
  if (!pod_resources.Start().ok()) return 1;
  std::vector<v1::PodResources> pods;
  for (int p = 0; p < 200; ++p) {
    const auto& [uuid, resource] = mig[static_cast<size_t>(p) % mig.size()];
    v1::PodResources pod;
    pod.set_namespace_("art");
    pod.set_name("render-" + std::to_string(p));
    auto* c = pod.add_containers();
    c->set_name("main");
    auto* d = c->add_devices();
    d->set_resource_name(resource);
    d->add_device_ids(uuid);
    pods.push_back(std::move(pod));
  }
  pod_resources.SetPods(pods);

  const bool dra = argc > 2 && std::string(argv[2]) == "dra";
  std::vector<std::string> args = {DANQING_DEVICE_PLUGIN_BIN,
                                   "--device-plugin-path",
                                   dir,
                                   "--nvml-lib",
                                   danqing::testing::FakeNvmlLibrary(),
                                   "--cdi-root",
                                   dir + "/cdi",
                                   "--node-features-file",
                                   "",
                                   "--mig-strategy",
                                   "mixed",
                                   "--metrics-addr",
                                   "127.0.0.1:0",
                                   "--pod-resources-socket",
                                   dir + "/pod-resources.sock",
                                   "--log-level",
                                   "info"};
  std::unique_ptr<danqing::testing::ApiFixture> api;
  std::unique_ptr<danqing::testing::DraKubeletEmulator> dra_kubelet;
  if (dra) {
    api = std::make_unique<danqing::testing::ApiFixture>(dir);
    if (!api->error.empty()) {
      std::fprintf(stderr, "API server emulator: %s\n", api->error.c_str());
      return 1;
    }
    if (!api->WriteKubeconfig(dir + "/kubeconfig")) {
      std::fprintf(stderr, "cannot write the kubeconfig\n");
      return 1;
    }
    dra_kubelet = std::make_unique<danqing::testing::DraKubeletEmulator>(
        danqing::testing::DraKubeletOptions{dir + "/registry", {"v1.DRAPlugin"}, 10'000ms});
    if (!dra_kubelet->Start()) return 1;
    for (const char* a : {"--mode", "dra", "--node-name", "node-a", "--kubeconfig"})
      args.emplace_back(a);
    args.push_back(dir + "/kubeconfig");
    for (const std::string& a :
         std::vector<std::string>{"--dra-plugins-registry", dir + "/registry", "--dra-plugin-dir",
                                  dir + "/plugin", "--dra-checkpoint-dir", dir + "/state"})
      args.push_back(a);
  }
  danqing::testing::ChildProcess daemon(args);
  int prepared = 0;
  if (dra) {
    if (!dra_kubelet->WaitForRegistrations("gpu.danqing.io", 1, 10s) ||
        !api->server->WaitForSlices(
            [](const std::vector<json>& all) {
              size_t n = 0;
              for (const auto& sl : all) n += sl["spec"]["devices"].size();
              return n == 28;
            },
            10s)) {
      std::fprintf(stderr, "daemon did not register or publish: %s\n", daemon.Output().c_str());
      return 1;
    }
    for (int c = 0; c < 200; ++c) {
      const std::string gpu = c % 2 == 0 ? "gpu-3" : "gpu-7";  // the two whole GPUs
      const json stored = api->server->PutClaim(
          danqing::testing::AllocatedClaim("art", "claim-" + std::to_string(c), "node-a", gpu));
      const std::vector<danqing::testing::DraClaimRef> ref{
          {"art", "claim-" + std::to_string(c), stored["metadata"]["uid"].get<std::string>()}};
      k8s::io::kubelet::pkg::apis::dra::v1::NodePrepareResourcesResponse p;
      if (dra_kubelet->Prepare("gpu.danqing.io", ref, &p).ok() &&
          p.claims().at(ref[0].uid).error().empty())
        ++prepared;
      k8s::io::kubelet::pkg::apis::dra::v1::NodeUnprepareResourcesResponse u;
      (void)dra_kubelet->Unprepare("gpu.danqing.io", ref, &u);
    }
    if (prepared != 200) {
      std::fprintf(stderr, "only %d of 200 claims prepared: %s\n", prepared,
                   daemon.Output().c_str());
      return 1;
    }
  }
  const std::string some_resource = mig.front().second;
  if (!dra && !kubelet.WaitForRegistration(some_resource, 10s)) {
    std::fprintf(stderr, "daemon did not register: %s\n", daemon.Output().c_str());
    return 1;
  }
  int port = 0;
  const std::regex port_re(R"(metrics on \S+ \(port (\d+)\))");
  for (int i = 0; i < 100 && port == 0; ++i) {
    std::smatch m;
    const std::string out = daemon.Output();
    if (std::regex_search(out, m, port_re)) port = std::stoi(m[1]);
    if (port == 0) std::this_thread::sleep_for(50ms);
  }
  if (port == 0) {
    std::fprintf(stderr, "no metrics port in the daemon's log: %s\n", daemon.Output().c_str());
    return 1;
  }

  httplib::Client http("127.0.0.1", port);
  http.set_read_timeout(5, 0);
  // Attribution must be on, or the figure would be of a lighter exporter
  // (dra mode: the pods hold device-plugin resources the agent does not serve).
  bool attributed = dra;
  for (int i = 0; i < 50 && !attributed; ++i) {
    auto r = http.Get("/metrics");
    attributed = r && r->status == 200 && r->body.find("pod=\"render-199\"") != std::string::npos;
    if (!attributed) std::this_thread::sleep_for(100ms);
  }
  if (!attributed) {
    std::fprintf(stderr, "the agent's metrics never named the 200 pods\n");
    return 1;
  }

  danqing::soak::ProcStat start = danqing::soak::Sample(daemon.pid());
  danqing::soak::ProcStat peak = start;
  danqing::soak::ProcStat last = start;
  int scrapes = 0, failures = 0;
  size_t bytes = 0;
  const auto end = Clock::now() + std::chrono::seconds(seconds);
  auto next_sample = Clock::now() + 1s;
  while (Clock::now() < end) {
    httplib::Headers headers;
    if (scrapes % 2 == 1) headers.emplace("Accept", "application/openmetrics-text; version=1.0.0");
    auto r = http.Get("/metrics", headers);
    ++scrapes;
    if (!r || r->status != 200) {
      ++failures;
    } else {
      bytes = r->body.size();
    }
    if (Clock::now() >= next_sample) {
      last = danqing::soak::Sample(daemon.pid());
      danqing::soak::KeepPeak(peak, last);
      next_sample += 1s;
    }
    std::this_thread::sleep_for(100ms);
  }
  last = danqing::soak::Sample(daemon.pid());
  danqing::soak::KeepPeak(peak, last);
  const long anon = SmapsField(daemon.pid(), "Anonymous");
  const long rss = SmapsField(daemon.pid(), "Rss");
  if (dra) {
    std::printf(
        "agent in dra mode with metrics on: 8 GPUs (28 DRA devices published to the API server "
        "emulator), "
        "%d claims prepared and unprepared, %d scrapes in %d s (%d failed, last %zu bytes)\n",
        prepared, scrapes, seconds, failures, bytes);
  } else {
    std::printf(
        "agent with metrics on: 8 GPUs (16 MIG devices, migStrategy mixed), 200 pods, %d scrapes "
        "in %d s "
        "(%d failed, last %zu bytes)\n",
        scrapes, seconds, failures, bytes);
  }
  std::printf("  RSS start / peak / end: %.1f / %.1f / %.1f MiB; at the end %.1f MiB anonymous, %.1f MiB pages of "
              "the binary and its libraries; %d threads\n",
              static_cast<double>(start.rss_kib) / 1024, static_cast<double>(peak.rss_kib) / 1024,
              static_cast<double>(last.rss_kib) / 1024, static_cast<double>(anon) / 1024,
              static_cast<double>(rss - anon) / 1024, last.threads);
  daemon.Signal(SIGTERM);
  daemon.Wait(10'000);
  pod_resources.Stop();
  kubelet.Stop();
  if (dra_kubelet) dra_kubelet->Stop();
  api.reset();
  std::filesystem::remove_all(dir);
  return failures == 0 ? 0 : 1;
}
