// Fake NVML: creating and destroying MIG GPU and compute instances, the calls
// a dynamic-MIG driver makes (placement queries, create with placement,
// compute-instance profile info, destroy).
//
// The model: a GPU instance is a MigDevice of its GPU; it becomes a MIG device
// (enumerated, with a handle and a UUID a caller can see) once its one compute
// instance exists. The fake supports one compute instance per GPU instance,
// spanning it; the compute-instance profile that spans the GPU instance is the
// only one reported as supported.
//
// Return codes follow nvml.h's documentation of each call:
//   - a GPU not in MIG mode: NOT_SUPPORTED (create); instance handles of a GPU
//     that left MIG mode: INVALID_ARGUMENT (as with every stale handle here);
//   - an unknown GPU-instance profile id or a placement that is not one of the
//     profile's possible placements: INVALID_ARGUMENT;
//   - a placement overlapping an existing GPU instance, or the profile's
//     instance count reached: INSUFFICIENT_RESOURCES;
//   - destroying a GPU instance that still has its compute instance, or either
//     instance while processes run in it: IN_USE.
// Every create and destroy queues nvmlEventMigConfigChange on the GPU.
// Injected failures ("fail" control command) apply per function name, so
// `nvmlGpuInstanceCreateComputeInstance` can fail after the GPU instance was
// created.
//
// Thread-safety: each entry point holds the state mutex for its duration.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "calls.h"
#include "gpu/nvml_abi.h"
#include "state.h"

