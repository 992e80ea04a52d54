// Inventory cost through the real loader over the fake libnvidia-ml.so.1:
// a full Discover() (GPUs, MIG devices, NVLink and PCIe topology) and one
// device's sensor read, per node profile. Target (issue 2): 8xA100 inventory
// with topology under 5 ms.
#include <benchmark/benchmark.h>

#include "gpu/nvml_backend.h"
#include "testing/support/fake_node.h"

namespace {

using danqing::gpu::NvmlBackend;

const char* const kProfiles[] = {"a100-8x-nvswitch", "a100-mig-mixed", "v100-8x-dgx1",
                                 "v100-16x-dgx2", "t4-1x"};

void BM_Discover(benchmark::State& state) {
  danqing::testing::FakeNode node(kProfiles[state.range(0)]);
  auto b = NvmlBackend::Create(danqing::testing::FakeNvmlLibrary());
  if (!b.ok()) {
    state.SkipWithError(b.status().ToString().c_str());
    return;
  }
  size_t gpus = 0, migs = 0;
  for (auto _ : state) {
    auto inv = (*b)->Discover();
    if (!inv.ok()) {
      state.SkipWithError(inv.status().ToString().c_str());
      return;
    }
    gpus = inv->gpus.size();
    migs = 0;
    for (const auto& g : inv->gpus) migs += g.mig_devices.size();
    benchmark::DoNotOptimize(inv);
  }
  state.SetLabel(std::string(kProfiles[state.range(0)]) + " gpus=" + std::to_string(gpus) +
                 " mig=" + std::to_string(migs));
}
BENCHMARK(BM_Discover)->DenseRange(0, 4)->Unit(benchmark::kMicrosecond);

void BM_ReadSensors(benchmark::State& state) {
  danqing::testing::FakeNode node(kProfiles[state.range(0)]);
  auto b = NvmlBackend::Create(danqing::testing::FakeNvmlLibrary());
  if (!b.ok()) {
    state.SkipWithError(b.status().ToString().c_str());
    return;
  }
  auto inv = (*b)->Discover();
  const std::string uuid = inv.ok() && !inv->gpus.empty() ? inv->gpus[0].uuid : "";
  for (auto _ : state) {
    auto s = (*b)->ReadSensors(uuid);
    benchmark::DoNotOptimize(s);
  }
  state.SetLabel(kProfiles[state.range(0)]);
}
BENCHMARK(BM_ReadSensors)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// Cold start: dlopen + nvmlInit + Discover + nvmlShutdown, what the agent pays once.
void BM_ColdStart(benchmark::State& state) {
  danqing::testing::FakeNode node("a100-8x-nvswitch");
  for (auto _ : state) {
    auto b = NvmlBackend::Create(danqing::testing::FakeNvmlLibrary());
    if (!b.ok()) {
      state.SkipWithError(b.status().ToString().c_str());
      return;
    }
    auto inv = (*b)->Discover();
    benchmark::DoNotOptimize(inv);
  }
}
BENCHMARK(BM_ColdStart)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
