// Agent: the node agent's wiring. It turns a resolved configuration into a
// running system: NVML backend → inventory → advertised resources → kubelet
// plugin servers, and rebuilds it all on reload (SIGHUP).
//
// Thread-safety: Start/Reload/Stop from one thread (main's signal loop).
#pragma once

#include <functional>
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
  explicit Agent(BackendFactory factory = NvmlBackendFactory());
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

  BackendFactory factory_;
  std::unique_ptr<gpu::GpuBackend> backend_;
  std::unique_ptr<deviceplugin::PluginManager> manager_;
  deviceplugin::ManagerOptions manager_options_;
};

}  // namespace danqing::agent
