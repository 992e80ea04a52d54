// Dynamic MIG prepare/unprepare figures for issue 26, over the fake NVML
// (testing/fake-nvml) through NvmlMigControl and DynamicMig, as the DRA
// driver runs them: a prepare reads the GPU (profiles, placements,
// instances), creates the GPU instance at the placement and its compute
// instance, reads the new MIG device's UUID, then writes the claim's CDI spec
// (fsync'd and renamed); an unprepare destroys both instances and removes the
// spec. The claims cycle over the 7 1g.10gb placements and the 3g.40gb ones
// of one GPU of a100-mig-mixed.json (GPU 2, reset to an empty MIG layout).
// NVML's own time on a real GPU (the driver carving the instance: hundreds
// of ms) is NOT in these figures.
// Usage: dynamic_mig_prepare_bench [iterations] [state-dir]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bench/support/stats.h"
#include "dra/claim_cdi.h"
#include "dra/dynamic_mig.h"
#include "dra/dynamic_mig_cdi.h"
#include "dra/nvml_mig_control.h"
#include "testing/support/fake_node.h"

namespace {

using danqing::bench::Clock;
using danqing::bench::Us;
namespace dra = danqing::dra;

void Print(const char* what, const std::vector<double>& us) {
  danqing::bench::PrintMicros(what, 26, us);
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 2000;
  const std::string base =
      argc > 2 ? std::string(argv[2]) : "/tmp/dqbench-dmig-" + std::to_string(getpid());
  std::filesystem::remove_all(base);
  const danqing::testing::FakeNode fake("a100-mig-mixed");
  auto opened = dra::NvmlMigControl::Open(danqing::testing::FakeNvmlLibrary());
  if (!opened.ok()) {
    std::fprintf(stderr, "%s\n", opened.status().message().c_str());
    return 1;
  }
  std::shared_ptr<dra::NvmlMigControl> control = std::move(*opened);
  if (const auto r = fake.TryControl(R"({"cmd":"mig","gpu":2,"mig":{"mode":1,"devices":[]}})");
      r.exit_code != 0) {
    std::fprintf(stderr, "fake NVML control failed: %s\n", r.out.c_str());
    return 1;
  }
  dra::DynamicMigConfig config;
  config.gpus = {"2"};
  dra::DynamicMig mig(control, config);
  dra::ClaimCdiOptions cdi;
  cdi.cdi_root = base + "/cdi";
  cdi.kind = "gpu.danqing.io/claim";
  cdi.dev_root = base + "/dev";
  const auto writer = dra::AtomicFileWriter();

  std::vector<std::string> devices;
  for (int s = 0; s < 7; ++s) devices.push_back("gpu-2-mig-1g10gb-at-" + std::to_string(s));
  devices.push_back("gpu-2-mig-3g40gb-at-0");
  devices.push_back("gpu-2-mig-3g40gb-at-4");

  std::vector<double> prepare;
  std::vector<double> unprepare;
  for (int i = 0; i < iterations; ++i) {
    const std::string uid = "uid-" + std::to_string(i);
    const std::string& device = devices[static_cast<std::size_t>(i) % devices.size()];
    auto t0 = Clock::now();
    auto m = mig.Prepare(uid, device);
    if (!m.ok()) {
      std::fprintf(stderr, "prepare %s: %s\n", device.c_str(), m.status().message().c_str());
      return 1;
    }
    dra::PreparedClaim claim;
    claim.uid = uid;
    dra::PreparedDevice pd;
    pd.pool = "node-mig";
    pd.device = device;
    pd.gpu_uuid = m->gpu_uuid;
    pd.cdi_ids = {dra::CdiId(cdi.kind, uid, device)};
    claim.devices.push_back(pd);
    const dra::NodeDevice node = dra::DynamicMigNodeDevice(*m, 2);
    if (auto s = dra::WriteClaimSpec(cdi, claim, {&node}, writer); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.message().c_str());
      return 1;
    }
    prepare.push_back(Us(Clock::now() - t0));
    t0 = Clock::now();
    if (auto s = mig.Unprepare(uid, device); !s.ok()) {
      std::fprintf(stderr, "unprepare: %s\n", s.message().c_str());
      return 1;
    }
    if (auto s = dra::RemoveClaimSpec(cdi, uid); !s.ok()) return 1;
    unprepare.push_back(Us(Clock::now() - t0));
  }
  Print("prepare (GI+CI+CDI spec)", prepare);
  Print("unprepare (CI+GI+spec)", unprepare);
  control.reset();
  std::filesystem::remove_all(base);
  return 0;
}
