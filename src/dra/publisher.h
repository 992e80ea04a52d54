// Publisher: keeps this node's ResourceSlices in the API server equal to the
// devices the inventory and the health monitor say the node has.
//
// The caller hands it the desired state (Update, SetConditions) whenever the
// inventory or health changes; a background thread publishes it:
//   * the first pass lists the node's slices of this driver
//     (fieldSelector spec.nodeName=<node>,spec.driver=<driver>); slices that
//     already say what is desired are adopted with their generation (an
//     agent restart with the same GPUs writes nothing);
//   * a change of devices (a GPU lost or back, MIG re-partition, a reload, a
//     taint added or removed) is published as a new pool generation on every
//     slice of the pool; slices no longer needed are deleted;
//   * 409 Conflict: the slice is read again and the write retried; 404 on
//     update: created; AlreadyExists on create: read and updated;
//   * a watch on the node's slices sees a slice modified or deleted behind
//     the agent's back, and the next pass restores it (same generation when
//     the devices did not change); 410 Gone (or an ERROR event with 410)
//     makes it list again;
//   * any failure (API server down, 5xx, 429, timeouts, an unreadable token)
//     is retried with a backoff doubling from min_backoff to max_backoff,
//     and the newest desired state is published once the server answers.
// Counted in the metrics registry (danqing_dra_slice_publish_total{result},
// danqing_dra_slice_publish_duration_seconds, danqing_dra_slice_repairs_total,
// danqing_dra_slice_generation).
//
// Dynamic MIG (issue 26): SetDynamicMig adds this node's second pool,
// "<node>-mig" (dynamic_mig.h: counter sets and placement devices), published
// and adopted with the main pool, at the same generation number (a pool's
// generation only has to grow; both grow when either changes).
//
// Taints carry timeAdded: the time this publisher first saw the condition
// (kept while the condition lasts, so a republication does not move it).
//
// Thread-safety: Update/SetConditions/status/WaitSynced from any thread;
// Start and Stop from one thread. The kube::Client must outlive it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "dra/dynamic_mig.h"
#include "dra/slices.h"
#include "gpu/types.h"
#include "kube/client.h"

namespace danqing::dra {

struct PublisherOptions {
  SliceOptions slices;  // driver, node_name (required), sysfs_root, serve, node_uid
  std::chrono::milliseconds min_backoff{200};
  std::chrono::milliseconds max_backoff{30000};
  // Each watch asks the server to end it after this long (then it is
  // re-opened from the last resourceVersion).
  std::chrono::seconds watch_timeout{300};
  int max_conflict_retries = 5;  // per slice and pass
};

struct PublisherStatus {
  int64_t generation = 0;        // the pool generation last published (0: none yet)
  bool synced = false;           // the API server holds the newest desired state
  uint64_t desired_version = 0;  // bumped on every change of the desired devices
  uint64_t published_version = 0;
  uint64_t passes_ok = 0, passes_failed = 0;
  uint64_t conflicts = 0;  // 409s met (and retried)
  uint64_t repairs = 0;    // slices restored after someone else changed or deleted them
  uint64_t relists = 0;    // lists after the first (410, watch trouble)
  std::string last_error;  // empty after a successful pass
};

class Publisher {
 public:
  Publisher(kube::Client& client, PublisherOptions options);
  ~Publisher();
  Publisher(const Publisher&) = delete;
  Publisher& operator=(const Publisher&) = delete;

  // INVALID_ARGUMENT without a node name or with a driver that is not a DNS
  // subdomain. Publishes what Update gave so far (nothing is published before
  // the first Update).
  Status Start();
  // Stops both threads (an open request ends within its timeout; a watch at once).
  void Stop();

  // The new desired state. Cheap when nothing changed for the slices.
  void Update(const gpu::NodeInventory& inventory, const DeviceConditions& conditions);
  // Health only (the inventory given last is kept).
  void SetConditions(const DeviceConditions& conditions);
  // The dynamic-MIG GPUs as they are now and the GPU instances prepared
  // claims created on them (by GPU UUID; they stay placement devices). No
  // GPUs: no "<node>-mig" pool (its slices are deleted).
  void SetDynamicMig(std::vector<MigGpuSpec> gpus,
                     std::map<std::string, std::set<uint32_t>> owned_by_gpu);

  PublisherStatus status() const;
  // Blocks until the newest desired state is published and no pass is due
  // or running (a repair included), or `timeout`.
  bool WaitSynced(std::chrono::milliseconds timeout) const;

 private:
  void ReconcileLoop();
  void WatchLoop();
  // One pass: list if needed, then create/update/delete. OK when the server
  // holds the desired state.
  Status Reconcile();
  Status List();
  // Writes `desired` over `existing` (may be null): update or create, with
  // conflict retries. Updates existing_ from the answer.
  Status WriteSlice(const kube::Json& desired);
  Status DeleteSlice(const std::string& name);
  void StoreLocked(const std::string& name, kube::Json obj);  // mu_ held
  void Rebuild();  // desired_ from inventory_ + conditions_ (mu_ held)
  // All slices of generation `gen`: the main pool's, then the MIG pool's (mu_ held).
  std::vector<kube::Json> AllSlices(const std::vector<SliceDevice>& devices, int64_t gen) const;
  std::string SlicesPath() const;
  kube::Query Selector() const;

  kube::Client& client_;
  PublisherOptions options_;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool have_inventory_ = false;
  gpu::NodeInventory inventory_;
  DeviceConditions conditions_;
  std::vector<SliceDevice> desired_;  // taints without time
  std::vector<MigGpuSpec> mig_gpus_;  // dynamic MIG (SetDynamicMig)
  std::map<std::string, std::set<uint32_t>> mig_owned_;
  std::string desired_key_;           // desired_ as JSON text
  uint64_t desired_version_ = 0;
  std::chrono::steady_clock::time_point desired_since_{};  // first unpublished change
  uint64_t published_version_ = 0;
  std::string published_key_;  // the devices of the generation on the server
  int64_t generation_ = 0;
  std::map<std::string, std::string> taint_times_;  // "device|key|value|effect" → RFC 3339
  bool dirty_ = false;                              // a pass is due
  bool in_pass_ = false;                            // a pass is running
  bool need_list_ = true;
  std::map<std::string, kube::Json> existing_;  // the node's slices as last seen, by name
  // The newest resourceVersion seen per slice name, deletions included: an
  // answer to our own write older than what the watch already reported (a
  // deletion right after it) does not bring the slice back into existing_.
  std::map<std::string, std::string> seen_rv_;
  std::string list_rv_;      // where the watch goes on from
  uint64_t list_epoch_ = 0;  // bumped by each list (restarts the watch)
  PublisherStatus stats_;
  bool stop_ = false;
  std::atomic<bool> cancel_watch_{false};

  std::thread reconcile_;
  std::thread watch_;
};

}  // namespace danqing::dra
