// Fake NVML: the node model and its JSON form ("node profiles").
//
// A profile describes one machine: driver versions and a list of GPUs with
// their PCI placement, NVLinks, sensors, processes and MIG layout. This file
// declares the in-memory model and the functions that turn JSON into it (with
// validation that names the offending JSON path) and back (for the control
// server's "get" command). README.md documents the schema.
//
// Thread-safety: the model types are plain values with no locking of their
// own; the library keeps its one Node behind the state mutex (see state.h).
// The parse/serialise functions are pure and may run on any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu/nvml_abi.h"

namespace fake_nvml {

using json = nlohmann::json;

// A profile that cannot be read, is not valid JSON, or breaks a rule of the
// schema. what() is one line naming the file (when known) and the JSON path.
class ProfileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Values NVML uses for "no MIG instance".
inline constexpr unsigned kNoInstanceId = 0xFFFFFFFFU;
// MIG geometry of the GPUs modelled here (A100/H100/H200): 7 compute slices,
// 8 memory slices, at most 7 MIG devices.
inline constexpr unsigned kMigComputeSlices = 7;
inline constexpr unsigned kMigMemorySlices = 8;
inline constexpr unsigned kMaxMigDevices = 7;
// PCI device id that nvmlDeviceGetNvLinkRemotePciInfo reports for an NVSwitch
// unless the profile says otherwise (the A100-generation NVSwitch).
inline constexpr unsigned kDefaultNvSwitchDeviceId = 0x1AF110DEU;

// A PCI function address. NVML writes it as "00000000:07:00.0" (busId: 8 hex
// digits of domain, upper-case) and "0000:07:00.0" (busIdLegacy).
struct PciAddress {
  unsigned domain = 0;
  unsigned bus = 0;
  unsigned device = 0;
  unsigned function = 0;

  std::string bus_id() const;         // "00000000:07:00.0"
  std::string legacy_bus_id() const;  // "0000:07:00.0"
  bool operator==(const PciAddress&) const = default;
};

// Parses "DDDDDDDD:BB:DD.F" or "DDDD:BB:DD.F" (hex, any case). Also accepts the
// short "BB:DD.F" form with domain 0. nullopt when malformed or out of range.
std::optional<PciAddress> parse_bus_id(std::string_view text);

struct NvSwitch {
  PciAddress address;
  unsigned device_id = kDefaultNvSwitchDeviceId;
  unsigned subsystem_id = 0;
};

// One NVLink of a GPU; its index is its position in Gpu::nvlinks.
struct NvLink {
  std::optional<PciAddress> remote;  // a GPU or an NVSwitch; nullopt: no peer
  bool active = true;
};

// Where a GPU sits in the PCIe tree. Ids are opaque labels; GPUs that share a
// label share that component. Empty means "none" (never shared).
struct PcieTopology {
  std::string switch_id;
  std::string switch_parent;
  std::string host_bridge;
};

// One row of a GPU model's MIG GPU-instance profile table.
struct MigProfile {
  unsigned profile = 0;  // NVML_GPU_INSTANCE_PROFILE_* constant
  unsigned id = 0;       // the driver's profile id (A100: 1g.10gb is 19)
  std::string name;      // "MIG 1g.10gb"
  unsigned slice_count = 0;    // compute slices
  unsigned memory_slices = 0;  // memory slices (of 8); placement size
  unsigned instance_count = 0;
  unsigned multiprocessor_count = 0;
  std::uint64_t memory_mib = 0;
  unsigned copy_engine_count = 0;
  unsigned decoder_count = 0;
  unsigned encoder_count = 0;
  unsigned jpeg_count = 0;
  unsigned ofa_count = 0;
  bool p2p = false;

  // The name without the "MIG " prefix: "1g.10gb".
  std::string_view short_name() const;
};

// One MIG device: a GPU instance with one compute instance spanning it.
struct MigDevice {
  std::size_t profile = 0;  // index into Gpu::mig_profiles
  unsigned gpu_instance_id = 0;
  unsigned compute_instance_id = 0;
  std::string uuid;  // "MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  unsigned placement_start = 0;  // in memory slices
  // False for a GPU instance created through NVML whose compute instance is
  // not (yet) created: it is no MIG device (no handle, not enumerated).
  bool has_compute_instance = true;
};

struct MigConfig {
  unsigned mode = NVML_DEVICE_MIG_DISABLE;     // current
  unsigned pending = NVML_DEVICE_MIG_DISABLE;  // after the next GPU reset
  std::vector<MigDevice> devices;              // MIG index = position
};

struct EccCounters {
  std::uint64_t corrected = 0;
  std::uint64_t uncorrected = 0;
};

// The readings that change at run time ("set" merges into these).
struct Sensors {
  unsigned gpu_util = 0;     // percent
  unsigned memory_util = 0;  // percent
  std::optional<std::uint64_t> memory_used_mib;  // nullopt: sum of processes
  unsigned temperature_c = 0;
  unsigned power_mw = 0;
  unsigned clock_graphics_mhz = 0;
  unsigned clock_sm_mhz = 0;
  unsigned clock_mem_mhz = 0;
  unsigned clock_video_mhz = 0;
  std::uint64_t throttle_reasons = 0;  // nvmlClocksThrottleReason* bits
  EccCounters ecc_volatile;
  EccCounters ecc_aggregate;
  bool retired_pages_pending = false;
  unsigned remapped_correctable = 0;
  unsigned remapped_uncorrectable = 0;
  bool remapped_pending = false;
  bool remapped_failure = false;
};

struct Process {
  unsigned pid = 0;
  std::uint64_t used_memory_mib = 0;
  unsigned sm_util = 0;   // percent, for nvmlDeviceGetProcessUtilization
  unsigned mem_util = 0;  // percent
  std::optional<unsigned> gpu_instance_id;      // set on MIG-enabled GPUs
  std::optional<unsigned> compute_instance_id;  // defaults to the GI's CI
};

using FailureMap = std::map<std::string, nvmlReturn_t, std::less<>>;

struct Gpu {
  // Identity.
  std::string uuid;  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  std::string name;  // "NVIDIA A100-SXM4-80GB"
  nvmlBrandType_t brand = NVML_BRAND_UNKNOWN;
  nvmlDeviceArchitecture_t architecture = NVML_DEVICE_ARCH_UNKNOWN;
  int cc_major = 0;
  int cc_minor = 0;
  unsigned minor_number = 0;

