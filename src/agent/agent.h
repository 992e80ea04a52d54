// Agent: the node agent's wiring. It turns a resolved configuration into a
// running system: NVML backend → inventory → advertised resources → kubelet
// plugin servers, and rebuilds it all on reload (SIGHUP).
//
// Health: a health::Checker follows the backend's events and polls its
// sensors; every change is published as the same resources with devices
// marked unhealthy (deviceplugin::WithHealth), so ListAndWatch carries it.
//
// DRA (dra and split modes): the node plugin prepares claims read from a
// ClaimSource; with an API server (ApiLink) the DRA GPUs are published as
// this node's ResourceSlices (dra::Publisher): a new pool generation on
// every inventory change (reload, MIG re-partition, a GPU lost or back), and
// the health conditions as device taints, removed when the device recovers.
//
// Thread-safety: Start/Reload/Stop from one thread (main's signal loop); the
// health checker and the init-retry thread publish concurrently, under the
// agent's locks. Accessors may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "common/status.h"
#include "config/config.h"
#include "deviceplugin/plugin_manager.h"
#include "dra/claim_preparer.h"
#include "dra/claims.h"
#include "dra/dynamic_mig.h"
#include "dra/node_devices.h"
#include "dra/node_plugin.h"
#include "dra/publisher.h"
#include "gpu/backend.h"
#include "health/checker.h"
#include "kube/client.h"
#include "metrics/exporter.h"

namespace danqing::agent {

// The NVML library to load: danqing.nvmlLib when set; else, when the host's
// driver root is mounted at flags.plugin.containerDriverRoot (not "/"), the
// libnvidia-ml.so.1 found under it, as NVIDIA's plugin looks for it (the GPU
// Operator's containerised driver, mounted at /driver-root); else "" (the
// dynamic linker's search path).
std::string NvmlLibraryFor(const config::Config& cfg);

// Builds a backend for the configured NVML library (injectable for tests).
using BackendFactory =
    std::function<Result<std::unique_ptr<gpu::GpuBackend>>(const config::Config&)>;
BackendFactory NvmlBackendFactory();

// The resource options the configuration asks for.
Result<deviceplugin::ResourceOptions> ResourceOptionsFrom(const config::Config& cfg);
deviceplugin::ManagerOptions ManagerOptionsFrom(const config::Config& cfg);
// The health checker's options; INVALID_ARGUMENT for a bad XID selection.
Result<health::CheckerOptions> HealthOptionsFrom(const config::Config& cfg);

// After a rediscovery: every GPU of `previous` that `fresh` lists among its
// errors (lost, or unreadable, at this discovery: by UUID, or by NVML index
// when the UUID could not be read) and does not list as a GPU is put back
// into `fresh` as `previous` knew it (its MIG devices and topology links
// too), and its error removed. A GPU that NVML no longer counts is not kept.
// Health checks then keep such a GPU listed as unhealthy until it answers,
// as they do between reloads. Returns the UUIDs kept.
std::vector<std::string> KeepUnreadableGpus(const gpu::NodeInventory& previous,
                                            gpu::NodeInventory& fresh);

// The DRA side's source of ResourceClaims (docs/dra.md). The default reads
// danqing.draClaimsFile when set, else is a source that fails every read
// saying no API client is configured. The agent's main passes the API
// client's claim reader here once it exists.
using ClaimSourceFactory = std::function<std::unique_ptr<dra::ClaimSource>(const config::Config&)>;
ClaimSourceFactory DefaultClaimSourceFactory();
// Claims read from the API server through `client` (dra::ClaimReader for
// danqing.draDriverName); `client` must outlive the agent.
ClaimSourceFactory ApiClaimSourceFactory(kube::Client& client);

// The API client of the DRA side: null in device-plugin mode, or when no API
// server is configured (no danqing.kubeconfig and not in a pod: no
// KUBERNETES_SERVICE_HOST). Errors: INVALID_ARGUMENT for an unreadable or
// malformed kubeconfig, FAILED_PRECONDITION for an incomplete in-cluster
// service account (each naming what is wrong).
Result<std::unique_ptr<kube::Client>> ApiClientFor(const config::Config& cfg);

// Where the DRA side publishes ResourceSlices. No client: nothing published.
struct ApiLink {
  kube::Client* client = nullptr;  // must outlive the agent
  // The publisher's retry backoff (dra::PublisherOptions).
  std::chrono::milliseconds min_backoff{200};
  std::chrono::milliseconds max_backoff{30000};
};
// The publisher's options from the configuration (driver, pool, sysfs root).
dra::PublisherOptions PublisherOptionsFrom(const config::Config& cfg, const ApiLink& api);

// The UUIDs of the GPUs of `inventory` that danqing.mode serves through DRA:
// none (device-plugin), all (dra), those danqing.draGpus names by UUID or
// NVML index (split; INVALID_ARGUMENT naming an entry that matches no GPU).
Result<std::vector<std::string>> DraGpuUuids(const config::Config& cfg,
                                             const gpu::NodeInventory& inventory);
// `inventory` without the GPUs `uuids` (topology and errors kept for the rest).
gpu::NodeInventory WithoutGpus(const gpu::NodeInventory& inventory,
                               const std::vector<std::string>& uuids);
// Dynamic MIG's configuration (danqing.draDynamicMig, ...DestroyOrphans).
dra::DynamicMigConfig DynamicMigConfigFrom(const config::Config& cfg);
// Where dynamic MIG keeps the instances it made: <draCheckpointDir>/dynamic-mig.json.
std::string DynamicMigStateFile(const config::Config& cfg);
// The NVML indices of the GPUs of `inventory` that dynamic MIG serves: among
// `dra_gpus`, those in MIG mode that `mig` selects (a selected GPU not in MIG
// mode is served statically, with a warning).
std::vector<int> DynamicMigGpus(const dra::DynamicMigConfig& mig,
                                const gpu::NodeInventory& inventory,
                                const std::vector<std::string>& dra_gpus);

// The node plugin's options from the configuration.
dra::NodePluginOptions NodePluginOptionsFrom(const config::Config& cfg);
dra::PreparerOptions PreparerOptionsFrom(const config::Config& cfg);

class Agent {
 public:
  // `request_reload`, when set, is called (from the agent's event thread)
  // when NVML reports a MIG re-partition, so the owner re-runs Reload();
  // without it MIG changes are picked up on the next explicit reload.
  // `api`: where the DRA side publishes its ResourceSlices (none by default).
  explicit Agent(BackendFactory factory = NvmlBackendFactory(),
                 std::function<void()> request_reload = {},
                 ClaimSourceFactory claim_sources = DefaultClaimSourceFactory(), ApiLink api = {});
  ~Agent();

