// MIG placement geometry for dynamic MIG (issue 26): a GPU's GPU-instance
// profiles with their possible placements, the counters each placement
// consumes, and the checks the Kubernetes scheduler makes with them.
//
// The model, per GPU in MIG mode:
//   - memory slices 0..7, one counter each ("memory-slice-<k>", value 1): a
//     placement {start, size} consumes 1 of each slice it covers, so two
//     placements that overlap can never be allocated together;
//   - "compute-slices" (7 on A100/H100): a placement consumes its profile's
//     compute slices;
//   - the engines NVML reports per profile ("copy-engines", "decoders",
//     "encoders", "jpegs", "ofas"): the GPU's total is taken from the profile
//     that spans the whole GPU (the largest memory-slice count); each
//     placement consumes its profile's counts. This is what limits, e.g., the
//     A100's one "+me" 1g instance (the one OFA).
// Counter names are DNS labels as resource.k8s.io/v1 requires.
//
// Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace danqing::dra {

// One GPU-instance profile as NVML reports it (nvmlDeviceGetGpuInstanceProfileInfoV
// and nvmlDeviceGetGpuInstancePossiblePlacements_v2).
struct MigProfileSpec {
  uint32_t profile_id = 0;  // the driver's id (A100 1g.10gb: 19)
  std::string name;         // "1g.10gb", "1g.10gb+me"
  uint32_t compute_slices = 0;
  uint32_t memory_slices = 0;  // placement size
  uint32_t instance_count = 0;
  uint32_t multiprocessors = 0;
  uint64_t memory_bytes = 0;
  uint32_t copy_engines = 0;
  uint32_t decoders = 0;
  uint32_t encoders = 0;
  uint32_t jpegs = 0;
  uint32_t ofas = 0;
  std::vector<uint32_t> placement_starts;  // in memory slices
};

// A MIG instance that exists on the GPU.
struct MigInstanceSpec {
  uint32_t profile_id = 0;
  uint32_t start = 0;
  uint32_t gpu_instance_id = 0;
  uint32_t compute_instance_id = 0;
  std::string uuid;  // "MIG-..."; empty while the compute instance is missing
};

// One MIG-mode GPU as dynamic MIG sees it.
struct MigGpuSpec {
  int index = -1;
  std::string uuid;     // "GPU-..."
  std::string product;  // "NVIDIA A100-SXM4-80GB"
  uint32_t compute_slices = 7;
  uint32_t memory_slices = 8;
  std::optional<uint32_t> minor;  // /dev/nvidia<minor>, when NVML tells
  std::vector<MigProfileSpec> profiles;
  std::vector<MigInstanceSpec> instances;

  const MigProfileSpec* FindProfile(uint32_t profile_id) const;
  const MigProfileSpec* FindProfile(const std::string& name) const;
};

// The counters of one GPU (name → capacity) and what a placement consumes.
using Counters = std::map<std::string, int64_t>;
Counters GpuCounters(const MigGpuSpec& gpu);
Counters PlacementCounters(const MigProfileSpec& profile, uint32_t start);

// Whether placement {start, size} of `a` and {start, size} of `b` share a
// memory slice.
bool PlacementsOverlap(uint32_t a_start, uint32_t a_size, uint32_t b_start, uint32_t b_size);

// Adds `use` to `used` if that stays within `capacity` (every counter of
// `use` must exist in `capacity`); false, with `used` unchanged, otherwise.
// This is the scheduler's check for devices that consume counters.
bool TryConsume(const Counters& capacity, Counters& used, const Counters& use);
void Release(Counters& used, const Counters& use);

// The A100-80GB profile table and placements as NVML reports them (the fake
// NVML's a100 profiles; nvidia-smi mig -lgip / -lgipp). For tests and
// benchmarks.
MigGpuSpec A100_80GB(int index, std::string uuid);

// A static MIG layout: the (profile id, start) of each instance.
using MigLayout = std::vector<std::pair<uint32_t, uint32_t>>;
// Every maximal valid layout of `gpu` (no instance can be added) built from
// the given profiles: what an operator can choose ahead of time.
std::vector<MigLayout> MaximalLayouts(const MigGpuSpec& gpu,
                                      const std::vector<uint32_t>& profile_ids);

}  // namespace danqing::dra
