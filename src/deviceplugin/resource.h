// Resources: what the node agent advertises to the kubelet, built from the GPU
// inventory and the sharing configuration.
//
// A Resource is one extended resource name (nvidia.com/gpu, ...) with its
// devices. A device is what the kubelet counts and hands out: a whole GPU, a
// MIG device, or a time-slicing replica of either. Each device remembers the
// physical GPU it lives on, so health and topology apply to every replica and
// MIG device of a GPU.
//
// Thread-safety: values; a ResourceSet is immutable once built and shared
// between threads through shared_ptr<const ...>.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/config.h"
#include "deviceplugin/allocator.h"
#include "gpu/types.h"

namespace danqing::deviceplugin {

inline constexpr std::string_view kHealthy = "Healthy";
inline constexpr std::string_view kUnhealthy = "Unhealthy";
inline constexpr std::string_view kDefaultResource = "nvidia.com/gpu";

// How many devices one resource may advertise.
//
// Every ListAndWatch message carries the resource's whole device list, and the
// kubelet reads it under gRPC's default limit on a received message, 4 MiB: a
// larger list fails on the kubelet's side, the stream ends, the plugin
// registers again and again, and the kubelet never sees a device. So a
// resource may have at most as many devices as fit, each at its largest
// encoding (MaxEncodedDeviceBytes), in half of that limit; the other half is
// the margin. Time-slicing that would advertise more is refused
// (BuildResources), and a kubelet request may not name more device IDs
// (CheckAllocateRequest, CheckPreferredAllocationRequest).
inline constexpr size_t kGrpcDefaultMaxMessageBytes = size_t{4} << 20;
inline constexpr size_t kListAndWatchBudgetBytes = kGrpcDefaultMaxMessageBytes / 2;
// The longest device ID the plugin advertises: an NVML UUID (NVML's buffer is
// 96 bytes with the terminating NUL) plus "::" and a replica number.
inline constexpr size_t kMaxDeviceIdBytes = 95 + 2 + 10;
// One device's largest encoding in a ListAndWatchResponse: an ID of
// kMaxDeviceIdBytes, "Unhealthy", a NUMA node of the widest varint, and the
// field's tag and length.
size_t MaxEncodedDeviceBytes();
// kListAndWatchBudgetBytes / MaxEncodedDeviceBytes().
size_t MaxDevicesPerResource();

using MigStrategy = config::MigStrategy;
using DeviceIdStrategy = config::DeviceIdStrategy;

struct Device {
  std::string id;            // advertised ID: "GPU-..", "MIG-..", or "<uuid>::<k>" for a replica
  std::string device_uuid;   // the GPU or MIG device it gives access to
  std::string gpu_uuid;      // the physical GPU (health propagates from it)
  std::string index;         // NVML index form: "3", or "3:1" for a MIG device
  int gpu_position = -1;     // position in NodeInventory::gpus (topology)
  std::optional<int> numa_node;
  std::optional<uint32_t> minor;                // /dev/nvidia<minor>
  std::optional<uint32_t> gpu_instance_id;      // MIG
  std::optional<uint32_t> compute_instance_id;  // MIG
  int replica = -1;          // k of "<uuid>::<k>", -1 when not a replica
  bool healthy = true;
  std::string unhealthy_reason;

  bool operator==(const Device&) const = default;
};

struct Resource {
  std::string name;  // "nvidia.com/gpu"
  std::vector<Device> devices;
  int replicas = 1;  // time-slicing replicas per device (1 = exclusive)
  bool fail_requests_greater_than_one = false;

  const Device* Find(std::string_view id) const;
  // Find for each of `ids` (null where unknown), in time linear in the IDs
  // and devices together: a request may name thousands.
  std::vector<const Device*> FindEach(const std::vector<std::string>& ids) const;
  bool operator==(const Resource&) const = default;
};

// Time-slicing of one resource (NVIDIA's sharing.timeSlicing.resources[i]).
struct TimeSlicing {
  std::string name;     // the resource it shares, e.g. nvidia.com/gpu
  std::string rename;   // advertised name; empty = name (or name + ".shared" when rename_by_default)
  int replicas = 1;
  // Which devices: empty (and count 0) = all; else NVML indices ("0", "1:0")
  // or UUIDs.
  std::vector<std::string> devices;
  // Or how many: the resource's first `count` devices, in the order they are
  // advertised (GPU index, then MIG device). 0 = not a count.
  int count = 0;
};

struct ResourceOptions {
  MigStrategy mig_strategy = MigStrategy::kNone;
  std::vector<TimeSlicing> time_slicing;
  bool rename_by_default = false;
  bool fail_requests_greater_than_one = false;
  ReplicaPolicy replica_policy = ReplicaPolicy::kDistributed;
};

// The resources of one inventory snapshot, with a topology-aware allocator
// per resource.
struct ResourceSet {
  std::vector<Resource> resources;
  std::map<std::string, std::shared_ptr<const PreferredAllocator>> allocators;  // by name
  std::vector<std::string> warnings;  // e.g. MIG geometry that `single` cannot advertise
  std::string driver_version;         // the inventory's, for the CDI spec's driver files

  const Resource* Find(std::string_view name) const;
};

// The extended resource of a MIG profile under the mixed strategy, as NVIDIA
// names it: "nvidia.com/mig-" + the profile, its '+' (media extensions:
// "1g.10gb+me") made '.', which a resource name may not contain.
std::string MigResourceName(std::string_view profile);

// Builds the advertised resources. Errors: INVALID_ARGUMENT when the options
// cannot apply to this node (a time-slicing selector naming a GPU that does
// not exist, a MIG strategy the hardware contradicts as NVIDIA documents, more
// devices in one resource than MaxDevicesPerResource(), which is checked before
// the replicas are made).
Result<std::shared_ptr<const ResourceSet>> BuildResources(const gpu::NodeInventory& inventory,
                                                          const ResourceOptions& options);

// A copy of `set` where every device on one of `unhealthy` GPUs (GPU UUID →
// reason) is marked unhealthy, and all others healthy.
std::shared_ptr<const ResourceSet> WithHealth(const ResourceSet& set,
                                              const std::map<std::string, std::string>& unhealthy);

}  // namespace danqing::deviceplugin
