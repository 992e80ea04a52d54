#include "deviceplugin/resource.h"

#include <algorithm>
#include <limits>
#include <set>
#include <unordered_map>

#include "deviceplugin/v1beta1/api.pb.h"

namespace danqing::deviceplugin {
namespace {

Device WholeGpu(const gpu::Gpu& g, int position) {
  Device d;
  d.id = g.uuid;
  d.device_uuid = g.uuid;
  d.gpu_uuid = g.uuid;
  d.index = std::to_string(g.index);
  d.gpu_position = position;
  d.numa_node = g.numa_node;
  d.minor = g.minor_number;
  return d;
}

// A compute instance smaller than its GPU instance ("1c.3g.20gb", one of
// three sharing the 3g's memory) is not the profile it would be advertised
// under: a pod asking for a 3g would get a third of one. NVIDIA's plugin does
// not advertise these either. Zero slices: the driver did not say.
bool WholeGpuInstance(const gpu::MigDevice& m) {
  return m.compute_instance_slices == 0 || m.gpu_instance_slices == 0 ||
         m.compute_instance_slices == m.gpu_instance_slices;
}

// WholeGpuInstance, with a warning for a device left out.
bool Advertisable(const gpu::MigDevice& m, std::vector<std::string>& warnings) {
  if (WholeGpuInstance(m)) return true;
  warnings.push_back("MIG device " + m.uuid + " is a " + std::to_string(m.compute_instance_slices) + "c." +
                     m.profile + " compute instance, smaller than its GPU instance: not advertised");
  return false;
}

Device MigPart(const gpu::Gpu& g, const gpu::MigDevice& m, int position) {
  Device d;
  d.id = m.uuid;
  d.device_uuid = m.uuid;
  d.gpu_uuid = g.uuid;
  d.index = std::to_string(g.index) + ":" + std::to_string(m.index);
  d.gpu_position = position;
  d.numa_node = g.numa_node;
  d.minor = g.minor_number;
  d.gpu_instance_id = m.gpu_instance_id;
  d.compute_instance_id = m.compute_instance_id;
  return d;
}

Resource& ResourceNamed(std::vector<Resource>& out, const std::string& name) {
  for (auto& r : out) {
    if (r.name == name) return r;
  }
  out.push_back(Resource{name, {}, 1, false});
  return out.back();
}

// Places every GPU or MIG device under its resource according to the MIG strategy.
Status PlaceDevices(const gpu::NodeInventory& inv, MigStrategy strategy, std::vector<Resource>& out,
                    std::vector<std::string>& warnings) {
  const std::string gpu_name(kDefaultResource);
  switch (strategy) {
    case MigStrategy::kNone:
      for (size_t p = 0; p < inv.gpus.size(); ++p) {
        const auto& g = inv.gpus[p];
        if (g.mig_mode == gpu::MigMode::kEnabled) {
          warnings.push_back("GPU " + std::to_string(g.index) + " (" + g.uuid +
                             ") has MIG enabled; migStrategy none advertises it whole and hides "
                             "its MIG devices");
        }
        ResourceNamed(out, gpu_name).devices.push_back(WholeGpu(g, static_cast<int>(p)));
      }
      return Status::Ok();
    case MigStrategy::kSingle: {
      // All GPUs must agree: either none has MIG enabled (whole GPUs are
      // advertised), or all have it enabled with one MIG profile.
      std::set<std::string> profiles;
      size_t enabled = 0;
      for (const auto& g : inv.gpus) {
        if (g.mig_mode != gpu::MigMode::kEnabled) continue;
        ++enabled;
        for (const auto& m : g.mig_devices) {
          if (WholeGpuInstance(m)) profiles.insert(m.profile);
        }
      }
      if (enabled == 0) {
        return PlaceDevices(inv, MigStrategy::kNone, out, warnings);
      }
      if (enabled != inv.gpus.size()) {
        return InvalidArgument("migStrategy single needs MIG enabled on all GPUs or on none; " +
                               std::to_string(enabled) + " of " + std::to_string(inv.gpus.size()) +
                               " have it (use migStrategy mixed for a mix)");
      }
      if (profiles.size() > 1) {
        std::string list;
        for (const auto& p : profiles) list += (list.empty() ? "" : ", ") + p;
        return InvalidArgument("migStrategy single needs one MIG profile on every GPU; found " + list +
                               " (use migStrategy mixed)");
      }
      Resource& r = ResourceNamed(out, gpu_name);
      for (size_t p = 0; p < inv.gpus.size(); ++p) {
        for (const auto& m : inv.gpus[p].mig_devices) {
          if (Advertisable(m, warnings)) r.devices.push_back(MigPart(inv.gpus[p], m, static_cast<int>(p)));
        }
      }
      if (r.devices.empty()) {
        warnings.push_back("migStrategy single: MIG is enabled but no MIG devices exist; advertising 0 " +
                           gpu_name);
      }
      return Status::Ok();
    }
    case MigStrategy::kMixed:
      for (size_t p = 0; p < inv.gpus.size(); ++p) {
        const auto& g = inv.gpus[p];
        if (g.mig_mode != gpu::MigMode::kEnabled) {
          ResourceNamed(out, gpu_name).devices.push_back(WholeGpu(g, static_cast<int>(p)));
          continue;
        }
        for (const auto& m : g.mig_devices) {
          if (!Advertisable(m, warnings)) continue;
          ResourceNamed(out, MigResourceName(m.profile)).devices.push_back(
              MigPart(g, m, static_cast<int>(p)));
        }
      }
      return Status::Ok();
  }
  return Internal("unknown MIG strategy");
}

bool Selected(const Device& d, const std::vector<std::string>& selector) {
  if (selector.empty()) return true;
  return std::any_of(selector.begin(), selector.end(), [&](const std::string& s) {
    return s == d.index || s == d.device_uuid || (d.index.find(':') == std::string::npos && s == d.gpu_uuid);
  });
}

// The refusal of a resource with more devices than its ListAndWatch message
// can carry.
std::string OverLimit(const std::string& name, uint64_t devices) {
  return "would advertise " + std::to_string(devices) + " devices as " + name + ", more than the " +
         std::to_string(MaxDevicesPerResource()) +
         " one resource may have: its ListAndWatch message, up to " +
         std::to_string(MaxEncodedDeviceBytes()) + " bytes per device, must stay within " +
         std::to_string(kListAndWatchBudgetBytes >> 20) + " MiB, half of gRPC's " +
         std::to_string(kGrpcDefaultMaxMessageBytes >> 20) +
         " MiB message limit, or the kubelet cannot read it";
}

Status ApplyTimeSlicing(const ResourceOptions& opts, std::vector<Resource>& out,
                        std::vector<std::string>& warnings) {
  std::set<std::string> done;
  for (const auto& ts : opts.time_slicing) {
    if (ts.replicas < 1) {
      return InvalidArgument("time-slicing of " + ts.name + ": replicas must be at least 1, got " +
                             std::to_string(ts.replicas));
    }
    // Whatever the node: one device's replicas alone must fit.
    if (static_cast<uint64_t>(ts.replicas) > MaxDevicesPerResource()) {
      return InvalidArgument("time-slicing of " + ts.name + ": " + std::to_string(ts.replicas) +
                             " replicas per device " + OverLimit(ts.name, ts.replicas));
    }
    if (!done.insert(ts.name).second) {
      return InvalidArgument("time-slicing of " + ts.name + " is configured twice");
    }
    auto it = std::find_if(out.begin(), out.end(), [&](const Resource& r) { return r.name == ts.name; });
    if (it == out.end()) {
      warnings.push_back("time-slicing names " + ts.name + ", which this node does not advertise");
      continue;
    }
    // Every selector entry must name a device of this resource.
    for (const auto& s : ts.devices) {
      bool known = std::any_of(it->devices.begin(), it->devices.end(),
                               [&](const Device& d) { return Selected(d, {s}); });
      if (!known) {
        return InvalidArgument("time-slicing of " + ts.name + ": devices entry '" + s +
                               "' matches no device of that resource on this node");
      }
    }
    std::vector<Device> shared, kept;
    if (ts.count > 0) {
      // The first N of the resource, whatever their indices (a MIG device's
      // is "0:1"; a GPU left out of discovery leaves a gap).
      // Fewer than asked (a GPU lost at discovery): all of them, and a
      // warning, rather than an agent that stops with the others.
      size_t n = static_cast<size_t>(ts.count);
      if (n > it->devices.size()) {
        warnings.push_back("time-slicing of " + ts.name + ": devices: " + std::to_string(ts.count) +
                           ", but this node has " + std::to_string(it->devices.size()) +
                           " device(s) of that resource; sharing those");
        n = it->devices.size();
      }
      shared.assign(it->devices.begin(), it->devices.begin() + static_cast<std::ptrdiff_t>(n));
      kept.assign(it->devices.begin() + static_cast<std::ptrdiff_t>(n), it->devices.end());
    } else {
      for (const auto& d : it->devices) (Selected(d, ts.devices) ? shared : kept).push_back(d);
    }
    std::string name = ts.rename;
    if (name.empty()) {
      name = opts.rename_by_default ? ts.name + ".shared" : ts.name;
      if (!kept.empty() && name == ts.name) {
        name = ts.name + ".shared";
        warnings.push_back("time-slicing of " + ts.name + " selects only some devices; the shared "
                           "ones are advertised as " + name + " so requests for " + ts.name +
                           " still get exclusive GPUs");
      }
    }
    if (name != ts.name &&
        std::any_of(out.begin(), out.end(), [&](const Resource& r) { return r.name == name; })) {
      // Its replicas would join devices of another kind (a MIG slice among
      // whole GPUs), and its sharing settings overwrite theirs.
      return InvalidArgument("time-slicing of " + ts.name + " advertises its replicas as " + name +
                             ", which this node already advertises (or another time-slicing entry "
                             "uses); choose another rename");
    }
    // Counted before a replica is made: a count that does not fit must not
    // cost its memory first.
    const uint64_t advertised =
        static_cast<uint64_t>(shared.size()) * static_cast<uint64_t>(ts.replicas);
    if (advertised > MaxDevicesPerResource()) {
      return InvalidArgument("time-slicing of " + ts.name + ": " + std::to_string(shared.size()) +
                             " device(s) x " + std::to_string(ts.replicas) + " replicas " +
                             OverLimit(name, advertised));
    }
    std::vector<Device> replicas;
    replicas.reserve(static_cast<size_t>(advertised));
    for (const auto& d : shared) {
      for (int k = 0; k < ts.replicas; ++k) {
        Device r = d;
        r.id = d.id + "::" + std::to_string(k);
        r.replica = k;
        replicas.push_back(std::move(r));
      }
    }
    if (name == ts.name) {
      it->devices = std::move(replicas);
      it->replicas = ts.replicas;
      it->fail_requests_greater_than_one = opts.fail_requests_greater_than_one;
    } else {
      it->devices = std::move(kept);
      Resource& r = ResourceNamed(out, name);
      r.devices.insert(r.devices.end(), replicas.begin(), replicas.end());
      r.replicas = ts.replicas;
      r.fail_requests_greater_than_one = opts.fail_requests_greater_than_one;
    }
  }
  // A resource left with no devices (all moved to .shared) is not advertised.
  out.erase(std::remove_if(out.begin(), out.end(), [](const Resource& r) { return r.devices.empty(); }),
            out.end());
  return Status::Ok();
}

std::shared_ptr<ResourceSet> WithAllocators(ResourceSet set, const gpu::Topology& topology,
                                            ReplicaPolicy policy) {
  for (const auto& r : set.resources) {
    std::vector<AllocatableDevice> devs;
    devs.reserve(r.devices.size());
    for (const auto& d : r.devices) devs.push_back({d.id, d.gpu_position});
    set.allocators[r.name] = std::make_shared<const PreferredAllocator>(topology, std::move(devs), policy);
  }
  return std::make_shared<ResourceSet>(std::move(set));
}

}  // namespace

size_t MaxEncodedDeviceBytes() {
  static const size_t bytes = [] {
    v1beta1::ListAndWatchResponse one;
    auto* d = one.add_devices();
    d->set_id(std::string(kMaxDeviceIdBytes, 'x'));
    d->set_health(std::string(kUnhealthy));
    d->mutable_topology()->add_nodes()->set_id(
        std::numeric_limits<int64_t>::min());  // 10-byte varint
    return one.ByteSizeLong();                 // the device with its tag and length in the list
  }();
  return bytes;
}

size_t MaxDevicesPerResource() {
  return kListAndWatchBudgetBytes / MaxEncodedDeviceBytes();
}

std::string MigResourceName(std::string_view profile) {
  std::string name = "nvidia.com/mig-" + std::string(profile);
  std::replace(name.begin(), name.end(), '+', '.');
  return name;
}

const Device* Resource::Find(std::string_view id) const {
  for (const auto& d : devices) {
    if (d.id == id) return &d;
  }
  return nullptr;
}

std::vector<const Device*> Resource::FindEach(const std::vector<std::string>& ids) const {
  std::vector<const Device*> out;
  out.reserve(ids.size());
  if (ids.size() <= 8) {  // the usual request: a scan is cheaper than an index
    for (const auto& id : ids) out.push_back(Find(id));
    return out;
  }
  std::unordered_map<std::string_view, const Device*> index;
  index.reserve(devices.size());
  for (const auto& d : devices) index.emplace(d.id, &d);  // the first of a repeated ID, as Find
  for (const auto& id : ids) {
    auto it = index.find(id);
    out.push_back(it == index.end() ? nullptr : it->second);
  }
  return out;
}

const Resource* ResourceSet::Find(std::string_view name) const {
  for (const auto& r : resources) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

Result<std::shared_ptr<const ResourceSet>> BuildResources(const gpu::NodeInventory& inventory,
                                                          const ResourceOptions& options) {
  ResourceSet set;
  set.driver_version = inventory.driver_version;
  if (Status st = PlaceDevices(inventory, options.mig_strategy, set.resources, set.warnings); !st.ok()) {
    return st;
  }
  if (Status st = ApplyTimeSlicing(options, set.resources, set.warnings); !st.ok()) return st;
  for (const auto& r : set.resources) {
    if (r.devices.size() > MaxDevicesPerResource())
      return InvalidArgument(OverLimit(r.name, r.devices.size()));
  }
  if (set.resources.empty()) {
    // Keep advertising nvidia.com/gpu (with no devices) so the kubelet shows 0, not a stale count.
    set.resources.push_back(Resource{std::string(kDefaultResource), {}, 1, false});
  }
  return std::shared_ptr<const ResourceSet>(
      WithAllocators(std::move(set), inventory.topology, options.replica_policy));
}

std::shared_ptr<const ResourceSet> WithHealth(const ResourceSet& set,
                                              const std::map<std::string, std::string>& unhealthy) {
  auto copy = std::make_shared<ResourceSet>(set);
  for (auto& r : copy->resources) {
    for (auto& d : r.devices) {
      auto it = unhealthy.find(d.gpu_uuid);
      if (it == unhealthy.end()) it = unhealthy.find(d.device_uuid);
      d.healthy = it == unhealthy.end();
      d.unhealthy_reason = d.healthy ? "" : it->second;
    }
  }
  return copy;
}

}  // namespace danqing::deviceplugin