namespace {

using fake_nvml::copy_truncated;
using fake_nvml::DeviceRef;
using fake_nvml::Gpu;
using fake_nvml::MigDevice;
using fake_nvml::MigProfile;
using fake_nvml::spanning_ci_profile;
using fake_nvml::State;
using fake_nvml::with_handle;

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
constexpr unsigned kCiProfileInfoV2 = nvmlComputeInstanceProfileInfo_v2;
constexpr unsigned kCiProfileInfoV3 = nvmlComputeInstanceProfileInfo_v3;
#pragma GCC diagnostic pop

// Serial number for the UUIDs of created MIG devices; guarded by the state
// mutex.
unsigned long long g_mig_serial = 0;

// Runs `body` on a full-GPU handle with the state mutex held; a MIG device
// handle is INVALID_ARGUMENT.
template <typename Body>
nvmlReturn_t gpu_call(std::string_view function, nvmlDevice_t handle, Body&& body) {
  return with_handle(function, handle, [&body](State& state, DeviceRef& device) {
    if (device.mig != nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    return body(state, device);
  });
}

const MigProfile* profile_by_id(const Gpu& gpu, unsigned profile_id) {
  for (const MigProfile& p : gpu.mig_profiles) {
    if (p.id == profile_id) return &p;
  }
  return nullptr;
}

// Placements of a GPU-instance profile, as the A100/H100 report them: starts
// at multiples of the placement size (in memory slices) where both the memory
// slices (8) and the compute slices (7) still fit.
std::vector<nvmlGpuInstancePlacement_t> possible_placements(const MigProfile& p) {
  std::vector<nvmlGpuInstancePlacement_t> out;
  const unsigned size = p.memory_slices;
  if (size == 0) return out;
  for (unsigned start = 0; start + size <= fake_nvml::kMigMemorySlices; start += size) {
    if (start + p.slice_count > fake_nvml::kMigComputeSlices && size < fake_nvml::kMigMemorySlices)
      break;
    out.push_back(nvmlGpuInstancePlacement_t{start, size});
  }
  return out;
}

}  // namespace

namespace fake_nvml {

// NVML_COMPUTE_INSTANCE_PROFILE_* constant spanning `slices` compute slices.
unsigned spanning_ci_profile(unsigned slices) {
  switch (slices) {
    case 1: return NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE;
    case 2: return NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE;
    case 3: return NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE;
    case 4: return NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE;
    case 6: return NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE;
    case 7: return NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE;
    case 8: return NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE;
    default: return NVML_COMPUTE_INSTANCE_PROFILE_COUNT;
  }
}

}  // namespace fake_nvml

namespace {

bool uuid_taken(State& state, const std::string& uuid) {
  for (const Gpu& g : state.node().gpus) {
    if (g.uuid == uuid) return true;
    for (const MigDevice& d : g.mig.devices) {
      if (d.uuid == uuid) return true;
    }
  }
  return false;
}

std::string new_mig_uuid(State& state, unsigned gpu, unsigned gi) {
  for (;;) {
    const unsigned long long serial = ++g_mig_serial;
    char buffer[64];
    std::snprintf(buffer, sizeof(buffer), "MIG-%08x-%04x-4d1e-8000-%012llx", 0xd1a60000U + gpu,
                  gi & 0xFFFFU, serial & 0xFFFFFFFFFFFFULL);
    std::string uuid(buffer);
    if (!uuid_taken(state, uuid)) return uuid;
  }
}

bool has_processes(const Gpu& gpu, unsigned gpu_instance_id) {
  return std::any_of(gpu.processes.begin(), gpu.processes.end(), [gpu_instance_id](const auto& p) {
    return p.gpu_instance_id == gpu_instance_id;
  });
}

void queue_mig_change(State& state, unsigned gpu) {
  fake_nvml::QueuedEvent event;
  event.gpu = gpu;
  event.type = nvmlEventMigConfigChange;
  state.queue_event(event);
}

MigDevice* mutable_instance(Gpu& gpu, unsigned gpu_instance_id) {
  for (MigDevice& d : gpu.mig.devices) {
    if (d.gpu_instance_id == gpu_instance_id) return &d;
  }
  return nullptr;
}

template <typename Info>
void fill_ci_profile(const MigProfile& p, unsigned ci_profile, Info& info) {
  info.id = ci_profile;
  info.sliceCount = p.slice_count;
  info.instanceCount = 1;
  info.multiprocessorCount = p.multiprocessor_count;
  info.sharedCopyEngineCount = p.copy_engine_count;
  info.sharedDecoderCount = p.decoder_count;
  info.sharedEncoderCount = p.encoder_count;
  info.sharedJpegCount = p.jpeg_count;
  info.sharedOfaCount = p.ofa_count;
}

// The two compute-instance profile queries: runs `body(profile)` on a
// GPU-instance handle once `info` is set, its version is one the call knows
// (the V call: v2 or v3, else ARGUMENT_VERSION_MISMATCH), and (`profile`,
// `eng_profile`) name a compute-instance profile (else INVALID_ARGUMENT) that
// spans the GPU instance, the only one supported (else NOT_SUPPORTED).
template <typename Info, typename Body>
nvmlReturn_t ci_profile_call(std::string_view function, nvmlGpuInstance_t handle, unsigned profile,
                             unsigned eng_profile, Info* info, Body&& body) {
  return with_handle(function, handle, [&](State&, DeviceRef& d) {
    if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if constexpr (std::is_same_v<Info, nvmlComputeInstanceProfileInfo_v2_t>) {
      if (info->version != kCiProfileInfoV2 && info->version != kCiProfileInfoV3) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
      }
    }
    if (profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT ||
        eng_profile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    const MigProfile& p = d.gpu->profile_of(*d.mig);
    if (spanning_ci_profile(p.slice_count) != profile) return NVML_ERROR_NOT_SUPPORTED;
    return body(p);
  });
}

}  // namespace

extern "C" {

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    nvmlDevice_t device, unsigned int profileId, nvmlGpuInstancePlacement_t* placements,
    unsigned int* count) {
  return gpu_call(__func__, device, [=](State&, DeviceRef& d) {
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d.gpu->mig_capable()) return NVML_ERROR_NOT_SUPPORTED;
    const MigProfile* p = profile_by_id(*d.gpu, profileId);
    if (p == nullptr) return NVML_ERROR_NOT_SUPPORTED;
    const auto all = possible_placements(*p);
    const auto n = static_cast<unsigned>(all.size());
    if (placements == nullptr) {
      *count = n;
      return NVML_SUCCESS;
    }
    if (*count < n) {
      *count = n;
      return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    std::copy(all.begin(), all.end(), placements);
    *count = n;
    return NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(
    nvmlDevice_t device, unsigned int profileId, const nvmlGpuInstancePlacement_t* placement,
    nvmlGpuInstance_t* gpuInstance) {
  return gpu_call(__func__, device, [=](State& state, DeviceRef& d) {
    if (placement == nullptr || gpuInstance == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    Gpu& gpu = *d.gpu;
    if (!gpu.mig_capable() || !gpu.mig_enabled()) return NVML_ERROR_NOT_SUPPORTED;
    const MigProfile* p = profile_by_id(gpu, profileId);
    if (p == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const auto all = possible_placements(*p);
    if (std::none_of(all.begin(), all.end(), [placement](const nvmlGpuInstancePlacement_t& q) {
          return q.start == placement->start && q.size == placement->size;
        })) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    unsigned same_profile = 0;
    for (const MigDevice& m : gpu.mig.devices) {
      const MigProfile& mp = gpu.profile_of(m);
      const unsigned a0 = m.placement_start;
      const unsigned a1 = a0 + mp.memory_slices;
      const unsigned b0 = placement->start;
      const unsigned b1 = b0 + placement->size;
      if (a0 < b1 && b0 < a1) return NVML_ERROR_INSUFFICIENT_RESOURCES;
      if (mp.id == p->id) ++same_profile;
    }
    if (same_profile >= p->instance_count || gpu.mig.devices.size() >= fake_nvml::kMaxMigDevices) {
      return NVML_ERROR_INSUFFICIENT_RESOURCES;
    }
    unsigned id = 1;
    while (gpu.find_mig_by_gi(id) != nullptr) ++id;
    MigDevice created;
    created.profile = static_cast<std::size_t>(p - gpu.mig_profiles.data());
    created.gpu_instance_id = id;
    created.compute_instance_id = 0;
    created.placement_start = placement->start;
    created.has_compute_instance = false;
    created.uuid = new_mig_uuid(state, d.index, id);
    gpu.mig.devices.push_back(std::move(created));
    *gpuInstance = state.gpu_instance_handle(d.index, id);
    queue_mig_change(state, d.index);
    return NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId,
                                                     nvmlGpuInstance_t* gpuInstances,
                                                     unsigned int* count) {
  return gpu_call(__func__, device, [=](State& state, DeviceRef& d) {
    if (gpuInstances == nullptr || count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d.gpu->mig_capable() || !d.gpu->mig_enabled()) return NVML_ERROR_NOT_SUPPORTED;
    const MigProfile* p = profile_by_id(*d.gpu, profileId);
    if (p == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned n = 0;
    for (const MigDevice& m : d.gpu->mig.devices) {
      if (d.gpu->profile_of(m).id == profileId)
        gpuInstances[n++] = state.gpu_instance_handle(d.index, m.gpu_instance_id);
    }
    *count = n;
    return NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance) {
  return with_handle(__func__, gpuInstance, [](State& state, DeviceRef& d) {
    if (d.mig->has_compute_instance || has_processes(*d.gpu, d.mig->gpu_instance_id))
      return NVML_ERROR_IN_USE;
    auto& devices = d.gpu->mig.devices;
    const unsigned id = d.mig->gpu_instance_id;
    devices.erase(std::remove_if(devices.begin(), devices.end(),
                                 [id](const MigDevice& m) { return m.gpu_instance_id == id; }),
                  devices.end());
    queue_mig_change(state, d.index);
    return NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(
    nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,
    nvmlComputeInstanceProfileInfo_t* info) {
  return ci_profile_call(__func__, gpuInstance, profile, engProfile, info,
                         [=](const MigProfile& p) {
                           *info = nvmlComputeInstanceProfileInfo_t{};
                           fill_ci_profile(p, profile, *info);
                           return NVML_SUCCESS;
                         });
}

FAKE_NVML_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(
    nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,
    nvmlComputeInstanceProfileInfo_v2_t* info) {
  return ci_profile_call(
      __func__, gpuInstance, profile, engProfile, info, [=](const MigProfile& p) {
        const std::string name =
            "MIG " + std::to_string(p.slice_count) + "c." + std::string(p.short_name());
        if (info->version == kCiProfileInfoV3) {
          auto* v3 = reinterpret_cast<nvmlComputeInstanceProfileInfo_v3_t*>(info);
          *v3 = nvmlComputeInstanceProfileInfo_v3_t{};
          v3->version = kCiProfileInfoV3;
          fill_ci_profile(p, profile, *v3);
          copy_truncated(name, v3->name);
          return NVML_SUCCESS;
        }
        *info = nvmlComputeInstanceProfileInfo_v2_t{};
        info->version = kCiProfileInfoV2;
        fill_ci_profile(p, profile, *info);
        copy_truncated(name, info->name);
        return NVML_SUCCESS;
      });
}

FAKE_NVML_API nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId, nvmlComputeInstance_t* computeInstance) {
  return with_handle(__func__, gpuInstance, [=](State& state, DeviceRef& d) {
    if (computeInstance == nullptr || profileId >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    const MigProfile& p = d.gpu->profile_of(*d.mig);
    if (spanning_ci_profile(p.slice_count) != profileId) return NVML_ERROR_NOT_SUPPORTED;
    MigDevice* m = mutable_instance(*d.gpu, d.mig->gpu_instance_id);
    if (m == nullptr) return NVML_ERROR_INVALID_ARGUMENT;  // resolve() found it; cannot happen
    if (m->has_compute_instance) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    m->has_compute_instance = true;
    m->compute_instance_id = 0;
    *computeInstance =
        state.compute_instance_handle(d.index, m->gpu_instance_id, m->compute_instance_id);
    queue_mig_change(state, d.index);
    return NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance) {
  return with_handle(__func__, computeInstance, [](State& state, DeviceRef& d) {
    if (has_processes(*d.gpu, d.mig->gpu_instance_id)) return NVML_ERROR_IN_USE;
    MigDevice* m = mutable_instance(*d.gpu, d.mig->gpu_instance_id);
    if (m == nullptr) return NVML_ERROR_INVALID_ARGUMENT;  // resolve() found it; cannot happen
    m->has_compute_instance = false;
    queue_mig_change(state, d.index);
    return NVML_SUCCESS;
  });
}

}  // extern "C"
