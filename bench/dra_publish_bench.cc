// DRA API-side figures for issue 25, against the API server emulator (HTTPS
// on loopback, bearer token, the real REST paths and JSON) and an 8-GPU A100
// node with mixed MIG served by the fake NVML (28 devices).
// Through the wired agent (agent::Agent in dra mode, its API client from a
// kubeconfig as main makes it):
//   - agent start to slices: Agent::Start (NVML discovery, health checker,
//     node plugin, publisher) until the emulator holds the node's slice with
//     every device; slices deleted before each start;
//   - XID to taint: from the fake NVML queuing an XID 62 event (its
//     queued_ns, CLOCK_MONOTONIC) until the emulator holds the slice whose
//     device carries gpu.danqing.io/unhealthy; recovery: from the end of the
//     XID quiet period (200 ms here) until the taint is gone from the slice
//     (the quiet period ends at the checker's next poll: healthCheckInterval,
//     the default 1 s);
// The publisher alone:
//   - health change to taint: from Publisher::SetConditions (what the
//     agent's health callback calls) until the emulator holds a slice whose
//     device carries the taint, and the same for its removal; p50/p99/max;
//   - ResourceClaim GET + parse (ClaimReader::Get), sequential; p50/p99.
// Usage: dra_publish_bench [health-iterations] [starts] [claim-gets] [agent-xids]
//   (default 300, 50, 2000, 50)
#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "agent/agent.h"
#include "bench/support/dra_agent.h"
#include "bench/support/stats.h"
#include "config/config.h"
#include "dra/claim_reader.h"
#include "dra/publisher.h"
#include "metrics/registry.h"
#include "testing/support/fake_node.h"
#include "testing/support/temp_dir.h"
#include "tests/dra/slice_fixtures.h"

using namespace danqing;
using bench::Clock;
using bench::Ms;
using nlohmann::json;

namespace {

void Report(const char* what, const std::vector<double>& ms) {
  const bench::Stats s = bench::Summarize(ms);
  std::printf("%-34s n=%-5zu p50=%7.3f ms  p99=%7.3f ms  max=%7.3f ms\n", what, s.n, s.p50, s.p99,
              s.max);
}

bool HasTaint(const std::vector<json>& all, const std::string& device) {
  for (const auto& s : all) {
    for (const auto& d : s["spec"]["devices"]) {
      if (d["name"] == device) return d.contains("taints");
    }
  }
  return false;
}

size_t DeviceCount(const std::vector<json>& all) {
  size_t n = 0;
  for (const auto& s : all) n += s["spec"]["devices"].size();
  return n;
}

// The fake NVML's reply's queued_ns as a steady_clock time (both CLOCK_MONOTONIC).
std::optional<Clock::time_point> QueuedAt(const std::string& reply) {
  const json j = json::parse(reply, nullptr, false);
  if (j.is_discarded() || !j.contains("queued_ns")) return std::nullopt;
  return Clock::time_point(std::chrono::nanoseconds(j["queued_ns"].get<int64_t>()));
}

}  // namespace

