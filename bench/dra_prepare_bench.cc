// DRA prepare figures for issue 25, measured from the kubelet's side: the DRA
// kubelet emulator calls NodePrepareResources / NodeUnprepareResources (v1)
// over the plugin's real unix socket, one 1-GPU claim per call; the claim's
// allocation comes from the in-memory ClaimSource (the API server's claim GET
// is NOT included). Each new prepare writes the claim's CDI spec and the
// checkpoint (both fsync'd and renamed), as in production.
// Rows: new prepare, repeated prepare (idempotent answer), unprepare: p50,
// p99, max over `iterations` claims.
// Usage: dra_prepare_bench [iterations] [state-dir]
//   state-dir: where the checkpoint and CDI specs go (default a fresh
//   directory under /tmp); put it on the disk under test.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "dra/node_plugin.h"
#include "testing/dra/fake_claim_source.h"
#include "testing/kubelet/dra_kubelet_emulator.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
namespace dra = danqing::dra;
namespace drav1 = k8s::io::kubelet::pkg::apis::dra::v1;

double Us(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

void Print(const char* what, std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
  };
  std::printf("%-22s n=%zu  p50 %8.0f us  p99 %8.0f us  max %8.0f us\n", what, v.size(), at(0.50),
              at(0.99), v.back());
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 1000;
  const std::string base =
      argc > 2 ? std::string(argv[2]) : "/tmp/dqbench-dra-" + std::to_string(getpid());
  const std::string sockets = "/tmp/dqbench-dra-sock-" + std::to_string(getpid());
  std::filesystem::remove_all(base);
  std::filesystem::remove_all(sockets);
  spdlog::set_level(spdlog::level::warn);

  danqing::testing::FakeClaimSource source;
  dra::PreparerOptions po;
  po.checkpoint_dir = base + "/state";
  po.cdi.cdi_root = base + "/cdi";
  dra::ClaimPreparer preparer(po, &source, nullptr);
  auto table = std::make_shared<dra::DeviceTable>();
  table->pool = "node-a";
  for (int i = 0; i < 8; ++i) {
    dra::NodeDevice d;
    d.name = "gpu-" + std::to_string(i);
    d.device.id = d.device.device_uuid = d.device.gpu_uuid = "GPU-" + std::to_string(i);
    d.device.minor = static_cast<uint32_t>(i);
    table->devices[d.name] = d;
  }
  preparer.SetDevices(table);
  dra::NodePluginOptions no;
  no.registry_dir = sockets + "/registry";
  no.plugin_dir = sockets + "/plugin";
  dra::NodePlugin plugin(no, &preparer);
  if (auto st = plugin.Start(); !st.ok()) {
    std::fprintf(stderr, "%s\n", st.ToString().c_str());
    return 1;
  }
  danqing::testing::DraKubeletEmulator kubelet({no.registry_dir, {"v1.DRAPlugin"}, 10'000ms});
  if (!kubelet.Start() || !kubelet.WaitForRegistrations("gpu.danqing.io", 1, 10s)) {
    std::fprintf(stderr, "the plugin did not register\n");
    return 1;
  }
  for (int i = 0; i < iterations; ++i) {
    dra::ClaimAllocation a;
    a.ns = "bench";
    a.name = "c" + std::to_string(i);
    a.uid = "uid-" + std::to_string(i);
    a.devices.push_back(
        {"gpu", "gpu.danqing.io", "node-a", "gpu-" + std::to_string(i % 8), std::nullopt});
    source.Put(a);
  }
  std::vector<double> prepare, repeat, unprepare;
  for (int i = 0; i < iterations; ++i) {
    const std::vector<danqing::testing::DraClaimRef> claim{
        {"bench", "c" + std::to_string(i), "uid-" + std::to_string(i)}};
    drav1::NodePrepareResourcesResponse p;
    auto t0 = Clock::now();
    auto s = kubelet.Prepare("gpu.danqing.io", claim, &p);
    prepare.push_back(Us(Clock::now() - t0));
    if (!s.ok() || !p.claims().at(claim[0].uid).error().empty()) {
      std::fprintf(stderr, "prepare failed: %s %s\n", s.error_message().c_str(),
                   p.claims().at(claim[0].uid).error().c_str());
      return 1;
    }
    t0 = Clock::now();
    (void)kubelet.Prepare("gpu.danqing.io", claim, &p);
    repeat.push_back(Us(Clock::now() - t0));
    drav1::NodeUnprepareResourcesResponse u;
    t0 = Clock::now();
    (void)kubelet.Unprepare("gpu.danqing.io", claim, &u);
    unprepare.push_back(Us(Clock::now() - t0));
  }
  std::printf(
      "DRA node plugin, 1-GPU claims over the kubelet emulator (claim GET not included), state in "
      "%s\n",
      base.c_str());
  Print("prepare (new)", prepare);
  Print("prepare (repeat)", repeat);
  Print("unprepare", unprepare);
  kubelet.Stop();
  plugin.Stop();
  std::filesystem::remove_all(base);
  std::filesystem::remove_all(sockets);
  return 0;
}
