#include "kube/config.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>

#include "common/read_file.h"

namespace danqing::kube {
namespace {

constexpr std::size_t kMaxConfigFileBytes = 4 << 20;

Result<std::string> ReadSmall(const std::string& path, std::string_view what) {
  auto r = ReadRegularFile(path, kMaxConfigFileBytes);
  if (!r.ok()) {
    return Status(r.status().code(), std::string(what) + " " + path + ": " + r.status().message());
  }
  return r;
}

std::string Trim(std::string s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::string Resolve(const std::string& dir, const std::string& p) {
  if (p.empty() || p.front() == '/' || dir.empty()) return p;
  return (std::filesystem::path(dir) / p).string();
}

// The map of the entry named `want` in a kubeconfig list (clusters, users,
// contexts): [{name: x, <key>: {...}}].
Result<YAML::Node> Named(const YAML::Node& root, const char* list, const char* key,
                         const std::string& want, const std::string& file) {
  const YAML::Node l = root[list];
  if (!l || !l.IsSequence()) {
    return InvalidArgument(file + ": `" + list + "` is missing or not a list");
  }
  for (std::size_t i = 0; i < l.size(); ++i) {
    const YAML::Node e = l[i];
    if (!e.IsMap() || !e["name"] || !e["name"].IsScalar()) {
      return InvalidArgument(file + ": " + list + "[" + std::to_string(i) + "].name is missing");
    }
    if (e["name"].as<std::string>() != want) continue;
    const YAML::Node v = e[key];
    if (!v || !v.IsMap()) {
      return InvalidArgument(file + ": " + list + "[" + std::to_string(i) + "]." + key +
                             " is missing or not a map");
    }
    return v;
  }
  return InvalidArgument(file + ": no " + std::string(key) + " named \"" + want + "\" in `" + list +
                         "`");
}

std::string Str(const YAML::Node& map, const char* key) {
  const YAML::Node v = map[key];
  if (!v || !v.IsScalar()) return {};
  return v.as<std::string>();
}

Result<Config> ParseKubeconfigImpl(const std::string& text, const std::string& dir,
                                   const std::string& context, const std::string& name) {
  YAML::Node root = YAML::Load(text);
  if (!root || !root.IsMap()) return InvalidArgument(name + ": not a YAML map");
  std::string ctx_name = context;
  if (ctx_name.empty()) ctx_name = Str(root, "current-context");
  if (ctx_name.empty()) return InvalidArgument(name + ": no context given and no current-context");
  auto ctx = Named(root, "contexts", "context", ctx_name, name);
  if (!ctx.ok()) return ctx.status();
  const std::string cluster_name = Str(*ctx, "cluster");
  const std::string user_name = Str(*ctx, "user");
  if (cluster_name.empty()) {
    return InvalidArgument(name + ": context \"" + ctx_name + "\" has no cluster");
  }
  auto cluster = Named(root, "clusters", "cluster", cluster_name, name);
  if (!cluster.ok()) return cluster.status();

  Config c;
  c.server = Str(*cluster, "server");
  if (c.server.empty()) {
    return InvalidArgument(name + ": cluster \"" + cluster_name + "\" has no server");
  }
  while (!c.server.empty() && c.server.back() == '/') c.server.pop_back();
  if (c.server.rfind("https://", 0) != 0 && c.server.rfind("http://", 0) != 0) {
    return InvalidArgument(name + ": cluster \"" + cluster_name + "\" server \"" + c.server +
                           "\" is not an http(s) URL");
  }
  c.ca_file = Resolve(dir, Str(*cluster, "certificate-authority"));
  if (const std::string data = Str(*cluster, "certificate-authority-data"); !data.empty()) {
    auto pem = DecodeBase64(data);
    if (!pem.ok()) {
      return InvalidArgument(name + ": cluster \"" + cluster_name +
                             "\" certificate-authority-data: " + pem.status().message());
    }
    c.ca_pem = std::move(pem).value();
  }
  c.insecure_skip_tls_verify = Str(*cluster, "insecure-skip-tls-verify") == "true";

  if (!user_name.empty()) {
    auto user = Named(root, "users", "user", user_name, name);
    if (!user.ok()) return user.status();
    if ((*user)["exec"] || (*user)["auth-provider"]) {
      return InvalidArgument(name + ": user \"" + user_name +
                             "\" uses an exec or auth-provider plugin, which Danqing does not run; "
                             "give it a token, tokenFile or client certificate");
    }
    c.token = Str(*user, "token");
    c.token_file = Resolve(dir, Str(*user, "tokenFile"));
    c.client_cert_file = Resolve(dir, Str(*user, "client-certificate"));
    c.client_key_file = Resolve(dir, Str(*user, "client-key"));
    for (auto [key, out] :
         {std::pair<const char*, std::string*>{"client-certificate-data", &c.client_cert_pem},
          {"client-key-data", &c.client_key_pem}}) {
      const std::string data = Str(*user, key);
      if (data.empty()) continue;
      auto pem = DecodeBase64(data);
      if (!pem.ok()) {
        return InvalidArgument(name + ": user \"" + user_name + "\" " + key + ": " +
                               pem.status().message());
      }
      *out = std::move(pem).value();
    }
    const bool has_cert = !c.client_cert_file.empty() || !c.client_cert_pem.empty();
    const bool has_key = !c.client_key_file.empty() || !c.client_key_pem.empty();
    if (has_cert != has_key) {
      return InvalidArgument(name + ": user \"" + user_name +
                             "\" has a client certificate without its key or a key without its "
                             "certificate");
    }
  }
  c.namespace_name = Str(*ctx, "namespace");
  if (c.namespace_name.empty()) c.namespace_name = "default";
  return c;
}

}  // namespace

Result<std::string> DecodeBase64(std::string_view text) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  int pad = 0;
  for (const char ch : text) {
    if (ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t') continue;
    if (ch == '=') {
      ++pad;
      continue;
    }
    if (pad > 0) return InvalidArgument("invalid base64: data after '='");
    int v;
    if (ch >= 'A' && ch <= 'Z') {
      v = ch - 'A';
    } else if (ch >= 'a' && ch <= 'z') {
      v = ch - 'a' + 26;
    } else if (ch >= '0' && ch <= '9') {
      v = ch - '0' + 52;
    } else if (ch == '+') {
      v = 62;
    } else if (ch == '/') {
      v = 63;
    } else {
      return InvalidArgument(std::string("invalid base64: unexpected character '") + ch + "'");
    }
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  if (pad > 2 || bits >= 6) return InvalidArgument("invalid base64: truncated");
  return out;
}

Result<Config> InClusterConfig(const std::string& sa_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0' || port == nullptr || *port == '\0') {
    return FailedPrecondition(
        "not running in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set "
        "(pass --kubeconfig to run outside the cluster)");
  }
  Config c;
  std::string h = host;
  if (h.find(':') != std::string::npos) h = "[" + h + "]";  // IPv6 service address
  c.server = "https://" + h + ":" + port;
  c.token_file = sa_dir + "/token";
  c.ca_file = sa_dir + "/ca.crt";
  if (auto t = ReadSmall(c.token_file, "service-account token"); !t.ok()) {
    return Status(StatusCode::kFailedPrecondition, t.status().message());
  }
  if (auto ca = ReadSmall(c.ca_file, "service-account CA"); !ca.ok()) {
    return Status(StatusCode::kFailedPrecondition, ca.status().message());
  }
  if (auto ns = ReadSmall(sa_dir + "/namespace", "service-account namespace"); ns.ok()) {
    c.namespace_name = Trim(*ns);
  }
  if (c.namespace_name.empty()) c.namespace_name = "default";
  return c;
}

Result<Config> ParseKubeconfig(const std::string& text, const std::string& dir,
                               const std::string& context, const std::string& name) {
  try {
    return ParseKubeconfigImpl(text, dir, context, name);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(name + ": " + e.what());
  }
}

Result<Config> LoadKubeconfig(const std::string& path, const std::string& context) {
  auto text = ReadSmall(path, "kubeconfig");
  if (!text.ok()) return Status(StatusCode::kInvalidArgument, text.status().message());
  return ParseKubeconfig(*text, std::filesystem::path(path).parent_path().string(), context, path);
}

Result<Config> ResolveConfig(const std::string& kubeconfig_path) {
  if (!kubeconfig_path.empty()) return LoadKubeconfig(kubeconfig_path);
  return InClusterConfig();
}

}  // namespace danqing::kube
