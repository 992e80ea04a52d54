// Fake NVML: the exported C entry points of libnvidia-ml.so.1.
//
// Each function validates its arguments, takes the state mutex for the whole
// call (via system_call/device_call below), and answers from the node model
// loaded from the profile. Everything in this library is compiled with hidden
// visibility; only the functions marked FAKE_NVML_API are exported. With
// FAKE_NVML_LEGACY defined, the newer optional entry points are left out to
// mimic an old driver.
//
// Thread-safety: every entry point is safe to call from any thread;
// nvmlEventSetWait* blocks without holding the state mutex.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "calls.h"
#include "codes.h"
#include "gpu/nvml_abi.h"
#include "state.h"

namespace {

using fake_nvml::copy_truncated;
using fake_nvml::DeviceRef;
using fake_nvml::Gpu;
using fake_nvml::MigDevice;
using fake_nvml::MigProfile;
using fake_nvml::PciAddress;
using fake_nvml::State;
using fake_nvml::with_handle;

// nvml_abi.h builds the struct version tags with C-style casts; evaluate them
// once here so the rest of the file stays free of that warning.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
[[maybe_unused]] constexpr unsigned kMemoryV2 = nvmlMemory_v2;  // unused in the legacy build
[[maybe_unused]] constexpr unsigned kGpuInstanceProfileInfoV2 = nvmlGpuInstanceProfileInfo_v2;
[[maybe_unused]] constexpr unsigned kGpuInstanceProfileInfoV3 = nvmlGpuInstanceProfileInfo_v3;
#pragma GCC diagnostic pop

constexpr unsigned long long kMiB = 1ULL << 20;

// The integer a C caller passed for an enum parameter. Copying the bytes
// avoids loading a value outside the C++ enum's range (undefined behaviour,
// and a UBSan error) when a caller passes one.
template <typename Enum>
int raw_value(Enum value) {
  static_assert(sizeof(Enum) == sizeof(int), "NVML enums are int-sized");
  int result = 0;
  std::memcpy(&result, &value, sizeof(result));
  return result;
}

// Runs `body(state)` with the state mutex held once NVML is initialised and
// no node-wide failure is injected for `function`.
template <typename Body>
nvmlReturn_t system_call(std::string_view function, Body&& body) {
  State& state = State::instance();
  const auto held = state.lock();
  if (!state.initialised()) return NVML_ERROR_UNINITIALIZED;
  if (const nvmlReturn_t failure = state.node_failure(function); failure != NVML_SUCCESS) return failure;
  return body(state);
}

// Runs `body(device)` with the state mutex held once `handle` resolved to a
// live device that passes the per-GPU checks (lost, failures, unsupported).
template <typename Body>
nvmlReturn_t device_call(std::string_view function, nvmlDevice_t handle, Body&& body) {
  return with_handle(function, handle, [&body](State&, DeviceRef& device) { return body(device); });
}

// Same for full-GPU-only sensor queries: MIG device handles are NOT_SUPPORTED,
// as with the real library.
template <typename Body>
nvmlReturn_t gpu_call(std::string_view function, nvmlDevice_t handle, Body&& body) {
  return device_call(function, handle, [&body](DeviceRef& device) {
    if (device.mig != nullptr) return NVML_ERROR_NOT_SUPPORTED;
    return body(*device.gpu);
  });
}

nvmlReturn_t copy_string(const std::string& value, char* buffer, unsigned int length) {
  if (buffer == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (length < value.size() + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(buffer, value.c_str(), value.size() + 1);
  return NVML_SUCCESS;
}

nvmlPciInfo_t make_pci_info(const PciAddress& address, unsigned device_id, unsigned subsystem_id) {
  nvmlPciInfo_t info{};
  copy_truncated(address.legacy_bus_id(), info.busIdLegacy);
  copy_truncated(address.bus_id(), info.busId);
  info.domain = address.domain;
  info.bus = address.bus;
  info.device = address.device;
  info.pciDeviceId = device_id;
  info.pciSubSystemId = subsystem_id;
  return info;
}

// The unversioned PCI queries date from before nvmlPciInfo_t grew: they write
// the old 52-byte layout - a 16-byte bus id (today's busIdLegacy), the five
// integers, and four reserved words that overlap the start of today's busId.
void write_pci_info(const nvmlPciInfo_t& info, nvmlPciInfo_t* out, bool legacy_layout) {
  if (!legacy_layout) {
    *out = info;
    return;
  }
  constexpr std::size_t kPrefix = offsetof(nvmlPciInfo_t, busId);  // busIdLegacy .. pciSubSystemId
  constexpr std::size_t kReserved = 4 * sizeof(unsigned int);
  auto* bytes = reinterpret_cast<unsigned char*>(out);
  std::memcpy(bytes, &info, kPrefix);
  std::memset(bytes + kPrefix, 0, kReserved);
}

nvmlPciInfo_t gpu_pci_info(const Gpu& gpu) {
  return make_pci_info(gpu.pci, gpu.pci_device_id, gpu.pci_subsystem_id);
}

unsigned long long mib_to_bytes(std::uint64_t mib) { return static_cast<unsigned long long>(mib) * kMiB; }

// nvmlComputeInstanceProfile constant for a compute instance spanning
// `slices` compute slices; 0 (the 1-slice profile) where no constant spans
// that many (a profile may give 5).
unsigned compute_instance_profile(unsigned slices) {
  const unsigned profile = fake_nvml::spanning_ci_profile(slices);
  return profile == NVML_COMPUTE_INSTANCE_PROFILE_COUNT ? 0 : profile;
}

unsigned long long supported_event_types(const Gpu& gpu) {
  unsigned long long types = nvmlEventTypeXidCriticalError | nvmlEventTypeSingleBitEccError |
                             nvmlEventTypeDoubleBitEccError;
  if (gpu.mig_capable()) types |= nvmlEventMigConfigChange;
  return types;
}

// Nearest common PCIe ancestor of two GPUs, from their profile labels.
nvmlGpuTopologyLevel_t common_ancestor(const Gpu& a, const Gpu& b, bool same_gpu) {
  const auto shared = [](const std::string& x, const std::string& y) { return !x.empty() && x == y; };
  if (same_gpu) return NVML_TOPOLOGY_INTERNAL;
  if (shared(a.pcie.switch_id, b.pcie.switch_id)) return NVML_TOPOLOGY_SINGLE;
  if (shared(a.pcie.switch_parent, b.pcie.switch_parent)) return NVML_TOPOLOGY_MULTIPLE;
  if (shared(a.pcie.host_bridge, b.pcie.host_bridge)) return NVML_TOPOLOGY_HOSTBRIDGE;
  if (a.numa_node >= 0 && a.numa_node == b.numa_node) return NVML_TOPOLOGY_NODE;
  return NVML_TOPOLOGY_SYSTEM;
}

// --- Shared bodies of versioned entry points. -------------------------------

nvmlReturn_t get_count(const char* function, unsigned int* count) {
  return system_call(function, [count](State& state) {
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *count = static_cast<unsigned>(state.node().gpus.size());
    return NVML_SUCCESS;
  });
}

nvmlReturn_t get_handle_by_index(const char* function, unsigned int index, nvmlDevice_t* device) {
  return system_call(function, [=](State& state) {
    if (device == nullptr || index >= state.node().gpus.size()) return NVML_ERROR_INVALID_ARGUMENT;
    if (const nvmlReturn_t rc = state.gpu_gate(state.node().gpus[index], function); rc != NVML_SUCCESS) return rc;
    *device = state.gpu_handle(index);
    return NVML_SUCCESS;
  });
}

nvmlReturn_t get_handle_by_pci_bus_id(const char* function, const char* bus_id, nvmlDevice_t* device) {
  return system_call(function, [=](State& state) {
    if (bus_id == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const auto address = fake_nvml::parse_bus_id(bus_id);
    if (!address) return NVML_ERROR_INVALID_ARGUMENT;
    auto& gpus = state.node().gpus;
    for (unsigned i = 0; i < gpus.size(); ++i) {
      if (gpus[i].pci != *address) continue;
      if (const nvmlReturn_t rc = state.gpu_gate(gpus[i], function); rc != NVML_SUCCESS) return rc;
      *device = state.gpu_handle(i);
      return NVML_SUCCESS;
    }
    return NVML_ERROR_NOT_FOUND;
  });
}

nvmlReturn_t get_pci_info(const char* function, nvmlDevice_t handle, nvmlPciInfo_t* pci, bool legacy_layout) {
  // MIG device handles report their parent's PCI function.
  return device_call(function, handle, [=](DeviceRef& device) {
    if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    write_pci_info(gpu_pci_info(*device.gpu), pci, legacy_layout);
    return NVML_SUCCESS;
  });
}

nvmlReturn_t get_attributes(const char* function, nvmlDevice_t handle, nvmlDeviceAttributes_t* attributes) {
  // Like the real library, only MIG device handles have attributes.
  return device_call(function, handle, [=](DeviceRef& device) {
    if (attributes == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (device.mig == nullptr) return NVML_ERROR_NOT_SUPPORTED;
    const MigProfile& p = device.gpu->profile_of(*device.mig);
    *attributes = nvmlDeviceAttributes_t{};
    attributes->multiprocessorCount = p.multiprocessor_count;
    attributes->sharedCopyEngineCount = p.copy_engine_count;
    attributes->sharedDecoderCount = p.decoder_count;
    attributes->sharedEncoderCount = p.encoder_count;
    attributes->sharedJpegCount = p.jpeg_count;
    attributes->sharedOfaCount = p.ofa_count;
    attributes->gpuInstanceSliceCount = p.slice_count;
    attributes->computeInstanceSliceCount = p.slice_count;
    attributes->memorySizeMB = p.memory_mib;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t compute_instance_info(const char* function, nvmlComputeInstance_t handle,
                                   nvmlComputeInstanceInfo_t* info) {
  return with_handle(function, handle, [info](State& state, DeviceRef& device) {
    if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const MigProfile& p = device.gpu->profile_of(*device.mig);
    *info = nvmlComputeInstanceInfo_t{};
    info->device = device.handle;  // the parent GPU, as in the real library
    info->gpuInstance = state.gpu_instance_handle(device.index, device.mig->gpu_instance_id);
    info->id = device.mig->compute_instance_id;
    info->profileId = compute_instance_profile(p.slice_count);
    info->placement.start = 0;
    info->placement.size = p.slice_count;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvlink_remote_pci(const char* function, nvmlDevice_t handle, unsigned int link, nvmlPciInfo_t* pci,
                               bool legacy_layout) {
  State& state = State::instance();
  return gpu_call(function, handle, [&](Gpu& gpu) {
    if (pci == nullptr || link >= NVML_NVLINK_MAX_LINKS) return NVML_ERROR_INVALID_ARGUMENT;
    if (link >= gpu.nvlinks.size()) return NVML_ERROR_NOT_SUPPORTED;
    const auto& remote = gpu.nvlinks[link].remote;
    if (!remote) return NVML_ERROR_NOT_FOUND;
    if (const Gpu* peer = state.node().find_gpu(*remote)) {
      write_pci_info(gpu_pci_info(*peer), pci, legacy_layout);
    } else if (const fake_nvml::NvSwitch* sw = state.node().find_nvswitch(*remote)) {
      write_pci_info(make_pci_info(sw->address, sw->device_id, sw->subsystem_id), pci, legacy_layout);
    } else {
      return NVML_ERROR_UNKNOWN;  // the loader rejects such profiles
    }
    return NVML_SUCCESS;
  });
}

// The INSUFFICIENT_SIZE protocol shared by the process queries: `count` is in
// (capacity) and out (entries written or needed). `Entry` is the caller's
// struct layout.
template <typename Entry, typename Fill>
nvmlReturn_t list_processes(const DeviceRef& device, unsigned int* count, Entry* entries, Fill&& fill) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  std::vector<const fake_nvml::Process*> selected;
  for (const auto& p : device.gpu->processes) {
    if (device.mig == nullptr || p.gpu_instance_id == device.mig->gpu_instance_id) selected.push_back(&p);
  }
  const auto needed = static_cast<unsigned>(selected.size());
  if (*count < needed) {
    *count = needed;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  if (needed > 0 && entries == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (unsigned i = 0; i < needed; ++i) fill(*selected[i], entries[i]);
  *count = needed;
  return NVML_SUCCESS;
}

nvmlReturn_t event_set_wait(const char* function, nvmlEventSet_t set, nvmlEventData_t* data,
                            unsigned int timeout_ms, bool with_instance_ids) {
  State& state = State::instance();
  auto held = state.lock();
  if (!state.initialised()) return NVML_ERROR_UNINITIALIZED;
  if (const nvmlReturn_t failure = state.node_failure(function); failure != NVML_SUCCESS) return failure;
  const auto event_set = state.find_event_set(set);
  if (event_set == nullptr || data == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  fake_nvml::QueuedEvent event;
  if (const nvmlReturn_t rc = state.wait_event(held, event_set, timeout_ms, event); rc != NVML_SUCCESS) return rc;
  nvmlEventData_t result{};
  result.device = state.gpu_handle(event.gpu);
  result.eventType = event.type;
  result.eventData = event.data;
  result.gpuInstanceId = event.gpu_instance_id;
  result.computeInstanceId = event.compute_instance_id;
  if (with_instance_ids) {
    *data = result;
  } else {
    // nvmlEventSetWait predates MIG: it fills device, eventType and eventData only.
    std::memcpy(data, &result, offsetof(nvmlEventData_t, gpuInstanceId));
  }
  return NVML_SUCCESS;
}

}  // namespace

// ===========================================================================
// Exported API. The prototypes come from nvml_abi.h (extern "C").

// --- Init, shutdown, errors. -----------------------------------------------

FAKE_NVML_API nvmlReturn_t nvmlInit(void) { return State::instance().init(); }
FAKE_NVML_API nvmlReturn_t nvmlInit_v2(void) { return State::instance().init(); }
FAKE_NVML_API nvmlReturn_t nvmlInitWithFlags(unsigned int /*flags*/) { return State::instance().init(); }
FAKE_NVML_API nvmlReturn_t nvmlShutdown(void) { return State::instance().shutdown(); }
FAKE_NVML_API const char* nvmlErrorString(nvmlReturn_t result) {
  return fake_nvml::error_string(raw_value(result));
}

// --- System. -----------------------------------------------------------------

FAKE_NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  return system_call(__func__, [=](State& state) { return copy_string(state.node().driver_version, version, length); });
}

FAKE_NVML_API nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int length) {
  return system_call(__func__, [=](State& state) { return copy_string(state.node().nvml_version, version, length); });
}

FAKE_NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* cudaDriverVersion) {
  return system_call(__func__, [=](State& state) {
    if (cudaDriverVersion == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *cudaDriverVersion = state.node().cuda_driver_version;
    return NVML_SUCCESS;
  });
}

#ifndef FAKE_NVML_LEGACY
FAKE_NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* cudaDriverVersion) {
  return system_call(__func__, [=](State& state) {
    if (cudaDriverVersion == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *cudaDriverVersion = state.node().cuda_driver_version;
    return NVML_SUCCESS;
  });
}
#endif

// --- Enumeration and lookup. ---------------------------------------------------

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetCount(unsigned int* deviceCount) { return get_count(__func__, deviceCount); }
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount) { return get_count(__func__, deviceCount); }

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  return get_handle_by_index(__func__, index, device);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  return get_handle_by_index(__func__, index, device);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  const std::string_view function = __func__;
  return system_call(function, [=](State& state) {
    if (uuid == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const std::string_view wanted(uuid);
    auto& gpus = state.node().gpus;
    for (unsigned i = 0; i < gpus.size(); ++i) {
      const Gpu& gpu = gpus[i];
      const MigDevice* mig = gpu.mig_enabled() ? gpu.find_mig_by_uuid(wanted) : nullptr;
      if (gpu.uuid != wanted && mig == nullptr) continue;
      if (const nvmlReturn_t rc = state.gpu_gate(gpu, function); rc != NVML_SUCCESS) return rc;
      *device = mig != nullptr ? state.mig_handle(i, mig->uuid) : state.gpu_handle(i);
      return NVML_SUCCESS;
    }
    return NVML_ERROR_NOT_FOUND;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* pciBusId, nvmlDevice_t* device) {
  return get_handle_by_pci_bus_id(__func__, pciBusId, device);
}

#ifndef FAKE_NVML_LEGACY
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pciBusId, nvmlDevice_t* device) {
  return get_handle_by_pci_bus_id(__func__, pciBusId, device);
}
#endif

// --- Identity. -----------------------------------------------------------------

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  return device_call(__func__, device, [=](DeviceRef& d) {
    if (d.mig == nullptr) return copy_string(d.gpu->name, name, length);
    return copy_string(d.gpu->name + " " + d.gpu->profile_of(*d.mig).name, name, length);
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  return device_call(__func__, device,
                     [=](DeviceRef& d) { return copy_string(d.mig != nullptr ? d.mig->uuid : d.gpu->uuid, uuid, length); });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  return device_call(__func__, device, [=](DeviceRef& d) {
    if (index == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *index = d.mig != nullptr ? d.mig_index : d.index;
    return NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minorNumber) {
  return gpu_call(__func__, device, [=](Gpu& gpu) {
    if (minorNumber == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *minorNumber = gpu.minor_number;
    return NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return get_pci_info(__func__, device, pci, true);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return get_pci_info(__func__, device, pci, false);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return get_pci_info(__func__, device, pci, false);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  // v1 counts reserved memory as used, as the real library does.
  return device_call(__func__, device, [=](DeviceRef& d) {
    if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (d.mig != nullptr) {
      memory->total = mib_to_bytes(d.gpu->profile_of(*d.mig).memory_mib);
      memory->used = std::min(memory->total, mib_to_bytes(d.gpu->instance_memory_used_mib(d.mig->gpu_instance_id)));
    } else {
      memory->total = mib_to_bytes(d.gpu->memory_total_mib);
      memory->used = std::min(memory->total, mib_to_bytes(d.gpu->memory_reserved_mib + d.gpu->memory_used_mib()));
    }
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
  });
}

#ifndef FAKE_NVML_LEGACY
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  return device_call(__func__, device, [=](DeviceRef& d) {
    if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != kMemoryV2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (d.mig != nullptr) {
      memory->total = mib_to_bytes(d.gpu->profile_of(*d.mig).memory_mib);
      memory->reserved = 0;
      memory->used = std::min(memory->total, mib_to_bytes(d.gpu->instance_memory_used_mib(d.mig->gpu_instance_id)));
    } else {
      memory->total = mib_to_bytes(d.gpu->memory_total_mib);
      memory->reserved = mib_to_bytes(d.gpu->memory_reserved_mib);
      memory->used = std::min(memory->total - memory->reserved, mib_to_bytes(d.gpu->memory_used_mib()));
    }
    memory->free = memory->total - memory->reserved - memory->used;
    return NVML_SUCCESS;
  });
}
#endif

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major, int* minor) {
  return device_call(__func__, device, [=](DeviceRef& d) {
    if (major == nullptr || minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *major = d.gpu->cc_major;
    *minor = d.gpu->cc_minor;
    return NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t* type) {
  return device_call(__func__, device, [=](DeviceRef& d) {
    if (type == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *type = d.gpu->brand;
    return NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t* arch) {
  return device_call(__func__, device, [=](DeviceRef& d) {
    if (arch == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *arch = d.gpu->architecture;
    return NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, nvmlDeviceAttributes_t* attributes) {
  return get_attributes(__func__, device, attributes);
}

#ifndef FAKE_NVML_LEGACY
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t* attributes) {
  return get_attributes(__func__, device, attributes);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int* node) {
  return device_call(__func__, device, [=](DeviceRef& d) {
    if (node == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (d.gpu->numa_node < 0) return NVML_ERROR_NOT_SUPPORTED;
    *node = static_cast<unsigned>(d.gpu->numa_node);
    return NVML_SUCCESS;
  });
}
#endif

// --- MIG. ------------------------------------------------------------------------

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* currentMode,
                                                unsigned int* pendingMode) {
  return device_call(__func__, device, [=](DeviceRef& d) {
    if (currentMode == nullptr || pendingMode == nullptr || d.mig != nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d.gpu->mig_capable()) return NVML_ERROR_NOT_SUPPORTED;
    *currentMode = d.gpu->mig.mode;
    *pendingMode = d.gpu->mig.pending;
    return NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count) {
  return device_call(__func__, device, [=](DeviceRef& d) {
    if (count == nullptr || d.mig != nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d.gpu->mig_capable()) return NVML_ERROR_NOT_SUPPORTED;
    *count = fake_nvml::kMaxMigDevices;
    return NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                               nvmlDevice_t* migDevice) {
  State& state = State::instance();
  return device_call(__func__, device, [&](DeviceRef& d) {
    if (migDevice == nullptr || d.mig != nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d.gpu->mig_capable()) return NVML_ERROR_NOT_SUPPORTED;
    if (!d.gpu->mig_enabled()) return NVML_ERROR_INVALID_ARGUMENT;
    // GPU instances without a compute instance are no MIG devices.
    unsigned seen = 0;
    for (const MigDevice& m : d.gpu->mig.devices) {
      if (!m.has_compute_instance) continue;
      if (seen++ == index) {
        *migDevice = state.mig_handle(d.index, m.uuid);
        return NVML_SUCCESS;
      }
    }
    return NVML_ERROR_NOT_FOUND;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int* isMigDevice) {
  return device_call(__func__, device, [=](DeviceRef& d) {
    if (isMigDevice == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *isMigDevice = d.mig != nullptr ? 1U : 0U;
    return NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                                        nvmlDevice_t* device) {
  State& state = State::instance();
  return device_call(__func__, migDevice, [&](DeviceRef& d) {
    if (device == nullptr || d.mig == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *device = state.gpu_handle(d.index);
    return NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id) {
  return device_call(__func__, device, [=](DeviceRef& d) {
    if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (d.mig == nullptr) return NVML_ERROR_NOT_SUPPORTED;
    *id = d.mig->gpu_instance_id;
    return NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int* id) {
  return device_call(__func__, device, [=](DeviceRef& d) {
    if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (d.mig == nullptr) return NVML_ERROR_NOT_SUPPORTED;
    *id = d.mig->compute_instance_id;
    return NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                                        nvmlGpuInstance_t* gpuInstance) {
  State& state = State::instance();
  return device_call(__func__, device, [&](DeviceRef& d) {
    if (gpuInstance == nullptr || d.mig != nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d.gpu->mig_capable()) return NVML_ERROR_NOT_SUPPORTED;
    if (!d.gpu->mig_enabled()) return NVML_ERROR_INVALID_ARGUMENT;
    if (d.gpu->find_mig_by_gi(id) == nullptr) return NVML_ERROR_NOT_FOUND;
    *gpuInstance = state.gpu_instance_handle(d.index, id);
    return NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t* info) {
  return with_handle(__func__, gpuInstance, [info](State&, DeviceRef& d) {
    if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const MigProfile& p = d.gpu->profile_of(*d.mig);
    *info = nvmlGpuInstanceInfo_t{};
    info->device = d.handle;
    info->id = d.mig->gpu_instance_id;
    info->profileId = p.id;
    info->placement.start = d.mig->placement_start;
    info->placement.size = p.memory_slices;
    return NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id,
                                                                 nvmlComputeInstance_t* computeInstance) {
  return with_handle(__func__, gpuInstance, [=](State& state, DeviceRef& d) {
    if (computeInstance == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d.mig->has_compute_instance || id != d.mig->compute_instance_id)
      return NVML_ERROR_NOT_FOUND;
    *computeInstance = state.compute_instance_handle(d.index, d.mig->gpu_instance_id, id);
    return NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance,
                                                      nvmlComputeInstanceInfo_t* info) {
  return compute_instance_info(__func__, computeInstance, info);
}

#ifndef FAKE_NVML_LEGACY
FAKE_NVML_API nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance,
                                                         nvmlComputeInstanceInfo_t* info) {
  return compute_instance_info(__func__, computeInstance, info);
}
#endif

namespace {

// Looks up a GPU-instance profile for the two profile-info queries.
nvmlReturn_t find_gi_profile(const DeviceRef& d, unsigned profile, const MigProfile*& out) {
  if (d.mig != nullptr || profile >= NVML_GPU_INSTANCE_PROFILE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
  if (!d.gpu->mig_capable()) return NVML_ERROR_NOT_SUPPORTED;
  out = d.gpu->find_mig_profile(profile);
  return out != nullptr ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

template <typename Info>
void fill_gi_profile(const MigProfile& p, Info& info) {
  info.id = p.id;
  info.isP2pSupported = p.p2p ? 1U : 0U;
  info.sliceCount = p.slice_count;
  info.instanceCount = p.instance_count;
  info.multiprocessorCount = p.multiprocessor_count;
  info.copyEngineCount = p.copy_engine_count;
  info.decoderCount = p.decoder_count;
  info.encoderCount = p.encoder_count;
  info.jpegCount = p.jpeg_count;
  info.ofaCount = p.ofa_count;
  info.memorySizeMB = p.memory_mib;
}

}  // namespace

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                               nvmlGpuInstanceProfileInfo_t* info) {
  return device_call(__func__, device, [=](DeviceRef& d) {
    if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const MigProfile* p = nullptr;
    if (const nvmlReturn_t rc = find_gi_profile(d, profile, p); rc != NVML_SUCCESS) return rc;
    *info = nvmlGpuInstanceProfileInfo_t{};
    fill_gi_profile(*p, *info);
    return NVML_SUCCESS;
  });
}

#ifndef FAKE_NVML_LEGACY
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                                nvmlGpuInstanceProfileInfo_v2_t* info) {
  return device_call(__func__, device, [=](DeviceRef& d) {
    if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const MigProfile* p = nullptr;
    if (info->version == kGpuInstanceProfileInfoV3) {
      // Same size as v2, other layout: no isP2pSupported, a capability mask.
      auto* v3 = reinterpret_cast<nvmlGpuInstanceProfileInfo_v3_t*>(info);
      if (const nvmlReturn_t rc = find_gi_profile(d, profile, p); rc != NVML_SUCCESS) return rc;
      *v3 = nvmlGpuInstanceProfileInfo_v3_t{};
      v3->version = kGpuInstanceProfileInfoV3;
      v3->id = p->id;
      v3->sliceCount = p->slice_count;
      v3->instanceCount = p->instance_count;
      v3->multiprocessorCount = p->multiprocessor_count;
      v3->copyEngineCount = p->copy_engine_count;
      v3->decoderCount = p->decoder_count;
      v3->encoderCount = p->encoder_count;
      v3->jpegCount = p->jpeg_count;
      v3->ofaCount = p->ofa_count;
      v3->memorySizeMB = p->memory_mib;
      copy_truncated(p->name, v3->name);
      return NVML_SUCCESS;
    }
    if (info->version != kGpuInstanceProfileInfoV2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (const nvmlReturn_t rc = find_gi_profile(d, profile, p); rc != NVML_SUCCESS) return rc;
    *info = nvmlGpuInstanceProfileInfo_v2_t{};
    info->version = kGpuInstanceProfileInfoV2;
    fill_gi_profile(*p, *info);
    copy_truncated(p->name, info->name);
    return NVML_SUCCESS;
  });
}
#endif

// --- Topology and NVLink. ----------------------------------------------------------

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                               nvmlGpuTopologyLevel_t* pathInfo) {
  State& state = State::instance();
  const auto held = state.lock();
  if (!state.initialised()) return NVML_ERROR_UNINITIALIZED;
  DeviceRef a;
  DeviceRef b;
  if (const nvmlReturn_t rc = state.resolve(device1, __func__, a); rc != NVML_SUCCESS) return rc;
  if (const nvmlReturn_t rc = state.resolve(device2, __func__, b); rc != NVML_SUCCESS) return rc;
  if (pathInfo == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (a.mig != nullptr || b.mig != nullptr) return NVML_ERROR_NOT_SUPPORTED;
  *pathInfo = common_ancestor(*a.gpu, *b.gpu, a.index == b.index);
  return NVML_SUCCESS;
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                                    nvmlEnableState_t* isActive) {
  return gpu_call(__func__, device, [=](Gpu& gpu) {
    if (isActive == nullptr || link >= NVML_NVLINK_MAX_LINKS) return NVML_ERROR_INVALID_ARGUMENT;
    if (link >= gpu.nvlinks.size()) return NVML_ERROR_NOT_SUPPORTED;
    *isActive = gpu.nvlinks[link].active ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link,
                                                            nvmlPciInfo_t* pci) {
  return nvlink_remote_pci(__func__, device, link, pci, true);
}

#ifndef FAKE_NVML_LEGACY
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                               nvmlPciInfo_t* pci) {
  return nvlink_remote_pci(__func__, device, link, pci, false);
}
#endif

// --- Sensors and health. ---------------------------------------------------------------

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  return gpu_call(__func__, device, [=](Gpu& gpu) {
    if (utilization == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    // "On MIG-enabled GPUs, querying device utilization rates is not currently supported."
    if (gpu.mig_enabled()) return NVML_ERROR_NOT_SUPPORTED;
    utilization->gpu = gpu.sensors.gpu_util;
    utilization->memory = gpu.sensors.memory_util;
    return NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                                    unsigned int* temp) {
  return gpu_call(__func__, device, [=](Gpu& gpu) {
    if (temp == nullptr || raw_value(sensorType) != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    *temp = gpu.sensors.temperature_c;
    return NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* power) {
  return gpu_call(__func__, device, [=](Gpu& gpu) {
    if (power == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *power = gpu.sensors.power_mw;
    return NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int* clock) {
  return gpu_call(__func__, device, [=](Gpu& gpu) {
    if (clock == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    switch (raw_value(type)) {
      case NVML_CLOCK_GRAPHICS: *clock = gpu.sensors.clock_graphics_mhz; return NVML_SUCCESS;
      case NVML_CLOCK_SM: *clock = gpu.sensors.clock_sm_mhz; return NVML_SUCCESS;
      case NVML_CLOCK_MEM: *clock = gpu.sensors.clock_mem_mhz; return NVML_SUCCESS;
      case NVML_CLOCK_VIDEO: *clock = gpu.sensors.clock_video_mhz; return NVML_SUCCESS;
      default: return NVML_ERROR_INVALID_ARGUMENT;
    }
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                                     unsigned long long* reasons) {
  return gpu_call(__func__, device, [=](Gpu& gpu) {
    if (reasons == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *reasons = gpu.sensors.throttle_reasons;
    return NVML_SUCCESS;
  });
}

#ifndef FAKE_NVML_LEGACY
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                                  unsigned long long* reasons) {
  return gpu_call(__func__, device, [=](Gpu& gpu) {
    if (reasons == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *reasons = gpu.sensors.throttle_reasons;
    return NVML_SUCCESS;
  });
}
#endif

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                                       nvmlEccCounterType_t counterType,
                                                       unsigned long long* eccCounts) {
  return gpu_call(__func__, device, [=](Gpu& gpu) {
    if (eccCounts == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const fake_nvml::EccCounters* counters = nullptr;
    switch (raw_value(counterType)) {
      case NVML_VOLATILE_ECC: counters = &gpu.sensors.ecc_volatile; break;
      case NVML_AGGREGATE_ECC: counters = &gpu.sensors.ecc_aggregate; break;
      default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    switch (raw_value(errorType)) {
      case NVML_MEMORY_ERROR_TYPE_CORRECTED: *eccCounts = counters->corrected; return NVML_SUCCESS;
      case NVML_MEMORY_ERROR_TYPE_UNCORRECTED: *eccCounts = counters->uncorrected; return NVML_SUCCESS;
      default: return NVML_ERROR_INVALID_ARGUMENT;
    }
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device,
                                                                  nvmlEnableState_t* isPending) {
  return gpu_call(__func__, device, [=](Gpu& gpu) {
    if (isPending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *isPending = gpu.sensors.retired_pages_pending ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
  });
}

#ifndef FAKE_NVML_LEGACY
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int* corrRows,
                                                     unsigned int* uncRows, unsigned int* isPending,
                                                     unsigned int* failureOccurred) {
  return gpu_call(__func__, device, [=](Gpu& gpu) {
    if (corrRows == nullptr || uncRows == nullptr || isPending == nullptr || failureOccurred == nullptr) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    // Not reported while MIG instances exist on the GPU.
    if (gpu.mig_enabled() && !gpu.mig.devices.empty()) return NVML_ERROR_NOT_SUPPORTED;
    *corrRows = gpu.sensors.remapped_correctable;
    *uncRows = gpu.sensors.remapped_uncorrectable;
    *isPending = gpu.sensors.remapped_pending ? 1U : 0U;
    *failureOccurred = gpu.sensors.remapped_failure ? 1U : 0U;
    return NVML_SUCCESS;
  });
}
#endif

// --- Processes. ----------------------------------------------------------------------------

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int* infoCount,
                                                                nvmlProcessInfo_v1_t* infos) {
  return device_call(__func__, device, [=](DeviceRef& d) {
    return list_processes(d, infoCount, infos, [](const fake_nvml::Process& p, nvmlProcessInfo_v1_t& out) {
      out = nvmlProcessInfo_v1_t{};
      out.pid = p.pid;
      out.usedGpuMemory = mib_to_bytes(p.used_memory_mib);
    });
  });
}

#ifndef FAKE_NVML_LEGACY
// Drivers 535.43 to 535.86 wrote a 32-byte nvmlProcessInfo_v3_t (the v2 entry
// plus usedGpuCcProtectedMemory) under the _v3 symbol; the fake does the same
// when its profile names such a driver.
namespace {
struct ProcessInfoR535 {
  nvmlProcessInfo_t v2;
  unsigned long long usedGpuCcProtectedMemory;
};

bool writes_r535_v3_entries(const std::string& driver_version) {
  unsigned major = 0, minor = 0;
  return std::sscanf(driver_version.c_str(), "%u.%u", &major, &minor) == 2 && major == 535 && minor >= 43 &&
         minor < 98;
}
}  // namespace

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                                   nvmlProcessInfo_t* infos) {
  const auto fill = [](const fake_nvml::Process& p, nvmlProcessInfo_t& out) {
    out = nvmlProcessInfo_t{};
    out.pid = p.pid;
    out.usedGpuMemory = mib_to_bytes(p.used_memory_mib);
    out.gpuInstanceId = p.gpu_instance_id.value_or(fake_nvml::kNoInstanceId);
    out.computeInstanceId = p.compute_instance_id.value_or(fake_nvml::kNoInstanceId);
  };
  return device_call(__func__, device, [=](DeviceRef& d) {
    if (writes_r535_v3_entries(State::instance().node().driver_version)) {
      return list_processes(d, infoCount, reinterpret_cast<ProcessInfoR535*>(infos),
                            [&](const fake_nvml::Process& p, ProcessInfoR535& out) {
                              out = ProcessInfoR535{};
                              fill(p, out.v2);
                            });
    }
    return list_processes(d, infoCount, infos, fill);
  });
}
#endif

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                           nvmlProcessUtilizationSample_t* utilization,
                                                           unsigned int* processSamplesCount,
                                                           unsigned long long lastSeenTimeStamp) {
  // One sample per process, stamped with the time the process list was last
  // set; samples not newer than lastSeenTimeStamp are not returned again.
  return gpu_call(__func__, device, [=](Gpu& gpu) {
    if (processSamplesCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (gpu.mig_enabled()) return NVML_ERROR_NOT_SUPPORTED;  // as utilisation rates
    const bool fresh = gpu.processes_timestamp_us > lastSeenTimeStamp;
    const auto needed = fresh ? static_cast<unsigned>(gpu.processes.size()) : 0U;
    if (needed == 0) {
      *processSamplesCount = 0;
      return NVML_ERROR_NOT_FOUND;
    }
    if (utilization == nullptr || *processSamplesCount < needed) {
      *processSamplesCount = needed;
      return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < needed; ++i) {
      const fake_nvml::Process& p = gpu.processes[i];
      utilization[i] = nvmlProcessUtilizationSample_t{};
      utilization[i].pid = p.pid;
      utilization[i].timeStamp = gpu.processes_timestamp_us;
      utilization[i].smUtil = p.sm_util;
      utilization[i].memUtil = p.mem_util;
    }
    *processSamplesCount = needed;
    return NVML_SUCCESS;
  });
}

// --- Events. ---------------------------------------------------------------------------------

FAKE_NVML_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  return system_call(__func__, [=](State& state) {
    if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *set = state.create_event_set();
    return NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long* eventTypes) {
  return gpu_call(__func__, device, [=](Gpu& gpu) {
    if (eventTypes == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *eventTypes = supported_event_types(gpu);
    return NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                                    nvmlEventSet_t set) {
  State& state = State::instance();
  return device_call(__func__, device, [&](DeviceRef& d) {
    const auto event_set = state.find_event_set(set);
    if (event_set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (d.mig != nullptr) return NVML_ERROR_NOT_SUPPORTED;  // register on the parent GPU
    if ((eventTypes & ~supported_event_types(*d.gpu)) != 0) return NVML_ERROR_NOT_SUPPORTED;
    event_set->masks[d.index] |= eventTypes;
    return NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeoutms) {
  return event_set_wait(__func__, set, data, timeoutms, false);
}

#ifndef FAKE_NVML_LEGACY
FAKE_NVML_API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeoutms) {
  return event_set_wait(__func__, set, data, timeoutms, true);
}
#endif

FAKE_NVML_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  return system_call(__func__, [=](State& state) {
    if (state.find_event_set(set) == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    state.free_event_set(set);
    return NVML_SUCCESS;
  });
}

// Stops the control thread before the library's code is unmapped (dlclose) or
// the process exits with NVML still initialised.
// Never creates the state just to unload it (a library loaded but never
// initialised has nothing to stop).
__attribute__((destructor)) static void fake_nvml_unload() {
  if (State* state = State::existing()) state->unload();
}
