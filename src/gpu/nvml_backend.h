// NvmlBackend: GpuBackend over NVIDIA's NVML (libnvidia-ml.so.1 via dlopen).
//
// Create() loads the library and calls nvmlInit; the last owner of the
// session (the backend or an EventStream it created) calls nvmlShutdown.
// Device handles are cached by UUID after each Discover(), so ReadSensors()
// costs only the sensor calls. NVML_ERROR_GPU_IS_LOST on one device is
// reported for that device and never fails calls about the others.
//
// Thread-safety: all methods may be called concurrently; the handle cache is
// guarded by an internal mutex, NVML calls are made outside it.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpu/backend.h"
#include "gpu/nvml_library.h"

namespace danqing::gpu {

// A loaded library with NVML initialised; shut down when the last owner goes.
class NvmlSession {
 public:
  // UNAVAILABLE when nvmlInit fails, with NVML's reason.
  static Result<std::shared_ptr<NvmlSession>> Start(std::unique_ptr<NvmlLibrary> lib);
  ~NvmlSession();
  NvmlSession(const NvmlSession&) = delete;
  NvmlSession& operator=(const NvmlSession&) = delete;

  const NvmlLibrary& lib() const { return *lib_; }
  const NvmlLibrary::Api& api() const { return lib_->api(); }
  Status Check(nvmlReturn_t code, std::string_view call) const {
    return NvmlStatus(*lib_, code, call);
  }

 private:
  explicit NvmlSession(std::unique_ptr<NvmlLibrary> lib) : lib_(std::move(lib)) {}
  std::unique_ptr<NvmlLibrary> lib_;
};

// The NUMA node of the PCI device at `pci` as sysfs gives it
// (<sysfs_root>/bus/pci/devices/<dddd:bb:dd.f>/numa_node); nullopt when the
// file is missing or says -1 (one NUMA node, or the firmware does not say).
std::optional<int> PciNumaNode(const std::string& sysfs_root, const PciInfo& pci);

class NvmlBackend final : public GpuBackend {
 public:
  // Loads the library at `library_path` (see ResolveNvmlLibraryPath) and
  // initialises NVML. UNAVAILABLE when the library is missing or nvmlInit
  // fails; INVALID_ARGUMENT when it lacks required symbols.
  // `sysfs_root`: where the host's sysfs is; each GPU's NUMA node is its PCI
  // device's numa_node there.
  static Result<std::unique_ptr<NvmlBackend>> Create(const std::string& library_path,
                                                     const std::string& sysfs_root = "/sys");

  Result<NodeInventory> Discover() override;
  Result<Sensors> ReadSensors(const std::string& uuid) override;
  Result<std::unique_ptr<EventStream>> WatchEvents(
      const std::vector<std::string>& gpu_uuids) override;
  std::string Describe() const override;

  const NvmlLibrary& library() const { return session_->lib(); }

 private:
  explicit NvmlBackend(std::shared_ptr<NvmlSession> session) : session_(std::move(session)) {}

  Result<nvmlDevice_t> HandleFor(const std::string& uuid);
  Result<Gpu> ReadGpu(nvmlDevice_t dev, int index);
  void ReadMigDevices(nvmlDevice_t dev, Gpu& gpu, std::vector<DeviceError>& errors,
                      std::unordered_map<std::string, nvmlDevice_t>& handles);
  Result<std::string> MigProfileName(nvmlDevice_t parent, const Gpu& gpu, uint32_t profile_id,
                                     uint64_t memory_bytes, uint32_t slices);
  Topology ReadTopology(const std::vector<Gpu>& gpus, const std::vector<nvmlDevice_t>& handles);

  std::shared_ptr<NvmlSession> session_;
  std::string nvml_version_;
  std::string sysfs_root_ = "/sys";
  size_t process_stride_ = sizeof(nvmlProcessInfo_t);  // ProcessInfoStride, for _v3

  mutable std::mutex mu_;
  std::unordered_map<std::string, nvmlDevice_t> handles_;  // GUARDED_BY(mu_): UUID → handle
};

}  // namespace danqing::gpu