int main(int argc, char** argv) {
  const int health_iters = argc > 1 ? std::atoi(argv[1]) : 300;
  const int starts = argc > 2 ? std::atoi(argv[2]) : 50;
  const int claim_gets = argc > 3 ? std::atoi(argv[3]) : 2000;
  const int agent_xids = argc > 4 ? std::atoi(argv[4]) : 50;
  spdlog::set_level(spdlog::level::warn);
  testing::TempDir dir;
  const std::string profile = dir.path() + "/a100-8x-mig-mixed.json";
  if (!testing::WriteEightGpuMigMixedProfile(DANQING_FAKE_NVML_PROFILE_DIR, profile)) {
    std::fprintf(stderr, "cannot write the profile\n");
    return 1;
  }
  testing::FakeNode node(profile);
  const auto t_disc = Clock::now();
  auto inv = testing::DiscoverProfile(DANQING_FAKE_NVML_LIB, profile);
  const double disc_ms = Ms(Clock::now() - t_disc);
  if (!inv.ok()) {
    std::fprintf(stderr, "discovery: %s\n", inv.status().ToString().c_str());
    return 1;
  }
  testing::ApiFixture fx(dir.path());
  if (!fx.error.empty()) {
    std::fprintf(stderr, "%s\n", fx.error.c_str());
    return 1;
  }
  dra::PublisherOptions po;
  po.slices.node_name = "node-1";
  po.slices.sysfs_root.clear();
  const size_t expected = dra::BuildDevices(*inv, {}, po.slices).size();
  std::printf("node: %zu GPUs, %zu DRA devices (fake NVML discovery %.2f ms)\n", inv->gpus.size(),
              expected, disc_ms);

  // Through the agent: start to slices, XID to taint and back.
  if (!fx.WriteKubeconfig(dir.path() + "/kubeconfig")) {
    std::fprintf(stderr, "cannot write the kubeconfig\n");
    return 1;
  }
  config::Config cfg = bench::DraBenchConfig(dir.path(), dir.path(), "node-1");
  cfg.danqing.sysfs_root = "";
  cfg.danqing.xid_quiet_period = std::chrono::milliseconds(200);
  std::vector<double> start_ms;
  for (int i = 0; i < starts; ++i) {
    for (const auto& s : fx.server->Slices()) fx.server->DeleteSlice(s["metadata"]["name"]);
    auto api = agent::ApiClientFor(cfg);
    if (!api.ok() || !*api) {
      std::fprintf(stderr, "API client: %s\n", api.status().ToString().c_str());
      return 1;
    }
    const auto t0 = Clock::now();
    const std::unique_ptr<agent::Agent> a = bench::WiredDraAgent(**api);
    if (Status st = a->Start(cfg); !st.ok()) {
      std::fprintf(stderr, "agent: %s\n", st.ToString().c_str());
      return 1;
    }
    if (!fx.server->WaitForSlices(
            [&](const std::vector<json>& all) { return DeviceCount(all) == expected; },
            std::chrono::seconds(10))) {
      std::fprintf(stderr, "start %d: slices not published\n", i);
      return 1;
    }
    start_ms.push_back(Ms(Clock::now() - t0));
    a->Stop();
  }
  std::vector<double> xid_ms, xid_recover_ms;
  {
    auto api = agent::ApiClientFor(cfg);
    const std::unique_ptr<agent::Agent> a = bench::WiredDraAgent(**api);
    if (Status st = a->Start(cfg); !st.ok()) {
      std::fprintf(stderr, "agent: %s\n", st.ToString().c_str());
      return 1;
    }
    // The whole GPUs of the profile (3 and 7) in turn. NVML drops an event
    // no event set holds yet: the first is sent until it is seen.
    bool armed = false;
    for (int k = 0; k < 50 && !armed; ++k) {
      node.Control(R"({"cmd":"xid","gpu":3,"xid":62})");
      armed = fx.server->WaitForSlices(
          [&](const std::vector<json>& all) { return HasTaint(all, "gpu-3"); },
          std::chrono::milliseconds(200));
    }
    if (!armed || !fx.server->WaitForSlices(
                      [&](const std::vector<json>& all) { return !HasTaint(all, "gpu-3"); },
                      std::chrono::seconds(10))) {
      std::fprintf(stderr, "the agent never tainted gpu-3 for an XID\n");
      return 1;
    }
    for (int i = 0; i < agent_xids; ++i) {
      const int g = i % 2 == 0 ? 3 : 7;
      const std::string device = "gpu-" + std::to_string(g);
      const auto queued =
          QueuedAt(node.Control(R"({"cmd":"xid","gpu":)" + std::to_string(g) + R"(,"xid":62})"));
      if (!queued || !fx.server->WaitForSlices(
                         [&](const std::vector<json>& all) { return HasTaint(all, device); },
                         std::chrono::seconds(10))) {
        std::fprintf(stderr, "xid %d: no taint\n", i);
        return 1;
      }
      xid_ms.push_back(Ms(Clock::now() - *queued));
      if (!fx.server->WaitForSlices(
              [&](const std::vector<json>& all) { return !HasTaint(all, device); },
              std::chrono::seconds(10))) {
        std::fprintf(stderr, "xid %d: taint not removed\n", i);
        return 1;
      }
      xid_recover_ms.push_back(Ms(Clock::now() - (*queued + cfg.danqing.xid_quiet_period)));
    }
    a->Stop();
  }

  // Health change to taint, and back.
  auto client = kube::Client::Create(fx.client->config());
  dra::Publisher p(**client, po);
  p.Update(*inv, {});
  (void)p.Start();
  p.WaitSynced(std::chrono::seconds(10));
  const auto devices = dra::BuildDevices(*inv, {}, po.slices);
  std::vector<double> add_ms, remove_ms;
  for (int i = 0; i < health_iters; ++i) {
    const auto& dev = devices[static_cast<size_t>(i) % devices.size()];
    auto t0 = Clock::now();
    p.SetConditions({{dev.uuid, {"xid-79", true}}});
    if (!fx.server->WaitForSlices(
            [&](const std::vector<json>& all) { return HasTaint(all, dev.name); },
            std::chrono::seconds(10))) {
      std::fprintf(stderr, "taint %d not seen\n", i);
      return 1;
    }
    add_ms.push_back(Ms(Clock::now() - t0));
    p.WaitSynced(std::chrono::seconds(10));
    t0 = Clock::now();
    p.SetConditions({});
    if (!fx.server->WaitForSlices(
            [&](const std::vector<json>& all) { return !HasTaint(all, dev.name); },
            std::chrono::seconds(10))) {
      std::fprintf(stderr, "recovery %d not seen\n", i);
      return 1;
    }
    remove_ms.push_back(Ms(Clock::now() - t0));
    p.WaitSynced(std::chrono::seconds(10));
  }
  p.Stop();

  // Claim GET.
  fx.server->PutClaim(json::parse(R"({"metadata": {"name": "c1", "namespace": "ml", "uid": "u1"},
    "status": {"allocation": {"devices": {"results": [
      {"request": "gpu", "driver": "gpu.danqing.io", "pool": "node-1", "device": "gpu-3"}]}}}})"));
  dra::ClaimReader reader(**client, "gpu.danqing.io");
  std::vector<double> claim_ms;
  for (int i = 0; i < claim_gets; ++i) {
    const auto t0 = Clock::now();
    auto a = reader.Get("ml", "c1", "u1");
    claim_ms.push_back(Ms(Clock::now() - t0));
    if (!a.ok()) {
      std::fprintf(stderr, "claim: %s\n", a.status().ToString().c_str());
      return 1;
    }
  }

  Report("agent start -> slices in API server", start_ms);
  Report("agent: XID -> taint in slice", xid_ms);
  Report("agent: quiet period end -> untainted", xid_recover_ms);
  Report("publisher: health -> taint in slice", add_ms);
  Report("publisher: recovery -> removed", remove_ms);
  Report("ResourceClaim GET + parse", claim_ms);
  // The publisher's own histogram: change handed to it until the API server
  // answered the last write (what danqing_dra_slice_publish_duration_seconds shows).
  for (const auto& f : metrics::DefaultRegistry().Collect()) {
    if (f.name != "danqing_dra_slice_publish_duration_seconds") continue;
    double sum = 0, count = 0;
    for (const auto& smp : f.samples) {
      if (smp.suffix == "_sum") sum = smp.value;
      if (smp.suffix == "_count") count = smp.value;
    }
    if (count > 0)
      std::printf("publisher histogram: %.0f publications, mean %.3f ms\n", count,
                  1000 * sum / count);
  }
  return 0;
}
