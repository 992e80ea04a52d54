#include "agent/agent.h"

#include <spdlog/spdlog.h>

#include <fstream>
#include <sstream>

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

Agent::Agent(BackendFactory factory) : factory_(std::move(factory)) {}

Agent::~Agent() { Stop(); }

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
  for (const auto& r : (*set)->resources) {
    spdlog::info("agent: resource={} devices={} replicas={}", r.name, r.devices.size(), r.replicas);
  }
  return set;
}

Status Agent::Start(const config::Config& cfg) {
  for (const auto& ignored : config::AcceptedButIgnored(cfg)) {
    spdlog::info("agent: setting has no effect in Danqing: {}", ignored.ToString());
  }
  auto set = Build(cfg, backend_);
  if (!set.ok()) {
    if (cfg.flags.fail_on_init_error) return set.status();
    spdlog::error("agent: {} (failOnInitError=false: advertising no GPUs)", set.status().ToString());
    set = deviceplugin::BuildResources(gpu::NodeInventory{}, deviceplugin::ResourceOptions{});
    if (!set.ok()) return set.status();
  }
  manager_options_ = ManagerOptionsFrom(cfg);
  manager_ = std::make_unique<deviceplugin::PluginManager>(manager_options_);
  return manager_->Start(*set);
}

Status Agent::Reload(const config::Config& cfg) {
  // A fresh backend, so a changed NVML library path takes effect; the
  // running one stays until the new configuration has been built.
  std::unique_ptr<gpu::GpuBackend> backend;
  auto set = Build(cfg, backend);
  if (!set.ok()) return set.status().WithContext("reload kept the running configuration");
  backend_ = std::move(backend);
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
  if (manager_) manager_->Stop();
}

}  // namespace danqing::agent