  // Discovers GPUs and serves their resources. With failOnInitError (the
  // default) an NVML or resource error is returned; without it the agent
  // logs the error, advertises nvidia.com/gpu with no devices, and retries
  // every initRetryInterval until discovery succeeds.
  Status Start(const config::Config& cfg);

  // Applies a new configuration: rediscovers and republishes; restarts the
  // plugin servers only when their options changed. On error the running
  // state is kept and the error returned.
  Status Reload(const config::Config& cfg);

  void Stop();

  // Null in dra mode (no device plugin resource is served).
  const deviceplugin::PluginManager* manager() const { return manager_.get(); }
  // The DRA side; null in device-plugin mode.
  const dra::NodePlugin* dra_plugin() const { return dra_plugin_.get(); }
  const dra::ClaimPreparer* dra_preparer() const { return dra_preparer_.get(); }
  // The ResourceSlice publisher; null without an API server or in device-plugin mode.
  const dra::Publisher* dra_publisher() const { return publisher_.get(); }
  // Dynamic MIG (issue 26); null unless danqing.draDynamicMig selects GPUs.
  const dra::DynamicMig* dynamic_mig() const { return dynamic_mig_.get(); }
  // The orphans Reconcile found at start (destroyed when configured).
  std::vector<dra::OrphanInstance> dynamic_mig_orphans() const;

  // The health of every tracked device (empty while no GPU is served).
  std::vector<health::DeviceHealth> Health() const;
  // Health transitions so far ("unhealthy:xid" → count).
  std::map<std::string, uint64_t> HealthTransitions() const;
  // True while failOnInitError=false kept the agent up without GPUs.
  bool degraded() const { return degraded_; }
  // The metrics endpoint's port (0 when metrics are off or not started).
  int metrics_port() const;

 private:
  struct Built {
    gpu::NodeInventory inventory;
    std::shared_ptr<const deviceplugin::ResourceSet> set;  // of the device plugin's GPUs
    std::vector<std::string> dra_gpus;                     // UUIDs served through DRA
  };
  // Starts the DRA side over `built` (state_mu_ held).
  Status StartDra(const config::Config& cfg, const Built* built);
  // Replaces the DRA side's devices and republishes (takes publish_mu_);
  // `discovered` false (no GPU discovered yet): the slices are left as they are.
  void SetDraBase(const gpu::NodeInventory& inventory, const std::vector<std::string>& dra_gpus,
                  bool discovered = true);
  // A split reload's change of draGpus (state_mu_ held), before `built` is
  // published: checks that no moving GPU is in use on the side it leaves (a
  // prepared claim; a device-plugin allocation in the kubelet's pod
  // resources, or pod resources not answering), withdraws every moving GPU
  // from both sides, and checks again. In use: both sides as they were, the
  // refusal logged and counted (danqing_dra_split_reload_refused_total) and
  // FAILED_PRECONDITION naming the GPU and its holder returned; else the
  // caller offers them on their new side.
  Status MoveSplit(const config::Config& cfg, const Built& built);
  // Starts dynamic MIG (StartDra, before the node plugin serves): the
  // instances of checkpointed claims are kept, orphans reported.
  Status StartDynamicMig(const config::Config& cfg, const Built* built,
                         const dra::PreparerOptions& popts);
  // Republishes the "<node>-mig" pool: the dynamic GPUs as NVML describes
  // them now and the instances claims hold. Takes only mig_mu_ (called from
  // the preparer with its lock held, and under publish_mu_).
  void PublishDynamicMig();
  // Discovers through `backend` (created from the factory when null).
  // `previous`, when given, is the inventory being replaced: GPUs it had that
  // this discovery cannot read are kept (KeepUnreadableGpus).
  Result<Built> Build(const config::Config& cfg, std::unique_ptr<gpu::GpuBackend>& backend,
                      const gpu::NodeInventory* previous = nullptr);

