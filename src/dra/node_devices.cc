#include "dra/node_devices.h"

#include <algorithm>

namespace danqing::dra {

const NodeDevice* DeviceTable::Find(const std::string& name) const {
  auto it = devices.find(name);
  return it == devices.end() ? nullptr : &it->second;
}

std::string DeviceNameFor(const gpu::Gpu& gpu) {
  return "gpu-" + std::to_string(gpu.index);
}

std::string DeviceNameFor(const gpu::Gpu& gpu, const gpu::MigDevice& mig) {
  return DeviceNameFor(gpu) + "-mig-" + std::to_string(mig.gpu_instance_id) + "-" +
         std::to_string(mig.compute_instance_id);
}

DeviceTable BuildDeviceTable(const gpu::NodeInventory& inventory, const std::string& pool,
                             const std::vector<std::string>& serve) {
  DeviceTable table;
  table.pool = pool;
  table.driver_version = inventory.driver_version;
  auto wanted = [&serve](const std::string& uuid) {
    return serve.empty() || std::find(serve.begin(), serve.end(), uuid) != serve.end();
  };
  for (size_t pos = 0; pos < inventory.gpus.size(); ++pos) {
    const gpu::Gpu& g = inventory.gpus[pos];
    if (!wanted(g.uuid)) continue;
    if (g.mig_mode == gpu::MigMode::kEnabled) {
      for (const auto& m : g.mig_devices) {
        NodeDevice d;
        d.name = DeviceNameFor(g, m);
        d.device.id = m.uuid;
        d.device.device_uuid = m.uuid;
        d.device.gpu_uuid = g.uuid;
        d.device.index = std::to_string(g.index) + ":" + std::to_string(m.index);
        d.device.gpu_position = static_cast<int>(pos);
        d.device.numa_node = g.numa_node;
        d.device.minor = g.minor_number;
        d.device.gpu_instance_id = m.gpu_instance_id;
        d.device.compute_instance_id = m.compute_instance_id;
        table.devices[d.name] = std::move(d);
      }
      continue;
    }
    NodeDevice d;
    d.name = DeviceNameFor(g);
    d.device.id = g.uuid;
    d.device.device_uuid = g.uuid;
    d.device.gpu_uuid = g.uuid;
    d.device.index = std::to_string(g.index);
    d.device.gpu_position = static_cast<int>(pos);
    d.device.numa_node = g.numa_node;
    d.device.minor = g.minor_number;
    table.devices[d.name] = std::move(d);
  }
  return table;
}

std::shared_ptr<const DeviceTable> WithHealth(const DeviceTable& table,
                                              const std::map<std::string, std::string>& unhealthy) {
  auto out = std::make_shared<DeviceTable>(table);
  for (auto& [name, d] : out->devices) {
    auto it = unhealthy.find(d.device.gpu_uuid);
    d.device.healthy = it == unhealthy.end();
    d.device.unhealthy_reason = d.device.healthy ? std::string() : it->second;
  }
  return out;
}

}  // namespace danqing::dra
