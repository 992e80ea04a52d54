#include "agent/agent.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "agent/labels.h"
#include "common/read_file.h"
#include "deviceplugin/cdi_driver.h"
#include "dra/claim_reader.h"
#include "dra/dynamic_mig_cdi.h"
#include "dra/file_claim_source.h"
#include "dra/node_metrics.h"
#include "dra/nvml_mig_control.h"
#include "dra/time_slicer.h"
#include "gpu/nvml_backend.h"
#include "kube/config.h"
#include "metrics/agent_metrics.h"
#include "metrics/pods.h"

namespace danqing::agent {
namespace {

constexpr char kMigMinors[] = "/proc/driver/nvidia-caps/mig-minors";

deviceplugin::MigCapMinors ReadMigCapMinors() {
  const auto text = ReadTextFile(kMigMinors);
  if (!text) return {};
  auto parsed = deviceplugin::ParseMigCapMinors(*text);
  if (!parsed.ok()) {
    spdlog::warn("agent: ignoring {}: {}", kMigMinors, parsed.status().message());
    return {};
  }
  return std::move(parsed).value();
}

// The preparer's maker of dynamic-MIG placement devices (dynamic_mig.h).
class DynamicMigMaker : public dra::DeviceMaker {
 public:
  DynamicMigMaker(std::shared_ptr<dra::DynamicMig> mig, std::string pool,
                  std::function<uint32_t(int)> minor_of, std::function<void()> changed)
      : mig_(std::move(mig)),
        pool_(std::move(pool)),
        minor_of_(std::move(minor_of)),
        changed_(std::move(changed)) {}
  std::string pool() const override { return pool_; }
  bool Makes(const std::string& device) const override {
    return dra::ParsePlacementName(device).has_value();
  }
  Result<dra::NodeDevice> Make(const std::string& claim_uid, const std::string& device) override {
    const size_t before = Count();
    auto inst = mig_->Prepare(claim_uid, device);
    if (!inst.ok()) return inst.status();
    if (Count() != before) changed_();  // a new instance: its placement stays offered
    return dra::DynamicMigNodeDevice(*inst, minor_of_(inst->gpu_index));
  }
  Status Unmake(const std::string& claim_uid, const std::string& device) override {
    const size_t before = Count();
    Status s = mig_->Unprepare(claim_uid, device);
    if (Count() != before) changed_();
    return s;
  }

