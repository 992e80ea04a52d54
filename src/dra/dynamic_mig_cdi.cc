#include "dra/dynamic_mig_cdi.h"

#include <string>

namespace danqing::dra {

NodeDevice DynamicMigNodeDevice(const MigInstance& instance, uint32_t parent_minor) {
  NodeDevice n;
  n.name = instance.device;
  n.device.id = instance.mig_uuid;
  n.device.device_uuid = instance.mig_uuid;
  n.device.gpu_uuid = instance.gpu_uuid;
  n.device.index =
      std::to_string(instance.gpu_index) + ":" + std::to_string(instance.gpu_instance_id);
  n.device.gpu_position = instance.gpu_index;
  n.device.minor = instance.parent_minor.value_or(parent_minor);
  n.device.gpu_instance_id = instance.gpu_instance_id;
  n.device.compute_instance_id = instance.compute_instance_id;
  return n;
}

}  // namespace danqing::dra
