#include "agent/agent.h"

#include <spdlog/spdlog.h>

#include <fstream>
#include <sstream>

#include "agent/labels.h"
#include "gpu/nvml_backend.h"

namespace danqing::agent {
namespace {

constexpr char kMigMinors[] = "/proc/driver/nvidia-caps/mig-minors";

deviceplugin::MigCapMinors ReadMigCapMinors() {
  std::ifstream in(kMigMinors);
  if (!in) return {};
  std::stringstream text;
  text << in.rdbuf();
  auto parsed = deviceplugin::ParseMigCapMinors(text.str());
  if (!parsed.ok()) {
    spdlog::warn("agent: ignoring {}: {}", kMigMinors, parsed.status().message());
    return {};
  }
  return std::move(parsed).value();
}

}  // namespace

BackendFactory NvmlBackendFactory() {
  return [](const config::Config& cfg) -> Result<std::unique_ptr<gpu::GpuBackend>> {
    auto b = gpu::NvmlBackend::Create(cfg.danqing.nvml_lib);
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
  if (cfg.sharing.mps) {
    return Status(StatusCode::kNotSupported,
                  "sharing.mps is accepted in the config file but Danqing does not run an MPS "
                  "control daemon yet; use sharing.timeSlicing");
  }
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
        case config::ReplicatedDevices::Kind::kCount:
          for (int i = 0; i < r.devices.count; ++i) t.devices.push_back(std::to_string(i));
          break;
        case config::ReplicatedDevices::Kind::kList: t.devices = r.devices.list; break;
      }
      o.time_slicing.push_back(std::move(t));
    }
  }
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
  a.mig_cap_minors = ReadMigCapMinors();
  return m;
}

Agent::Agent(BackendFactory factory, std::function<void()> request_reload)
    : factory_(std::move(factory)), request_reload_(std::move(request_reload)) {}

Agent::~Agent() { Stop(); }

void Agent::StartEvents() {
  if (!request_reload_ || !backend_) return;
  auto stream = backend_->WatchEvents({});
  if (!stream.ok()) {
    spdlog::warn("agent: no device events ({}); MIG changes need a reload", stream.status().ToString());
    return;
  }
  events_stop_ = false;
  events_ = std::thread([this, s = std::shared_ptr<gpu::EventStream>(std::move(stream).value())] {
    while (!events_stop_) {
      auto ev = s->Wait(std::chrono::milliseconds(200));
      if (!ev.ok()) {
        spdlog::warn("agent: device event stream failed: {}", ev.status().ToString());
        return;
      }
      if (ev->has_value() && (*ev)->kind == gpu::EventKind::kMigConfigChange) {
        spdlog::info("agent: MIG layout changed on {}; rediscovering", (*ev)->uuid);
        request_reload_();
      }
    }
  });
}

void Agent::StopEvents() {
  events_stop_ = true;
  if (events_.joinable()) events_.join();
}

Result<std::shared_ptr<const deviceplugin::ResourceSet>> Agent::Build(
    const config::Config& cfg, std::unique_ptr<gpu::GpuBackend>& backend) {
  if (!backend) {
    auto b = factory_(cfg);
    if (!b.ok()) return b.status();
    backend = std::move(b).value();
  }
  auto inv = backend->Discover();
  if (!inv.ok()) return inv.status();
  for (const auto& e : inv->errors) {
    spdlog::warn("agent: GPU {} {} left out: {}", e.index, e.uuid, e.status.ToString());
  }
  auto ropts = ResourceOptionsFrom(cfg);
  if (!ropts.ok()) return ropts.status();
  auto set = deviceplugin::BuildResources(*inv, *ropts);
  if (!set.ok()) return set.status();
  for (const auto& w : (*set)->warnings) spdlog::warn("agent: {}", w);
  if (!cfg.danqing.node_features_file.empty()) {
    Status st = WriteFeatureFile(cfg.danqing.node_features_file, NodeLabels(*inv, **set, cfg));
    if (!st.ok()) spdlog::info("agent: node labels not written: {}", st.message());
  }
  for (const auto& r : (*set)->resources) {
    spdlog::info("agent: resource={} devices={} replicas={}", r.name, r.devices.size(), r.replicas);
  }
  return set;
}

Status Agent::Start(const config::Config& cfg) {
  for (const auto& ignored : config::AcceptedButIgnored(cfg)) {
    spdlog::info("agent: setting has no effect in Danqing: {}", ignored.ToString());
  }
  nvml_lib_ = cfg.danqing.nvml_lib;
  auto set = Build(cfg, backend_);
  if (!set.ok()) {
    if (cfg.flags.fail_on_init_error) return set.status();
    spdlog::error("agent: {} (failOnInitError=false: advertising no GPUs)", set.status().ToString());
    set = deviceplugin::BuildResources(gpu::NodeInventory{}, deviceplugin::ResourceOptions{});
    if (!set.ok()) return set.status();
  }
  manager_options_ = ManagerOptionsFrom(cfg);
  manager_ = std::make_unique<deviceplugin::PluginManager>(manager_options_);
  if (Status st = manager_->Start(*set); !st.ok()) return st;
  StartEvents();
  return Status::Ok();
}

Status Agent::Reload(const config::Config& cfg) {
  // The running backend rediscovers; only a changed NVML library path needs a
  // new one, which replaces the running one once the new configuration built.
  const bool new_backend = !backend_ || cfg.danqing.nvml_lib != nvml_lib_;
  std::unique_ptr<gpu::GpuBackend> fresh;
  auto set = Build(cfg, new_backend ? fresh : backend_);
  if (!set.ok()) return set.status().WithContext("reload kept the running configuration");
  if (new_backend) {
    StopEvents();
    backend_ = std::move(fresh);
    nvml_lib_ = cfg.danqing.nvml_lib;
    StartEvents();
  }
  auto mopts = ManagerOptionsFrom(cfg);
  if (manager_ && mopts == manager_options_) {
    manager_->Update(*set);
    spdlog::info("agent: reloaded; resources republished");
    return Status::Ok();
  }
  if (manager_) manager_->Stop();
  manager_options_ = mopts;
  manager_ = std::make_unique<deviceplugin::PluginManager>(manager_options_);
  spdlog::info("agent: reloaded; plugin servers restarted with new options");
  return manager_->Start(*set);
}

void Agent::Stop() {
  StopEvents();
  if (manager_) manager_->Stop();
}

}  // namespace danqing::agent
