// Config: where the API server is and how to authenticate to it, from the
// pod's service account (in-cluster) or from a kubeconfig file.
//
// In-cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT name the
// server; the token, CA and namespace are the files Kubernetes mounts at
// /var/run/secrets/kubernetes.io/serviceaccount/. The token is kept as a
// path, not read once: a projected token is rotated by the kubelet (hourly by
// default) and the client re-reads it before each request.
//
// Kubeconfig (--kubeconfig, out-of-cluster): the current context's (or the
// named context's) cluster `server`, `certificate-authority` or
// `certificate-authority-data`, `insecure-skip-tls-verify`, and the user's
// `token`, `tokenFile`, `client-certificate(-data)` and `client-key(-data)`.
// Relative file paths are relative to the kubeconfig's directory, as kubectl
// reads them. Exec and auth-provider plugins are refused with a clear error.
//
// Thread-safety: values and free functions.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "common/status.h"

namespace danqing::kube {

inline constexpr char kServiceAccountDir[] = "/var/run/secrets/kubernetes.io/serviceaccount";

struct Config {
  std::string server;  // "https://10.96.0.1:443" (no trailing slash)

  // The CA the server's certificate must chain to: a PEM file, or PEM text.
  // Neither: the system's CA store.
  std::string ca_file;
  std::string ca_pem;
  bool insecure_skip_tls_verify = false;  // kubeconfig only; never in-cluster

  // Bearer token: `token` as is, or `token_file` read before every request
  // (one of the two, or neither with a client certificate).
  std::string token;
  std::string token_file;

  // Client certificate and key: PEM files or PEM text.
  std::string client_cert_file;
  std::string client_cert_pem;
  std::string client_key_file;
  std::string client_key_pem;

  std::string namespace_name;  // the pod's namespace ("default" when unknown)

  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds request_timeout{30000};        // whole request, not watches
  std::size_t max_response_bytes = std::size_t{32} << 20;  // body (or watch line) limit
  std::string user_agent = "danqing-device-plugin";

  // The HTTP proxy comes from HTTPS_PROXY / HTTP_PROXY / NO_PROXY (kube/proxy.h),
  // read by Client::Create. Tests only: a loopback server (the emulators) is
  // proxied too when the rules say so (Go, and the client by default, never
  // proxy localhost or a loopback address).
  bool proxy_loopback_too = false;
};

// The in-cluster config from the environment and `sa_dir` (the service
// account's mount). FAILED_PRECONDITION naming what is missing when not in a
// pod (no KUBERNETES_SERVICE_HOST/PORT, no token or CA file).
Result<Config> InClusterConfig(const std::string& sa_dir = kServiceAccountDir);

// Parses a kubeconfig file. `context` empty: the current-context.
// INVALID_ARGUMENT naming the file and the field for anything missing or
// malformed (no such context, a user with an exec plugin, bad base64).
Result<Config> LoadKubeconfig(const std::string& path, const std::string& context = "");
// The same from text; `dir` resolves relative paths.
Result<Config> ParseKubeconfig(const std::string& text, const std::string& dir,
                               const std::string& context = "",
                               const std::string& name = "kubeconfig");

// --kubeconfig when given, else the in-cluster config.
Result<Config> ResolveConfig(const std::string& kubeconfig_path);

// Standard base64 (RFC 4648, padding optional, whitespace ignored).
Result<std::string> DecodeBase64(std::string_view text);

}  // namespace danqing::kube
