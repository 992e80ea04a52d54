// Agent: the node agent's wiring. It turns a resolved configuration into a
// running system: NVML backend → inventory → advertised resources → kubelet
// plugin servers, and rebuilds it all on reload (SIGHUP).
//
// Thread-safety: Start/Reload/Stop from one thread (main's signal loop).
#pragma once

#include <atomic>
#include <functional>
#include <thread>
#include <memory>

#include "common/status.h"
#include "config/config.h"
#include "deviceplugin/plugin_manager.h"
#include "gpu/backend.h"

namespace danqing::agent {

// Builds a backend for the configured NVML library (injectable for tests).
using BackendFactory =
    std::function<Result<std::unique_ptr<gpu::GpuBackend>>(const config::Config&)>;
BackendFactory NvmlBackendFactory();

// The resource options the configuration asks for.
Result<deviceplugin::ResourceOptions> ResourceOptionsFrom(const config::Config& cfg);
deviceplugin::ManagerOptions ManagerOptionsFrom(const config::Config& cfg);

class Agent {
 public:
  // `request_reload`, when set, is called (from the agent's event thread)
  // when NVML reports a MIG re-partition, so the owner re-runs Reload();
  // without it MIG changes are picked up on the next explicit reload.
  explicit Agent(BackendFactory factory = NvmlBackendFactory(),
                 std::function<void()> request_reload = {});
  ~Agent();

  // Discovers GPUs and serves their resources. With failOnInitError (the
  // default) an NVML or resource error is returned; without it the agent
  // logs the error and advertises nvidia.com/gpu with no devices.
  Status Start(const config::Config& cfg);

  // Applies a new configuration: rediscovers and republishes; restarts the
  // plugin servers only when their options changed. On error the running
  // state is kept and the error returned.
  Status Reload(const config::Config& cfg);

  void Stop();

  const deviceplugin::PluginManager* manager() const { return manager_.get(); }

 private:
  // Discovers through `backend` (created from the factory when null).
  Result<std::shared_ptr<const deviceplugin::ResourceSet>> Build(
      const config::Config& cfg, std::unique_ptr<gpu::GpuBackend>& backend);

  // Follows the backend's events; today it acts on MIG re-partitions.
  void StartEvents();
  void StopEvents();

  BackendFactory factory_;
  std::function<void()> request_reload_;
  std::unique_ptr<gpu::GpuBackend> backend_;
  std::string nvml_lib_;  // the library backend_ was created for
  std::thread events_;
  std::atomic<bool> events_stop_{false};
  std::unique_ptr<deviceplugin::PluginManager> manager_;
  deviceplugin::ManagerOptions manager_options_;
};

}  // namespace danqing::agent
