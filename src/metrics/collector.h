// Collector: turns what the agent knows (GPU inventory, sensors, health) and
// what the kubelet says (pod resources) into one snapshot of metric
// families, ready to render.
//
// The collector does all the slow work (NVML reads, the pod resources RPC,
// /proc reads); rendering a scrape only formats the snapshot. The Exporter
// (exporter.h) runs Collect() on its own thread every interval; a benchmark or
// test may call it directly.
//
// Thread-safety: Collect() from one thread at a time (the Sources callbacks
// are called on that thread). Snapshots are immutable and may be shared.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "gpu/types.h"
#include "metrics/pods.h"
#include "metrics/registry.h"

namespace danqing::metrics {

// Health of one GPU or MIG device as the health monitor sees it.
struct DeviceHealth {
  std::string uuid;  // GPU or MIG UUID; a MIG device without its own entry inherits its GPU's
  bool healthy = true;
  std::string reason;                       // "xid-79", "device-lost", ... when unhealthy
  std::map<uint64_t, uint64_t> xid_counts;  // XID → events seen since the agent started
  uint64_t last_xid = 0;                    // the most recent XID, 0 when none
};

// Where the collector gets what the agent knows. Callbacks are called by
// Collect(), one at a time (the Exporter's collector thread); an empty
// std::function means "not available".
struct Sources {
  // The current discovery; null or empty function: no GPU metrics.
  std::function<std::shared_ptr<const gpu::NodeInventory>()> inventory;
  // Sensors of a GPU or MIG device by UUID (GpuBackend::ReadSensors).
  std::function<Result<gpu::Sensors>(const std::string& uuid)> read_sensors;
  // Health of devices; empty function or a device missing from the list: healthy.
  std::function<std::vector<DeviceHealth>()> health;
  // Health transitions since start, by "<to>:<condition>" ("unhealthy:xid",
  // "healthy:gpu-lost"; every XID condition counts as "xid") → count.
  std::function<std::map<std::string, uint64_t>()> health_transitions;
  // The devices served through DRA (dra/split mode), to attribute the
  // devices of pods' claims; empty function or null: none.
  std::function<std::shared_ptr<const DraDevices>()> dra_devices;
};

struct CollectorOptions {
  std::string hostname;  // the `Hostname` label; empty = gethostname()
  // The kubelet's pod resources socket; empty = no pod attribution.
  std::string pod_resources_socket;
  std::chrono::milliseconds pod_resources_timeout{500};
  // The kubelet's device manager checkpoint (maps pod UIDs from /proc to pods);
  // empty or unreadable = time-sliced GPUs are split only where one pod holds them.
  std::string kubelet_checkpoint = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint";
  std::string proc_root = "/proc";
  std::string resource_prefix = "nvidia.com/";
  // DCGM's label `modelName` is camelCase, which `promtool check metrics`
  // flags; true writes `model_name` instead (dashboards made for
  // dcgm-exporter then need editing).
  bool snake_case_labels = false;
};

struct Snapshot {
  uint64_t generation = 0;
  std::chrono::system_clock::time_point taken;
  std::vector<MetricFamily> families;
};

class Collector {
 public:
  // `registry` receives the collector's own counters (pod resources errors,
  // collections); it must outlive the collector.
  Collector(CollectorOptions options, Sources sources, Registry& registry);
  ~Collector();
  Collector(const Collector&) = delete;
  Collector& operator=(const Collector&) = delete;

  // Reads everything once and returns the new snapshot. Never fails: what
  // could not be read is left out and counted.
  std::shared_ptr<const Snapshot> Collect();

 private:
  struct State;
  CollectorOptions options_;
  Sources sources_;
  std::unique_ptr<State> state_;
};

}  // namespace danqing::metrics
