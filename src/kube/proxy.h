// The HTTP proxy for the API client, from the environment as client-go (Go's
// net/http, golang.org/x/net/http/httpproxy) reads it:
//
//   - HTTPS_PROXY (else https_proxy) for an https:// server, HTTP_PROXY (else
//     http_proxy) for an http:// one; empty or unset: direct.
//   - The value is `http://[user:password@]host[:port]` (port 80 when none; a
//     value without a scheme is read as http://). The connection to the API
//     server is a CONNECT tunnel through it: TLS is end to end, the proxy
//     sees no plaintext. Other schemes (https://, socks5://) are refused.
//   - NO_PROXY (else no_proxy): comma-separated entries, each compared with
//     the server's host: `*` (no proxy at all); an IP address (exact); a CIDR
//     (`10.0.0.0/8`, `fd00::/8`: the host is an IP address in it); a domain
//     name `svc.cluster.local` (that name and every name under it); `.svc` or
//     `*.svc` (names under it only). An entry with `:port` matches only that
//     port of the server.
//   - `localhost` and loopback addresses are never proxied (as Go does).
//
// Thread-safety: values and free functions.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "common/status.h"

namespace danqing::kube {

struct ProxyUrl {
  std::string host;  // name or IP address (IPv6 without brackets)
  int port = 80;
  std::string username;  // from the URL's userinfo, percent-decoded
  std::string password;
  std::string variable;  // the environment variable it came from ("HTTPS_PROXY")
  // "http://proxy:3128" with the password left out, for messages.
  std::string Display() const;
};

// Looks up an environment variable; nullptr when unset.
using EnvLookup = std::function<const char*(const char*)>;

// The proxy for a server `scheme` ("https" or "http") `host` `port`, or none
// (direct). INVALID_ARGUMENT naming the variable when the proxy's value is
// not a usable URL (unsupported scheme, no host, bad port, bad escape).
// `loopback_too`: tests only (their servers listen on 127.0.0.1): loopback
// hosts follow the rules like any other.
Result<std::optional<ProxyUrl>> ProxyFromEnvironment(const std::string& scheme,
                                                     const std::string& host, int port,
                                                     const EnvLookup& env,
                                                     bool loopback_too = false);

// True when NO_PROXY's value `no_proxy` says `host`:`port` goes direct.
bool NoProxyMatches(const std::string& no_proxy, const std::string& host, int port);

}  // namespace danqing::kube
