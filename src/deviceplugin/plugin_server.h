// PluginServer: the kubelet-facing gRPC server of one advertised resource
// (device plugin API v1beta1) on its own unix socket.
//
// Built on gRPC's asynchronous API with the server's own completion queue and
// thread (see Engine in the .cc for why not the callback API): GetDevicePluginOptions,
// GetPreferredAllocation, Allocate and PreStartContainer are answered on that
// thread. Each ListAndWatch write starts on whichever thread publishes a new
// list (no hand-off); its completion comes back on the server's thread, which
// starts the next write if a newer list is waiting. Every stream message carries the
// full device list (the kubelet replaces its view with each one); Update()
// bumps a version and every open stream sends the newest list as soon as its
// previous write completes, so bursts of changes coalesce.
//
// Thread-safety: Start/Shutdown from one thread (the manager's); Update and
// the accessors from any thread. RPC handlers run on the server's thread and read
// the current ResourceSet snapshot (shared_ptr<const>, swapped under a mutex).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "deviceplugin/allocate.h"
#include "deviceplugin/resource.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace danqing::deviceplugin {

struct ServerStats {
  uint64_t allocate_calls = 0;
  uint64_t allocate_errors = 0;
  uint64_t preferred_calls = 0;
  uint64_t list_and_watch_streams = 0;  // opened over the server's life, numbered from 1
  uint64_t list_and_watch_sends = 0;
  uint64_t open_streams = 0;            // ListAndWatch streams open now
  std::vector<uint64_t> open_stream_ids;  // their numbers, ascending
  std::optional<std::chrono::steady_clock::time_point> last_stream_end;  // none: none has ended
};

class PluginServer {
 public:
  // `on_stream_end`, if given, is called (on the server's thread, with no
  // lock of the server held) each time a ListAndWatch stream ends, whoever
  // ended it. It must be cheap and must not call back into this server.
  PluginServer(std::string resource, std::string socket_path, AllocateOptions options,
               std::function<void()> on_stream_end = {});
  ~PluginServer();  // Shutdown()
  PluginServer(const PluginServer&) = delete;
  PluginServer& operator=(const PluginServer&) = delete;

  // Removes a stale socket file, serves on the socket, and checks that the
  // socket answers GetDevicePluginOptions. UNAVAILABLE on failure.
  Status Start(std::shared_ptr<const ResourceSet> set);

  // Ends every stream, stops serving and removes the socket. Idempotent.
  void Shutdown();

  // Publishes a new snapshot to every ListAndWatch stream.
  void Update(std::shared_ptr<const ResourceSet> set);
  // Takes a new snapshot whose device list for this resource is unchanged:
  // RPCs use it, streams send nothing.
  void Replace(std::shared_ptr<const ResourceSet> set);

  const std::string& resource() const { return resource_; }
  const std::string& socket_path() const { return socket_path_; }
  bool serving() const;
  ServerStats stats() const;

  class Hub;     // shared state between the server and its calls
  class Engine;  // the completion queue and its thread

 private:
  std::shared_ptr<Hub> hub() const;

  std::string resource_;
  std::string socket_path_;
  mutable std::mutex hub_mu_;
  std::shared_ptr<Hub> hub_;  // guarded by hub_mu_; replaced on each Shutdown
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Engine> engine_;  // the service and queue of server_
};

// The socket file name for a resource: "danqing-nvidia.com-gpu.sock".
std::string SocketNameFor(std::string_view resource);

}  // namespace danqing::deviceplugin
