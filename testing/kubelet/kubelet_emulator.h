// KubeletEmulator: the device-manager half of a kubelet, for tests.
//
// It serves v1beta1.Registration on <dir>/kubelet.sock and behaves like a real
// kubelet towards a device plugin (docs/kubelet-api.md):
//   * Register validates the request (version "v1beta1", endpoint a bare file
//     name, resource "domain/name"), then, still inside Register, dials the
//     plugin at <dir>/<endpoint> (dial_timeout, wait-for-ready, 10 s as the
//     kubelet) and calls GetDevicePluginOptions. A failure fails Register.
//   * Right after accepting a registration it opens ListAndWatch on a
//     background thread; every message replaces the resource's whole device
//     list. When the stream ends, all of the resource's devices are marked
//     "Unhealthy" at once and the resource's endpoint is stopped: calls into
//     the plugin fail, and a real kubelet drops the resource from the node's
//     capacity 5 minutes later unless the plugin registers again.
//   * A second registration of the same resource makes a new endpoint but
//     leaves the first one's stream open, as the kubelet does. Its messages
//     still replace the device list, and when it ends the kubelet, which
//     handles a stream's end by resource name, marks the resource unhealthy
//     and stops the *new* endpoint (StaleStreamEnds counts these). This is
//     the kubelet whose plugin server keeps its clients by socket path
//     (recent releases): the new registration's stream stays open, so the
//     plugin cannot see the harm. Older kubelets (their plugin server keyed
//     clients by resource name only) also close the new client's connection
//     then, which a plugin does see. Either way a plugin must end its old
//     stream, and let the kubelet handle that, before it registers again.
//   * GetPreferredAllocation / Allocate / PreStartContainer are issued on demand
//     by the test, one container request per RPC, as the kubelet does;
//     GetPreferredAllocation and PreStartContainer only when the plugin's
//     GetDevicePluginOptions asked for them, and none of them on a stopped
//     endpoint (FAILED_PRECONDITION otherwise: the kubelet would not call).
//   * Restart() emulates a kubelet restart: the Registration server stops, the
//     plugin streams are cancelled, every socket in <dir> is deleted (regular
//     files such as kubelet_internal_checkpoint stay), all registrations are
//     forgotten and kubelet.sock is served again.
//
// PodResourcesEmulator serves v1.PodResourcesLister with canned answers.
//
// Thread-safety: Start/Stop/Restart (and destruction) must be called from one
// thread at a time (normally the test's main thread). Every other method is
// thread-safe and may be called from any thread, including while the plugin
// under test is calling in. Waits block on a condition variable; they never
// sleep-poll. Errors are reported as grpc::Status with a message that names
// the resource, endpoint or path involved; nothing throws.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "podresources/v1/api.grpc.pb.h"

