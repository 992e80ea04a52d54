#include "deviceplugin/allocate.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/atomic_file.h"
#include "common/printable.h"
#include "deviceplugin/cdi_driver.h"

namespace danqing::deviceplugin {
namespace {

// FNV-1a, for a short stable annotation key from a container's device list.
uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace

std::vector<std::string> DeviceNodes(const Device& d, const MigCapMinors& caps) {
  std::vector<std::string> nodes;
  if (d.minor) nodes.push_back("/dev/nvidia" + std::to_string(*d.minor));
  if (d.gpu_instance_id && d.minor) {
    const std::string gpu = "gpu" + std::to_string(*d.minor);
    const std::string gi = gpu + "/gi" + std::to_string(*d.gpu_instance_id);
    for (const std::string& key :
         {gi + "/access", gi + "/ci" + std::to_string(d.compute_instance_id.value_or(0)) + "/access"}) {
      if (auto it = caps.find(key); it != caps.end()) {
        nodes.push_back("/dev/nvidia-caps/nvidia-cap" + std::to_string(it->second));
      }
    }
  }
  return nodes;
}

// Each control node is optional, as in NVIDIA's plugin: the UVM module
// creates its nodes only when first loaded (often by the first CUDA program
// after boot), and a runtime refuses to start a container whose device spec
// names a node that does not exist. So a node is listed when it exists, under
// dev_root or at its own path (where the plugin container sees the host's
// /dev), checked at each Allocate.
std::vector<std::string> ControlNodes(const std::string& dev_root) {
  static const char* const kNodes[] = {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                                       "/dev/nvidia-modeset"};
  std::vector<std::string> out;
  for (const char* n : kNodes) {
    std::error_code ec;
    if (std::filesystem::exists(UnderRoot(dev_root, n), ec) || std::filesystem::exists(n, ec)) out.emplace_back(n);
  }
  return out;
}

namespace {

bool Has(const AllocateOptions& o, DeviceListStrategy s) {
  return std::find(o.device_list_strategies.begin(), o.device_list_strategies.end(), s) !=
         o.device_list_strategies.end();
}

}  // namespace

bool UsesCdi(const std::vector<DeviceListStrategy>& strategies) {
  return std::any_of(strategies.begin(), strategies.end(), [](DeviceListStrategy s) {
    return s == DeviceListStrategy::kCdiAnnotations || s == DeviceListStrategy::kCdiCri;
  });
}

Result<MigCapMinors> ParseMigCapMinors(std::string_view text) {
  MigCapMinors out;
  std::istringstream in{std::string(text)};
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    std::istringstream ls(line);
    std::string key;
    long long minor = -1;
    if (!(ls >> key >> minor) || minor < 0 || minor > 0xFFFFF) {
      return InvalidArgument("mig-minors line " + std::to_string(n) + ": expected '<path> <minor>', got '" +
                             line + "'");
    }
    out[key] = static_cast<uint32_t>(minor);
  }
  return out;
}

namespace {

// One list of device IDs of a request: at most MaxDevicesPerResource() IDs,
// none longer than kMaxDeviceIdBytes; `total` counts the IDs of the whole
// request, at most `total_max`.
Status CheckIds(const google::protobuf::RepeatedPtrField<std::string>& ids, const std::string& what,
                size_t& total, size_t total_max) {
  const size_t max = MaxDevicesPerResource();
  const auto n = static_cast<size_t>(ids.size());
  if (n > max) {
    return InvalidArgument(what + " names " + std::to_string(n) + " device IDs, more than the " +
                           std::to_string(max) + " a resource may advertise");
  }
  for (const auto& id : ids) {
    if (id.size() > kMaxDeviceIdBytes) {
      return InvalidArgument(what + " holds a device ID of " + std::to_string(id.size()) +
                             " bytes, longer than any this plugin advertises (" +
                             std::to_string(kMaxDeviceIdBytes) + "): '" + Printable(id, 64) + "'");
    }
  }
  total += n;
  if (total > total_max) {
    return InvalidArgument("the request names more than " + std::to_string(total_max) +
                           " device IDs in all");
  }
  return Status::Ok();
}

Status CheckContainerCount(int n, std::string_view rpc) {
  if (n > kMaxContainerRequests) {
    return InvalidArgument(std::string(rpc) + " holds " + std::to_string(n) +
                           " container requests, more than " +
                           std::to_string(kMaxContainerRequests) + " (the kubelet sends one)");
  }
  return Status::Ok();
}

}  // namespace

Status CheckAllocateRequest(const v1beta1::AllocateRequest& req) {
  if (Status st = CheckContainerCount(req.container_requests_size(), "Allocate"); !st.ok())
    return st;
  size_t total = 0;
  for (int i = 0; i < req.container_requests_size(); ++i) {
    // A pod cannot be given more devices than the resource has.
    Status st =
        CheckIds(req.container_requests(i).devices_ids(),
                 "Allocate container request " + std::to_string(i), total, MaxDevicesPerResource());
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

Status CheckPreferredAllocationRequest(const v1beta1::PreferredAllocationRequest& req) {
  if (Status st = CheckContainerCount(req.container_requests_size(), "GetPreferredAllocation");
      !st.ok()) {
    return st;
  }
  const size_t max = MaxDevicesPerResource();
  size_t total = 0;
  for (int i = 0; i < req.container_requests_size(); ++i) {
    const auto& creq = req.container_requests(i);
    const std::string what = "GetPreferredAllocation container request " + std::to_string(i);
    if (creq.allocation_size() < 0 || static_cast<size_t>(creq.allocation_size()) > max) {
      return InvalidArgument(what + ": allocation_size " + std::to_string(creq.allocation_size()) +
                             " is not between 0 and " + std::to_string(max) +
                             ", the most devices a resource may advertise");
    }
    // The available devices and those already chosen: each at most the
    // resource's devices.
    for (const auto* ids : {&creq.available_deviceids(), &creq.must_include_deviceids()}) {
      if (Status st = CheckIds(*ids, what, total, 2 * max); !st.ok()) return st;
    }
  }
  return Status::Ok();
}

Result<v1beta1::ContainerAllocateResponse> BuildContainerResponse(
    const Resource& resource, const std::vector<std::string>& ids, const AllocateOptions& options) {
  if (ids.empty()) {
    return InvalidArgument("Allocate for " + resource.name + " named no devices");
  }
  if (resource.fail_requests_greater_than_one && ids.size() > 1) {
    return InvalidArgument("Allocate for " + resource.name + " asked for " + std::to_string(ids.size()) +
                           " devices; this shared resource allows 1 per container "
                           "(failRequestsGreaterThanOne)");
  }
  std::vector<const Device*> devices;
  std::set<std::string> seen;
  const std::vector<const Device*> found = resource.FindEach(ids);
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string& id = ids[i];
    const Device* d = found[i];
    if (d == nullptr) {
      return InvalidArgument("Allocate for " + resource.name + ": unknown device ID '" +
                             Printable(id) + "'");
    }
    if (!d->healthy) {
      return InvalidArgument("Allocate for " + resource.name + ": device '" + Printable(id) +
                             "' is unhealthy (" + d->unhealthy_reason + ")");
    }
    if (seen.insert(id).second) devices.push_back(d);
  }

  // What the runtime identifies: the GPU/MIG device, once even if several
  // replicas of it were given.
  std::vector<const Device*> targets;
  std::set<std::string> target_uuids;
  for (const Device* d : devices) {
    if (target_uuids.insert(d->device_uuid).second) targets.push_back(d);
  }
  std::string visible;
  for (const Device* d : targets) {
    if (!visible.empty()) visible += ',';
    visible += options.device_id_strategy == DeviceIdStrategy::kIndex ? d->index : d->device_uuid;
  }

  v1beta1::ContainerAllocateResponse resp;
  auto& envs = *resp.mutable_envs();
  if (Has(options, DeviceListStrategy::kEnvvar)) envs[std::string(kVisibleDevicesEnv)] = visible;
  if (Has(options, DeviceListStrategy::kVolumeMounts)) {
    envs[std::string(kVisibleDevicesEnv)] = std::string(kVolumeMountDir);
    for (const Device* d : targets) {
      auto* m = resp.add_mounts();
      m->set_host_path("/dev/null");
      m->set_container_path(std::string(kVolumeMountDir) + "/" +
                            (options.device_id_strategy == DeviceIdStrategy::kIndex ? d->index
                                                                                    : d->device_uuid));
      m->set_read_only(true);
    }
  }
  if (Has(options, DeviceListStrategy::kCdiAnnotations) || Has(options, DeviceListStrategy::kCdiCri)) {
    std::string joined;
    for (const Device* d : targets) {
      const std::string name = options.cdi_kind + "=" + d->device_uuid;
      if (Has(options, DeviceListStrategy::kCdiCri)) resp.add_cdi_devices()->set_name(name);
      if (!joined.empty()) joined += ',';
      joined += name;
    }
    if (Has(options, DeviceListStrategy::kCdiAnnotations)) {
      char key[32];
      std::snprintf(key, sizeof key, "%016llx", static_cast<unsigned long long>(Fnv1a(joined)));
      (*resp.mutable_annotations())[options.cdi_annotation_prefix + "danqing-device-plugin_" + key] = joined;
    }
  }
  // Device specs only with a strategy that is not CDI, as NVIDIA's plugin
  // does: with CDI alone the runtime adds the nodes from the spec.
  const bool cdi_only = UsesCdi(options.device_list_strategies) &&
                        !Has(options, DeviceListStrategy::kEnvvar) &&
                        !Has(options, DeviceListStrategy::kVolumeMounts);
  if (options.pass_device_specs && !cdi_only) {
    std::set<std::string> added;
    auto add = [&](const std::string& path) {
      if (!added.insert(path).second) return;
      auto* spec = resp.add_devices();
      spec->set_container_path(path);
      spec->set_host_path(UnderRoot(options.dev_root, path));
      spec->set_permissions("rw");
    };
    for (const auto& n : ControlNodes(options.dev_root)) add(n);
    for (const Device* d : targets) {
      for (const auto& n : DeviceNodes(*d, options.mig_cap_minors)) add(n);
    }
  }
  return resp;
}

Status WriteCdiSpec(const ResourceSet& set, const std::string& cdi_root, const AllocateOptions& options,
                    std::vector<std::string>* warnings) {
  const auto slash = options.cdi_kind.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == options.cdi_kind.size()) {
    return InvalidArgument("CDI kind '" + options.cdi_kind + "' is not vendor/class");
  }
  nlohmann::json devices = nlohmann::json::array();
  std::set<std::string> done;
  for (const auto& r : set.resources) {
    for (const auto& d : r.devices) {
      if (!done.insert(d.device_uuid).second) continue;
      nlohmann::json nodes = nlohmann::json::array();
      for (const auto& n : DeviceNodes(d, options.mig_cap_minors)) {
        nodes.push_back({{"path", n}, {"hostPath", UnderRoot(options.dev_root, n)}});
      }
      // No env edit: CDI applies each device's edits in turn, so one
      // NVIDIA_VISIBLE_DEVICES per device would leave a container given
      // several GPUs naming only the last. The runtime injects the nodes;
      // CUDA sees exactly those.
      devices.push_back({{"name", d.device_uuid}, {"containerEdits", {{"deviceNodes", std::move(nodes)}}}});
    }
  }
  nlohmann::json control = nlohmann::json::array();
  for (const auto& n : ControlNodes(options.dev_root)) {
    control.push_back({{"path", n}, {"hostPath", UnderRoot(options.dev_root, n)}});
  }
  nlohmann::json common = {{"deviceNodes", std::move(control)}};
  if (!options.driver_root_local.empty()) {
    const DriverFiles files = FindDriverFiles({.local = options.driver_root_local,
                                               .host = options.driver_root_host,
                                               .version = set.driver_version,
                                               .hook_path = options.cdi_hook_path});
    AddDriverEdits(files, common);
    if (warnings) warnings->insert(warnings->end(), files.warnings.begin(), files.warnings.end());
  }
  const nlohmann::json spec = {{"cdiVersion", "0.6.0"},
                               {"kind", options.cdi_kind},
                               {"devices", std::move(devices)},
                               {"containerEdits", std::move(common)}};
  std::string file_name = options.cdi_kind;
  file_name[slash] = '-';
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(cdi_root, ec);
  if (ec) return Unavailable("cannot create CDI directory " + cdi_root + ": " + ec.message());
  return WriteFileAtomically(cdi_root + "/" + file_name + ".json", spec.dump(2) + "\n");
}

}  // namespace danqing::deviceplugin
