#include "dra/nvml_mig_control.h"

#include <dlfcn.h>

#include <cstring>
#include <utility>
#include <vector>

#include "gpu/nvml_abi.h"

namespace danqing::dra {

#define DANQING_MIG_NVML_FUNCTIONS(X)                                                              \
  X(nvmlInit_v2)                                                                                   \
  X(nvmlShutdown)                                                                                  \
  X(nvmlErrorString) X(nvmlDeviceGetHandleByIndex_v2) X(nvmlDeviceGetUUID) X(nvmlDeviceGetName) X( \
      nvmlDeviceGetMigMode) X(nvmlDeviceGetGpuInstanceProfileInfoV)                                \
      X(nvmlDeviceGetGpuInstancePossiblePlacements_v2) X(nvmlDeviceCreateGpuInstanceWithPlacement) \
          X(nvmlDeviceGetGpuInstances) X(nvmlDeviceGetGpuInstanceById) X(nvmlGpuInstanceGetInfo)   \
              X(nvmlGpuInstanceGetComputeInstanceProfileInfo)                                      \
                  X(nvmlGpuInstanceCreateComputeInstance) X(nvmlGpuInstanceGetComputeInstanceById) \
                      X(nvmlComputeInstanceDestroy) X(nvmlGpuInstanceDestroy)                      \
                          X(nvmlDeviceGetMigDeviceHandleByIndex) X(nvmlDeviceGetGpuInstanceId)     \
                              X(nvmlDeviceGetComputeInstanceId) X(nvmlDeviceGetMaxMigDeviceCount)  \
                                  X(nvmlDeviceGetMinorNumber)

struct NvmlMigControl::Api {
  void* handle = nullptr;
  bool initialised = false;
#define DANQING_DECLARE(name) decltype(&::name) name = nullptr;
  DANQING_MIG_NVML_FUNCTIONS(DANQING_DECLARE)
#undef DANQING_DECLARE

  Status Fail(const char* call, nvmlReturn_t rc) const {
    std::string message = std::string(call) + ": " + nvmlErrorString(rc);
    switch (rc) {
      case NVML_ERROR_INSUFFICIENT_RESOURCES: return ResourceExhausted(std::move(message));
      case NVML_ERROR_IN_USE: return FailedPrecondition(std::move(message) + " (in use)");
      case NVML_ERROR_NOT_SUPPORTED: return FailedPrecondition(std::move(message));
      case NVML_ERROR_GPU_IS_LOST: return Status(StatusCode::kDeviceLost, std::move(message));
      case NVML_ERROR_INVALID_ARGUMENT: return InvalidArgument(std::move(message));
      case NVML_ERROR_NOT_FOUND: return NotFound(std::move(message));
      default: return Internal(std::move(message));
    }
  }

  Result<nvmlDevice_t> Device(int index) const {
    nvmlDevice_t d = nullptr;
    if (index < 0) return InvalidArgument("GPU index " + std::to_string(index));
    if (const auto rc = nvmlDeviceGetHandleByIndex_v2(static_cast<unsigned>(index), &d);
        rc != NVML_SUCCESS) {
      return Fail("nvmlDeviceGetHandleByIndex_v2", rc);
    }
    return d;
  }

