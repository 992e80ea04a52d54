// Allocate: turns the kubelet's device IDs for one container into what the
// container runtime needs — NVIDIA_VISIBLE_DEVICES, device nodes, volume-mount
// markers, CDI device names or annotations — following NVIDIA's conventions
// (deviceListStrategy, deviceIDStrategy, passDeviceSpecs), and writes the CDI
// spec those names refer to.
//
// Thread-safety: pure functions, except WriteCdiSpec (file I/O; atomic rename).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "deviceplugin/resource.h"
#include "deviceplugin/v1beta1/api.pb.h"

namespace danqing::deviceplugin {

using DeviceListStrategy = config::DeviceListStrategy;

// /proc/driver/nvidia-caps/mig-minors: "gpu0/gi1/ci0/access 13" → minor of
// /dev/nvidia-caps/nvidia-cap13.
using MigCapMinors = std::map<std::string, uint32_t>;
Result<MigCapMinors> ParseMigCapMinors(std::string_view text);

struct AllocateOptions {
  std::vector<DeviceListStrategy> device_list_strategies{DeviceListStrategy::kEnvvar};
  DeviceIdStrategy device_id_strategy = DeviceIdStrategy::kUuid;
  bool pass_device_specs = false;
  std::string dev_root = "/";                  // host root under which /dev/nvidia* live
  std::string cdi_annotation_prefix = "cdi.k8s.io/";
  std::string cdi_kind = "k8s.device-plugin.danqing.io/gpu";
  MigCapMinors mig_cap_minors;                 // for MIG device nodes; empty = none known
  // CDI spec only: the driver files (see cdi_driver.h). `driver_root_local`
  // empty = none (the spec lists device nodes alone).
  std::string driver_root_local;               // containerDriverRoot
  std::string driver_root_host = "/";          // nvidiaDriverRoot
  std::string cdi_hook_path = "/usr/bin/nvidia-ctk";  // nvidiaCTKPath; empty = no hooks

  bool operator==(const AllocateOptions&) const = default;
};

// Whether a cdi-* strategy is among the device list strategies (a CDI spec
// is then written).
bool UsesCdi(const std::vector<DeviceListStrategy>& strategies);

// The device nodes one device needs (/dev/nvidia<minor>, and for a MIG
// device the nvidia-cap nodes of its GPU and compute instance found in
// `caps`), as container paths: the host path is the same under dev_root.
std::vector<std::string> DeviceNodes(const Device& d, const MigCapMinors& caps);

// The driver's control nodes a CUDA container needs that exist now
// (/dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools, /dev/nvidia-modeset),
// under `dev_root` or at their own path.
std::vector<std::string> ControlNodes(const std::string& dev_root);

inline constexpr std::string_view kVisibleDevicesEnv = "NVIDIA_VISIBLE_DEVICES";
inline constexpr std::string_view kVolumeMountDir = "/var/run/nvidia-container-devices";

// The bounds of a kubelet request, checked before anything is sized by it.
// A kubelet asks for one container per call, naming devices the plugin
// advertised: no list may name more IDs than a resource may have
// (MaxDevicesPerResource), no ID be longer than the plugin's longest
// (kMaxDeviceIdBytes), no allocation_size be negative or larger than a
// resource may have, and a call may hold at most kMaxContainerRequests
// containers and, all lists together, MaxDevicesPerResource() IDs (Allocate:
// a pod cannot be given more) or twice that (GetPreferredAllocation: the
// available and the must-include lists).
// INVALID_ARGUMENT, saying which bound and with the offending value made
// Printable, otherwise OK.
inline constexpr int kMaxContainerRequests = 64;
Status CheckAllocateRequest(const v1beta1::AllocateRequest& req);
Status CheckPreferredAllocationRequest(const v1beta1::PreferredAllocationRequest& req);

// Validates `ids` against `resource` and builds one container's response.
// INVALID_ARGUMENT, naming the ID and the resource, for: no IDs, an unknown
// ID, an unhealthy device, or more than one ID where the resource allows one.
// IDs are echoed in messages through Printable (common/printable.h).
Result<v1beta1::ContainerAllocateResponse> BuildContainerResponse(
    const Resource& resource, const std::vector<std::string>& ids, const AllocateOptions& options);

// Writes the CDI spec for every device of `set` to
// <cdi_root>/<vendor>-<class>.json (temp file + fsync + rename), with the
// files of driver `set.driver_version` found under options.driver_root_local
// in its common edits. What of the driver was not found goes to `warnings`
// (when given): the spec is still written, and works under the NVIDIA
// runtime, which adds the driver itself.
Status WriteCdiSpec(const ResourceSet& set, const std::string& cdi_root,
                    const AllocateOptions& options, std::vector<std::string>* warnings = nullptr);

}  // namespace danqing::deviceplugin
