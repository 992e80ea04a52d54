// NvmlLibrary: libnvidia-ml.so.1 opened with dlopen() and its symbols resolved.
//
// The NVML library ships with the driver, not with Danqing, so it is loaded
// at run time. Required symbols (init, count, handle, UUID, name) must all be
// present or Open() fails; every other symbol is optional, and a missing one
// disables only the feature that needs it (see Feature and missing()).
// Versioned symbols are preferred (nvmlInit_v2, nvmlDeviceGetPciInfo_v3, ...)
// with a fallback to an older version where its ABI is the same.
//
// Thread-safety: immutable after Open(); the function pointers may be called
// from any thread (NVML itself is thread-safe).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "gpu/nvml_abi.h"

namespace danqing::gpu {

// Where to find the library: an explicit path (--nvml-lib), else the
// DANQING_NVML_LIB environment variable, else "libnvidia-ml.so.1" resolved by
// the dynamic linker's search path.
std::string ResolveNvmlLibraryPath(const std::string& flag_value);

class NvmlLibrary {
 public:
  // Pointers to the functions Danqing calls; null when the library lacks them.
  struct Api {
    // Required.
    nvmlReturn_t (*Init)() = nullptr;  // nvmlInit_v2, else nvmlInit
    nvmlReturn_t (*Shutdown)() = nullptr;
    const char* (*ErrorString)(nvmlReturn_t) = nullptr;
    nvmlReturn_t (*DeviceGetCount)(unsigned int*) = nullptr;
    nvmlReturn_t (*DeviceGetHandleByIndex)(unsigned int, nvmlDevice_t*) = nullptr;
    nvmlReturn_t (*DeviceGetUUID)(nvmlDevice_t, char*, unsigned int) = nullptr;
    nvmlReturn_t (*DeviceGetName)(nvmlDevice_t, char*, unsigned int) = nullptr;
    // System.
    nvmlReturn_t (*SystemGetDriverVersion)(char*, unsigned int) = nullptr;
    nvmlReturn_t (*SystemGetNVMLVersion)(char*, unsigned int) = nullptr;
    nvmlReturn_t (*SystemGetCudaDriverVersion)(int*) = nullptr;
    // Identity.
    nvmlReturn_t (*DeviceGetHandleByUUID)(const char*, nvmlDevice_t*) = nullptr;
    nvmlReturn_t (*DeviceGetIndex)(nvmlDevice_t, unsigned int*) = nullptr;
    nvmlReturn_t (*DeviceGetMinorNumber)(nvmlDevice_t, unsigned int*) = nullptr;
    nvmlReturn_t (*DeviceGetPciInfo)(nvmlDevice_t, nvmlPciInfo_t*) = nullptr;
    nvmlReturn_t (*DeviceGetMemoryInfo)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
    nvmlReturn_t (*DeviceGetCudaComputeCapability)(nvmlDevice_t, int*, int*) = nullptr;
    nvmlReturn_t (*DeviceGetBrand)(nvmlDevice_t, nvmlBrandType_t*) = nullptr;
    nvmlReturn_t (*DeviceGetArchitecture)(nvmlDevice_t, nvmlDeviceArchitecture_t*) = nullptr;
    nvmlReturn_t (*DeviceGetAttributes)(nvmlDevice_t, nvmlDeviceAttributes_t*) = nullptr;
    // MIG.
    nvmlReturn_t (*DeviceGetMigMode)(nvmlDevice_t, unsigned int*, unsigned int*) = nullptr;
    nvmlReturn_t (*DeviceGetMaxMigDeviceCount)(nvmlDevice_t, unsigned int*) = nullptr;
    nvmlReturn_t (*DeviceGetMigDeviceHandleByIndex)(nvmlDevice_t, unsigned int,
                                                    nvmlDevice_t*) = nullptr;
    nvmlReturn_t (*DeviceGetGpuInstanceId)(nvmlDevice_t, unsigned int*) = nullptr;
    nvmlReturn_t (*DeviceGetComputeInstanceId)(nvmlDevice_t, unsigned int*) = nullptr;
    nvmlReturn_t (*DeviceGetGpuInstanceById)(nvmlDevice_t, unsigned int,
                                             nvmlGpuInstance_t*) = nullptr;
    nvmlReturn_t (*GpuInstanceGetInfo)(nvmlGpuInstance_t, nvmlGpuInstanceInfo_t*) = nullptr;
    nvmlReturn_t (*DeviceGetGpuInstanceProfileInfo)(nvmlDevice_t, unsigned int,
                                                    nvmlGpuInstanceProfileInfo_t*) = nullptr;
    nvmlReturn_t (*DeviceGetGpuInstanceProfileInfoV)(nvmlDevice_t, unsigned int,
                                                     nvmlGpuInstanceProfileInfo_v2_t*) = nullptr;
    // Topology.
    nvmlReturn_t (*DeviceGetTopologyCommonAncestor)(nvmlDevice_t, nvmlDevice_t,
                                                    nvmlGpuTopologyLevel_t*) = nullptr;
    nvmlReturn_t (*DeviceGetNvLinkState)(nvmlDevice_t, unsigned int,
                                         nvmlEnableState_t*) = nullptr;
    nvmlReturn_t (*DeviceGetNvLinkRemotePciInfo)(nvmlDevice_t, unsigned int,
                                                 nvmlPciInfo_t*) = nullptr;
    // Sensors.
    nvmlReturn_t (*DeviceGetUtilizationRates)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
    nvmlReturn_t (*DeviceGetTemperature)(nvmlDevice_t, nvmlTemperatureSensors_t,
                                         unsigned int*) = nullptr;
    nvmlReturn_t (*DeviceGetPowerUsage)(nvmlDevice_t, unsigned int*) = nullptr;
    nvmlReturn_t (*DeviceGetClockInfo)(nvmlDevice_t, nvmlClockType_t, unsigned int*) = nullptr;
    nvmlReturn_t (*DeviceGetClockEventReasons)(nvmlDevice_t, unsigned long long*) = nullptr;
    nvmlReturn_t (*DeviceGetTotalEccErrors)(nvmlDevice_t, nvmlMemoryErrorType_t,
                                            nvmlEccCounterType_t, unsigned long long*) = nullptr;
    nvmlReturn_t (*DeviceGetRetiredPagesPendingStatus)(nvmlDevice_t,
                                                       nvmlEnableState_t*) = nullptr;
    nvmlReturn_t (*DeviceGetRemappedRows)(nvmlDevice_t, unsigned int*, unsigned int*,
                                          unsigned int*, unsigned int*) = nullptr;
    nvmlReturn_t (*DeviceGetComputeRunningProcesses)(nvmlDevice_t, unsigned int*,
                                                     nvmlProcessInfo_t*) = nullptr;
    nvmlReturn_t (*DeviceGetProcessUtilization)(nvmlDevice_t, nvmlProcessUtilizationSample_t*,
                                                unsigned int*, unsigned long long) = nullptr;
    // Events.
    nvmlReturn_t (*EventSetCreate)(nvmlEventSet_t*) = nullptr;
    nvmlReturn_t (*DeviceGetSupportedEventTypes)(nvmlDevice_t, unsigned long long*) = nullptr;
    nvmlReturn_t (*DeviceRegisterEvents)(nvmlDevice_t, unsigned long long,
                                         nvmlEventSet_t) = nullptr;
    nvmlReturn_t (*EventSetWait)(nvmlEventSet_t, nvmlEventData_t*, unsigned int) = nullptr;
    nvmlReturn_t (*EventSetFree)(nvmlEventSet_t) = nullptr;
  };