  Result<nvmlGpuInstance_t> Gi(int index, uint32_t gi) const {
    auto d = Device(index);
    if (!d.ok()) return d.status();
    nvmlGpuInstance_t h = nullptr;
    if (const auto rc = nvmlDeviceGetGpuInstanceById(*d, gi, &h); rc != NVML_SUCCESS) {
      return Fail("nvmlDeviceGetGpuInstanceById", rc);
    }
    return h;
  }
};

namespace {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
constexpr unsigned kGiProfileInfoV2 = nvmlGpuInstanceProfileInfo_v2;
#pragma GCC diagnostic pop

unsigned SpanningCiProfile(unsigned slices) {
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

}  // namespace

Result<std::unique_ptr<NvmlMigControl>> NvmlMigControl::Open(const std::string& library_path) {
  auto api = std::make_unique<Api>();
  // RTLD_NODELETE as the agent's own NVML handle (src/gpu/nvml_library.cc):
  // the library's state outlives a dlclose instead of being unmapped under
  // whatever still points into it.
  api->handle = ::dlopen(library_path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (api->handle == nullptr) {
    const char* e = ::dlerror();
    return Unavailable("dynamic MIG: cannot open " + library_path + ": " +
                       (e != nullptr ? e : "?"));
  }
#define DANQING_RESOLVE(name)                                                                 \
  api->name = reinterpret_cast<decltype(api->name)>(::dlsym(api->handle, #name));             \
  if (api->name == nullptr) {                                                                 \
    ::dlclose(api->handle);                                                                   \
    return Unavailable("dynamic MIG: " + library_path + " lacks " #name " (driver too old)"); \
  }
  DANQING_MIG_NVML_FUNCTIONS(DANQING_RESOLVE)
#undef DANQING_RESOLVE
  if (const auto rc = api->nvmlInit_v2(); rc != NVML_SUCCESS) {
    const std::string message = api->nvmlErrorString(rc);
    ::dlclose(api->handle);
    return Unavailable("dynamic MIG: nvmlInit_v2: " + message);
  }
  api->initialised = true;
  return std::unique_ptr<NvmlMigControl>(new NvmlMigControl(std::move(api)));
}

NvmlMigControl::NvmlMigControl(std::unique_ptr<Api> api) : api_(std::move(api)) {}

NvmlMigControl::~NvmlMigControl() {
  if (api_->initialised) api_->nvmlShutdown();
  ::dlclose(api_->handle);
}

Result<MigGpuSpec> NvmlMigControl::Describe(int gpu_index) {
  const Api& a = *api_;
  auto d = a.Device(gpu_index);
  if (!d.ok()) return d.status();
  MigGpuSpec g;
  g.index = gpu_index;
  char buffer[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
  if (const auto rc = a.nvmlDeviceGetUUID(*d, buffer, sizeof(buffer)); rc != NVML_SUCCESS) {
    return a.Fail("nvmlDeviceGetUUID", rc);
  }
  g.uuid = buffer;
  std::memset(buffer, 0, sizeof(buffer));
  if (const auto rc = a.nvmlDeviceGetName(*d, buffer, sizeof(buffer)); rc == NVML_SUCCESS)
    g.product = buffer;
  if (unsigned minor = 0; a.nvmlDeviceGetMinorNumber(*d, &minor) == NVML_SUCCESS) g.minor = minor;
  unsigned current = 0;
  unsigned pending = 0;
  if (const auto rc = a.nvmlDeviceGetMigMode(*d, &current, &pending); rc != NVML_SUCCESS) {
    return a.Fail("nvmlDeviceGetMigMode", rc);
  }
  if (current != NVML_DEVICE_MIG_ENABLE) {
    return FailedPrecondition("GPU " + std::to_string(gpu_index) + " (" + g.uuid +
                              ") is not in MIG mode");
  }
  for (unsigned constant = 0; constant < NVML_GPU_INSTANCE_PROFILE_COUNT; ++constant) {
    nvmlGpuInstanceProfileInfo_v2_t info{};
    info.version = kGiProfileInfoV2;
    const auto rc = a.nvmlDeviceGetGpuInstanceProfileInfoV(*d, constant, &info);
    if (rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_INVALID_ARGUMENT) continue;
    if (rc != NVML_SUCCESS) return a.Fail("nvmlDeviceGetGpuInstanceProfileInfoV", rc);
    MigProfileSpec p;
    p.profile_id = info.id;
    p.name = info.name;
    if (p.name.rfind("MIG ", 0) == 0) p.name = p.name.substr(4);
    p.compute_slices = info.sliceCount;
    p.instance_count = info.instanceCount;
    p.multiprocessors = info.multiprocessorCount;
    p.memory_bytes = info.memorySizeMB * (1ULL << 20);
    p.copy_engines = info.copyEngineCount;
    p.decoders = info.decoderCount;
    p.encoders = info.encoderCount;
    p.jpegs = info.jpegCount;
    p.ofas = info.ofaCount;
    unsigned count = 0;
    if (const auto prc =
            a.nvmlDeviceGetGpuInstancePossiblePlacements_v2(*d, info.id, nullptr, &count);
        prc != NVML_SUCCESS) {
      return a.Fail("nvmlDeviceGetGpuInstancePossiblePlacements_v2", prc);
    }
    std::vector<nvmlGpuInstancePlacement_t> placements(count);
    if (count > 0) {
      if (const auto prc = a.nvmlDeviceGetGpuInstancePossiblePlacements_v2(
              *d, info.id, placements.data(), &count);
          prc != NVML_SUCCESS) {
        return a.Fail("nvmlDeviceGetGpuInstancePossiblePlacements_v2", prc);
      }
    }
    placements.resize(count);
    for (const auto& pl : placements) {
      p.memory_slices = pl.size;
      p.placement_starts.push_back(pl.start);
    }
    // Instances of this profile.
    std::vector<nvmlGpuInstance_t> gis(std::max(1U, info.instanceCount));
    unsigned n = 0;
    if (const auto grc = a.nvmlDeviceGetGpuInstances(*d, info.id, gis.data(), &n);
        grc != NVML_SUCCESS) {
      return a.Fail("nvmlDeviceGetGpuInstances", grc);
    }
    for (unsigned i = 0; i < n && i < gis.size(); ++i) {
      nvmlGpuInstanceInfo_t gi{};
      if (const auto irc = a.nvmlGpuInstanceGetInfo(gis[i], &gi); irc != NVML_SUCCESS) {
        return a.Fail("nvmlGpuInstanceGetInfo", irc);
      }
      MigInstanceSpec inst;
      inst.profile_id = gi.profileId;
      inst.start = gi.placement.start;
      inst.gpu_instance_id = gi.id;
      nvmlComputeInstance_t ci = nullptr;
      if (a.nvmlGpuInstanceGetComputeInstanceById(gis[i], 0, &ci) == NVML_SUCCESS) {
        inst.compute_instance_id = 0;
        auto uuid = MigUuid(gpu_index, gi.id, 0);
        if (uuid.ok()) inst.uuid = *uuid;
      }
      g.instances.push_back(std::move(inst));
    }
    g.profiles.push_back(std::move(p));
  }
  return g;
}

Result<uint32_t> NvmlMigControl::CreateGpuInstance(int gpu_index, uint32_t profile_id,
                                                   uint32_t start) {
  const Api& a = *api_;
  auto d = a.Device(gpu_index);
  if (!d.ok()) return d.status();
  // The placement's size is the profile's: read it from the possible placements.
  unsigned count = 0;
  if (const auto rc =
          a.nvmlDeviceGetGpuInstancePossiblePlacements_v2(*d, profile_id, nullptr, &count);
      rc != NVML_SUCCESS) {
    return a.Fail("nvmlDeviceGetGpuInstancePossiblePlacements_v2", rc);
  }
  std::vector<nvmlGpuInstancePlacement_t> placements(count);
  if (count > 0) {
    if (const auto rc = a.nvmlDeviceGetGpuInstancePossiblePlacements_v2(*d, profile_id,
                                                                        placements.data(), &count);
        rc != NVML_SUCCESS) {
      return a.Fail("nvmlDeviceGetGpuInstancePossiblePlacements_v2", rc);
    }
  }
  nvmlGpuInstancePlacement_t placement{start, 0};
  for (unsigned i = 0; i < count; ++i) {
    if (placements[i].start == start) placement.size = placements[i].size;
  }
  if (placement.size == 0) {
    return InvalidArgument("profile " + std::to_string(profile_id) + " has no placement at " +
                           std::to_string(start));
  }
  nvmlGpuInstance_t gi = nullptr;
  if (const auto rc = a.nvmlDeviceCreateGpuInstanceWithPlacement(*d, profile_id, &placement, &gi);
      rc != NVML_SUCCESS) {
    return a.Fail("nvmlDeviceCreateGpuInstanceWithPlacement", rc);
  }
  nvmlGpuInstanceInfo_t info{};
  if (const auto rc = a.nvmlGpuInstanceGetInfo(gi, &info); rc != NVML_SUCCESS) {
    (void)a.nvmlGpuInstanceDestroy(gi);
    return a.Fail("nvmlGpuInstanceGetInfo", rc);
  }
  return info.id;
}

Result<uint32_t> NvmlMigControl::CreateComputeInstance(int gpu_index, uint32_t gi_id) {
  const Api& a = *api_;
  auto gi = a.Gi(gpu_index, gi_id);
  if (!gi.ok()) return gi.status();
  // The compute-instance profile spanning the GPU instance: the largest
  // supported one.
  for (unsigned slices : {8U, 7U, 6U, 4U, 3U, 2U, 1U}) {
    const unsigned profile = SpanningCiProfile(slices);
    nvmlComputeInstanceProfileInfo_t info{};
    const auto rc = a.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        *gi, profile, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &info);
    if (rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_INVALID_ARGUMENT) continue;
    if (rc != NVML_SUCCESS) return a.Fail("nvmlGpuInstanceGetComputeInstanceProfileInfo", rc);
    nvmlComputeInstance_t ci = nullptr;
    if (const auto crc = a.nvmlGpuInstanceCreateComputeInstance(*gi, info.id, &ci);
        crc != NVML_SUCCESS) {
      return a.Fail("nvmlGpuInstanceCreateComputeInstance", crc);
    }
    return 0U;  // the one compute instance of the GPU instance
  }
  return FailedPrecondition("GPU instance " + std::to_string(gi_id) +
                            " supports no compute-instance profile");
}

Status NvmlMigControl::DestroyComputeInstance(int gpu_index, uint32_t gi_id, uint32_t ci_id) {
  const Api& a = *api_;
  auto gi = a.Gi(gpu_index, gi_id);
  if (!gi.ok()) return gi.status();
  nvmlComputeInstance_t ci = nullptr;
  if (const auto rc = a.nvmlGpuInstanceGetComputeInstanceById(*gi, ci_id, &ci);
      rc != NVML_SUCCESS) {
    return a.Fail("nvmlGpuInstanceGetComputeInstanceById", rc);
  }
  if (const auto rc = a.nvmlComputeInstanceDestroy(ci); rc != NVML_SUCCESS)
    return a.Fail("nvmlComputeInstanceDestroy", rc);
  return Status::Ok();
}

Status NvmlMigControl::DestroyGpuInstance(int gpu_index, uint32_t gi_id) {
  const Api& a = *api_;
  auto gi = a.Gi(gpu_index, gi_id);
  if (!gi.ok()) return gi.status();
  if (const auto rc = a.nvmlGpuInstanceDestroy(*gi); rc != NVML_SUCCESS)
    return a.Fail("nvmlGpuInstanceDestroy", rc);
  return Status::Ok();
}

Result<std::string> NvmlMigControl::MigUuid(int gpu_index, uint32_t gi, uint32_t ci) {
  const Api& a = *api_;
  auto d = a.Device(gpu_index);
  if (!d.ok()) return d.status();
  unsigned max = 0;
  if (const auto rc = a.nvmlDeviceGetMaxMigDeviceCount(*d, &max); rc != NVML_SUCCESS) {
    return a.Fail("nvmlDeviceGetMaxMigDeviceCount", rc);
  }
  for (unsigned i = 0; i < max; ++i) {
    nvmlDevice_t mig = nullptr;
    if (a.nvmlDeviceGetMigDeviceHandleByIndex(*d, i, &mig) != NVML_SUCCESS) continue;
    unsigned g = 0;
    unsigned c = 0;
    if (a.nvmlDeviceGetGpuInstanceId(mig, &g) != NVML_SUCCESS ||
        a.nvmlDeviceGetComputeInstanceId(mig, &c) != NVML_SUCCESS) {
      continue;
    }
    if (g != gi || c != ci) continue;
    char buffer[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    if (const auto rc = a.nvmlDeviceGetUUID(mig, buffer, sizeof(buffer)); rc != NVML_SUCCESS) {
      return a.Fail("nvmlDeviceGetUUID", rc);
    }
    return std::string(buffer);
  }
  return NotFound("no MIG device for GPU instance " + std::to_string(gi) + ", compute instance " +
                  std::to_string(ci));
}

}  // namespace danqing::dra
