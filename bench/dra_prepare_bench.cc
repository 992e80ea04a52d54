// DRA prepare figures for issue 25, through the wired agent: the real
// agent::Agent in dra mode (fake NVML, a100-8x-nvswitch: 8 GPUs) with its
// API client made from a kubeconfig (agent::ApiClientFor, as main makes it),
// claims read through that client from the API server emulator (HTTPS on
// loopback), and the DRA kubelet emulator calling NodePrepareResources /
// NodeUnprepareResources (v1) over the plugin's unix socket, one 1-GPU claim
// per call. The claim GET is included. Each new prepare writes the claim's
// CDI spec and the checkpoint (both fsync'd and renamed), as in production.
// Rows: new prepare (claim GET included), repeated prepare (idempotent
// answer, no GET), unprepare: p50, p99, max over `iterations` claims.
// Usage: dra_prepare_bench [iterations] [state-dir] [dynamic-mig]
//   state-dir: where the checkpoint and CDI specs go (default a fresh
//   directory under /tmp); put it on the disk under test.
//   dynamic-mig: claims for dynamic-MIG placements (issue 26) instead: each
//   prepare creates a 1g.10gb instance on GPU 2 through the fake NVML, each
//   unprepare destroys it.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "agent/agent.h"
#include "bench/support/dra_agent.h"
#include "bench/support/stats.h"
#include "config/config.h"
#include "testing/kubelet/dra_kubelet_emulator.h"
#include "testing/support/fake_node.h"
#include "tests/dra/slice_fixtures.h"

namespace {

using danqing::bench::Clock;
using danqing::bench::Us;
using namespace std::chrono_literals;
using nlohmann::json;
namespace drav1 = k8s::io::kubelet::pkg::apis::dra::v1;

void Print(const char* what, const std::vector<double>& us) {
  danqing::bench::PrintMicros(what, 30, us);
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 1000;
  const std::string base =
      argc > 2 ? std::string(argv[2]) : "/tmp/dqbench-dra-" + std::to_string(getpid());
  const std::string sockets = "/tmp/dqbench-dra-sock-" + std::to_string(getpid());
  std::filesystem::remove_all(base);
  std::filesystem::remove_all(sockets);
  std::filesystem::create_directories(base);
  std::filesystem::create_directories(sockets);
  spdlog::set_level(spdlog::level::warn);

  // "dynamic-mig": claims for dynamic-MIG placements (issue 26): GPU 2 of
  // a100-mig-mixed emptied and listed in draDynamicMig; each prepare creates
  // the GPU and compute instance through the fake NVML, each unprepare
  // destroys them.
  const bool dynamic = argc > 3 && std::string(argv[3]) == "dynamic-mig";
  danqing::testing::FakeNode node(dynamic ? "a100-mig-mixed" : "a100-8x-nvswitch");
  danqing::testing::ApiFixture api(sockets);
  if (!api.error.empty()) {
    std::fprintf(stderr, "API server emulator: %s\n", api.error.c_str());
    return 1;
  }
  if (!api.WriteKubeconfig(sockets + "/kubeconfig")) {
    std::fprintf(stderr, "cannot write the kubeconfig\n");
    return 1;
  }

  danqing::config::Config cfg = danqing::bench::DraBenchConfig(sockets, base, "node-a");
  if (dynamic) cfg.danqing.dra_dynamic_mig = {"2"};
  auto client = danqing::agent::ApiClientFor(cfg);
  if (!client.ok() || !*client) {
    std::fprintf(stderr, "API client: %s\n", client.status().ToString().c_str());
    return 1;
  }
  const std::unique_ptr<danqing::agent::Agent> agent = danqing::bench::WiredDraAgent(**client);
  danqing::testing::DraKubeletEmulator kubelet(
      {cfg.danqing.dra_plugins_registry, {"v1.DRAPlugin"}, 10'000ms});
  if (!kubelet.Start()) return 1;
  if (auto st = agent->Start(cfg); !st.ok()) {
    std::fprintf(stderr, "agent: %s\n", st.ToString().c_str());
    return 1;
  }
  if (!kubelet.WaitForRegistrations("gpu.danqing.io", 1, 10s)) {
    std::fprintf(stderr, "the plugin did not register\n");
    return 1;
  }
  if (dynamic) {
    node.Control(R"({"cmd":"mig","gpu":2,"mig":{"mode":1,"devices":[]}})");
    if (auto st = agent->Reload(cfg); !st.ok()) {
      std::fprintf(stderr, "reload: %s\n", st.ToString().c_str());
      return 1;
    }
  }
  std::vector<std::string> uids;
  for (int i = 0; i < iterations; ++i) {
    const json claim = danqing::testing::AllocatedClaim(
        "bench", "c" + std::to_string(i), dynamic ? "node-a-mig" : "node-a",
        dynamic ? "gpu-2-mig-1g10gb-at-" + std::to_string(i % 7) : "gpu-" + std::to_string(i % 8));
    uids.push_back(api.server->PutClaim(claim)["metadata"]["uid"]);
  }
  std::vector<double> prepare, repeat, unprepare;
  for (int i = 0; i < iterations; ++i) {
    const std::vector<danqing::testing::DraClaimRef> claim{
        {"bench", "c" + std::to_string(i), uids[static_cast<size_t>(i)]}};
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
  const uint64_t gets = api.server->Counts()["GET resourceclaims"];
  std::printf(
      "DRA agent (dra mode, %s) over the kubelet emulator, claims read from the API server "
      "emulator (%llu claim GETs), state in %s\n",
      dynamic ? "dynamic MIG: 1g.10gb placement claims, instance created and destroyed"
              : "8 GPUs, 1-GPU claims",
      static_cast<unsigned long long>(gets), base.c_str());
  Print("prepare (new, claim GET)", prepare);
  Print("prepare (repeat)", repeat);
  Print("unprepare", unprepare);
  kubelet.Stop();
  agent->Stop();
  std::filesystem::remove_all(base);
  std::filesystem::remove_all(sockets);
  return gets == static_cast<uint64_t>(iterations) ? 0 : 1;
}
