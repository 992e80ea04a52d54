// GetPreferredAllocation latency: PreferredAllocator::Choose() on topologies
// read through the fake libnvidia-ml.so.1, from every device available.
// Target: p99 under 500 µs on 8 and 16 GPUs for every request size
// (NVIDIA's plugin takes seconds for 4-of-16).
//
// Each case times every call on its own and reports the percentiles as
// counters: p50_us, p99_us and max_us (the usual time column is the mean).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "deviceplugin/allocator.h"
#include "gpu/nvml_backend.h"
#include "testing/support/fake_node.h"

namespace {

using danqing::deviceplugin::AllocatableDevice;
using danqing::deviceplugin::PreferredAllocator;

// Index 3 is no profile: a synthetic 16-GPU node with irregular links (no two
// GPUs alike), where the exhaustive search cannot fold symmetric choices.
const char* const kProfiles[] = {"a100-8x-nvswitch", "v100-8x-dgx1", "v100-16x-dgx2",
                                 "synthetic-16-irregular"};

danqing::gpu::NodeInventory Irregular16() {
  danqing::gpu::NodeInventory inv;
  constexpr size_t kN = 16;
  std::mt19937 rng(16);
  inv.topology = danqing::gpu::Topology(kN);
  for (size_t a = 0; a < kN; ++a) {
    inv.gpus.emplace_back();
    inv.gpus.back().uuid = "GPU-synthetic-" + std::to_string(a);
    inv.topology.at(a, a).pcie = danqing::gpu::PcieLevel::kSame;
    for (size_t b = a + 1; b < kN; ++b) {
      danqing::gpu::GpuLink link;
      link.nvlinks = static_cast<int>(rng() % 4);
      link.pcie = static_cast<danqing::gpu::PcieLevel>(1 + rng() % 5);
      inv.topology.at(a, b) = inv.topology.at(b, a) = link;
    }
  }
  return inv;
}

// Discovered once per profile (one FakeNode at a time per process).
const danqing::gpu::NodeInventory* Inventory(const std::string& profile, std::string& error) {
  static std::map<std::string, danqing::gpu::NodeInventory> cache;
  auto it = cache.find(profile);
  if (it != cache.end()) return &it->second;
  if (profile == "synthetic-16-irregular")
    return &cache.emplace(profile, Irregular16()).first->second;
  danqing::testing::FakeNode node(profile);
  auto backend = danqing::gpu::NvmlBackend::Create(danqing::testing::FakeNvmlLibrary());
  if (!backend.ok()) {
    error = backend.status().ToString();
    return nullptr;
  }
  auto inv = (*backend)->Discover();
  if (!inv.ok()) {
    error = inv.status().ToString();
    return nullptr;
  }
  return &cache.emplace(profile, std::move(inv).value()).first->second;
}

// Args: profile index, request size, replicas per GPU (1: whole GPUs; more:
// time-slicing replicas "<uuid>::<k>").
void BM_Choose(benchmark::State& state) {
  const std::string profile = kProfiles[state.range(0)];
  const int size = static_cast<int>(state.range(1));
  const int replicas = static_cast<int>(state.range(2));
  std::string error;
  const danqing::gpu::NodeInventory* inv = Inventory(profile, error);
  if (inv == nullptr) {
    state.SkipWithError(error.c_str());
    return;
  }
  std::vector<AllocatableDevice> devices;
  std::vector<std::string> available;
  for (size_t g = 0; g < inv->gpus.size(); ++g) {
    for (int k = 0; k < replicas; ++k) {
      std::string id = inv->gpus[g].uuid;
      if (replicas > 1) id += "::" + std::to_string(k);
      devices.push_back({id, static_cast<int>(g)});
      available.push_back(std::move(id));
    }
  }
  const PreferredAllocator alloc(inv->topology, devices);

  std::vector<double> samples_us;
  size_t chosen = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    auto ids = alloc.Choose(available, {}, size);
    const auto stop = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(ids);
    chosen = ids.size();
    samples_us.push_back(std::chrono::duration<double, std::micro>(stop - start).count());
  }
  if (samples_us.empty()) return;
  std::sort(samples_us.begin(), samples_us.end());
  auto percentile = [&](double p) {
    const auto i = static_cast<size_t>(p * static_cast<double>(samples_us.size() - 1));
    return samples_us[i];
  };
  state.counters["p50_us"] = percentile(0.50);
  state.counters["p99_us"] = percentile(0.99);
  state.counters["max_us"] = samples_us.back();
  state.SetLabel(profile + " " + std::to_string(size) + "-of-" + std::to_string(available.size()) +
                 (replicas > 1 ? " (" + std::to_string(replicas) + " replicas/GPU)" : "") +
                 " chose " + std::to_string(chosen));
}

void Cases(benchmark::internal::Benchmark* b) {
  for (int64_t p : {0, 1}) {
    for (int64_t size : {1, 2, 4, 8}) b->Args({p, size, 1});
  }
  for (int64_t p : {2, 3}) {
    for (int64_t size : {1, 2, 4, 8, 16}) b->Args({p, size, 1});
  }
  // 8 GPUs x 4 replicas, including requests that must reuse GPUs.
  for (int64_t size : {1, 2, 4, 8, 12}) b->Args({0, size, 4});
}
BENCHMARK(BM_Choose)->Apply(Cases)->Unit(benchmark::kMicrosecond);

// Every request size on 16 GPUs (the most sets: 8-of-16, C(16,8) = 12870).
BENCHMARK(BM_Choose)
    ->ArgsProduct({{2, 3}, benchmark::CreateDenseRange(1, 16, 1), {1}})
    ->Name("BM_Choose_16GpuAllSizes")
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
