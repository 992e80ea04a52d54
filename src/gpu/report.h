// Renders what the node agent sees — inventory, MIG tree, topology matrix and
// sensors — as a human table or as JSON. Used by `danqing-device-plugin gpus`.
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "gpu/backend.h"
#include "gpu/types.h"

namespace danqing::gpu {

struct Snapshot {
  std::string source;  // GpuBackend::Describe()
  NodeInventory inventory;
  std::vector<Result<Sensors>> sensors;  // one per GPU then per MIG device; may be empty
};

// Discovers the inventory and, if `with_sensors`, reads every device's sensors.
Result<Snapshot> TakeSnapshot(GpuBackend& backend, bool with_sensors);

nlohmann::json ToJson(const Snapshot& snap);
std::string RenderTable(const Snapshot& snap);

}  // namespace danqing::gpu
