#include "kube/proxy.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <string_view>

namespace danqing::kube {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())) != 0) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())) != 0) s.remove_suffix(1);
  return s;
}

// An IPv4 or IPv6 address as 16 bytes (IPv4 mapped into ::ffff:0:0/96, as Go
// compares them); nullopt when `s` is not one.
std::optional<std::array<unsigned char, 16>> ParseIp(const std::string& s) {
  std::array<unsigned char, 16> a{};
  in_addr v4{};
  if (inet_pton(AF_INET, s.c_str(), &v4) == 1) {
    a[10] = a[11] = 0xff;
    std::memcpy(a.data() + 12, &v4, 4);
    return a;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, s.c_str(), &v6) == 1) {
    std::memcpy(a.data(), &v6, 16);
    return a;
  }
  return std::nullopt;
}

bool IsV4(const std::array<unsigned char, 16>& a) {
  static constexpr unsigned char kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(a.data(), kPrefix, 12) == 0;
}

bool IsLoopback(const std::array<unsigned char, 16>& a) {
  if (IsV4(a)) return a[12] == 127;
  static constexpr unsigned char kOne[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  return std::memcmp(a.data(), kOne, 16) == 0;
}

// "10.0.0.0/8" or "fd00::/8" holds `ip`; false when `cidr` is not a CIDR.
bool CidrContains(const std::string& cidr, const std::array<unsigned char, 16>& ip, bool* is_cidr) {
  *is_cidr = false;
  const auto slash = cidr.find('/');
  if (slash == std::string::npos) return false;
  auto net = ParseIp(cidr.substr(0, slash));
  const std::string bits_text = cidr.substr(slash + 1);
  if (!net || bits_text.empty() || bits_text.size() > 3 ||
      !std::all_of(bits_text.begin(), bits_text.end(),
                   [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; })) {
    return false;
  }
  int bits = std::stoi(bits_text);
  const bool v4 = cidr.find(':') == std::string::npos;
  if (bits > (v4 ? 32 : 128)) return false;
  *is_cidr = true;
  if (v4) {
    if (!IsV4(ip)) return false;
    bits += 96;
  }
  for (int i = 0; i < 16 && bits > 0; ++i, bits -= 8) {
    const unsigned mask = bits >= 8 ? 0xffU : (0xffU << (8 - bits)) & 0xffU;
    if (((*net)[i] & mask) != (ip[i] & mask)) return false;
  }
  return true;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

bool PercentDecode(std::string_view s, std::string* out) {
  out->clear();
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out->push_back(s[i]);
      continue;
    }
    if (i + 2 >= s.size()) return false;
    const int hi = HexValue(s[i + 1]);
    const int lo = HexValue(s[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return true;
}

// "host[:port]" or "[v6][:port]" into its parts; false when malformed.
bool SplitHostPort(std::string_view s, std::string* host, std::string* port) {
  port->clear();
  if (!s.empty() && s.front() == '[') {
    const auto close = s.find(']');
    if (close == std::string_view::npos) return false;
    *host = std::string(s.substr(1, close - 1));
    std::string_view rest = s.substr(close + 1);
    if (rest.empty()) return true;
    if (rest.front() != ':') return false;
    *port = std::string(rest.substr(1));
    return true;
  }
  const auto colon = s.rfind(':');
  if (colon != std::string_view::npos && s.find(':') == colon) {
    *host = std::string(s.substr(0, colon));
    *port = std::string(s.substr(colon + 1));
  } else {
    *host = std::string(s);  // a bare IPv6 address has several colons and no port
  }
  return true;
}

Result<ProxyUrl> ParseProxy(const std::string& variable, const std::string& value) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument("kube client: " + variable + "=" + value + ": " + why +
                           " (want http://[user:password@]host[:port])");
  };
  std::string_view v = Trim(value);
  std::string scheme = "http";
  if (const auto sep = v.find("://"); sep != std::string_view::npos) {
    scheme = Lower(v.substr(0, sep));
    v.remove_prefix(sep + 3);
  }
  if (scheme != "http") {
    return bad("scheme " + scheme + ":// is not supported (only http://: a CONNECT tunnel " +
               "through an HTTP proxy)");
  }
  // The path, query and fragment are ignored, as Go does.
  if (const auto end = v.find_first_of("/?#"); end != std::string_view::npos) v = v.substr(0, end);
  ProxyUrl p;
  p.variable = variable;
  if (const auto at = v.rfind('@'); at != std::string_view::npos) {
    std::string_view info = v.substr(0, at);
    v.remove_prefix(at + 1);
    const auto colon = info.find(':');
    const std::string_view user = info.substr(0, colon);
    const std::string_view pass =
        colon == std::string_view::npos ? std::string_view() : info.substr(colon + 1);
    if (!PercentDecode(user, &p.username) || !PercentDecode(pass, &p.password))
      return bad("bad %-escape in the user information");
  }
  std::string port;
  if (!SplitHostPort(v, &p.host, &port)) return bad("malformed host");
  if (p.host.empty()) return bad("no host");
  if (!port.empty()) {
    int n = 0;
    for (const char c : port) {
      if (std::isdigit(static_cast<unsigned char>(c)) == 0 || n > 65535) return bad("bad port");
      n = n * 10 + (c - '0');
    }
    if (n <= 0 || n > 65535) return bad("bad port");
    p.port = n;
  } else if (v.back() == ':') {
    return bad("bad port");
  }
  return p;
}

}  // namespace

