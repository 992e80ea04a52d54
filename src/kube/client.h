// Client: a small Kubernetes API client over cpp-httplib's HTTP/1.1 client
// (HTTPS through OpenSSL; the agent links both already for /metrics, so the
// API client adds no shared library: docs/benchmarks.md, "DRA through the
// wired agent").
//
// What the node agent needs from the API server and no more: JSON requests to
// REST paths (get, list, create, update, delete) and watch streams (one JSON
// event per line). Authentication is a bearer token (re-read from its file
// before every request: projected service-account tokens rotate) or a client
// certificate; the server's certificate is always verified against the
// configured CA unless the kubeconfig says insecure-skip-tls-verify.
//
// Errors are ApiError values: the HTTP status (0 when no answer came), the
// Kubernetes Status `reason` ("Conflict", "NotFound", "Expired", ...) and its
// message, so a caller can tell a 409 from a 410 from a timeout. No
// exception escapes.
//
// Bounds: a response body larger than Config::max_response_bytes, or a watch
// line longer than it, is refused (RESOURCE_EXHAUSTED) and the connection
// dropped; every request has a connect timeout and a request timeout (a watch
// has its own idle timeout, and is cancellable at any time). The request
// timeout bounds each wait for the server and the body's arrival as a whole;
// a server trickling its status line and headers a byte at a time could
// stretch it (cpp-httplib 0.11 has no deadline for the whole exchange).
//
// Proxy: HTTPS_PROXY / HTTP_PROXY / NO_PROXY are read at Create, with Go's
// rules (kube/proxy.h); through a proxy each connection is a CONNECT tunnel
// (cpp-httplib's set_proxy) with TLS end to end to the API server, whose
// certificate is verified as without one. A proxy that refuses the tunnel is
// an ApiError with reason "ProxyRefused", its status (403, 407, 502, ...) and
// a message naming the proxy and the variable it came from.
//
// Thread-safety: Client is safe to use from several threads at once; each
// call takes a pooled connection (kept alive and reused) or makes one; a
// watch has its own connection and a small thread that ends it when
// cancelled or idle.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "common/status.h"
#include "kube/config.h"
#include "kube/proxy.h"

namespace danqing::kube {

using Json = nlohmann::json;

// One failed API call.
struct ApiError {
  int http_status = 0;  // 0: no HTTP answer (connect failure, timeout, TLS, bad response)
  std::string reason;   // the Status object's reason ("Conflict"), or a transport reason
                        // ("Timeout", "ConnectionFailed", "TLSError", "TooLarge", "BadResponse",
                        // "TokenUnreadable")
  std::string message;  // the Status message, or the transport's error text
  std::string verb;     // "GET", "PUT", ... (context for logs)
  std::string path;

  bool IsNotFound() const { return http_status == 404; }
  bool IsConflict() const { return http_status == 409 && reason != "AlreadyExists"; }
  bool IsAlreadyExists() const { return http_status == 409 && reason == "AlreadyExists"; }
  bool IsGone() const { return http_status == 410 || reason == "Expired" || reason == "Gone"; }
  // The API server's 401 / 403 (not a proxy's: reason "ProxyRefused").
  bool IsUnauthorized() const { return http_status == 401 && reason != "ProxyRefused"; }
  bool IsForbidden() const { return http_status == 403 && reason != "ProxyRefused"; }
  // Worth retrying later as it is: no answer, 429, 5xx, 401 (a token about to rotate).
  bool IsRetryable() const;

  // "PUT /apis/...: 409 Conflict: Operation cannot be fulfilled ..."
  std::string ToString() const;
  // The project's Status: 401/403 PERMISSION_DENIED, 404 NOT_FOUND, 409
  // ALREADY_EXISTS or FAILED_PRECONDITION, 410 FAILED_PRECONDITION, 400/422
  // INVALID_ARGUMENT, timeouts DEADLINE_EXCEEDED, too large RESOURCE_EXHAUSTED,
  // others UNAVAILABLE.
  Status ToStatus() const;
};

// Either a T or an ApiError.
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Expected(ApiError error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return std::holds_alternative<T>(v_); }
  const ApiError& error() const { return std::get<ApiError>(v_); }
  Status status() const { return ok() ? Status::Ok() : error().ToStatus(); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, ApiError> v_;
};

// A query string's parameters, in order ("fieldSelector", "spec.nodeName=n1").
using Query = std::vector<std::pair<std::string, std::string>>;

// "?a=b&c=d", each part percent-encoded; "" for none.
std::string EncodeQuery(const Query& query);

// One watch event: type ADDED, MODIFIED, DELETED, BOOKMARK or ERROR, and the
// object (for ERROR, a Status object).
struct WatchEvent {
  std::string type;
  Json object;
};

struct WatchOptions {
  // Stop waiting for the next byte after this long without one (the API
  // server sends nothing on a quiet watch; pass timeoutSeconds in the query
  // to have it close the stream first). 0: no limit.
  std::chrono::milliseconds idle_timeout{0};
  // Set to true (from any thread) to end the watch within ~50 ms.
  const std::atomic<bool>* cancel = nullptr;
};

class Client {
 public:
  // Fails (INVALID_ARGUMENT) when the config has no server, its CA or client
  // certificate cannot be read, or the proxy variable is not a usable URL
  // (the message names the variable).
  static Result<std::unique_ptr<Client>> Create(Config config);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const Config& config() const { return config_; }
  // The proxy the connections go through; none: direct.
  const std::optional<ProxyUrl>& proxy() const { return proxy_; }

  // `path` starts with '/' ("/apis/resource.k8s.io/v1/resourceslices").
  // OK: the 2xx response's JSON body.
  Expected<Json> Get(const std::string& path, const Query& query = {});
  Expected<Json> Create(const std::string& path, const Json& object);  // POST
  Expected<Json> Update(const std::string& path, const Json& object);  // PUT
  // DELETE; `resource_version`, when not empty, is sent as a precondition.
  Expected<Json> Delete(const std::string& path, const std::string& resource_version = "");

  // GET with watch=1 added to `query`: `on_event` gets each event as it
  // arrives and returns false to end the watch. Returns OK when the server
  // closed the stream, the callback ended it, or `cancel` was set; an
  // ApiError for a non-2xx answer, a transport failure, an idle timeout
  // (reason "Timeout") or a line that is not a JSON event (reason
  // "BadResponse"). An ERROR event is handed to `on_event` like any other.
  Expected<bool> Watch(const std::string& path, Query query,
                       const std::function<bool(const WatchEvent&)>& on_event,
                       const WatchOptions& options = {});

  // The bearer token that the next request sends ("" when none): the
  // configured token, or the token file's content read now.
  Result<std::string> CurrentToken() const;

 private:
  explicit Client(Config config);
  struct Handle;
  std::unique_ptr<Handle> NewHandle(std::chrono::milliseconds read_timeout) const;
  // A pooled connection when there is one (`*reused` true), else a new one.
  std::unique_ptr<Handle> TakeHandle(bool* reused = nullptr);
  void ReturnHandle(std::unique_ptr<Handle> h);
  Expected<Json> Request(const char* verb, const std::string& path, const Query& query,
                         const Json* body);

  Config config_;
  bool tls_ = false;  // https://
  std::string host_;  // from config_.server
  int port_ = 0;
  std::string prefix_;  // the server URL's path ("" or "/k8s/clusters/c1"), before every path
  std::optional<ProxyUrl> proxy_;
  std::mutex pool_mu_;
  std::vector<std::unique_ptr<Handle>> pool_;  // guarded by pool_mu_
};

}  // namespace danqing::kube
