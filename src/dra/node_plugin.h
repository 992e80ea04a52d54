// NodePlugin: the DRA driver's kubelet-facing side on one node.
//
// Two unix sockets, as the kubelet's plugin watcher wants them:
//   <plugin_dir>/dra.sock      the node services: k8s.io.kubelet.pkg.apis.dra.v1
//                              and .v1beta1 DRAPlugin (NodePrepareResources,
//                              NodeUnprepareResources) and v1alpha1
//                              DRAResourceHealth (NodeWatchResources), on one
//                              gRPC server;
//   <registry_dir>/<driver>-reg.sock   pluginregistration.Registration
//                              (GetInfo, NotifyRegistrationStatus).
// The registration socket is created only once dra.sock answers (the kubelet
// dials the endpoint as soon as it sees the registration socket).
//
// Lifecycle: Start() restores the prepared claims (ClaimPreparer::Restore),
// serves dra.sock, checks it answers, then serves the registration socket,
// and starts a thread that watches both directories with inotify:
//   * the registration socket deleted (by hand, or a tidy-up): served again
//     at once, so the kubelet sees a new socket and registers the plugin again;
//   * dra.sock deleted: the node server is served again, then the
//     registration socket made anew (the kubelet's connection went with it);
//   * a directory itself deleted and made again: both served again.
// A kubelet restart needs nothing from the plugin: the kubelet lists the
// registry directory when it starts and registers every socket there. The
// prepared claims live in the ClaimPreparer and its checkpoint, never in a
// server, so none is lost when a socket is served again.
//
// Health: every NodeWatchResources stream gets, at once and after each change
// of the prepared claims or of the devices' health, the health of every
// device of a prepared claim: HEALTHY/UNHEALTHY, the health monitor's reason
// as message (cut to 1024 bytes on a UTF-8 boundary) and the time the health
// last changed.
//
// Thread-safety: Start/Stop from one thread; the rest from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "dra/claim_preparer.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace danqing::dra {

struct NodePluginOptions {
  std::string driver_name = "gpu.danqing.io";
  std::string registry_dir = "/var/lib/kubelet/plugins_registry";
  std::string plugin_dir;  // empty: /var/lib/kubelet/plugins/<driver_name>
  // DeviceHealth.health_check_timeout_seconds: how long the kubelet may go
  // without a report before it takes a device's health as unknown. Streams
  // send the full set again when this much has passed without a change.
  std::chrono::seconds health_check_timeout{60};
  // Retry of a failed serve on the watcher thread.
  std::chrono::milliseconds retry_backoff{200};
};

struct NodePluginStatus {
  bool serving = false;  // dra.sock served
  bool registration_serving = false;
  uint64_t registration_serves = 0;  // times the registration socket was (re)created
  uint64_t node_serves = 0;          // times dra.sock was (re)created
  uint64_t registered_notices = 0;   // NotifyRegistrationStatus(true)
  uint64_t rejected_notices = 0;     // NotifyRegistrationStatus(false)
  std::string last_rejection;
  uint64_t health_streams_open = 0;
  uint64_t health_messages = 0;
};

// The message cut to at most `max` bytes without splitting a UTF-8 sequence.
std::string CutUtf8(std::string_view s, size_t max);

class NodePlugin {
 public:
  NodePlugin(NodePluginOptions options, ClaimPreparer* preparer);
  ~NodePlugin();  // Stop()
  NodePlugin(const NodePlugin&) = delete;
  NodePlugin& operator=(const NodePlugin&) = delete;

  // UNAVAILABLE when a directory cannot be made or watched, or a socket
  // cannot be served (nothing left running). A checkpoint that cannot be
  // rewritten is logged, not an error.
  Status Start();
  void Stop();  // idempotent; removes both sockets

  std::string dra_socket() const;
  std::string registration_socket() const;
  NodePluginStatus status() const;

  // For the health streams: something changed (the preparer calls it).
  void Notify();

  class Services;  // the gRPC services (in the .cc)

 private:
  Status ServeNode();
  Status ServeRegistration();
  void StopNode();
  void StopRegistration();
  void Watch();
  void HandleEvents(bool* node_gone, bool* reg_gone, bool* dirs_changed);
  int AddWatches();

  const NodePluginOptions options_;
  ClaimPreparer* const preparer_;
  std::unique_ptr<Services> services_;

  std::mutex servers_mu_;                              // Start/Stop vs the watcher thread
  std::unique_ptr<grpc::Server> node_server_;          // guarded by servers_mu_
  std::unique_ptr<grpc::Server> registration_server_;  // guarded by servers_mu_
  int inotify_fd_ = -1;
  int wake_fd_ = -1;
  int registry_wd_ = -1;
  int plugin_wd_ = -1;
  std::thread watcher_;
  std::atomic<bool> stopping_{false};
  bool started_ = false;

  mutable std::mutex status_mu_;
  NodePluginStatus status_;  // guarded by status_mu_ (counters the services bump too)
  friend class Services;
};

}  // namespace danqing::dra
