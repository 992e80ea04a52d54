#include "gpu/nvml_library.h"

#include <dlfcn.h>

#include <charconv>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <string_view>

#include "common/read_file.h"

namespace danqing::gpu {
namespace {

constexpr const char* kDefaultSoname = "libnvidia-ml.so.1";

// Binds `slot` to the first of `names` the library exports. Returns the bound
// name, or nullptr when none is present.
template <typename Fn>
const char* Bind(void* handle, Fn& slot, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (void* sym = dlsym(handle, name)) {
      slot = reinterpret_cast<Fn>(sym);
      return name;
    }
  }
  slot = nullptr;
  return nullptr;
}

}  // namespace

std::string ResolveNvmlLibraryPath(const std::string& flag_value) {
  if (!flag_value.empty()) return flag_value;
  if (const char* env = std::getenv("DANQING_NVML_LIB"); env != nullptr && *env != '\0') {
    return env;
  }
  return kDefaultSoname;
}

Result<std::unique_ptr<NvmlLibrary>> NvmlLibrary::Open(const std::string& path) {
  const std::string target = path.empty() ? kDefaultSoname : path;
  // A path (not a soname the dynamic linker searches for) may name a FIFO,
  // whose open() inside dlopen would block the start or the reload, and the
  // thread that takes SIGTERM with it: refuse what is not a regular file.
  if (target.find('/') != std::string::npos) {
    if (Status st = CheckRegularFile(target); st.code() == StatusCode::kFailedPrecondition) {
      return Unavailable("cannot load NVML library '" + target + "': " + st.message());
    }
  }
  dlerror();  // clear
  // RTLD_NODELETE: the driver's library starts threads of its own; it stays
  // mapped for the life of the process even after dlclose().
  void* handle = dlopen(target.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (handle == nullptr) {
    const char* why = dlerror();
    return Unavailable("cannot load NVML library '" + target + "': " +
                       (why != nullptr ? why : "unknown dlopen error") +
                       " (is the NVIDIA driver installed? set --nvml-lib or DANQING_NVML_LIB)");
  }
  std::unique_ptr<NvmlLibrary> lib(new NvmlLibrary());
  lib->handle_ = handle;
  lib->path_ = target;
  // Report the file the dynamic linker actually chose.
  if (Dl_info info{}; dladdr(dlsym(handle, "nvmlErrorString"), &info) != 0 &&
                      info.dli_fname != nullptr) {
    lib->path_ = info.dli_fname;
  }

  Api& a = lib->api_;
  std::string missing_required;
  auto required = [&](auto& slot, std::initializer_list<const char*> names) {
    if (Bind(handle, slot, names) == nullptr) {
      if (!missing_required.empty()) missing_required += ", ";
      missing_required += *names.begin();
    }
  };
  // Returns the symbol bound, nullptr when none was.
  auto optional = [&](const char* feature, auto& slot, std::initializer_list<const char*> names) {
    const char* bound = Bind(handle, slot, names);
    if (bound == nullptr) lib->missing_.push_back(std::string(feature) + " (" + *names.begin() + ")");
    return bound;
  };

  required(a.Init, {"nvmlInit_v2", "nvmlInit"});
  required(a.Shutdown, {"nvmlShutdown"});
  required(a.ErrorString, {"nvmlErrorString"});
  required(a.DeviceGetCount, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"});
  required(a.DeviceGetHandleByIndex,
           {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"});
  required(a.DeviceGetUUID, {"nvmlDeviceGetUUID"});
  required(a.DeviceGetName, {"nvmlDeviceGetName"});
  if (!missing_required.empty()) {
    return InvalidArgument("NVML library '" + lib->path_ +
                           "' lacks required symbols: " + missing_required);
  }

  optional("driver version", a.SystemGetDriverVersion, {"nvmlSystemGetDriverVersion"});
  optional("NVML version", a.SystemGetNVMLVersion, {"nvmlSystemGetNVMLVersion"});
  optional("CUDA driver version", a.SystemGetCudaDriverVersion,
           {"nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"});
  optional("lookup by UUID", a.DeviceGetHandleByUUID, {"nvmlDeviceGetHandleByUUID"});
  optional("device index", a.DeviceGetIndex, {"nvmlDeviceGetIndex"});
  optional("minor number", a.DeviceGetMinorNumber, {"nvmlDeviceGetMinorNumber"});
  // The unversioned nvmlDeviceGetPciInfo writes an older, shorter struct.
  optional("PCI info", a.DeviceGetPciInfo, {"nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2"});
  optional("memory info", a.DeviceGetMemoryInfo, {"nvmlDeviceGetMemoryInfo"});
  optional("compute capability", a.DeviceGetCudaComputeCapability,
           {"nvmlDeviceGetCudaComputeCapability"});
  optional("brand", a.DeviceGetBrand, {"nvmlDeviceGetBrand"});
  optional("architecture", a.DeviceGetArchitecture, {"nvmlDeviceGetArchitecture"});
  optional("attributes", a.DeviceGetAttributes,
           {"nvmlDeviceGetAttributes_v2", "nvmlDeviceGetAttributes"});
  optional("MIG", a.DeviceGetMigMode, {"nvmlDeviceGetMigMode"});
  optional("MIG", a.DeviceGetMaxMigDeviceCount, {"nvmlDeviceGetMaxMigDeviceCount"});
  optional("MIG", a.DeviceGetMigDeviceHandleByIndex, {"nvmlDeviceGetMigDeviceHandleByIndex"});
  optional("MIG", a.DeviceGetGpuInstanceId, {"nvmlDeviceGetGpuInstanceId"});
  optional("MIG", a.DeviceGetComputeInstanceId, {"nvmlDeviceGetComputeInstanceId"});
  optional("MIG profiles", a.DeviceGetGpuInstanceById, {"nvmlDeviceGetGpuInstanceById"});
  optional("MIG profiles", a.GpuInstanceGetInfo, {"nvmlGpuInstanceGetInfo"});
  optional("MIG profiles", a.DeviceGetGpuInstanceProfileInfo,
           {"nvmlDeviceGetGpuInstanceProfileInfo"});
  optional("MIG profile names", a.DeviceGetGpuInstanceProfileInfoV,
           {"nvmlDeviceGetGpuInstanceProfileInfoV"});
  optional("PCIe topology", a.DeviceGetTopologyCommonAncestor,
           {"nvmlDeviceGetTopologyCommonAncestor"});
  optional("NVLink", a.DeviceGetNvLinkState, {"nvmlDeviceGetNvLinkState"});
  optional("NVLink", a.DeviceGetNvLinkRemotePciInfo,
           {"nvmlDeviceGetNvLinkRemotePciInfo_v2", "nvmlDeviceGetNvLinkRemotePciInfo"});
  optional("utilisation", a.DeviceGetUtilizationRates, {"nvmlDeviceGetUtilizationRates"});
  optional("temperature", a.DeviceGetTemperature, {"nvmlDeviceGetTemperature"});
  optional("power", a.DeviceGetPowerUsage, {"nvmlDeviceGetPowerUsage"});
  optional("clocks", a.DeviceGetClockInfo, {"nvmlDeviceGetClockInfo"});
  optional("throttle reasons", a.DeviceGetClockEventReasons,
           {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"});
  optional("ECC counters", a.DeviceGetTotalEccErrors, {"nvmlDeviceGetTotalEccErrors"});
  optional("retired pages", a.DeviceGetRetiredPagesPendingStatus,
           {"nvmlDeviceGetRetiredPagesPendingStatus"});
  optional("remapped rows", a.DeviceGetRemappedRows, {"nvmlDeviceGetRemappedRows"});
  // The unversioned symbol fills the 16-byte v1 struct; only v3/v2 share ours.
  const char* processes = optional("processes", a.DeviceGetComputeRunningProcesses,
                                   {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"});
  lib->processes_v3_ = processes != nullptr && std::string_view(processes).ends_with("_v3");
  optional("process utilisation", a.DeviceGetProcessUtilization,
           {"nvmlDeviceGetProcessUtilization"});
  optional("events", a.EventSetCreate, {"nvmlEventSetCreate"});
  optional("events", a.DeviceGetSupportedEventTypes, {"nvmlDeviceGetSupportedEventTypes"});
  optional("events", a.DeviceRegisterEvents, {"nvmlDeviceRegisterEvents"});
  optional("events", a.EventSetWait, {"nvmlEventSetWait_v2", "nvmlEventSetWait"});
  optional("events", a.EventSetFree, {"nvmlEventSetFree"});
  return lib;
}

NvmlLibrary::~NvmlLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

std::string NvmlLibrary::ErrorString(nvmlReturn_t code) const {
  const char* text = api_.ErrorString != nullptr ? api_.ErrorString(code) : nullptr;
  return text != nullptr ? text : "NVML error " + std::to_string(static_cast<int>(code));
}

Status NvmlStatus(const NvmlLibrary& lib, nvmlReturn_t code, std::string_view call) {
  if (code == NVML_SUCCESS) return Status::Ok();
  StatusCode sc = StatusCode::kInternal;
  switch (code) {
    case NVML_ERROR_GPU_IS_LOST: sc = StatusCode::kDeviceLost; break;
    case NVML_ERROR_NOT_SUPPORTED: sc = StatusCode::kNotSupported; break;
    case NVML_ERROR_NOT_FOUND: sc = StatusCode::kNotFound; break;
    case NVML_ERROR_UNINITIALIZED:
    case NVML_ERROR_DRIVER_NOT_LOADED:
    case NVML_ERROR_LIBRARY_NOT_FOUND:
    case NVML_ERROR_FUNCTION_NOT_FOUND:
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: sc = StatusCode::kUnavailable; break;
    case NVML_ERROR_NO_PERMISSION: sc = StatusCode::kPermissionDenied; break;
    case NVML_ERROR_INVALID_ARGUMENT: sc = StatusCode::kInvalidArgument; break;
    case NVML_ERROR_TIMEOUT: sc = StatusCode::kDeadlineExceeded; break;
    default: break;
  }
  std::string msg(call);
  msg += ": ";
  msg += lib.ErrorString(code);
  msg += " (NVML return ";
  msg += std::to_string(static_cast<int>(code));
  msg += ")";
  return {sc, std::move(msg)};
}

size_t ProcessInfoStride(std::string_view driver_version) {
  constexpr size_t kV2 = sizeof(nvmlProcessInfo_t);  // pid, usedGpuMemory, gpuInstanceId, computeInstanceId
  constexpr size_t kR535V3 = kV2 + sizeof(unsigned long long);  // + usedGpuCcProtectedMemory
  unsigned major = 0, minor = 0;
  const char* p = driver_version.data();
  const char* end = p + driver_version.size();
  auto [after_major, e1] = std::from_chars(p, end, major);
  if (e1 != std::errc() || after_major == end || *after_major != '.') return kV2;
  auto [after_minor, e2] = std::from_chars(after_major + 1, end, minor);
  if (e2 != std::errc()) return kV2;
  return major == 535 && minor >= 43 && minor < 98 ? kR535V3 : kV2;
}

}  // namespace danqing::gpu
