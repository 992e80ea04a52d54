// Slices: this node's GPUs as resource.k8s.io/v1 ResourceSlices.
//
// From one inventory snapshot and the health monitor's conditions it builds
// the devices the DRA driver publishes, then splits them into the slices of
// one pool (the node's). Pure functions: no I/O except reading the PCIe root
// of each GPU from sysfs (injectable); the Publisher (publisher.h) writes
// them to the API server.
//
// Devices, named by DeviceNameFor (node_devices.h, shared with the node
// plugin) as DNS labels that stay the same across restarts:
//   gpu-<index>                                 a GPU without MIG enabled
//   gpu-<index>-mig-<profile>-<gi>-<ci>         an existing MIG device
//                                               ("gpu-0-mig-1g10gb-9-0")
// A GPU with MIG enabled is published through its MIG devices only: the
// whole GPU beside them could be allocated twice.
//
// Attributes (unqualified names are in the driver's domain, e.g.
// device.attributes["gpu.danqing.io"].productName in CEL):
//   type (string "gpu"|"mig"), uuid, productName, brand, architecture,
//   cudaComputeCapability (version "8.0.0"), driverVersion (version,
//   "550.54.15"; leading zeros dropped: "535.104.5"), cudaDriverVersion
//   (version "12.4.0"), index (int), minor (int), pcieBusID (string),
//   resource.kubernetes.io/pcieRoot (string "pci0000:00", when sysfs tells),
//   numaNode (int, when known), nvlinkDomain (int: GPUs joined by NVLink,
//   directly or through NVSwitches, share one; the lowest GPU index in the
//   island; a GPU without NVLink has its own), and for MIG devices
//   migProfile (string "1g.10gb"), parentUUID, parentIndex,
//   gpuInstanceID, computeInstanceID (ints).
// Capacity: memory (bytes, a binary-SI quantity "80Gi") and multiprocessors
// (MIG: NVML's count; whole GPU: from the product's known SM count, absent
// for an unknown product).
//
// Health: a device whose GPU or own UUID has a condition gets one taint
// <driver>/unhealthy with the condition(s) as its value (a label value:
// "xid-79_gpu-lost"), effect NoExecute when the condition needs a GPU reset
// (reset-class XID, double-bit ECC, pending page retirement or row remap,
// row remap failure), NoSchedule otherwise. No condition: no taint.
//
// Limits (resource.k8s.io/v1 validation): at most 128 devices per slice, 64
// in a slice with a tainted device; at most 32 attributes and capacities per
// device (at most 22 are written).
//
// Thread-safety: free functions over values.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/types.h"
#include "health/monitor.h"
#include "health/xid_policy.h"

namespace danqing::dra {

using Json = nlohmann::json;

inline constexpr std::string_view kDefaultDriverName = "gpu.danqing.io";
inline constexpr std::size_t kMaxDevicesPerSlice = 128;
inline constexpr std::size_t kMaxDevicesPerSliceWithTaints = 64;
inline constexpr std::string_view kPcieRootAttribute = "resource.kubernetes.io/pcieRoot";

// A device's health condition, by UUID (GPU-... or MIG-...).
struct DeviceCondition {
  std::string reason;        // conditions joined by ',' ("xid-79,gpu-lost")
  bool needs_reset = false;  // NoExecute
  bool operator==(const DeviceCondition&) const = default;
};
using DeviceConditions = std::map<std::string, DeviceCondition>;

// From health::Checker::Snapshot() / Monitor::Snapshot(): unhealthy devices only.
DeviceConditions ConditionsFromSnapshot(const std::vector<health::DeviceHealth>& snapshot);
// From the map health::Checker's publish callback receives (UUID → reason):
// a condition needs a reset when one of its names is double-bit-ecc,
// retired-pages-pending, row-remap-pending, row-remap-failure, or xid-<N>
// with N in `policy`'s reset class.
DeviceConditions ConditionsFromUnhealthy(const std::map<std::string, std::string>& unhealthy,
                                         const health::XidPolicy& policy);

struct SliceOptions {
  std::string driver = std::string(kDefaultDriverName);
  std::string node_name;  // required: spec.nodeName, and the pool's name
  // Where the host's sysfs is: each GPU's PCIe root is read from the link
  // <sysfs_root>/bus/pci/devices/<dddd:bb:dd.f>. Empty: not read.
  std::string sysfs_root = "/sys";
  // Which GPUs this front end serves (split mode); empty: every GPU.
  std::function<bool(const gpu::Gpu&)> serve;
  // When set, each slice gets an ownerReference to the Node (garbage
  // collected with it): the Node object's UID.
  std::string node_uid;
  std::size_t max_devices_per_slice = kMaxDevicesPerSlice;  // lower only in tests
};

struct Taint {
  std::string key;
  std::string value;
  std::string effect;      // "NoSchedule" | "NoExecute"
  std::string time_added;  // RFC 3339; empty: the API server sets it
  bool operator==(const Taint&) const = default;
};

struct SliceDevice {
  std::string name;      // DNS label
  std::string uuid;      // GPU-... or MIG-...
  std::string gpu_uuid;  // the physical GPU
  Json attributes;       // name → {"int"|"bool"|"string"|"version": v}
  Json capacity;         // name → {"value": quantity}
  std::vector<Taint> taints;
};

// A slice's name: "<node>-<driver>-<index>" (a DNS subdomain).
std::string SliceName(const SliceOptions& options, std::size_t index);

// "550.54.15" → "550.54.15", "535.104.05" → "535.104.5", "12.4" → "12.4.0";
// nullopt when not made of 1 to 3 dot-separated numbers.
std::optional<std::string> SemanticVersion(std::string_view version);
// 85899345920 → "80Gi"; 1000 → "1000" (a canonical binary-SI quantity).
std::string BinaryQuantity(uint64_t bytes);
// A label value (≤ 63 characters of [A-Za-z0-9._-], alphanumeric at both
// ends): ',' → '_', other characters → '-'.
std::string LabelValue(std::string_view text);
// The NVLink island of each GPU (by UUID): the lowest NVML index among the
// GPUs it reaches over NVLink.
std::map<std::string, int> NvlinkDomains(const gpu::NodeInventory& inventory);
// The PCIe root complex of a PCI device from sysfs ("pci0000:00"), nullopt
// when the link cannot be read.
std::optional<std::string> PcieRoot(const std::string& sysfs_root, const gpu::PciInfo& pci);
// SMs of a whole GPU of this product name (NVIDIA's published counts), 0 when unknown.
uint32_t KnownMultiprocessors(std::string_view product_name);

// The devices to publish, sorted by (GPU index, MIG GPU instance), with
// health applied; taints have no time_added (the Publisher keeps the times).
std::vector<SliceDevice> BuildDevices(const gpu::NodeInventory& inventory,
                                      const DeviceConditions& conditions,
                                      const SliceOptions& options);

// How `devices` are grouped into slices: each group at most 128 devices, 64
// when one of them has a taint; in order. An empty pool is one empty slice
// (so that its generation is still published).
std::vector<std::vector<const SliceDevice*>> GroupDevices(const std::vector<SliceDevice>& devices,
                                                          const SliceOptions& options);

// The ResourceSlice objects of one pool generation (apiVersion, kind,
// metadata.name [+ ownerReferences], spec), in index order.
std::vector<Json> BuildSlices(const std::vector<SliceDevice>& devices, int64_t generation,
                              const SliceOptions& options);

// One device's JSON as it appears in spec.devices.
Json DeviceJson(const SliceDevice& device);

}  // namespace danqing::dra