  // Opens the library at `path` (a file path or a bare soname). UNAVAILABLE
  // with dlerror()'s text when it cannot be loaded; INVALID_ARGUMENT naming
  // the symbols when a required one is missing.
  static Result<std::unique_ptr<NvmlLibrary>> Open(const std::string& path);

  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  const Api& api() const { return api_; }
  const std::string& path() const { return path_; }  // as resolved by the loader

  // Optional features switched off because their symbols are missing, each
  // as "<feature> (<symbol>)", e.g. "remapped rows (nvmlDeviceGetRemappedRows)".
  const std::vector<std::string>& missing() const { return missing_; }

  // True when DeviceGetComputeRunningProcesses is the _v3 symbol, whose entry
  // size some R535 drivers changed (see ProcessInfoStride).
  bool processes_v3() const { return processes_v3_; }

  // NVML's text for a return code ("GPU is lost"); works before init.
  std::string ErrorString(nvmlReturn_t code) const;

 private:
  NvmlLibrary() = default;
  void* handle_ = nullptr;
  std::string path_;
  Api api_;
  std::vector<std::string> missing_;
  bool processes_v3_ = false;
};

// The size of one entry nvmlDeviceGetComputeRunningProcesses_v3 writes.
// Drivers 535.43 to 535.86 wrote a 32-byte nvmlProcessInfo_v3_t (v2 plus
// usedGpuCcProtectedMemory) under that symbol; 535.98 went back to the 24-byte
// v2 entry, as every other driver uses. Reading 24-byte entries from the
// former gives wrong PIDs from the second process on, and a buffer sized for
// them is overrun. `driver_version`: nvmlSystemGetDriverVersion's text.
size_t ProcessInfoStride(std::string_view driver_version);

// Maps an NVML return code to a Status: "<call>: <NVML text> (<code>)".
// GPU_IS_LOST → DEVICE_LOST, NOT_SUPPORTED → NOT_SUPPORTED, NOT_FOUND →
// NOT_FOUND, UNINITIALIZED/DRIVER_NOT_LOADED/LIBRARY_NOT_FOUND → UNAVAILABLE,
// NO_PERMISSION → PERMISSION_DENIED, INVALID_ARGUMENT → INVALID_ARGUMENT,
// TIMEOUT → DEADLINE_EXCEEDED, anything else → INTERNAL.
Status NvmlStatus(const NvmlLibrary& lib, nvmlReturn_t code, std::string_view call);

}  // namespace danqing::gpu
