// Which pod holds which GPU, and which pod a GPU process belongs to.
//
// Three sources, each read by the exporter's collector thread:
//   - the kubelet's pod resources API (`List`): namespace/pod/container →
//     device IDs of each extended resource (exact for whole GPUs and MIG
//     devices; for time-sliced replicas it names every pod sharing a GPU),
//     and the DRA devices of its claims (`dynamic_resources`);
//   - /proc/<pid>/cgroup of each GPU process: the pod UID and container ID
//     (cgroup v1 and v2, systemd and cgroupfs drivers, containerd, CRI-O,
//     Docker);
//   - the kubelet's device manager checkpoint
//     (<device-plugins>/kubelet_internal_checkpoint): pod UID + container
//     name → device IDs, which joins a process's pod UID to the namespace and
//     name that `List` reports (pod resources carry no UID).
//
// Thread-safety: free functions are reentrant; a PodResourcesClient is used
// by one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace v1 {
class ListPodResourcesResponse;
class AllocatableResourcesResponse;
}  // namespace v1

namespace danqing::metrics {

// The pod and container of a process, from its cgroup path.
struct CgroupIdentity {
  std::string pod_uid;       // "8dd4b4c9-3b6e-4d0e-9c62-9b1b3b1a2f10"
  std::string container_id;  // 64 hex digits; empty when the path names none

  bool operator==(const CgroupIdentity&) const = default;
};

// Parses the text of /proc/<pid>/cgroup. nullopt when no line names a pod
// (a host process, or a process in another cgroup namespace).
std::optional<CgroupIdentity> ParseCgroup(std::string_view text);

// Reads <proc_root>/<pid>/cgroup. NOT_FOUND when the process is gone or not
// visible; OK with nullopt when it is not in a pod.
Result<std::optional<CgroupIdentity>> ReadProcessCgroup(const std::string& proc_root, uint32_t pid);

struct ContainerRef {
  std::string ns;  // namespace
  std::string pod;
  std::string container;

  bool operator==(const ContainerRef&) const = default;
  auto operator<=>(const ContainerRef&) const = default;
};

// One kubelet device ID held by a container.
struct DeviceHolder {
  ContainerRef ref;
  std::string resource;   // "nvidia.com/gpu"
  std::string device_id;  // "GPU-...", "MIG-...", "GPU-...::3"
};

// "GPU-x::3" → "GPU-x"; other IDs unchanged.
std::string DeviceUuidOf(std::string_view device_id);

// The devices this node serves through DRA (docs/dra.md): a claim's device
// in the pod resources' dynamic_resources is named by driver, pool and
// device name; this maps it back to the GPU or MIG device.
struct DraDevices {
  std::string driver;                                 // "gpu.danqing.io"
  std::string pool;                                   // the node's name
  std::map<std::string, std::string> uuid_by_device;  // "gpu-0" → "GPU-…"
};

// Device UUID (GPU or MIG) → every container holding one of its device IDs,
// from a List answer, for resources starting with `resource_prefix`; with
// `dra`, also every container whose dynamic_resources hold one of its
// devices of that driver and pool (resource: the driver; device ID:
// "<pool>/<device>", "/<shareID>" appended for a shared allocation). Other
// drivers' and pools' devices, and names `dra` does not know, are skipped.
using HolderMap = std::map<std::string, std::vector<DeviceHolder>>;
HolderMap HoldersFrom(const v1::ListPodResourcesResponse& list, std::string_view resource_prefix,
                      const DraDevices* dra = nullptr);

// Device UUID → number of allocatable device IDs (e.g. time-slicing replicas).
std::map<std::string, int> AllocatableFrom(const v1::AllocatableResourcesResponse& resp,
                                           std::string_view resource_prefix);

// One entry of the kubelet's device manager checkpoint.
struct CheckpointEntry {
  std::string pod_uid;
  std::string container;
  std::string resource;
  std::vector<std::string> device_ids;
};

// Parses kubelet_internal_checkpoint (JSON; DeviceIDs as a NUMA-keyed map
// since Kubernetes 1.20, a plain list before). INVALID_ARGUMENT when it is
// not such a file.
Result<std::vector<CheckpointEntry>> ParseCheckpoint(std::string_view json);

// Pod UID → (namespace, pod, containers) by joining checkpoint entries with
// List holders on (resource, device ID).
struct PodByUid {
  std::string ns;
  std::string pod;
  // container name → device UUIDs it holds
  std::map<std::string, std::vector<std::string>> containers;
};
std::map<std::string, PodByUid> JoinCheckpoint(const std::vector<CheckpointEntry>& entries,
                                               const HolderMap& holders);

// A synchronous client of v1.PodResourcesLister on a unix socket, with a
// short deadline per call. Errors: NOT_FOUND when the socket file is missing
// (no kubelet, or not mounted), UNAVAILABLE when nothing answers,
// DEADLINE_EXCEEDED, or INTERNAL with the gRPC message.
class PodResourcesClient {
 public:
  PodResourcesClient(std::string socket_path, std::chrono::milliseconds deadline);
  ~PodResourcesClient();
  PodResourcesClient(const PodResourcesClient&) = delete;
  PodResourcesClient& operator=(const PodResourcesClient&) = delete;

  Result<std::shared_ptr<v1::ListPodResourcesResponse>> List();
  Result<std::shared_ptr<v1::AllocatableResourcesResponse>> GetAllocatable();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace danqing::metrics
