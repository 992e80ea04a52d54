// NvmlMigControl: dynamic MIG's MigControl (dynamic_mig.h) over NVML.
//
// Opens libnvidia-ml.so.1 itself (dlopen; the process-wide library is shared
// with the agent's NvmlLibrary when both name the same file, and nvmlInit is
// reference counted) and resolves the MIG create/destroy entry points:
// nvmlDeviceGetGpuInstanceProfileInfoV (v2), ..PossiblePlacements_v2,
// nvmlDeviceCreateGpuInstanceWithPlacement, nvmlDeviceGetGpuInstances,
// nvmlGpuInstanceGetInfo, nvmlGpuInstanceGetComputeInstanceProfileInfo,
// nvmlGpuInstanceCreateComputeInstance, nvmlGpuInstanceGetComputeInstanceById,
// nvmlComputeInstanceDestroy, nvmlGpuInstanceDestroy and the MIG device
// handle queries. NVML codes map to Status codes: NOT_SUPPORTED →
// FAILED_PRECONDITION for a GPU not in MIG mode, INSUFFICIENT_RESOURCES →
// RESOURCE_EXHAUSTED, IN_USE → FAILED_PRECONDITION, GPU_IS_LOST → DEVICE_LOST,
// INVALID_ARGUMENT → INVALID_ARGUMENT, others INTERNAL; messages name the call
// and NVML's error string.
//
// Thread-safety: NVML is thread-safe; so is this class.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "dra/dynamic_mig.h"

namespace danqing::dra {

class NvmlMigControl : public MigControl {
 public:
  // UNAVAILABLE when the library cannot be opened, lacks an entry point, or
  // nvmlInit fails.
  static Result<std::unique_ptr<NvmlMigControl>> Open(const std::string& library_path);
  ~NvmlMigControl() override;

  Result<MigGpuSpec> Describe(int gpu_index) override;
  Result<uint32_t> CreateGpuInstance(int gpu_index, uint32_t profile_id, uint32_t start) override;
  Result<uint32_t> CreateComputeInstance(int gpu_index, uint32_t gi) override;
  Status DestroyComputeInstance(int gpu_index, uint32_t gi, uint32_t ci) override;
  Status DestroyGpuInstance(int gpu_index, uint32_t gi) override;
  Result<std::string> MigUuid(int gpu_index, uint32_t gi, uint32_t ci) override;

  struct Api;

 private:
  explicit NvmlMigControl(std::unique_ptr<Api> api);
  std::unique_ptr<Api> api_;
};

}  // namespace danqing::dra
