// PluginManager: keeps every advertised resource served and registered with
// the kubelet, through kubelet restarts, socket deletions and reloads.
//
// Lifecycle of each resource, run on the manager's own thread:
//   remove a stale socket → serve → check the socket answers → Register
//   (version v1beta1, endpoint = socket file name) → the kubelet streams
//   ListAndWatch.
// The plugin directory is watched with inotify: when kubelet.sock is
// (re)created, every resource registers again at once; when a resource's own
// socket is deleted (the kubelet does this when it restarts), that server is
// restarted and registers again. While the kubelet is absent, registration is
// retried with capped exponential backoff. No fixed polling interval.
//
// Registering again with a kubelet that still holds the previous
// registration's ListAndWatch stream would let that stream's end, which the
// kubelet handles by resource name, mark the new registration's devices
// unhealthy and its endpoint stopped (the resource then leaves the node's
// capacity after 5 minutes). So the manager never registers while such a
// stream is open: it re-registers with the same kubelet only after the old
// server (and stream) is gone, and `stream_settle` after the last stream's
// end, so the kubelet has handled it first; this holds for a resource that
// is advertised again after a reload too. A kubelet that was restarted
// (kubelet.sock is a new file) is registered with at once. A stream the
// kubelet ends on its own while it keeps running (a broken connection), or
// one that never comes within `register_timeout`, is noticed, and the
// resource registers again after the same wait. A server the kubelet already
// streams from is not registered again (a Register that timed out but went
// through): that stream is the registration. An inotify overflow
// re-registers only what may have changed.
//
// Thread-safety: all public methods may be called from any thread. Structural
// work (serving, registering, writing the CDI spec) is handed to the manager
// thread through an eventfd; a snapshot that keeps the same resources and
// devices is applied on the caller's thread, under mu_. The CDI spec is
// written without mu_ held: a slow write delays only the snapshot that needs
// it, never a health change's caller or Statuses().
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "deviceplugin/allocate.h"
#include "deviceplugin/plugin_server.h"
#include "deviceplugin/resource.h"

