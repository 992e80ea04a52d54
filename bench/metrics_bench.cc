// Metrics benchmarks: one scrape of an 8x A100 MIG-mixed node (the
// a100-mig-mixed profile's 4 GPUs twice over: 26 MIG devices and 2 whole GPUs,
// each time-sliced) with 200 pods, each running one GPU process mapped to
// its pod through a fake /proc and the kubelet checkpoint. Measures the render
// of a scrape (the target: < 2 ms), a whole collection, an HTTP scrape, and
// the exporter's resident memory.
//
//   build/default/bench/metrics_bench [--benchmark_min_time=0.5]
#include <benchmark/benchmark.h>
#include <httplib.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>

#include "gpu/nvml_backend.h"
#include "metrics/exporter.h"
#include "podresources/v1/api.pb.h"
#include "testing/kubelet/kubelet_emulator.h"
#include "testing/support/fake_node.h"

namespace dq = danqing;
namespace m = danqing::metrics;

namespace {

long RssKiB(const char* field = "VmRSS:") {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::stol(line.substr(std::string(field).size()));
  }
  return -1;
}

std::string Clone(const std::string& uuid) {  // a distinct UUID of the same shape
  std::string out = uuid;
  out.back() = out.back() == 'f' ? 'e' : 'f';
  out[out.size() - 2] = '7';
  return out;
}

struct Fixture {
  Fixture() : node("a100-mig-mixed") {
    auto b = dq::gpu::NvmlBackend::Create(dq::testing::FakeNvmlLibrary());
    if (!b.ok()) throw std::runtime_error(b.status().ToString());
    backend = std::move(b).value();
    auto d = backend->Discover();
    if (!d.ok()) throw std::runtime_error(d.status().ToString());
    auto inv = std::make_shared<dq::gpu::NodeInventory>(std::move(d).value());
    const size_t n = inv->gpus.size();
    for (size_t i = 0; i < n; ++i) {  // the second half of the 8 GPUs
      dq::gpu::Gpu g = inv->gpus[i];
      g.index = static_cast<int>(n + i);
      g.minor_number = static_cast<uint32_t>(n + i);
      original[Clone(g.uuid)] = g.uuid;
      g.uuid = Clone(g.uuid);
      g.pci.bus_id[9] = '9';
      for (auto& mig : g.mig_devices) {
        original[Clone(mig.uuid)] = mig.uuid;
        mig.uuid = Clone(mig.uuid);
        mig.parent_uuid = g.uuid;
      }
      inv->gpus.push_back(std::move(g));
    }
    inventory = inv;

    // Devices that pods can hold: MIG devices and non-MIG GPUs.
    std::vector<std::pair<std::string, std::string>> devices;  // uuid, resource
    for (const auto& g : inventory->gpus) {
      if (g.mig_devices.empty()) devices.emplace_back(g.uuid, "nvidia.com/gpu");
      for (const auto& mig : g.mig_devices)
        devices.emplace_back(mig.uuid, "nvidia.com/mig-" + mig.profile);
    }
    dir = "/tmp/dqbench-" + std::to_string(::getpid());
    std::filesystem::create_directories(dir);
    std::vector<v1::PodResources> pods;
    std::string checkpoint = R"({"Data":{"PodDeviceEntries":[)";
    for (int p = 0; p < 200; ++p) {
      const auto& [uuid, resource] = devices[static_cast<size_t>(p) % devices.size()];
      std::string id = uuid + "::" + std::to_string(p / static_cast<int>(devices.size()));
      char uid[40];
      std::snprintf(uid, sizeof uid, "00000000-0000-4000-8000-%012d", p);
      v1::PodResources pod;
      pod.set_namespace_("art");
      pod.set_name("render-" + std::to_string(p));
      auto* c = pod.add_containers();
      c->set_name("main");
      auto* dev = c->add_devices();
      dev->set_resource_name(resource);
      dev->add_device_ids(id);
      pods.push_back(pod);
      if (p) checkpoint += ",";
      checkpoint += std::string(R"({"PodUID":")") + uid +
                    R"(","ContainerName":"main","ResourceName":")" + resource +
                    R"(","DeviceIDs":{"0":[")" + id + R"("]}})";
      uint32_t pid = 10000 + static_cast<uint32_t>(p);
      std::filesystem::create_directories(dir + "/proc/" + std::to_string(pid));
      std::ofstream(dir + "/proc/" + std::to_string(pid) + "/cgroup")
          << "0::/kubepods/pod" << uid << "/" << std::string(64, 'a') << "\n";
      procs[uuid].push_back({pid, 512ULL << 20, 7u, 3u, std::nullopt, std::nullopt});
    }
    checkpoint += "]},\"Checksum\":1}";
    std::ofstream(dir + "/kubelet_internal_checkpoint") << checkpoint;
    kubelet = std::make_unique<dq::testing::PodResourcesEmulator>(dir + "/kubelet.sock");
    if (!kubelet->Start().ok()) throw std::runtime_error("pod resources emulator did not start");
    kubelet->SetPods(pods);
  }
  ~Fixture() {
    kubelet.reset();
    std::filesystem::remove_all(dir);
  }

  m::Sources MakeSources() {
    m::Sources s;
    s.inventory = [this] { return inventory; };
    s.read_sensors = [this](const std::string& uuid) -> dq::Result<dq::gpu::Sensors> {
      auto it = original.find(uuid);
      auto r = backend->ReadSensors(it == original.end() ? uuid : it->second);
      if (!r.ok()) return r;
      r->uuid = uuid;
      if (auto p = procs.find(uuid); p != procs.end()) r->processes = p->second;
      return r;
    };
    return s;
  }

  m::CollectorOptions Options() const {
    m::CollectorOptions o;
    o.hostname = "gpu-node-1";
    o.pod_resources_socket = dir + "/kubelet.sock";
    o.kubelet_checkpoint = dir + "/kubelet_internal_checkpoint";
    o.proc_root = dir + "/proc";
    return o;
  }

  dq::testing::FakeNode node;
  std::unique_ptr<dq::gpu::NvmlBackend> backend;
  std::shared_ptr<const dq::gpu::NodeInventory> inventory;
  std::map<std::string, std::string> original;  // cloned UUID → profile UUID
  std::map<std::string, std::vector<dq::gpu::ProcessInfo>> procs;
  std::string dir;
  std::unique_ptr<dq::testing::PodResourcesEmulator> kubelet;
};

