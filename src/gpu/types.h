// The backend-neutral GPU model: what Danqing knows about a node's GPUs,
// their MIG devices, the links between them, their sensors and their events.
//
// Plain values filled by a GpuBackend (NVML on a real node, or a fake in
// tests). Nothing here talks to hardware. Thread-safety: values.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace danqing::gpu {

struct PciInfo {
  std::string bus_id;  // NVML form, upper-case: "00000000:07:00.0"
  uint32_t domain = 0;
  uint32_t bus = 0;
  uint32_t device = 0;
  uint32_t device_id = 0;     // (PCI device id << 16) | vendor id, e.g. 0x20B210DE
  uint32_t subsystem_id = 0;
};

enum class MigMode { kUnsupported, kDisabled, kEnabled };
std::string_view MigModeName(MigMode mode);

// One MIG device: a compute instance inside a GPU instance of a parent GPU.
struct MigDevice {
  std::string uuid;         // "MIG-..."
  std::string parent_uuid;  // "GPU-..."
  int parent_index = -1;
  int index = -1;           // index among the parent's MIG devices
  uint32_t gpu_instance_id = 0;
  uint32_t compute_instance_id = 0;
  uint32_t gpu_instance_profile_id = 0;  // NVML's profile id (e.g. 19 for A100 1g.10gb)
  std::string profile;      // "1g.10gb", the resource suffix of nvidia.com/mig-1g.10gb
  uint32_t gpu_instance_slices = 0;
  uint32_t compute_instance_slices = 0;
  uint32_t placement_start = 0;
  uint32_t multiprocessor_count = 0;
  uint64_t memory_bytes = 0;
};

struct Gpu {
  int index = -1;
  std::string uuid;  // "GPU-..."
  std::string name;  // "NVIDIA A100-SXM4-80GB"
  std::string brand; // "Tesla", "NVIDIA", ...
  std::string architecture;  // "Ampere", "Hopper", ...
  uint64_t memory_bytes = 0;
  PciInfo pci;
  std::optional<uint32_t> minor_number;  // /dev/nvidiaN
  std::optional<int> numa_node;          // absent when the driver cannot say
  int cuda_major = 0;
  int cuda_minor = 0;
  MigMode mig_mode = MigMode::kUnsupported;
  bool mig_pending_change = false;       // pending mode differs from current
  std::vector<MigDevice> mig_devices;
};

// How two GPUs reach each other over PCIe, nearest first (NVML's levels).
enum class PcieLevel {
  kSame,         // the same GPU
  kSwitch,       // behind one PCIe switch
  kMultiSwitch,  // through several switches, no host bridge
  kHostBridge,   // through one host bridge
  kNumaNode,     // within one NUMA node / CPU socket
  kSystem,       // across sockets (SMP interconnect)
  kUnknown,      // the driver could not say
};
std::string_view PcieLevelName(PcieLevel level);  // "PIX", "PXB", "PHB", "NODE", "SYS"

struct GpuLink {
  int nvlinks = 0;  // active NVLink lanes between the pair (direct, or via NVSwitch)
  PcieLevel pcie = PcieLevel::kUnknown;
};

// Links between every pair of GPUs, indexed by position in NodeInventory::gpus.
class Topology {
 public:
  Topology() = default;
  explicit Topology(size_t n) : n_(n), links_(n * n) {}

  size_t size() const { return n_; }
  const GpuLink& at(size_t a, size_t b) const { return links_[a * n_ + b]; }
  GpuLink& at(size_t a, size_t b) { return links_[a * n_ + b]; }

 private:
  size_t n_ = 0;
  std::vector<GpuLink> links_;
};

// A device the backend could not read during discovery (e.g. fell off the
// bus). The rest of the inventory is still valid.
struct DeviceError {
  int index = -1;
  std::string uuid;  // empty when not even the UUID could be read
  Status status;
};

struct NodeInventory {
  std::string driver_version;
  int cuda_driver_version = 0;  // e.g. 12040 for CUDA 12.4
  std::vector<Gpu> gpus;        // in NVML index order; lost GPUs are absent
  Topology topology;            // over `gpus`
  std::vector<DeviceError> errors;
  std::vector<std::string> disabled_features;  // features off for lack of a library symbol

  const Gpu* FindGpu(std::string_view uuid) const;
};

struct ProcessInfo {
  uint32_t pid = 0;
  uint64_t used_memory_bytes = 0;
  std::optional<uint32_t> sm_util;   // %, from process utilisation samples
  std::optional<uint32_t> mem_util;  // %
  std::optional<uint32_t> gpu_instance_id;
  std::optional<uint32_t> compute_instance_id;
};

// Throttle ("clock event") reasons: NVML's bit values.
namespace throttle {
constexpr uint64_t kGpuIdle = 0x1;
constexpr uint64_t kApplicationsClocksSetting = 0x2;
constexpr uint64_t kSwPowerCap = 0x4;
constexpr uint64_t kHwSlowdown = 0x8;
constexpr uint64_t kSyncBoost = 0x10;
constexpr uint64_t kSwThermalSlowdown = 0x20;
constexpr uint64_t kHwThermalSlowdown = 0x40;
constexpr uint64_t kHwPowerBrakeSlowdown = 0x80;
constexpr uint64_t kDisplayClockSetting = 0x100;
// "sw_thermal,hw_slowdown"; "none" for 0.
std::string Describe(uint64_t reasons);
}  // namespace throttle

// One reading of a GPU's (or MIG device's) sensors. Each field is absent when
// the device does not support it; `failures` lists calls that failed for
// another reason (the health monitor treats those as a sign of trouble).
struct Sensors {
  std::string uuid;
  std::optional<uint32_t> utilization_gpu;     // %
  std::optional<uint32_t> utilization_memory;  // %
  std::optional<uint64_t> memory_total_bytes;
  std::optional<uint64_t> memory_used_bytes;
  std::optional<uint64_t> memory_free_bytes;
  std::optional<uint32_t> temperature_c;
  std::optional<uint32_t> power_mw;
  std::optional<uint32_t> clock_graphics_mhz;
  std::optional<uint32_t> clock_sm_mhz;
  std::optional<uint32_t> clock_mem_mhz;
  std::optional<uint32_t> clock_video_mhz;
  std::optional<uint64_t> throttle_reasons;
  std::optional<uint64_t> ecc_volatile_corrected;
  std::optional<uint64_t> ecc_volatile_uncorrected;
  std::optional<uint64_t> ecc_aggregate_corrected;
  std::optional<uint64_t> ecc_aggregate_uncorrected;
  std::optional<bool> retired_pages_pending;
  std::optional<uint32_t> remapped_rows_correctable;
  std::optional<uint32_t> remapped_rows_uncorrectable;
  std::optional<bool> remapped_rows_pending;
  std::optional<bool> remapped_rows_failure;
  std::optional<std::vector<ProcessInfo>> processes;
  std::vector<Status> failures;
};

enum class EventKind { kXid, kDoubleBitEcc, kSingleBitEcc, kMigConfigChange, kOther };
std::string_view EventKindName(EventKind kind);

struct GpuEvent {
  EventKind kind = EventKind::kOther;
  std::string uuid;  // the GPU's UUID; empty if the event named no device we know
  uint64_t xid = 0;  // for kXid
  std::optional<uint32_t> gpu_instance_id;      // set when the event names a MIG device
  std::optional<uint32_t> compute_instance_id;
  std::chrono::steady_clock::time_point received;
};

}  // namespace danqing::gpu