namespace danqing::deviceplugin {

// One file, not one path: a kubelet makes kubelet.sock afresh each start. The
// modification time tells a new socket from an old one whose inode number the
// file system gave out again.
struct FileId {
  uint64_t dev = 0;
  uint64_t ino = 0;
  int64_t mtime_ns = 0;
  bool operator==(const FileId&) const = default;
};

struct ManagerOptions {
  std::string plugin_dir = "/var/lib/kubelet/device-plugins";
  std::string kubelet_socket_name = "kubelet.sock";
  AllocateOptions allocate;
  std::string cdi_root;  // write the CDI spec here when a cdi-* strategy is on; empty = never
  std::chrono::milliseconds register_timeout{10'000};
  std::chrono::milliseconds initial_backoff{10};
  std::chrono::milliseconds max_backoff{5'000};
  // Wait between the end of a stream and registering again with the same
  // kubelet (see above). The kubelet handles an end within milliseconds.
  std::chrono::milliseconds stream_settle{1'000};
  // How often the manager thread looks whether the driver's control nodes
  // (/dev/nvidia-uvm appears with the first CUDA program) came or went, to
  // rewrite the CDI spec, which lists those that exist. CDI strategies only.
  std::chrono::milliseconds cdi_node_check{10'000};

  bool operator==(const ManagerOptions&) const = default;
};

struct ResourceStatus {
  std::string resource;
  std::string socket_path;
  bool serving = false;
  bool registered = false;
  uint64_t registrations = 0;  // successful Register calls over the manager's life
  std::optional<std::chrono::steady_clock::time_point> last_registered;
  std::string last_error;
  ServerStats stats;
};

class PluginManager {
 public:
  explicit PluginManager(ManagerOptions options);
  virtual ~PluginManager();  // Stop()
  PluginManager(const PluginManager&) = delete;
  PluginManager& operator=(const PluginManager&) = delete;

  // Starts the manager thread and serves `set`. Returns once every resource is
  // serving on its socket (registration proceeds in the background). Errors:
  // UNAVAILABLE when the directory cannot be watched (nothing started), or
  // when a resource's socket could not be served: the thread runs anyway,
  // registers the others and serves that one again with backoff.
  Status Start(std::shared_ptr<const ResourceSet> set);

  // Publishes a new snapshot (health change, reload). Resources that appear
  // are served and registered; resources that disappear stop being served.
  // A snapshot with the same resources as the current one (a health change)
  // reaches the ListAndWatch streams before Update returns; others are handed
  // to the manager thread, as is one that arrives while that thread applies
  // an earlier snapshot or whose devices need the CDI spec written first.
  void Update(std::shared_ptr<const ResourceSet> set);

  // Has the CDI spec (cdi-* strategies) written again, on the manager thread,
  // from its snapshot then: the driver's files are looked for afresh (a reload
  // calls it; health changes never rewrite the spec). Returns at once.
  void RewriteCdiSpec();

  // Stops every server, removes the sockets, joins the thread. Idempotent.
  void Stop();

  std::vector<ResourceStatus> Statuses() const;

 protected:
  // Writes the spec file (WriteCdiSpec with the manager's options). Called
  // without mu_ held. A seam for tests; a subclass that overrides it must
  // call Stop() in its own destructor.
  virtual Status WriteCdiSpecFile(const ResourceSet& set, std::vector<std::string>* warnings);

 private:
  struct Entry;
  void Run();
  void Wake();
  void Apply(const std::shared_ptr<const ResourceSet>& set);
  void PublishLocked(const std::shared_ptr<const ResourceSet>& set);
  bool CdiOn() const;  // a CDI spec is written
  bool CdiNeededLocked(const ResourceSet& set) const;
  void WriteCdiIfNeeded(const std::shared_ptr<const ResourceSet>& set);
  void MaintainCdi(const std::shared_ptr<const ResourceSet>& current);
  bool SameResources(const ResourceSet& set) const;
  void Serve(Entry& e);
  void TryRegister(Entry& e);
  void RegisterAllNow();
  void HandleInotify();
  void CheckStreams();
  std::chrono::milliseconds SettleFor(const Entry& e) const;
  void MarkRegistered(Entry& e, const std::optional<FileId>& kubelet);
  std::string KubeletSocket() const;       // <plugin_dir>/kubelet.sock
  std::optional<FileId> KubeletId() const;  // that file now; none if absent

  const ManagerOptions options_;
  int inotify_fd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;

  mutable std::mutex mu_;
  bool stopping_ = false;                                   // guarded by mu_
  std::shared_ptr<const ResourceSet> pending_;              // guarded by mu_: set to apply
  std::map<std::string, std::unique_ptr<Entry>> entries_;   // guarded by mu_ (structure); entries
                                                            // themselves are touched by the thread
  std::shared_ptr<const ResourceSet> current_;              // guarded by mu_
  bool started_ = false;                                    // guarded by mu_: thread_ runs
  bool applying_ = false;  // guarded by mu_: Run took pending_, not yet published
  // The CDI spec: RewriteCdiSpec asks for a write by raising cdi_wanted_; a
  // write records the value it began under and the snapshot it wrote.
  uint64_t cdi_wanted_ = 1;                     // guarded by mu_
  uint64_t cdi_done_ = 0;                       // guarded by mu_
  std::shared_ptr<const ResourceSet> cdi_set_;  // guarded by mu_
  std::vector<std::string> cdi_nodes_;          // guarded by mu_: the control nodes it listed
  // Guarded by mu_: when the manager thread next looks at the control nodes,
  // or retries a write that failed (cdi_backoff_ > 0).
  std::chrono::steady_clock::time_point cdi_check_at_{};
  std::chrono::milliseconds cdi_backoff_{0};
  // Resources no longer advertised: the kubelet they were registered with,
  // so one advertised again waits out the settle like a served-again one.
  std::map<std::string, std::optional<FileId>> retired_;    // guarded by mu_
};

}  // namespace danqing::deviceplugin