 private:
  size_t Count() const {
    size_t n = 0;
    for (const auto& [uid, list] : mig_->Held()) n += list.size();
    return n;
  }
  std::shared_ptr<dra::DynamicMig> mig_;
  std::string pool_;
  std::function<uint32_t(int)> minor_of_;
  std::function<void()> changed_;
};

}  // namespace

dra::DynamicMigConfig DynamicMigConfigFrom(const config::Config& cfg) {
  dra::DynamicMigConfig c;
  c.gpus = cfg.danqing.dra_dynamic_mig;
  c.destroy_orphans = cfg.danqing.dra_dynamic_mig_destroy_orphans;
  return c;
}

std::string DynamicMigStateFile(const config::Config& cfg) {
  return cfg.danqing.dra_checkpoint_dir + "/dynamic-mig.json";
}

std::vector<int> DynamicMigGpus(const dra::DynamicMigConfig& mig,
                                const gpu::NodeInventory& inventory,
                                const std::vector<std::string>& dra_gpus) {
  std::vector<int> out;
  const bool all = std::find(mig.gpus.begin(), mig.gpus.end(), "all") != mig.gpus.end();
  for (const auto& g : inventory.gpus) {
    if (!mig.Selects(g.index, g.uuid)) continue;
    if (std::find(dra_gpus.begin(), dra_gpus.end(), g.uuid) == dra_gpus.end()) {
      if (!all) {
        spdlog::warn(
            "agent: GPU {} ({}) is selected by danqing.draDynamicMig but served by the device "
            "plugin (danqing.draGpus does not name it); not dynamic",
            g.index, g.uuid);
      }
      continue;
    }
    if (g.mig_mode != gpu::MigMode::kEnabled) {
      spdlog::warn(
          "agent: GPU {} ({}) is selected by danqing.draDynamicMig but not in MIG mode; served "
          "as a whole GPU",
          g.index, g.uuid);
      continue;
    }
    out.push_back(g.index);
  }
  return out;
}

std::string NvmlLibraryFor(const config::Config& cfg) {
  if (!cfg.danqing.nvml_lib.empty()) return cfg.danqing.nvml_lib;
  const std::string& root = cfg.flags.plugin.container_driver_root;
  if (root.empty() || root == "/") return {};
  for (std::string_view dir : deviceplugin::kDriverLibraryDirs) {
    const std::string path = root + std::string(dir) + "/libnvidia-ml.so.1";
    if (::access(path.c_str(), R_OK) == 0) return path;
  }
  return {};
}

BackendFactory NvmlBackendFactory() {
  return [](const config::Config& cfg) -> Result<std::unique_ptr<gpu::GpuBackend>> {
    auto b = gpu::NvmlBackend::Create(NvmlLibraryFor(cfg), cfg.danqing.sysfs_root);
    if (!b.ok()) return b.status();
    spdlog::info("agent: GPU backend {}", (*b)->Describe());
    return std::unique_ptr<gpu::GpuBackend>(std::move(b).value());
  };
}

Result<deviceplugin::ResourceOptions> ResourceOptionsFrom(const config::Config& cfg) {
  deviceplugin::ResourceOptions o;
  o.mig_strategy = cfg.flags.mig_strategy;
  o.replica_policy = cfg.danqing.replica_policy == "packed" ? deviceplugin::ReplicaPolicy::kPacked
                                                            : deviceplugin::ReplicaPolicy::kDistributed;
  if (const auto& ts = cfg.sharing.time_slicing) {
    o.rename_by_default = ts->rename_by_default;
    o.fail_requests_greater_than_one = ts->fail_requests_greater_than_one;
    for (const auto& r : ts->resources) {
      deviceplugin::TimeSlicing t;
      t.name = r.name;
      t.rename = r.rename;
      t.replicas = r.replicas;
      switch (r.devices.kind) {
        case config::ReplicatedDevices::Kind::kAll: break;
        case config::ReplicatedDevices::Kind::kCount: t.count = r.devices.count; break;
        case config::ReplicatedDevices::Kind::kList: t.devices = r.devices.list; break;
      }
      o.time_slicing.push_back(std::move(t));
    }
  }
  return o;
}

Result<health::CheckerOptions> HealthOptionsFrom(const config::Config& cfg) {
  auto policy = health::XidPolicy::Make(cfg.danqing.disable_health_checks, cfg.danqing.enable_health_checks,
                                        cfg.danqing.reset_xids);
  if (!policy.ok()) return policy.status();
  health::CheckerOptions o;
  o.monitor.policy = std::move(policy).value();
  o.monitor.quiet_period = std::chrono::duration_cast<health::Clock::duration>(cfg.danqing.xid_quiet_period);
  o.poll_interval = std::chrono::duration_cast<health::Clock::duration>(cfg.danqing.health_check_interval);
  o.on_event_published = [](std::chrono::steady_clock::duration d) {
    metrics::AgentMetrics().health_event_publish_seconds.WithLabels({}).Observe(
        std::chrono::duration<double>(d).count());
  };
  return o;
}

deviceplugin::ManagerOptions ManagerOptionsFrom(const config::Config& cfg) {
  deviceplugin::ManagerOptions m;
  m.plugin_dir = cfg.danqing.device_plugin_path;
  m.cdi_root = cfg.danqing.cdi_root;
  auto& a = m.allocate;
  a.device_list_strategies = cfg.flags.plugin.device_list_strategy;
  a.device_id_strategy = cfg.flags.plugin.device_id_strategy;
  a.pass_device_specs = cfg.flags.plugin.pass_device_specs;
  a.dev_root = cfg.flags.nvidia_dev_root.empty() ? cfg.flags.nvidia_driver_root : cfg.flags.nvidia_dev_root;
  a.cdi_annotation_prefix = cfg.flags.plugin.cdi_annotation_prefix;
  // Only a CDI spec uses these: under envvar a change to them must not
  // restart the plugin servers.
  if (deviceplugin::UsesCdi(a.device_list_strategies)) {
    a.driver_root_local = cfg.flags.plugin.container_driver_root;
    a.driver_root_host = cfg.flags.nvidia_driver_root;
    a.cdi_hook_path = cfg.flags.plugin.nvidia_ctk_path;
  }
  a.mig_cap_minors = ReadMigCapMinors();
  return m;
}

ClaimSourceFactory DefaultClaimSourceFactory() {
  return [](const config::Config& cfg) -> std::unique_ptr<dra::ClaimSource> {
    if (!cfg.danqing.dra_claims_file.empty()) {
      return std::make_unique<dra::FileClaimSource>(cfg.danqing.dra_claims_file);
    }
    return std::make_unique<dra::NoClaimSource>(
        "no source of ResourceClaims: this build reads claims only from danqing.draClaimsFile, "
        "which is not set");
  };
}

ClaimSourceFactory ApiClaimSourceFactory(kube::Client& client) {
  return [&client](const config::Config& cfg) -> std::unique_ptr<dra::ClaimSource> {
    return std::make_unique<dra::ClaimReader>(client, cfg.danqing.dra_driver_name);
  };
}

Result<std::unique_ptr<kube::Client>> ApiClientFor(const config::Config& cfg) {
  if (cfg.danqing.mode == "device-plugin") return std::unique_ptr<kube::Client>();
  const bool in_pod = std::getenv("KUBERNETES_SERVICE_HOST") != nullptr;
  if (cfg.danqing.kubeconfig.empty() && !in_pod) {
    spdlog::warn(
        "agent: no API server (no --kubeconfig, not in a pod): ResourceSlices are not published{}",
        cfg.danqing.dra_claims_file.empty() ? " and claims cannot be read"
                                            : "; claims are read from danqing.draClaimsFile");
    return std::unique_ptr<kube::Client>();
  }
  auto kc = cfg.danqing.kubeconfig.empty() ? kube::InClusterConfig()
                                           : kube::LoadKubeconfig(cfg.danqing.kubeconfig);
  if (!kc.ok()) {
    return kc.status().WithContext(cfg.danqing.kubeconfig.empty() ? "in-cluster API access"
                                                                  : "danqing.kubeconfig");
  }
  auto client = kube::Client::Create(std::move(kc).value());
  if (!client.ok()) return client.status().WithContext("API client");
  spdlog::info("agent: DRA API server {}", (*client)->config().server);
  return std::move(client).value();
}

dra::PublisherOptions PublisherOptionsFrom(const config::Config& cfg, const ApiLink& api) {
  dra::PublisherOptions o;
  o.slices.driver = cfg.danqing.dra_driver_name;
  o.slices.node_name = cfg.danqing.node_name;
  o.slices.sysfs_root = cfg.danqing.sysfs_root;
  o.min_backoff = api.min_backoff;
  o.max_backoff = api.max_backoff;
  return o;
}

Result<std::vector<std::string>> DraGpuUuids(const config::Config& cfg,
                                             const gpu::NodeInventory& inventory) {
  std::vector<std::string> out;
  if (cfg.danqing.mode == "dra") {
    for (const auto& g : inventory.gpus) out.push_back(g.uuid);
    return out;
  }
  if (cfg.danqing.mode != "split") return out;
  for (const auto& want : cfg.danqing.dra_gpus) {
    const gpu::Gpu* found = nullptr;
    for (const auto& g : inventory.gpus) {
      if (g.uuid == want || std::to_string(g.index) == want) found = &g;
    }
    if (found == nullptr) {
      return InvalidArgument("danqing.draGpus: no GPU '" + want +
                             "' on this node (give a GPU UUID or NVML index)");
    }
    if (std::find(out.begin(), out.end(), found->uuid) == out.end()) out.push_back(found->uuid);
  }
  return out;
}

gpu::NodeInventory WithoutGpus(const gpu::NodeInventory& inventory,
                               const std::vector<std::string>& uuids) {
  gpu::NodeInventory out = inventory;
  out.gpus.clear();
  std::vector<size_t> kept;
  for (size_t i = 0; i < inventory.gpus.size(); ++i) {
    if (std::find(uuids.begin(), uuids.end(), inventory.gpus[i].uuid) != uuids.end()) continue;
    kept.push_back(i);
    out.gpus.push_back(inventory.gpus[i]);
  }
  out.topology = gpu::Topology(kept.size());
  if (inventory.topology.size() == inventory.gpus.size()) {
    for (size_t a = 0; a < kept.size(); ++a) {
      for (size_t b = 0; b < kept.size(); ++b)
        out.topology.at(a, b) = inventory.topology.at(kept[a], kept[b]);
    }
  }
  return out;
}

dra::NodePluginOptions NodePluginOptionsFrom(const config::Config& cfg) {
  dra::NodePluginOptions o;
  o.driver_name = cfg.danqing.dra_driver_name;
  o.registry_dir = cfg.danqing.dra_plugins_registry;
  o.plugin_dir = cfg.danqing.dra_plugin_dir;
  return o;
}

dra::PreparerOptions PreparerOptionsFrom(const config::Config& cfg) {
  dra::PreparerOptions o;
  o.driver_name = cfg.danqing.dra_driver_name;
  o.checkpoint_dir = cfg.danqing.dra_checkpoint_dir;
  o.cdi.cdi_root = cfg.danqing.cdi_root;
  o.cdi.kind = cfg.danqing.dra_driver_name + "/claim";
  o.cdi.dev_root =
      cfg.flags.nvidia_dev_root.empty() ? cfg.flags.nvidia_driver_root : cfg.flags.nvidia_dev_root;
  o.cdi.mig_cap_minors = ReadMigCapMinors();
  return o;
}

std::vector<std::string> KeepUnreadableGpus(const gpu::NodeInventory& previous,
                                            gpu::NodeInventory& fresh) {
  std::vector<const gpu::Gpu*> kept;
  std::vector<gpu::DeviceError> errors;
  for (auto& e : fresh.errors) {
    const gpu::Gpu* was = nullptr;
    for (const auto& g : previous.gpus) {
      if (e.uuid.empty() ? g.index == e.index : g.uuid == e.uuid) {
        was = &g;
        break;
      }
    }
    // A MIG device's error names its GPU, which this discovery did read.
    if (was == nullptr || fresh.FindGpu(was->uuid) != nullptr ||
        std::find(kept.begin(), kept.end(), was) != kept.end()) {
      errors.push_back(std::move(e));
      continue;
    }
    kept.push_back(was);
  }
  if (kept.empty()) return {};

  // The GPUs in NVML index order, each with its position in either inventory.
  struct Entry {
    gpu::Gpu gpu;
    int fresh_pos = -1;
    int previous_pos = -1;
  };
  auto previous_pos = [&](const std::string& uuid) {
    for (size_t i = 0; i < previous.gpus.size(); ++i) {
      if (previous.gpus[i].uuid == uuid) return static_cast<int>(i);
    }
    return -1;
  };
  std::vector<Entry> all;
  for (size_t i = 0; i < fresh.gpus.size(); ++i) {
    all.push_back({fresh.gpus[i], static_cast<int>(i), previous_pos(fresh.gpus[i].uuid)});
  }
  for (const gpu::Gpu* g : kept) all.push_back({*g, -1, previous_pos(g->uuid)});
  std::stable_sort(all.begin(), all.end(),
                   [](const Entry& a, const Entry& b) { return a.gpu.index < b.gpu.index; });

  gpu::Topology topology(all.size());
  for (size_t a = 0; a < all.size(); ++a) {
    for (size_t b = 0; b < all.size(); ++b) {
      const Entry& x = all[a];
      const Entry& y = all[b];
      if (x.fresh_pos >= 0 && y.fresh_pos >= 0) {
        topology.at(a, b) =
            fresh.topology.at(static_cast<size_t>(x.fresh_pos), static_cast<size_t>(y.fresh_pos));
      } else if (x.previous_pos >= 0 && y.previous_pos >= 0) {
        topology.at(a, b) = previous.topology.at(static_cast<size_t>(x.previous_pos),
                                                 static_cast<size_t>(y.previous_pos));
      }
    }
  }
  fresh.gpus.clear();
  for (auto& e : all) fresh.gpus.push_back(std::move(e.gpu));
  fresh.topology = std::move(topology);
  fresh.errors = std::move(errors);
  std::vector<std::string> uuids;
  for (const gpu::Gpu* g : kept) uuids.push_back(g->uuid);
  return uuids;
}

Agent::Agent(BackendFactory factory, std::function<void()> request_reload,
             ClaimSourceFactory claim_sources, ApiLink api)
    : factory_(std::move(factory)),
      request_reload_(std::move(request_reload)),
      claim_sources_(std::move(claim_sources)),
      api_(api) {}

Agent::~Agent() { Stop(); }

Result<Agent::Built> Agent::Build(const config::Config& cfg,
                                  std::unique_ptr<gpu::GpuBackend>& backend,
                                  const gpu::NodeInventory* previous) {
  if (!backend) {
    auto b = factory_(cfg);
    if (!b.ok()) return b.status();
    backend = std::move(b).value();
  }
  auto inv = backend->Discover();
  if (!inv.ok()) return inv.status();
  if (previous != nullptr) {
    for (const auto& uuid : KeepUnreadableGpus(*previous, *inv)) {
      spdlog::warn(
          "agent: GPU {} does not answer this discovery; kept as it was, unhealthy until it "
          "answers",
          uuid);
    }
  }
  for (const auto& e : inv->errors) {
    spdlog::warn("agent: GPU {} {} left out: {}", e.index, e.uuid, e.status.ToString());
  }
  auto ropts = ResourceOptionsFrom(cfg);
  if (!ropts.ok()) return ropts.status();
  auto dra_gpus = DraGpuUuids(cfg, *inv);
  if (!dra_gpus.ok()) return dra_gpus.status();
  // A GPU served through DRA is not the device plugin's: never both ways.
  auto set =
      deviceplugin::BuildResources(dra_gpus->empty() ? *inv : WithoutGpus(*inv, *dra_gpus), *ropts);
  if (!set.ok()) return set.status();
  for (const auto& w : (*set)->warnings) spdlog::warn("agent: {}", w);
  if (!cfg.danqing.node_features_file.empty()) {
    Status st = WriteFeatureFile(cfg.danqing.node_features_file, NodeLabels(*inv, **set, cfg));
    if (!st.ok()) spdlog::info("agent: node labels not written: {}", st.message());
  }
  for (const auto& r : (*set)->resources) {
    spdlog::info("agent: resource={} devices={} replicas={}", r.name, r.devices.size(), r.replicas);
  }
  if (!dra_gpus->empty())
    spdlog::info("agent: {} GPU(s) served through DRA ({})", dra_gpus->size(), cfg.danqing.mode);
  return Built{std::move(inv).value(), std::move(set).value(), std::move(dra_gpus).value()};
}

void Agent::Publish(const std::map<std::string, std::string>& unhealthy) {
  std::lock_guard lock(publish_mu_);
  unhealthy_ = unhealthy;
  if (manager_ && base_) manager_->Update(deviceplugin::WithHealth(*base_, unhealthy_));
  if (dra_preparer_ && dra_base_)
    dra_preparer_->SetDevices(dra::WithHealth(*dra_base_, unhealthy_));
  if (publisher_) publisher_->SetConditions(dra::ConditionsFromUnhealthy(unhealthy_, dra_policy_));
}

void Agent::SetDraBase(const gpu::NodeInventory& inventory,
                       const std::vector<std::string>& dra_gpus, bool discovered) {
  std::lock_guard lock(publish_mu_);
  dra_base_ = std::make_shared<const dra::DeviceTable>(
      dra_gpus.empty() ? dra::DeviceTable{cfg_.danqing.node_name, {}, inventory.driver_version}
                       : dra::BuildDeviceTable(inventory, cfg_.danqing.node_name, dra_gpus));
  if (dra_preparer_) dra_preparer_->SetDevices(dra::WithHealth(*dra_base_, unhealthy_));
  std::vector<int> dynamic;
  if (dynamic_mig_ && discovered) {
    dynamic = DynamicMigGpus(DynamicMigConfigFrom(cfg_), inventory, dra_gpus);
    std::lock_guard mlock(mig_mu_);
    mig_gpus_ = dynamic;
  }
  if (publisher_ && discovered) {
    // The slices hold the DRA GPUs only (split: the device plugin's stay off
    // them); the dynamic-MIG GPUs are in their own pool ("<node>-mig").
    std::vector<std::string> others;
    for (const auto& g : inventory.gpus) {
      if (std::find(dra_gpus.begin(), dra_gpus.end(), g.uuid) == dra_gpus.end() ||
          std::find(dynamic.begin(), dynamic.end(), g.index) != dynamic.end())
        others.push_back(g.uuid);
    }
    if (dynamic_mig_) PublishDynamicMig();
    publisher_->Update(others.empty() ? inventory : WithoutGpus(inventory, others),
                       dra::ConditionsFromUnhealthy(unhealthy_, dra_policy_));
  }
  // For the exporter's pod attribution of claims' devices.
  auto names = std::make_shared<metrics::DraDevices>();
  names->driver = cfg_.danqing.dra_driver_name;
  names->pool = dra_base_->pool;
  for (const auto& [name, d] : dra_base_->devices)
    names->uuid_by_device[name] = d.device.device_uuid;
  std::lock_guard names_lock(dra_names_mu_);
  dra_names_ = std::move(names);
  dra_gpus_ = dra_gpus;
}

Status Agent::MoveSplit(const config::Config& cfg, const Built& built) {
  const std::set<std::string> before(dra_gpus_.begin(), dra_gpus_.end());
  const std::set<std::string> after(built.dra_gpus.begin(), built.dra_gpus.end());
  std::vector<std::string> to_plugin, to_dra, staying, moving;
  for (const auto& u : before) (after.contains(u) ? staying : to_plugin).push_back(u);
  for (const auto& u : after) {
    if (!before.contains(u)) to_dra.push_back(u);
  }
  if (to_plugin.empty() && to_dra.empty()) return Status::Ok();  // the same GPUs, named otherwise
  moving = to_plugin;
  moving.insert(moving.end(), to_dra.begin(), to_dra.end());
  std::map<std::string, const gpu::Gpu*> by_uuid;  // GPU or MIG UUID → its GPU
  for (const auto& g : built.inventory.gpus) {
    by_uuid[g.uuid] = &g;
    for (const auto& m : g.mig_devices) by_uuid[m.uuid] = &g;
  }
  auto name = [&by_uuid](const std::string& uuid) {
    auto it = by_uuid.find(uuid);
    return it == by_uuid.end() ? uuid
                               : "GPU " + std::to_string(it->second->index) + " (" + uuid + ")";
  };
  auto ropts = ResourceOptionsFrom(cfg);
  if (!ropts.ok()) return ropts.status().WithContext("reload kept the running configuration");
  auto held_back = deviceplugin::BuildResources(WithoutGpus(built.inventory, moving), *ropts);
  if (!held_back.ok())
    return held_back.status().WithContext("reload kept the running configuration");

  std::shared_ptr<const deviceplugin::ResourceSet> running;
  {
    std::lock_guard plock(publish_mu_);
    running = base_;
  }
  const std::vector<std::string> running_dra = dra_gpus_;
  const std::shared_ptr<const gpu::NodeInventory> running_inventory = inventory_;

  // Is any moving GPU in use on the side it leaves? (side, why) for each holder.
  auto in_use = [&] {
    std::vector<std::pair<std::string, std::string>> held;
    if (!to_plugin.empty() && dra_preparer_) {
      const std::set<std::string> leaving(to_plugin.begin(), to_plugin.end());
      for (const auto& [uid, c] : dra_preparer_->Prepared()) {
        for (const auto& d : c.devices) {
          if (leaving.contains(d.gpu_uuid)) {
            held.emplace_back("dra", name(d.gpu_uuid) + " is held through DRA by claim " + c.ns +
                                         "/" + c.name + " (" + uid + ", device " + d.device + ")");
          }
        }
      }
    }
    if (!to_dra.empty()) {
      const std::set<std::string> leaving(to_dra.begin(), to_dra.end());
      metrics::PodResourcesClient pods(cfg.danqing.pod_resources_socket, std::chrono::seconds(2));
      auto list = pods.List();
      if (!list.ok()) {
        held.emplace_back("unknown",
                          "cannot tell whether " + name(to_dra.front()) +
                              " is allocated through the device plugin: pod resources: " +
                              list.status().message());
      } else {
        std::set<std::string> resources;  // the device plugin's, as it ran
        if (running) {
          for (const auto& r : running->resources) resources.insert(r.name);
        }
        for (const auto& [uuid, hs] : metrics::HoldersFrom(**list, "")) {
          auto it = by_uuid.find(uuid);
          if (it == by_uuid.end() || !leaving.contains(it->second->uuid)) continue;
          for (const auto& h : hs) {
            if (!resources.contains(h.resource)) continue;
            held.emplace_back("device-plugin", name(it->second->uuid) +
                                                   " is allocated through the device plugin (" +
                                                   h.resource + ") to pod " + h.ref.ns + "/" +
                                                   h.ref.pod + " container " + h.ref.container);
          }
        }
      }
    }
    return held;
  };
  // 1. Asked first, so that a refused move touches nothing.
  auto held = in_use();
  const bool withdrawn = held.empty();
  if (withdrawn) {
    // 2. Withdraw every moving GPU from both sides: from here on neither the
    //    kubelet's device manager nor a new claim can take one. Then ask
    //    again: an allocation made meanwhile is seen now.
    SetBase(*held_back);
    SetDraBase(built.inventory, staying);
    held = in_use();
  }
  if (!held.empty()) {
    // 3a. Refused: both sides offer what they offered before.
    if (withdrawn) {
      SetBase(running);
      SetDraBase(running_inventory ? *running_inventory : built.inventory, running_dra);
    }
    std::string why;
    std::set<std::string> sides;
    for (const auto& [side, w] : held) {
      sides.insert(side);
      why += (why.empty() ? "" : "; ") + w;
    }
    // One refused reload, counted once per kind of holder.
    for (const auto& side : sides) dra::NodeMetrics().split_reload_refused.WithLabels({side}).Inc();
    spdlog::error(
        "agent: split reload refused, running configuration kept: {}; danqing.draGpus can move "
        "it once it is released",
        why);
    return FailedPrecondition("reload kept the running configuration: danqing.draGpus would move " +
                              why + "; move it once it is released");
  }
  // 3b. The caller offers them on their new side (SetBase, SetDraBase).
  for (const auto& u : to_plugin) {
    dra::NodeMetrics().split_moves.WithLabels({"device-plugin"}).Inc();
    spdlog::info("agent: split reload: {} moves from DRA to the device plugin", name(u));
  }
  for (const auto& u : to_dra) {
    dra::NodeMetrics().split_moves.WithLabels({"dra"}).Inc();
    spdlog::info("agent: split reload: {} moves from the device plugin to DRA", name(u));
  }
  return Status::Ok();
}

Status Agent::StartDra(const config::Config& cfg, const Built* built) {
  dra::PreparerOptions popts = PreparerOptionsFrom(cfg);
  if (!cfg.flags.plugin.container_driver_root.empty() && built != nullptr) {
    const auto files =
        deviceplugin::FindDriverFiles({.local = cfg.flags.plugin.container_driver_root,
                                       .host = cfg.flags.nvidia_driver_root,
                                       .version = built->inventory.driver_version,
                                       .hook_path = cfg.flags.plugin.nvidia_ctk_path});
    for (const auto& w : files.warnings) spdlog::warn("agent: DRA CDI specs {}", w);
    popts.cdi.driver_files = files;
  }
  claim_source_ = claim_sources_(cfg);
  // nvidia-smi of the host's driver, with its libnvidia-ml; where there is
  // none, time-slicing is NOT_SUPPORTED and claims asking for it are prepared
  // at the default slice with a warning (docs/dra.md).
  const std::string& root = cfg.flags.plugin.container_driver_root;
  const std::string nvml = NvmlLibraryFor(cfg);
  time_slicer_ = std::make_unique<dra::NvidiaSmiTimeSlicer>(
      deviceplugin::UnderRoot(root, "/usr/bin/nvidia-smi"),
      nvml.empty() ? std::string() : nvml.substr(0, nvml.rfind('/')));
  {
    std::lock_guard plock(publish_mu_);
    dra_preparer_ =
        std::make_unique<dra::ClaimPreparer>(popts, claim_source_.get(), time_slicer_.get());
  }
  if (api_.client != nullptr) {
    std::lock_guard plock(publish_mu_);
    publisher_ = std::make_unique<dra::Publisher>(*api_.client, PublisherOptionsFrom(cfg, api_));
  }
  if (!cfg.danqing.dra_dynamic_mig.empty()) {
    if (Status st = StartDynamicMig(cfg, built, popts); !st.ok()) return st;
  }
  SetDraBase(built ? built->inventory : gpu::NodeInventory{},
             built ? built->dra_gpus : std::vector<std::string>{}, built != nullptr);
  if (publisher_) {
    if (Status st = publisher_->Start(); !st.ok()) return st;
  }
  dra_plugin_ = std::make_unique<dra::NodePlugin>(NodePluginOptionsFrom(cfg), dra_preparer_.get());
  return dra_plugin_->Start();
}

Status Agent::StartDynamicMig(const config::Config& cfg, const Built* built,
                              const dra::PreparerOptions& popts) {
  auto control = dra::NvmlMigControl::Open(NvmlLibraryFor(cfg));
  if (!control.ok()) return control.status().WithContext("danqing.draDynamicMig");
  mig_control_ = std::shared_ptr<dra::MigControl>(std::move(control).value());
  const dra::DynamicMigConfig mcfg = DynamicMigConfigFrom(cfg);
  dynamic_mig_ = std::make_shared<dra::DynamicMig>(mig_control_, mcfg, DynamicMigStateFile(cfg));
  // The parent GPU's /dev/nvidia<minor> as the inventory knows it.
  std::map<int, uint32_t> minors;
  if (built != nullptr) {
    for (const auto& g : built->inventory.gpus) {
      if (g.minor_number) minors[g.index] = *g.minor_number;
    }
  }
  mig_maker_ = std::make_unique<DynamicMigMaker>(
      dynamic_mig_, cfg.danqing.node_name + "-mig",
      [minors](int index) {
        auto it = minors.find(index);
        return it == minors.end() ? static_cast<uint32_t>(index) : it->second;
      },
      [this] { PublishDynamicMig(); });
  dra_preparer_->SetDeviceMaker(mig_maker_.get());

  // Restart: the instances the state file records for claims the checkpoint
  // still holds are kept; any other instance on a dynamic GPU is an orphan.
  auto state = dra::DynamicMig::LoadState(DynamicMigStateFile(cfg));
  if (!state.ok()) {
    spdlog::error("agent: dynamic MIG: {}; every instance on the dynamic GPUs is an orphan",
                  state.status().message());
    state = std::map<std::string, std::vector<dra::MigInstance>>{};
  }
  auto claims = dra::Checkpoint(popts.checkpoint_dir).Load();
  std::map<std::string, dra::PreparedClaim> held;
  if (claims.ok()) {
    held = std::move(claims).value();
  } else {
    std::vector<std::string> skipped;
    held = dra::ReadClaimSpecs(popts.cdi, &skipped);  // as the preparer's Restore rebuilds it
  }
  std::map<std::string, std::vector<dra::MigInstance>> kept;
  for (auto& [uid, list] : *state) {
    if (held.contains(uid)) kept[uid] = std::move(list);
  }
  const std::vector<int> gpus =
      built ? DynamicMigGpus(mcfg, built->inventory, built->dra_gpus) : std::vector<int>{};
  auto orphans = dynamic_mig_->Reconcile(kept, gpus);
  for (const auto& o : orphans) {
    spdlog::warn("agent: dynamic MIG: {}{}", dra::DescribeOrphan(o),
                 o.destroyed       ? "; destroyed (draDynamicMigDestroyOrphans)"
                 : o.error.empty() ? "; kept (draDynamicMigDestroyOrphans is off)"
                                   : "; destroying it failed: " + o.error);
  }
  spdlog::info("agent: dynamic MIG on {} GPU(s); {} instance(s) of prepared claims kept",
               gpus.size(), [&] {
                 size_t n = 0;
                 for (const auto& [uid, list] : dynamic_mig_->Held()) n += list.size();
                 return n;
               }());
  std::lock_guard mlock(mig_mu_);
  mig_gpus_ = gpus;
  mig_orphans_ = std::move(orphans);
  return Status::Ok();
}

void Agent::PublishDynamicMig() {
  if (!publisher_ || !dynamic_mig_) return;
  std::vector<int> gpus;
  {
    std::lock_guard mlock(mig_mu_);
    gpus = mig_gpus_;
  }
  std::vector<dra::MigGpuSpec> specs;
  for (const int index : gpus) {
    auto d = mig_control_->Describe(index);
    if (!d.ok()) {
      spdlog::warn("agent: dynamic MIG: GPU {} left out of the MIG pool: {}", index,
                   d.status().message());
      continue;
    }
    specs.push_back(std::move(d).value());
  }
  std::map<std::string, std::set<uint32_t>> owned;
  for (const auto& [uid, list] : dynamic_mig_->Held()) {
    for (const auto& m : list) owned[m.gpu_uuid].insert(m.gpu_instance_id);
  }
  publisher_->SetDynamicMig(std::move(specs), std::move(owned));
}

std::vector<dra::OrphanInstance> Agent::dynamic_mig_orphans() const {
  std::lock_guard mlock(mig_mu_);
  return mig_orphans_;
}

void Agent::SetBase(std::shared_ptr<const deviceplugin::ResourceSet> set) {
  std::lock_guard lock(publish_mu_);
  base_ = std::move(set);
  if (manager_) manager_->Update(deviceplugin::WithHealth(*base_, unhealthy_));
}

Status Agent::StartChecker(const config::Config& cfg, const gpu::NodeInventory& inventory,
                           std::unique_ptr<health::Checker> retired) {
  auto opts = HealthOptionsFrom(cfg);
  if (!opts.ok()) return opts.status();
  if (auto running = TakeChecker()) retired = std::move(running);
  checker_options_ = *opts;
  {
    std::lock_guard plock(publish_mu_);
    dra_policy_ = opts->monitor.policy;
  }
  auto checker = std::make_unique<health::Checker>(
      *backend_, std::move(opts).value(),
      [this](const std::map<std::string, std::string>& unhealthy) { Publish(unhealthy); },
      [this] {
        if (request_reload_) {
          request_reload_();
        } else {
          spdlog::info("agent: MIG layout changed; it is picked up on the next reload");
        }
      });
  checker->Start(inventory, retired.get());
  std::lock_guard slock(sources_mu_);
  checker_ = std::move(checker);
  return Status::Ok();
}

std::unique_ptr<health::Checker> Agent::TakeChecker() {
  if (!checker_) return nullptr;
  checker_->Stop();
  std::lock_guard slock(sources_mu_);
  return std::move(checker_);
}

Status Agent::Start(const config::Config& cfg) {
  std::unique_lock lock(state_mu_);
  for (const auto& ignored : config::AcceptedButIgnored(cfg)) {
    spdlog::info("agent: setting has no effect in Danqing: {}", ignored.ToString());
  }
  if (auto h = HealthOptionsFrom(cfg); !h.ok()) return h.status();
  cfg_ = cfg;
  nvml_lib_ = NvmlLibraryFor(cfg);
  manager_options_ = ManagerOptionsFrom(cfg);
  auto built = Build(cfg, backend_);
  if (!built.ok()) {
    if (cfg.flags.fail_on_init_error) return built.status();
    spdlog::error("agent: {} (failOnInitError=false: advertising no GPUs, retrying every {} s)",
                  built.status().ToString(),
                  std::chrono::duration_cast<std::chrono::seconds>(cfg.danqing.init_retry_interval).count());
    backend_.reset();
    auto empty = deviceplugin::BuildResources(gpu::NodeInventory{}, deviceplugin::ResourceOptions{});
    if (!empty.ok()) return empty.status();
    base_ = std::move(empty).value();
    degraded_ = true;
  } else {
    base_ = built->set;
    inventory_ = std::make_shared<const gpu::NodeInventory>(built->inventory);
  }
  // Health checks first: the GPUs are watched before the kubelet can hand
  // them out, and an event from then on is not lost.
  if (!degraded_) {
    if (Status st = StartChecker(cfg, built->inventory); !st.ok()) return st;
  }
  if (cfg.danqing.mode != "device-plugin") {
    if (Status st = StartDra(cfg, degraded_ ? nullptr : &*built); !st.ok()) return st;
  }
  if (cfg.danqing.mode != "dra") {
    std::lock_guard plock(publish_mu_);
    manager_ = std::make_unique<deviceplugin::PluginManager>(manager_options_);
    if (Status st = manager_->Start(deviceplugin::WithHealth(*base_, unhealthy_)); !st.ok()) return st;
  }
  StartMetrics(cfg);
  if (degraded_) {
    retry_stop_ = false;
    retry_ = std::thread([this] { RetryLoop(); });
  }
  return Status::Ok();
}

void Agent::RetryLoop() {
  while (true) {
    config::Duration wait;
    {
      std::lock_guard lock(state_mu_);
      wait = cfg_.danqing.init_retry_interval;
    }
    {
      std::unique_lock lock(retry_mu_);
      if (retry_cv_.wait_for(lock, wait, [this] { return retry_stop_; })) return;
    }
    std::lock_guard lock(state_mu_);
    if (!degraded_) return;  // a reload succeeded meanwhile
    std::unique_ptr<gpu::GpuBackend> fresh;
    auto built = Build(cfg_, fresh);
    if (!built.ok()) {
      spdlog::warn("agent: still no GPUs: {}", built.status().ToString());
      continue;
    }
    {
      std::lock_guard slock(sources_mu_);
      backend_ = std::move(fresh);
      inventory_ = std::make_shared<const gpu::NodeInventory>(built->inventory);
    }
    nvml_lib_ = NvmlLibraryFor(cfg_);
    degraded_ = false;
    SetBase(built->set);
    SetDraBase(built->inventory, built->dra_gpus);
    if (Status st = StartChecker(cfg_, built->inventory); !st.ok()) {
      spdlog::error("agent: health checks not started: {}", st.ToString());
    }
    spdlog::info("agent: GPUs discovered after a failed start; now serving them");
    return;
  }
}

Status Agent::Reload(const config::Config& cfg) {
  std::unique_lock lock(state_mu_);
  auto health_opts = HealthOptionsFrom(cfg);
  if (!health_opts.ok()) return health_opts.status().WithContext("reload kept the running configuration");
  // The DRA settings are read at start only, but for split's draGpus: a
  // changed selection moves GPUs between the two sides live (MoveSplit).
  const auto& a = cfg.danqing;
  const auto& b = cfg_.danqing;
  const bool split_move = a.mode == "split" && b.mode == "split" && a.dra_gpus != b.dra_gpus;
  if (a.mode != b.mode || (a.dra_gpus != b.dra_gpus && !split_move) ||
      a.dra_driver_name != b.dra_driver_name || a.dra_plugins_registry != b.dra_plugins_registry ||
      a.dra_plugin_dir != b.dra_plugin_dir || a.dra_checkpoint_dir != b.dra_checkpoint_dir ||
      a.dra_claims_file != b.dra_claims_file || a.node_name != b.node_name ||
      a.dra_dynamic_mig != b.dra_dynamic_mig ||
      a.dra_dynamic_mig_destroy_orphans != b.dra_dynamic_mig_destroy_orphans) {
    return FailedPrecondition(
        "reload kept the running configuration: danqing.mode, draDriverName, "
        "draPluginsRegistry, draPluginDir, draCheckpointDir, draClaimsFile, draDynamicMig, "
        "draDynamicMigDestroyOrphans and nodeName (and "
        "draGpus outside split mode) change only with a restart of the agent");
  }
  if (cfg.danqing.kubeconfig != cfg_.danqing.kubeconfig) {
    return FailedPrecondition(
        "reload kept the running configuration: danqing.kubeconfig changes only with a restart "
        "of the agent");
  }
  // The running backend rediscovers; only a changed NVML library path (or a
  // start without any) needs a new one, which replaces the running one once
  // the new configuration built.
  const bool new_backend = !backend_ || NvmlLibraryFor(cfg) != nvml_lib_;
  std::unique_ptr<gpu::GpuBackend> fresh;
  if (degraded_) cfg_ = cfg;  // the retry thread uses the newest configuration
  auto built = Build(cfg, new_backend ? fresh : backend_, inventory_.get());
  if (!built.ok()) return built.status().WithContext("reload kept the running configuration");
  if (split_move) {
    if (Status st = MoveSplit(cfg, *built); !st.ok()) return st;
  }
  const bool health_changed =
      !checker_ || cfg.danqing.disable_health_checks != cfg_.danqing.disable_health_checks ||
      cfg.danqing.enable_health_checks != cfg_.danqing.enable_health_checks ||
      cfg.danqing.reset_xids != cfg_.danqing.reset_xids ||
      cfg.danqing.xid_quiet_period != cfg_.danqing.xid_quiet_period ||
      cfg.danqing.health_check_interval != cfg_.danqing.health_check_interval;
  // The checker holds a reference to backend_: stopped before that changes,
  // and its conditions go to the next one (published meanwhile as they were).
  std::unique_ptr<health::Checker> retired;
  if (new_backend || health_changed) retired = TakeChecker();
  {
    std::lock_guard slock(sources_mu_);
    if (new_backend) backend_ = std::move(fresh);
    inventory_ = std::make_shared<const gpu::NodeInventory>(built->inventory);
  }
  if (new_backend) nvml_lib_ = NvmlLibraryFor(cfg);
  degraded_ = false;
  cfg_ = cfg;
  StartMetrics(cfg);
  auto mopts = ManagerOptionsFrom(cfg);
  Status result = Status::Ok();
  SetDraBase(built->inventory, built->dra_gpus);
  if (cfg.danqing.mode == "dra") {
    SetBase(built->set);
    spdlog::info("agent: reloaded; DRA devices republished");
  } else if (mopts == manager_options_) {
    SetBase(built->set);
    // The driver's files may have changed (a daemon's socket came or went).
    {
      std::lock_guard plock(publish_mu_);
      if (manager_) manager_->RewriteCdiSpec();
    }
    spdlog::info("agent: reloaded; resources republished");
  } else {
    std::lock_guard plock(publish_mu_);
    if (manager_) manager_->Stop();
    manager_options_ = mopts;
    base_ = built->set;
    manager_ = std::make_unique<deviceplugin::PluginManager>(manager_options_);
    spdlog::info("agent: reloaded; plugin servers restarted with new options");
    result = manager_->Start(deviceplugin::WithHealth(*base_, unhealthy_));
  }
  if (checker_) {
    checker_->SetInventory(built->inventory);
  } else if (Status st = StartChecker(cfg, built->inventory, std::move(retired)); !st.ok()) {
    return st;
  }
  // The next scrape shows the new inventory (a MIG instance created for a
  // claim, whose config change event asked for this reload): collected now,
  // not at the exporter's next interval. Its collector takes only sources_mu_.
  if (exporter_) (void)exporter_->CollectNow();
  return result;
}

void Agent::Stop() {
  if (exporter_) exporter_->Stop();  // its collector reads under state_mu_
  {
    std::lock_guard lock(retry_mu_);
    retry_stop_ = true;
  }
  retry_cv_.notify_all();
  if (retry_.joinable()) retry_.join();
  std::lock_guard lock(state_mu_);
  if (checker_) {
    checker_->Stop();
    std::lock_guard slock(sources_mu_);
    checker_.reset();
  }
  if (dra_plugin_) dra_plugin_->Stop();
  // The slices stay: a restarted agent with the same GPUs adopts them.
  if (publisher_) publisher_->Stop();
  std::lock_guard plock(publish_mu_);
  if (manager_) manager_->Stop();
}

metrics::Sources Agent::MetricsSources() {
  metrics::Sources src;
  src.inventory = [this] {
    std::lock_guard lock(sources_mu_);
    return inventory_;
  };
  src.read_sensors = [this](const std::string& uuid) -> Result<gpu::Sensors> {
    std::lock_guard lock(sources_mu_);
    if (!backend_) return Status(StatusCode::kUnavailable, "no GPU backend");
    return backend_->ReadSensors(uuid);
  };
  src.health = [this] {
    std::vector<metrics::DeviceHealth> out;
    for (const auto& h : Health()) {
      metrics::DeviceHealth m;
      m.uuid = h.uuid;
      m.healthy = h.healthy;
      m.reason = h.reason;
      m.xid_counts = h.xid_counts;
      m.last_xid = h.last_xid;
      out.push_back(std::move(m));
    }
    return out;
  };
  src.health_transitions = [this] { return HealthTransitions(); };
  src.dra_devices = [this] {
    std::lock_guard lock(dra_names_mu_);
    return dra_names_;
  };
  return src;
}

void Agent::StartMetrics(const config::Config& cfg) {
  // What the exporter was started with: a reload that changes any of it
  // (not only the address) restarts it.
  const std::string key = cfg.danqing.metrics_addr + '\n' + cfg.danqing.pod_resources_socket + '\n' +
                          cfg.danqing.device_plugin_path;
  if (exporter_ && key == metrics_key_) return;
  metrics_key_ = key;
  if (exporter_) {
    exporter_->Stop();  // its collector takes only sources_mu_, which we do not hold
    exporter_.reset();
  }
  metrics_addr_ = cfg.danqing.metrics_addr;
  if (metrics_addr_.empty()) return;
  metrics::ExporterOptions o;
  o.listen = metrics_addr_;
  const char* node = std::getenv("NODE_NAME");
  o.collector.hostname = node != nullptr ? node : "";
  o.collector.pod_resources_socket = cfg.danqing.pod_resources_socket;
  o.collector.kubelet_checkpoint = cfg.danqing.device_plugin_path + "/kubelet_internal_checkpoint";
  o.ready = [this] {
    std::lock_guard lock(publish_mu_);
    if (dra_plugin_ && !dra_plugin_->status().serving) return false;
    if (!manager_) return dra_plugin_ != nullptr;
    for (const auto& st : manager_->Statuses()) {
      if (!st.registered) return false;
    }
    return true;
  };
  auto e = metrics::Exporter::Start(o, MetricsSources());
  if (!e.ok()) {
    spdlog::error("agent: metrics endpoint {} not started: {}", metrics_addr_, e.status().ToString());
    return;
  }
  exporter_ = std::move(e).value();
  spdlog::info("agent: metrics on {} (port {}): /metrics, /healthz, /readyz", metrics_addr_, exporter_->port());
}

int Agent::metrics_port() const {
  std::lock_guard lock(state_mu_);  // exporter_ changes only under state_mu_
  return exporter_ ? exporter_->port() : 0;
}

std::vector<health::DeviceHealth> Agent::Health() const {
  std::lock_guard lock(sources_mu_);
  return checker_ ? checker_->Snapshot() : std::vector<health::DeviceHealth>{};
}

std::map<std::string, uint64_t> Agent::HealthTransitions() const {
  std::lock_guard lock(sources_mu_);
  return checker_ ? checker_->transitions() : std::map<std::string, uint64_t>{};
}

}  // namespace danqing::agent