std::string ProxyUrl::Display() const {
  std::string s = "http://";
  if (!username.empty()) s += username + ":***@";
  s += host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return s + ":" + std::to_string(port);
}

bool NoProxyMatches(const std::string& no_proxy, const std::string& host_in, int port) {
  const std::string host = Lower(Trim(host_in));
  const std::string port_text = std::to_string(port);
  const auto ip = ParseIp(host);
  std::string_view list = no_proxy;
  while (!list.empty()) {
    const auto comma = list.find(',');
    const std::string entry = Lower(Trim(list.substr(0, comma)));
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    if (entry.empty()) continue;
    if (entry == "*") return true;
    bool is_cidr = false;
    if (ip && CidrContains(entry, *ip, &is_cidr)) return true;
    if (is_cidr) continue;
    std::string ehost;
    std::string eport;
    if (!SplitHostPort(entry, &ehost, &eport) || ehost.empty()) continue;
    if (!eport.empty() && eport != port_text) continue;
    if (const auto eip = ParseIp(ehost)) {
      if (ip && *eip == *ip) return true;
      continue;
    }
    // A domain: "foo.com" is that name and the names under it; ".foo.com"
    // and "*.foo.com" only the names under it.
    if (ehost.rfind("*.", 0) == 0) ehost.erase(0, 1);
    const bool match_itself = ehost.front() != '.';
    if (match_itself) ehost.insert(0, ".");
    if ((host.size() > ehost.size() &&
         host.compare(host.size() - ehost.size(), ehost.size(), ehost) == 0) ||
        (match_itself && host == ehost.substr(1))) {
      return true;
    }
  }
  return false;
}

Result<std::optional<ProxyUrl>> ProxyFromEnvironment(const std::string& scheme,
                                                     const std::string& host, int port,
                                                     const EnvLookup& env, bool loopback_too) {
  auto get = [&](const char* upper, const char* lower) -> std::pair<std::string, std::string> {
    for (const char* name : {upper, lower}) {
      const char* v = env(name);
      if (v != nullptr && *v != '\0') return {name, v};
    }
    return {"", ""};
  };
  const auto [variable, value] =
      scheme == "https" ? get("HTTPS_PROXY", "https_proxy") : get("HTTP_PROXY", "http_proxy");
  if (value.empty() || Trim(value).empty()) return std::optional<ProxyUrl>();
  // The value is checked even when this server goes direct: a typo shows at
  // start, not on the day the server moves.
  auto proxy = ParseProxy(variable, value);
  if (!proxy.ok()) return proxy.status();
  if (!loopback_too) {
    const std::string h = Lower(host);
    const auto ip = ParseIp(h);
    if (h == "localhost" || (ip && IsLoopback(*ip))) return std::optional<ProxyUrl>();
  }
  const auto [no_var, no_value] = get("NO_PROXY", "no_proxy");
  if (NoProxyMatches(no_value, host, port)) return std::optional<ProxyUrl>();
  return std::optional<ProxyUrl>(std::move(proxy).value());
}

}  // namespace danqing::kube
