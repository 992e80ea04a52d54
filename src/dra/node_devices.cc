#include "dra/node_devices.h"

#include <algorithm>
#include <cctype>

namespace danqing::dra {

const NodeDevice* DeviceTable::Find(const std::string& name) const {
  auto it = devices.find(name);
  return it == devices.end() ? nullptr : &it->second;
}

std::string DeviceNameFor(const gpu::Gpu& gpu) {
  return "gpu-" + std::to_string(gpu.index);
}

std::string DeviceNameFor(const gpu::Gpu& gpu, const gpu::MigDevice& mig) {
  std::string profile;
  for (const char c : mig.profile) {
    const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if ((l >= 'a' && l <= 'z') || (l >= '0' && l <= '9')) {
      profile.push_back(l);
    } else if (l == '+' || l == '-') {
      profile.push_back('-');
    }  // '.' and anything else dropped
  }
  if (profile.empty()) profile = "unknown";
  std::string name = DeviceNameFor(gpu) + "-mig-" + profile + "-" +
                     std::to_string(mig.gpu_instance_id) + "-" +
                     std::to_string(mig.compute_instance_id);
  if (name.size() > 63) name.resize(63);
  while (!name.empty() && name.back() == '-') name.pop_back();
  return name;
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
    // The GPU's condition reaches each device on it; a MIG device may have its own.
    auto it = unhealthy.find(d.device.gpu_uuid);
    if (it == unhealthy.end()) it = unhealthy.find(d.device.device_uuid);
    d.device.healthy = it == unhealthy.end();
    d.device.unhealthy_reason = d.device.healthy ? std::string() : it->second;
  }
  return out;
}

}  // namespace danqing::dra