Fixture& F() {
  static Fixture* f = new Fixture();
  return *f;
}

void BM_Render(benchmark::State& state, m::Format format) {
  m::Registry reg;
  m::Collector c(F().Options(), F().MakeSources(), reg);
  auto snap = c.Collect();
  size_t series = 0;
  for (const auto& fam : snap->families) series += fam.samples.size();
  std::string out;
  for (auto _ : state) {
    out.clear();
    m::Render(snap->families, format, out);
    m::RenderEof(format, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["series"] = static_cast<double>(series);
  state.counters["bytes"] = static_cast<double>(out.size());
}
BENCHMARK_CAPTURE(BM_Render, text, m::Format::kText004)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Render, openmetrics, m::Format::kOpenMetrics100)
    ->Unit(benchmark::kMicrosecond);

void BM_Collect(benchmark::State& state) {
  m::Registry reg;
  m::Collector c(F().Options(), F().MakeSources(), reg);
  for (auto _ : state) benchmark::DoNotOptimize(c.Collect());
}
BENCHMARK(BM_Collect)->Unit(benchmark::kMillisecond);

// A whole scrape over HTTP (loopback), snapshot rendering cached between collections.
void BM_HttpScrape(benchmark::State& state) {
  m::ExporterOptions o;
  o.listen = "127.0.0.1:0";
  o.interval = std::chrono::hours(1);
  o.collector = F().Options();
  auto ex = m::Exporter::Start(o, F().MakeSources());
  if (!ex.ok()) {
    state.SkipWithError(ex.status().ToString().c_str());
    return;
  }
  httplib::Client cli("127.0.0.1", (*ex)->port());
  cli.set_keep_alive(true);
  for (auto _ : state) {
    auto res = cli.Get("/metrics");
    if (!res || res->status != 200) state.SkipWithError("scrape failed");
  }
}
BENCHMARK(BM_HttpScrape)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  long before = RssKiB();
  F();  // fake node, emulator, /proc tree
  long with_fixture = RssKiB();
  long anon_fixture = RssKiB("RssAnon:");
  {
    m::ExporterOptions o;
    o.listen = "127.0.0.1:0";
    o.interval = std::chrono::milliseconds(1000);
    o.collector = F().Options();
    auto ex = m::Exporter::Start(o, F().MakeSources());
    if (!ex.ok()) {
      std::cerr << ex.status().ToString() << "\n";
      return 1;
    }
    httplib::Client cli("127.0.0.1", (*ex)->port());
    for (int i = 0; i < 20; ++i) {
      (void)(*ex)->CollectNow();
      (void)cli.Get("/metrics");
      httplib::Headers h{{"Accept", "application/openmetrics-text;version=1.0.0"}};
      (void)cli.Get("/metrics", h);
    }
    long with_exporter = RssKiB();
    long anon_exporter = RssKiB("RssAnon:");
    std::cout
        << "memory: process RSS " << before << " KiB at start, " << with_fixture
        << " KiB with the fake node and 200 pods, " << with_exporter
        << " KiB with the exporter running (+" << (with_exporter - with_fixture)
        << " KiB for the exporter: HTTP threads, snapshot, cached renders; of which anonymous +"
        << (anon_exporter - anon_fixture) << " KiB, the rest library pages)\n";
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::cout << "memory: peak RSS " << RssKiB("VmHWM:") << " KiB\n";
  return 0;
}
