// DraKubeletEmulator: the DRA half of a kubelet, for tests.
//
// Like the kubelet's plugin watcher and DRA manager (../shared/docs/dra-api.md):
//   * watches the plugins_registry directory with inotify (and lists it at
//     Start, as a starting kubelet does); for each new socket it dials it,
//     calls pluginregistration GetInfo (waiting for the socket to answer, 10 s),
//     checks type "DRAPlugin", a name and an absolute endpoint, picks the
//     highest service version it knows among supported_versions ("v1.DRAPlugin"
//     over "v1beta1.DRAPlugin"), and answers NotifyRegistrationStatus: true,
//     or false with the reason;
//   * a deleted registration socket deregisters its plugin;
//   * Restart() forgets every plugin and lists the directory again (a kubelet
//     restart leaves the registry's sockets in place);
//   * Prepare/Unprepare call the registered plugin's endpoint with the
//     chosen version (k8s.io.kubelet.pkg.apis.dra.<v>.DRAPlugin), and check
//     the answer has an entry for every claim asked;
//   * WatchHealth opens DRAResourceHealth.NodeWatchResources (v1alpha1) and
//     keeps every message.
// Messages of v1beta1 are wire-identical to v1's: answers are returned as v1
// messages whichever version was used.
//
// Thread-safety: Start/Stop/Restart from one thread; the rest from any.
// Waits block on a condition variable.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dra-health/v1alpha1/api.grpc.pb.h"
#include "dra/v1/api.grpc.pb.h"

namespace danqing::testing {

struct DraKubeletOptions {
  std::string registry_dir;
  // The versions this kubelet speaks, most preferred first.
  std::vector<std::string> versions{"v1.DRAPlugin", "v1beta1.DRAPlugin"};
  std::chrono::milliseconds call_timeout{10'000};
};

struct DraPluginInfo {
  std::string driver;
  std::string endpoint;
  std::string version;  // chosen: "v1.DRAPlugin" or "v1beta1.DRAPlugin"
  std::vector<std::string> supported;
  std::string socket;  // the registration socket
};

struct DraClaimRef {
  std::string ns, name, uid;
};

class DraKubeletEmulator {
 public:
  explicit DraKubeletEmulator(DraKubeletOptions options);
  ~DraKubeletEmulator();

  bool Start();
  void Stop();
  void Restart();

  std::optional<DraPluginInfo> Plugin(const std::string& driver) const;
  // Registrations accepted so far for `driver` (over the emulator's life).
  uint64_t Registrations(const std::string& driver) const;
  // Registrations refused (NotifyRegistrationStatus false), with reasons.
  std::vector<std::string> Refusals() const;
  // Waits until Registrations(driver) >= n.
  bool WaitForRegistrations(const std::string& driver, uint64_t n,
                            std::chrono::milliseconds timeout) const;
  // Waits until Refusals() has at least `n` entries.
  bool WaitForRefusals(size_t n, std::chrono::milliseconds timeout) const;
  bool WaitForDeregistration(const std::string& driver, std::chrono::milliseconds timeout) const;

  grpc::Status Prepare(
      const std::string& driver, const std::vector<DraClaimRef>& claims,
      k8s::io::kubelet::pkg::apis::dra::v1::NodePrepareResourcesResponse* out) const;
  grpc::Status Unprepare(
      const std::string& driver, const std::vector<DraClaimRef>& claims,
      k8s::io::kubelet::pkg::apis::dra::v1::NodeUnprepareResourcesResponse* out) const;

  // Opens the health stream of `driver` on a thread of its own (one at a
  // time; a second call replaces the first).
  bool WatchHealth(const std::string& driver);
  void StopHealth();
  // Waits until the newest message (the kubelet's current view) is one for
  // which `pred` holds; that message, or nullopt on timeout.
  std::optional<v1alpha1::NodeWatchResourcesResponse> WaitForHealth(
      const std::function<bool(const v1alpha1::NodeWatchResourcesResponse&)>& pred,
      std::chrono::milliseconds timeout) const;
  size_t HealthMessages() const;

 private:
  void Run();
  void Scan();
  void Consider(const std::string& socket);
  void Forget(const std::string& socket);

  const DraKubeletOptions options_;
  int inotify_fd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::map<std::string, DraPluginInfo> plugins_;   // guarded by mu_, by driver
  std::map<std::string, uint64_t> registrations_;  // guarded by mu_
  std::vector<std::string> refusals_;              // guarded by mu_

  mutable std::mutex health_mu_;
  mutable std::condition_variable health_cv_;
  std::vector<v1alpha1::NodeWatchResourcesResponse> health_;  // guarded by health_mu_
  std::unique_ptr<grpc::ClientContext> health_ctx_;           // guarded by health_mu_
  std::thread health_thread_;
};

}  // namespace danqing::testing
