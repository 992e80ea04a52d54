// The devices this node serves through DRA, as the node plugin sees them:
// each with its name in the driver's pool (the ResourceSlice device name),
// what it gives access to (the device plugin's Device: UUID, minor, MIG
// instance IDs, for the CDI device nodes) and its health.
//
// Names: DeviceNameFor is the one naming function of the driver, used by
// the node plugin (this table) and by the ResourceSlices (slices.h), so a
// claim allocated from a published slice names a device the node knows.
// DNS labels that stay the same across restarts:
//   whole GPU    gpu-<index>                          e.g. gpu-0
//   MIG device   gpu-<index>-mig-<profile>-<gi>-<ci>  e.g. gpu-0-mig-1g10gb-9-0
//                (the profile lower-cased, '.' dropped, '+' made '-';
//                cut to 63 characters)
// The pool is the node's name.
//
// Thread-safety: values; a DeviceTable is immutable once built and shared
// through shared_ptr<const ...>.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "deviceplugin/resource.h"
#include "gpu/types.h"

namespace danqing::dra {

struct NodeDevice {
  std::string name;             // device name in the pool
  deviceplugin::Device device;  // id/device_uuid/gpu_uuid/minor/MIG ids; healthy/unhealthy_reason
  bool operator==(const NodeDevice&) const = default;
};

struct DeviceTable {
  std::string pool;                           // the node's name
  std::map<std::string, NodeDevice> devices;  // by name
  std::string driver_version;                 // for the CDI spec's driver files

  const NodeDevice* Find(const std::string& name) const;
};

// The device name of `gpu` or, for a MIG device, of `mig` on it (see above).
std::string DeviceNameFor(const gpu::Gpu& gpu);
std::string DeviceNameFor(const gpu::Gpu& gpu, const gpu::MigDevice& mig);

// Every whole GPU of `inventory`, and every MIG device of a GPU in MIG mode,
// whose UUID `serve` accepts (all when `serve` is empty: split mode passes
// the GPUs the DRA side serves). All healthy: WithHealth marks them.
DeviceTable BuildDeviceTable(const gpu::NodeInventory& inventory, const std::string& pool,
                             const std::vector<std::string>& serve = {});

// A copy of `table` where every device on one of `unhealthy` GPUs (GPU
// UUID → reason), and every MIG device named there by its own UUID, is
// unhealthy with that reason, all others healthy.
std::shared_ptr<const DeviceTable> WithHealth(const DeviceTable& table,
                                              const std::map<std::string, std::string>& unhealthy);

}  // namespace danqing::dra
