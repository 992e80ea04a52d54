// Fake NVML: return-code names, error strings and the exported-function list.
// Thread-safety: immutable tables only.
#include "codes.h"

#include <algorithm>
#include <array>
#include <cctype>

namespace fake_nvml {
namespace {

struct CodeInfo {
  nvmlReturn_t code;
  std::string_view name;  // enumerator without NVML_ERROR_ / NVML_
  const char* message;    // what nvmlErrorString() returns
};

// The strings follow the real library's wording where it is well known.
constexpr std::array kCodes = {
    CodeInfo{NVML_SUCCESS, "SUCCESS", "Success"},
    CodeInfo{NVML_ERROR_UNINITIALIZED, "UNINITIALIZED", "Uninitialized"},
    CodeInfo{NVML_ERROR_INVALID_ARGUMENT, "INVALID_ARGUMENT", "Invalid Argument"},
    CodeInfo{NVML_ERROR_NOT_SUPPORTED, "NOT_SUPPORTED", "Not Supported"},
    CodeInfo{NVML_ERROR_NO_PERMISSION, "NO_PERMISSION", "Insufficient Permissions"},
    CodeInfo{NVML_ERROR_ALREADY_INITIALIZED, "ALREADY_INITIALIZED", "Already Initialized"},
    CodeInfo{NVML_ERROR_NOT_FOUND, "NOT_FOUND", "Not Found"},
    CodeInfo{NVML_ERROR_INSUFFICIENT_SIZE, "INSUFFICIENT_SIZE", "Insufficient Size"},
    CodeInfo{NVML_ERROR_INSUFFICIENT_POWER, "INSUFFICIENT_POWER", "Insufficient External Power"},
    CodeInfo{NVML_ERROR_DRIVER_NOT_LOADED, "DRIVER_NOT_LOADED", "Driver Not Loaded"},
    CodeInfo{NVML_ERROR_TIMEOUT, "TIMEOUT", "Timeout"},
    CodeInfo{NVML_ERROR_IRQ_ISSUE, "IRQ_ISSUE", "Interrupt request issue"},
    CodeInfo{NVML_ERROR_LIBRARY_NOT_FOUND, "LIBRARY_NOT_FOUND", "NVML Shared Library Not Found"},
    CodeInfo{NVML_ERROR_FUNCTION_NOT_FOUND, "FUNCTION_NOT_FOUND", "Function Not Found"},
    CodeInfo{NVML_ERROR_CORRUPTED_INFOROM, "CORRUPTED_INFOROM", "Corrupted infoROM"},
    CodeInfo{NVML_ERROR_GPU_IS_LOST, "GPU_IS_LOST", "GPU is lost"},
    CodeInfo{NVML_ERROR_RESET_REQUIRED, "RESET_REQUIRED", "GPU requires restart"},
    CodeInfo{NVML_ERROR_OPERATING_SYSTEM, "OPERATING_SYSTEM",
             "The operating system has blocked the request."},
    CodeInfo{NVML_ERROR_LIB_RM_VERSION_MISMATCH, "LIB_RM_VERSION_MISMATCH",
             "RM has detected an NVML/RM version mismatch."},
    CodeInfo{NVML_ERROR_IN_USE, "IN_USE", "In use by another client"},
    CodeInfo{NVML_ERROR_MEMORY, "MEMORY", "Insufficient Memory"},
    CodeInfo{NVML_ERROR_NO_DATA, "NO_DATA", "No data"},
    CodeInfo{NVML_ERROR_VGPU_ECC_NOT_SUPPORTED, "VGPU_ECC_NOT_SUPPORTED",
             "The requested vgpu operation is not available because ECC is enabled"},
    CodeInfo{NVML_ERROR_INSUFFICIENT_RESOURCES, "INSUFFICIENT_RESOURCES",
             "Ran out of critical resources, other than memory"},
    CodeInfo{NVML_ERROR_FREQ_NOT_SUPPORTED, "FREQ_NOT_SUPPORTED", "Frequency not supported"},
    CodeInfo{NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "ARGUMENT_VERSION_MISMATCH",
             "Argument version mismatch"},
    CodeInfo{NVML_ERROR_DEPRECATED, "DEPRECATED", "Deprecated"},
    CodeInfo{NVML_ERROR_NOT_READY, "NOT_READY", "Not Ready"},
    CodeInfo{NVML_ERROR_GPU_NOT_FOUND, "GPU_NOT_FOUND", "GPU not found"},
    CodeInfo{NVML_ERROR_INVALID_STATE, "INVALID_STATE", "Invalid state"},
    CodeInfo{NVML_ERROR_UNKNOWN, "UNKNOWN", "Unknown Error"},
};

const CodeInfo* find_code(nvmlReturn_t code) {
  const auto* it = std::find_if(kCodes.begin(), kCodes.end(),
                                [code](const CodeInfo& c) { return c.code == code; });
  return it == kCodes.end() ? nullptr : it;
}

// In the order of nvml_abi.h; the smoke test checks that every prototype in the
// header is exported by the library and named here.
constexpr auto kExported = std::to_array<std::string_view>({
    "nvmlInit",
    "nvmlInit_v2",
    "nvmlInitWithFlags",
    "nvmlShutdown",
    "nvmlErrorString",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetNVMLVersion",
    "nvmlSystemGetCudaDriverVersion",
    "nvmlSystemGetCudaDriverVersion_v2",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetHandleByPciBusId",
    "nvmlDeviceGetHandleByPciBusId_v2",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetMinorNumber",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetPciInfo_v2",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetCudaComputeCapability",
    "nvmlDeviceGetBrand",
    "nvmlDeviceGetArchitecture",
    "nvmlDeviceGetAttributes",
    "nvmlDeviceGetAttributes_v2",
    "nvmlDeviceGetNumaNodeId",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceIsMigDeviceHandle",
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
    "nvmlDeviceGetGpuInstanceById",
    "nvmlGpuInstanceGetInfo",
    "nvmlGpuInstanceGetComputeInstanceById",
    "nvmlComputeInstanceGetInfo",
    "nvmlComputeInstanceGetInfo_v2",
    "nvmlDeviceGetGpuInstanceProfileInfo",
    "nvmlDeviceGetGpuInstanceProfileInfoV",
    "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
    "nvmlDeviceCreateGpuInstanceWithPlacement",
    "nvmlDeviceGetGpuInstances",
    "nvmlGpuInstanceDestroy",
    "nvmlGpuInstanceGetComputeInstanceProfileInfo",
    "nvmlGpuInstanceGetComputeInstanceProfileInfoV",
    "nvmlGpuInstanceCreateComputeInstance",
    "nvmlComputeInstanceDestroy",
    "nvmlDeviceGetTopologyCommonAncestor",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkRemotePciInfo",
    "nvmlDeviceGetNvLinkRemotePciInfo_v2",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetProcessUtilization",
    "nvmlEventSetCreate",
    "nvmlDeviceGetSupportedEventTypes",
    "nvmlDeviceRegisterEvents",
    "nvmlEventSetWait",
    "nvmlEventSetWait_v2",
    "nvmlEventSetFree",
});

constexpr auto kLegacyOmitted = std::to_array<std::string_view>({
    "nvmlDeviceGetNumaNodeId",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetGpuInstanceProfileInfoV",
    "nvmlEventSetWait_v2",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlSystemGetCudaDriverVersion_v2",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetAttributes_v2",
    "nvmlComputeInstanceGetInfo_v2",
    "nvmlDeviceGetNvLinkRemotePciInfo_v2",
    "nvmlDeviceGetHandleByPciBusId_v2",
});

}  // namespace

const char* error_string(int code) {
  for (const CodeInfo& c : kCodes) {
    if (static_cast<int>(c.code) == code) return c.message;
  }
  return "Unknown Error";
}

std::string_view return_code_name(nvmlReturn_t code) {
  const CodeInfo* info = find_code(code);
  return info != nullptr ? info->name : std::string_view("UNKNOWN");
}

std::optional<nvmlReturn_t> parse_return_code(std::string_view name) {
  if (name == "NVML_SUCCESS") return NVML_SUCCESS;
  constexpr std::string_view kPrefix = "NVML_ERROR_";
  if (name.starts_with(kPrefix)) name.remove_prefix(kPrefix.size());
  for (const CodeInfo& c : kCodes) {
    if (c.name == name) return c.code;
  }
  return std::nullopt;
}

std::span<const std::string_view> exported_functions() { return kExported; }

std::span<const std::string_view> legacy_omitted_functions() { return kLegacyOmitted; }

bool is_exported_function(std::string_view name) {
  auto all = exported_functions();
  return std::find(all.begin(), all.end(), name) != all.end();
}

std::string_view base_function_name(std::string_view name) {
  const auto pos = name.rfind("_v");
  if (pos == std::string_view::npos || pos + 2 >= name.size()) return name;
  const bool digits = std::all_of(name.begin() + static_cast<std::ptrdiff_t>(pos + 2), name.end(),
                                  [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)) != 0; });
  return digits ? name.substr(0, pos) : name;
}

}  // namespace fake_nvml