  // Publishes `base_` with the given health to the plugin servers.
  void Publish(const std::map<std::string, std::string>& unhealthy);
  // Replaces the base resources and republishes (state_mu_ held).
  void SetBase(std::shared_ptr<const deviceplugin::ResourceSet> set);
  // (Re)creates the health checker over backend_ (state_mu_ held). The
  // conditions of the checker it replaces, the running one or `retired`,
  // are carried over: new options or a new NVML library do not make a GPU
  // that needs a reset healthy.
  Status StartChecker(const config::Config& cfg, const gpu::NodeInventory& inventory,
                      std::unique_ptr<health::Checker> retired = nullptr);
  // Stops the running checker and hands it over (null if none).
  std::unique_ptr<health::Checker> TakeChecker();
  void RetryLoop();
  // (Re)starts the metrics endpoint when its address changed (state_mu_ held).
  void StartMetrics(const config::Config& cfg);
  metrics::Sources MetricsSources();

  BackendFactory factory_;
  std::function<void()> request_reload_;

  mutable std::mutex state_mu_;  // Start/Reload/Stop vs the init-retry thread and accessors
  config::Config cfg_;
  std::unique_ptr<gpu::GpuBackend> backend_;
  std::string nvml_lib_;  // the library backend_ was created for
  std::shared_ptr<const gpu::NodeInventory> inventory_;
  std::unique_ptr<health::Checker> checker_;
  std::optional<health::CheckerOptions> checker_options_;
  deviceplugin::ManagerOptions manager_options_;

  mutable std::mutex publish_mu_;  // taken inside the checker's lock
  std::shared_ptr<const deviceplugin::ResourceSet> base_;
  std::map<std::string, std::string> unhealthy_;
  std::unique_ptr<deviceplugin::PluginManager> manager_;
  // The DRA side (dra and split modes), guarded by publish_mu_ as manager_.
  ClaimSourceFactory claim_sources_;
  std::unique_ptr<dra::ClaimSource> claim_source_;
  std::unique_ptr<dra::TimeSlicer> time_slicer_;
  std::unique_ptr<dra::ClaimPreparer> dra_preparer_;
  std::unique_ptr<dra::NodePlugin> dra_plugin_;
  std::shared_ptr<const dra::DeviceTable> dra_base_;
  ApiLink api_;
  std::unique_ptr<dra::Publisher> publisher_;  // with an API server
  // Dynamic MIG: set at StartDra, then only read.
  std::shared_ptr<dra::MigControl> mig_control_;
  std::shared_ptr<dra::DynamicMig> dynamic_mig_;
  std::unique_ptr<dra::DeviceMaker> mig_maker_;
  mutable std::mutex mig_mu_;  // guards the two below; taken after publish_mu_ / the preparer's
  std::vector<int> mig_gpus_;  // NVML indices of the dynamic GPUs
  std::vector<dra::OrphanInstance> mig_orphans_;
  health::XidPolicy dra_policy_;               // which conditions need a reset (NoExecute taints)
  // dra_base_'s device names → UUIDs for the metrics collector's thread.
  mutable std::mutex dra_names_mu_;
  std::shared_ptr<const metrics::DraDevices> dra_names_;
  std::vector<std::string> dra_gpus_;  // UUIDs the DRA side serves (state_mu_)

  // Guards backend_, inventory_ and checker_ (the pointers) for readers on
  // other threads (the metrics collector, accessors); writers also hold
  // state_mu_. Never held while waiting for another thread.
  mutable std::mutex sources_mu_;
  // Metrics: /metrics, /healthz, /readyz on danqing.metricsAddr.
  std::unique_ptr<metrics::Exporter> exporter_;
  std::string metrics_addr_;
  std::string metrics_key_;  // the options the running exporter was started with

  std::atomic<bool> degraded_{false};
  std::mutex retry_mu_;
  std::condition_variable retry_cv_;
  bool retry_stop_ = false;
  std::thread retry_;
};

}  // namespace danqing::agent
