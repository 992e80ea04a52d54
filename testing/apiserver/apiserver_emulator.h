// ApiServerEmulator: a Kubernetes API server for tests, on loopback HTTPS.
//
// It speaks the REST paths, JSON, status codes and Status bodies of the real
// API server for what a DRA driver uses (resource.k8s.io/v1):
//
//   /apis/resource.k8s.io/v1/resourceslices            GET list (fieldSelector
//        spec.nodeName, spec.driver, metadata.name), GET ?watch=1 (one JSON
//        event per line, from resourceVersion; ERROR 410 Expired when that
//        version is compacted away; timeoutSeconds), POST create
//   /apis/resource.k8s.io/v1/resourceslices/<name>     GET, PUT (update with
//        metadata.resourceVersion: 409 Conflict when stale, 422 when absent),
//        DELETE (preconditions.resourceVersion honoured)
//   /apis/resource.k8s.io/v1/namespaces/<ns>/resourceclaims[/<name>]  GET
//   /apis/resource.k8s.io/v1/deviceclasses[/<name>]    GET
//   /apis/authorization.k8s.io/v1/selfsubjectaccessreviews  POST (answered
//        from the RBAC table below; any authenticated token may ask)
//
// ResourceSlices are validated as the API server's validation does for the
// parts a driver can get wrong (422 Invalid with causes naming the field):
// driver, pool, exactly one node selection, at most 128 devices (64 when a
// device has taints), DNS-label device names unique in the slice, at most 32
// attributes and capacities per device, each attribute exactly one of
// int/bool/string/version, taint effects; spec.driver and spec.nodeName are
// immutable. A taint without timeAdded gets the current time, as upstream.
//
// Authentication: `Authorization: Bearer <token>` must name one of the
// accepted tokens (401 Unauthorized otherwise); an optional RBAC table per
// token answers 403 Forbidden with upstream's message for a verb/resource it
// does not allow.
//
// Fault injection: Stop()/Restart() (connection refused meanwhile, objects
// kept, as after an API server restart with etcd intact), FailNext (500, 429
// with Retry-After, ...), SetDelay, ExpireWatches (ERROR 410 to every open
// watch), Compact (older resourceVersions become too old).
//
// The test side (playing the scheduler, an admin, another controller) reads
// and writes objects directly through the C++ methods; each write bumps the
// resourceVersion and is seen by watches like a REST write.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace httplib {
class SSLServer;
}

namespace danqing::testing {

using Json = nlohmann::json;

// A CA and a certificate for 127.0.0.1 / localhost signed by it, plus a
// client certificate (CN "danqing-test-client"), written as PEM files to a
// directory.
struct TestPki {
  std::string ca_cert;      // <dir>/ca.crt
  std::string ca_pem;       // its content
  std::string server_cert;  // <dir>/server.crt
  std::string server_key;   // <dir>/server.key
  std::string client_cert;  // <dir>/client.crt
  std::string client_key;   // <dir>/client.key
};
// `prefix` names the files ("<dir>/<prefix>ca.crt"), so two sets can share a directory.
Result<TestPki> MakeTestPki(const std::string& dir, const std::string& prefix = "");

struct ApiServerOptions {
  std::string cert_file;  // the server's certificate and key (PEM)
  std::string key_file;
  std::vector<std::string> tokens = {"test-token"};  // accepted bearer tokens
  std::size_t event_window = 10000;  // watch events kept (older ones: 410 for a watch from them)
  int threads = 16;                  // server threads (each open watch holds one)
};

class ApiServerEmulator {
 public:
  explicit ApiServerEmulator(ApiServerOptions options);
  ~ApiServerEmulator();
  ApiServerEmulator(const ApiServerEmulator&) = delete;
  ApiServerEmulator& operator=(const ApiServerEmulator&) = delete;

  // Listens on 127.0.0.1:`port` (0: any free port).
  Status Start(int port = 0);
  // Closes the listener and every connection; objects are kept.
  void Stop();
  // Start again on the same port.
  Status Restart();
  int port() const;
  std::string url() const;  // "https://127.0.0.1:<port>"

  // --- authentication and authorisation
  void SetTokens(std::vector<std::string> tokens);
  // Allowed "verb resource" pairs for `token` (verbs: get list watch create
  // update delete; resources: resourceslices resourceclaims deviceclasses).
  // Tokens without a table may do anything.
  void SetRbac(const std::string& token, std::set<std::string> allowed);

  // --- faults
  // The next `count` requests (watches included) are answered `http_status`
  // with a Status body of `reason` (default by code); 429 and 503 carry
  // Retry-After: `retry_after_s`.
  void FailNext(int count, int http_status, std::string reason = "", int retry_after_s = 1);
  // Every request waits this long before it is handled.
  void SetDelay(std::chrono::milliseconds delay);
  // Every open watch receives an ERROR event (410 Expired) and is closed.
  void ExpireWatches();
  // Events up to now are forgotten: a watch from an older resourceVersion
  // gets ERROR 410 Expired.
  void Compact();

  // --- objects, as other actors see and change them
  std::vector<Json> Slices() const;  // every ResourceSlice, by name
  std::optional<Json> Slice(const std::string& name) const;
  // Replaces a slice's object as an admin would (kubectl replace, no
  // resourceVersion check); creates it when absent. Returns the stored object.
  Json PutSlice(Json slice);
  bool DeleteSlice(const std::string& name);
  // Creates or replaces a ResourceClaim (metadata.namespace/name), as the
  // scheduler writes status.allocation.
  Json PutClaim(Json claim);
  void PutDeviceClass(Json device_class);
  // Blocks until `pred` holds for the slices (checked on every change) or
  // `timeout` passes; returns whether it held.
  bool WaitForSlices(const std::function<bool(const std::vector<Json>&)>& pred,
                     std::chrono::milliseconds timeout) const;

  uint64_t resource_version() const;
  // Requests handled so far by "VERB resource" ("PUT resourceslices", "WATCH
  // resourceslices", "GET resourceclaims") and by status ("status 409").
  std::map<std::string, uint64_t> Counts() const;
  int open_watches() const;

 private:
  struct Event {
    uint64_t rv = 0;
    std::string type;
    Json object;
  };
  struct Fault {
    int remaining = 0;
    int status = 0;
    std::string reason;
    int retry_after_s = 0;
  };
  class Handlers;

  void Record(const std::string& type, const Json& object);  // mu_ held
  Json Stamp(Json object, const std::string& kind);          // mu_ held: new rv, uid, ...

  ApiServerOptions options_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;  // any change (objects, watches, stop)
  uint64_t rv_ = 1;
  uint64_t uid_seq_ = 0;
  std::map<std::string, Json> slices_;
  std::map<std::string, Json> claims_;  // "ns/name"
  std::map<std::string, Json> classes_;
  std::deque<Event> events_;
  uint64_t compacted_rv_ = 0;  // events up to this one are gone: a watch from below gets 410
  uint64_t expire_epoch_ = 0;  // ExpireWatches bumps it
  std::set<std::string> tokens_;
  std::map<std::string, std::set<std::string>> rbac_;
  Fault fault_;
  std::chrono::milliseconds delay_{0};
  mutable std::mutex counts_mu_;            // taken alone or inside mu_
  std::map<std::string, uint64_t> counts_;  // guarded by counts_mu_
  int open_watches_ = 0;
  bool stopping_ = false;

  int port_ = 0;
  std::unique_ptr<httplib::SSLServer> server_;
  std::thread thread_;
};

}  // namespace danqing::testing