  // PCI and placement.
  PciAddress pci;
  unsigned pci_device_id = 0;     // (device << 16) | vendor
  unsigned pci_subsystem_id = 0;
  int numa_node = -1;  // -1: nvmlDeviceGetNumaNodeId is NOT_SUPPORTED
  PcieTopology pcie;
  std::vector<NvLink> nvlinks;

  // Capacity.
  std::uint64_t memory_total_mib = 0;
  std::uint64_t memory_reserved_mib = 0;
  unsigned multiprocessor_count = 0;

  // Run-time state.
  Sensors sensors;
  std::vector<Process> processes;
  std::uint64_t processes_timestamp_us = 0;  // when `processes` last changed
  bool lost = false;

  // MIG: an empty table means the GPU is not MIG capable.
  std::vector<MigProfile> mig_profiles;
  MigConfig mig;

  // Functions that return NOT_SUPPORTED (profile), or a chosen error (control
  // "fail"), for this GPU. Keys are function names, exact or unversioned.
  std::set<std::string, std::less<>> unsupported;
  FailureMap failures;

  bool mig_capable() const { return !mig_profiles.empty(); }
  bool mig_enabled() const { return mig.mode == NVML_DEVICE_MIG_ENABLE; }
  const MigDevice* find_mig_by_uuid(std::string_view mig_uuid) const;
  const MigDevice* find_mig_by_gi(unsigned gpu_instance_id) const;
  const MigProfile* find_mig_profile(unsigned profile_constant) const;
  const MigProfile& profile_of(const MigDevice& device) const { return mig_profiles[device.profile]; }
  // Memory in use on the whole GPU (explicit sensor or sum of processes), MiB.
  std::uint64_t memory_used_mib() const;
  // Memory used by the processes of one GPU instance, MiB.
  std::uint64_t instance_memory_used_mib(unsigned gpu_instance_id) const;
};

struct Node {
  std::string driver_version;  // "550.54.15"
  std::string nvml_version;    // "12.550.54.15"
  int cuda_driver_version = 0; // 12040
  std::optional<nvmlReturn_t> init_error;
  std::vector<Gpu> gpus;       // NVML index = position
  std::vector<NvSwitch> nvswitches;
  FailureMap failures;         // node-wide injected failures (control "fail")

  // The GPU or NVSwitch at a PCI address; nullptr when there is none.
  const Gpu* find_gpu(const PciAddress& address) const;
  const NvSwitch* find_nvswitch(const PciAddress& address) const;
};

// Reads and parses a profile file. Throws ProfileError naming `path`, with the
// byte offset and line for JSON syntax errors.
Node load_profile(const std::string& path);

// Parses and validates a profile document. Throws ProfileError with the JSON
// path of the first problem, e.g. "gpus[2].mig.devices[1]: ...".
Node parse_profile(const json& doc);

// The pieces the control server replaces at run time. `where` prefixes error
// messages. parse_sensors takes a complete sensors object (callers merge a
// partial update into sensors_to_json() of the current value first).
Sensors parse_sensors(const json& value, const std::string& where);
std::vector<Process> parse_processes(const json& value, const Gpu& gpu, const std::string& where);
MigConfig parse_mig(const json& value, const Gpu& gpu, const std::string& where);

// JSON forms of the current state, in the profile's schema.
json sensors_to_json(const Sensors& sensors);
json processes_to_json(const std::vector<Process>& processes);
json mig_to_json(const Gpu& gpu);
json gpu_to_json(const Gpu& gpu, unsigned index);

// "GPU-"/"MIG-" followed by 8-4-4-4-12 hex digits.
bool is_valid_uuid(std::string_view uuid, std::string_view prefix);

}  // namespace fake_nvml