namespace danqing::testing {

// Knobs for KubeletEmulator. Defaults are a real kubelet's.
struct KubeletEmulatorOptions {
  // Dial + GetDevicePluginOptions inside Register. Default 10 s (kubelet).
  std::chrono::milliseconds dial_timeout{10'000};
  // Deadline of GetPreferredAllocation and Allocate. Default 10 s.
  std::chrono::milliseconds call_timeout{10'000};
  // Deadline of PreStartContainer. Default 30 s (kubelet).
  std::chrono::milliseconds pre_start_timeout{30'000};
  // How long Stop/Restart let in-flight RPCs finish before cancelling them.
  // Default 1 s.
  std::chrono::milliseconds shutdown_grace{1'000};
  // How long the kubelet takes to handle the end of a ListAndWatch stream
  // (a loaded kubelet). Default 0.
  std::chrono::milliseconds stream_end_delay{0};
  // How long Register takes to answer once it has accepted the plugin and
  // opened its stream (a kubelet slower than the plugin's deadline).
  // Default 0.
  std::chrono::milliseconds register_reply_delay{0};
};

struct PreferredAllocationResult {
  grpc::Status status;                  // the RPC's status (or FAILED_PRECONDITION, see below)
  std::vector<std::string> device_ids;  // container_responses[0].deviceIDs when OK
};

struct AllocateResult {
  grpc::Status status;
  v1beta1::ContainerAllocateResponse response;  // container_responses[0] when OK
};

class KubeletEmulator {
 public:
  using Clock = std::chrono::steady_clock;
  using DevicePredicate = std::function<bool(const std::vector<v1beta1::Device>&)>;

  static constexpr const char* kVersion = "v1beta1";
  static constexpr const char* kKubeletSocketName = "kubelet.sock";
  static constexpr const char* kHealthy = "Healthy";
  static constexpr const char* kUnhealthy = "Unhealthy";

  // `dir`: the device-plugin directory (created by Start if missing). Keep it
  // short: every socket path in it must be under 108 bytes.
  explicit KubeletEmulator(std::string dir, KubeletEmulatorOptions options = {});
  ~KubeletEmulator();  // Stop()
  KubeletEmulator(const KubeletEmulator&) = delete;
  KubeletEmulator& operator=(const KubeletEmulator&) = delete;

  // Serves Registration on <dir>/kubelet.sock (a stale file there is removed).
  // OK: serving. FAILED_PRECONDITION: already started. INVALID_ARGUMENT: the
  // socket path is too long. UNAVAILABLE: the server could not be started.
  grpc::Status Start();

  // Stops serving, cancels pending registrations and plugin streams, joins all
  // threads and removes kubelet.sock. Plugin sockets are left alone.
  // Idempotent; safe when never started.
  void Stop();

  // Emulates a kubelet restart (see the header comment). Afterwards
  // IsRegistered() is false for every resource until the plugin registers
  // again; counts and device lists (now all Unhealthy) are kept.
  // OK: kubelet.sock is served again. FAILED_PRECONDITION: not started.
  // Other codes: as Start().
  grpc::Status Restart();

  const std::string& dir() const;
  std::string kubelet_socket() const;  // <dir>/kubelet.sock

  // --- Registration state ----------------------------------------------------

  // Waits until `resource` is registered with the current kubelet instance
  // (i.e. since Start or the last Restart). True if so within `timeout`.
  bool WaitForRegistration(const std::string& resource, std::chrono::milliseconds timeout) const;
  bool IsRegistered(const std::string& resource) const;
  // Registrations accepted for `resource` over the emulator's life (across
  // restarts). 0 for an unknown resource.
  int RegistrationCount(const std::string& resource) const;
  // Waits until RegistrationCount(resource) >= count.
  bool WaitForRegistrationCount(const std::string& resource, int count,
                                std::chrono::milliseconds timeout) const;
  // Total of Register calls received, accepted or not.
  int RegisterCalls() const;
  // What GetDevicePluginOptions returned at the last accepted registration.
  std::optional<v1beta1::DevicePluginOptions> Options(const std::string& resource) const;
  // The last accepted RegisterRequest for `resource`, as the plugin sent it.
  std::optional<v1beta1::RegisterRequest> LastRegisterRequest(const std::string& resource) const;
  // When the last registration of `resource` was accepted.
  std::optional<Clock::time_point> LastRegistrationTime(const std::string& resource) const;

  // --- ListAndWatch state ----------------------------------------------------

  // Waits until `resource` has received at least one device list and
  // `predicate` holds for its current list. The predicate runs under the
  // emulator's lock: it must not call back into the emulator.
  bool WaitForDevices(const std::string& resource, const DevicePredicate& predicate,
                      std::chrono::milliseconds timeout) const;
  // The current device list (empty if none received yet).
  std::vector<v1beta1::Device> Devices(const std::string& resource) const;
  // ListAndWatch messages received on the current registration's stream.
  int64_t StreamUpdates(const std::string& resource) const;
  // Waits until StreamUpdates(resource) >= count.
  bool WaitForStreamUpdates(const std::string& resource, int64_t count,
                            std::chrono::milliseconds timeout) const;
  // When the current device list arrived (read off the stream, before the
  // emulator's lock); a default time point if none has.
  std::chrono::steady_clock::time_point LastUpdateTime(const std::string& resource) const;
  // Whether the current registration's stream has ended.
  bool StreamEnded(const std::string& resource) const;
  // Waits until StreamEnded(resource).
  bool WaitForStreamEnd(const std::string& resource, std::chrono::milliseconds timeout) const;
  // The status the ended stream finished with (OK while it is open).
  grpc::Status StreamStatus(const std::string& resource) const;
  // ListAndWatch streams of `resource` the kubelet holds open, the current
  // registration's and earlier ones'.
  int OpenStreams(const std::string& resource) const;
  // Waits until OpenStreams(resource) == count.
  bool WaitForOpenStreams(const std::string& resource, int count,
                          std::chrono::milliseconds timeout) const;
  // Ends of streams of earlier registrations, each of which stopped the
  // endpoint registered after them.
  int StaleStreamEnds(const std::string& resource) const;
  // When the resource's current endpoint was stopped (a stream of it ended);
  // nullopt while it runs. A new registration starts a new endpoint.
  std::optional<Clock::time_point> EndpointStopTime(const std::string& resource) const;
  // Ends the current registration's stream from the kubelet's side, as a
  // broken connection does. FAILED_PRECONDITION when none is open.
  grpc::Status BreakStream(const std::string& resource);

  // Changes KubeletEmulatorOptions::register_reply_delay from now on.
  void SetRegisterReplyDelay(std::chrono::milliseconds delay);

  // --- Restarts --------------------------------------------------------------

  // When the last Restart() had kubelet.sock served again.
  std::optional<Clock::time_point> LastRestartTime() const;
  int RestartCount() const;

  // --- Calls into the plugin, as the kubelet makes them -----------------------
  // Each uses the registered endpoint's channel. FAILED_PRECONDITION when
  // `resource` is not registered with the current kubelet instance or its
  // endpoint is stopped; otherwise the RPC's status. A response without
  // container_responses is INTERNAL, as for the kubelet.

  // The kubelet calls this once, inside Register; here it can be repeated
  // (bench/plugin_bench times it as the floor of one RPC).
  grpc::Status GetDevicePluginOptions(const std::string& resource,
                                      v1beta1::DevicePluginOptions* options) const;

  PreferredAllocationResult GetPreferredAllocation(const std::string& resource,
                                                   const std::vector<std::string>& available,
                                                   const std::vector<std::string>& must_include,
                                                   int32_t allocation_size) const;
  AllocateResult Allocate(const std::string& resource, const std::vector<std::string>& ids) const;
  grpc::Status PreStartContainer(const std::string& resource,
                                 const std::vector<std::string>& ids) const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Serves v1.PodResourcesLister on a unix socket with answers the test sets.
// List returns the pods set by SetPods; Get finds one by name and namespace
// (NOT_FOUND when unknown); GetAllocatableResources returns SetAllocatable's.
//
// Thread-safety: Start/Stop from one thread; the setters and counters are
// thread-safe and may be called while serving.
class PodResourcesEmulator {
 public:
  // `socket_path`: under 108 bytes; its directory must exist.
  explicit PodResourcesEmulator(std::string socket_path);
  ~PodResourcesEmulator();  // Stop()
  PodResourcesEmulator(const PodResourcesEmulator&) = delete;
  PodResourcesEmulator& operator=(const PodResourcesEmulator&) = delete;

  // OK: serving. FAILED_PRECONDITION: already started. INVALID_ARGUMENT: path
  // too long. UNAVAILABLE: the server could not be started.
  grpc::Status Start();
  // Stops serving and removes the socket. Idempotent.
  void Stop();

  const std::string& socket_path() const;

  void SetPods(std::vector<v1::PodResources> pods);
  // From the `call`-th RPC on (CallCount's numbering, 1-based), List answers
  // `pods`: a pod admitted between two reads of the client under test.
  void SetPodsFromCall(int64_t call, std::vector<v1::PodResources> pods);
  void SetAllocatable(v1::AllocatableResourcesResponse allocatable);

  // RPCs answered so far, all methods together.
  int64_t CallCount() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// One device of a DRA claim as the kubelet reports it in a container's
// dynamic_resources (pod resources v1: DynamicResource.claim_resources).
struct ClaimDevice {
  std::string driver;  // "gpu.danqing.io"
  std::string pool;    // the node's name
  std::string device;  // "gpu-0"
  std::vector<std::string> cdi_ids;
  std::optional<std::string> share_id;  // a shared allocation's shareID
};
// Adds claim `claim_namespace/claim_name` holding `devices` to `container`,
// as the kubelet does for a container that names the claim in
// resources.claims.
void AddDynamicResource(v1::ContainerResources& container, const std::string& claim_namespace,
                        const std::string& claim_name, const std::vector<ClaimDevice>& devices);

}  // namespace danqing::testing
