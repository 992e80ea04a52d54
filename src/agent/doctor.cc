#include "agent/doctor.h"

#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <linux/magic.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <sstream>

#include "common/read_file.h"
#include "deviceplugin/cdi_driver.h"
#include "dra/checkpoint.h"
#include "dra/nvml_mig_control.h"
#include "health/monitor.h"
#include "kube/client.h"
#include "kube/config.h"
#include "metrics/exporter.h"
#include "pluginregistration/v1/api.grpc.pb.h"

namespace danqing::agent {
namespace {

using Level = Finding::Level;

enum class Kind { kMissing, kDir, kSocket, kCharDevice, kOther };

Kind KindOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Kind::kMissing;
  if (S_ISDIR(st.st_mode)) return Kind::kDir;
  if (S_ISSOCK(st.st_mode)) return Kind::kSocket;
  if (S_ISCHR(st.st_mode)) return Kind::kCharDevice;
  return Kind::kOther;
}

// Connects to a unix socket: is someone listening?
bool Listening(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return false;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

bool UsesCdi(const config::Config& cfg) { return deviceplugin::UsesCdi(cfg.flags.plugin.device_list_strategy); }

class Findings {
 public:
  void Add(Level level, std::string check, std::string detail, std::string fix = {}) {
    list.push_back(Finding{level, std::move(check), std::move(detail), std::move(fix)});
  }
  std::vector<Finding> list;
};

void CheckKubelet(const config::Config& cfg, Findings& f) {
  const std::string& dir = cfg.danqing.device_plugin_path;
  if (KindOf(dir) != Kind::kDir) {
    f.Add(Level::kFail, "kubelet directory", dir + " does not exist or is not a directory",
          "mount the kubelet's device-plugin directory into the agent (hostPath " + dir +
              "), or set danqing.devicePluginPath to where the kubelet keeps it");
    return;
  }
  f.Add(Level::kOk, "kubelet directory", dir);
  const std::string sock = dir + "/kubelet.sock";
  const Kind k = KindOf(sock);
  if (k == Kind::kMissing) {
    f.Add(Level::kFail, "kubelet socket", sock + " does not exist",
          "is the kubelet running on this node? The agent registers as soon as it appears");
  } else if (k != Kind::kSocket) {
    f.Add(Level::kFail, "kubelet socket", sock + " is not a socket", "remove it; the kubelet recreates it");
  } else if (!Listening(sock)) {
    f.Add(Level::kFail, "kubelet socket", sock + " exists but nobody answers on it",
          "the kubelet is down or restarting: `systemctl status kubelet`");
  } else {
    f.Add(Level::kOk, "kubelet socket", sock + " answers");
  }
  const std::string& pr = cfg.danqing.pod_resources_socket;
  if (KindOf(pr) == Kind::kSocket && Listening(pr)) {
    f.Add(Level::kOk, "pod-resources socket", pr + " answers");
  } else {
    f.Add(Level::kWarn, "pod-resources socket", pr + " is missing or does not answer",
          "mount /var/lib/kubelet/pod-resources into the agent; without it metrics carry no pod labels");
  }
}

void CheckCdi(const config::Config& cfg, const DoctorOptions& options, Findings& f) {
  const bool uses = UsesCdi(cfg);
  const std::string& root = cfg.danqing.cdi_root;
  if (KindOf(root) != Kind::kDir || ::access(root.c_str(), W_OK) != 0) {
    f.Add(uses ? Level::kFail : Level::kInfo, "CDI directory",
          root + " is missing or not writable" + (uses ? "" : " (not needed: no CDI device list strategy)"),
          uses ? "mount " + root + " read-write into the agent (hostPath), or set danqing.cdiRoot" : "");
  } else {
    f.Add(Level::kOk, "CDI directory", root + " is writable");
  }
  if (!uses) return;
  if (auto text = ReadTextFile(options.containerd_config)) {
    const bool enabled = text->find("enable_cdi = true") != std::string::npos ||
                         text->find("enable_cdi=true") != std::string::npos;
    const bool disabled = text->find("enable_cdi = false") != std::string::npos;
    if (enabled) {
      f.Add(Level::kOk, "containerd CDI", options.containerd_config + " has enable_cdi = true");
    } else {
      f.Add(disabled ? Level::kFail : Level::kWarn, "containerd CDI",
            options.containerd_config + (disabled ? " sets enable_cdi = false" : " does not set enable_cdi"),
            "set enable_cdi = true (and cdi_spec_dirs to include " + root +
                ") in the CRI plugin section and restart containerd; containerd 2.0 enables it by default");
    }
  } else if (ReadTextFile(options.crio_config)) {
    f.Add(Level::kOk, "CRI-O CDI", "CRI-O enables CDI by default (" + options.crio_config + ")");
  } else {
    f.Add(Level::kInfo, "container runtime CDI", "no runtime configuration readable here; not checked");
  }
}

// The value of label `name` in one exposition-format sample line; nullopt
// when the line has none. Prometheus escapes \\, \" and \n in label values.
std::optional<std::string> SampleLabel(std::string_view line, std::string_view name) {
  const std::string key = std::string(name) + "=\"";
  for (size_t at = line.find(key); at != std::string_view::npos; at = line.find(key, at + 1)) {
    if (at > 0 && line[at - 1] != '{' && line[at - 1] != ',') continue;  // a longer label name
    std::string value;
    for (size_t i = at + key.size(); i < line.size(); ++i) {
      if (line[i] == '"') return value;
      if (line[i] == '\\' && i + 1 < line.size()) {
        ++i;
        value += line[i] == 'n' ? '\n' : line[i];
      } else {
        value += line[i];
      }
    }
    return std::nullopt;  // unterminated
  }
  return std::nullopt;
}

// The running agent's view of health: UUID → reason ("" when healthy), from
// danqing_gpu_healthy on its /metrics on this host. The agent sees XIDs and
// ECC events as they happen, which one reading of the sensors here cannot.
// nullopt, with `why`, when no agent answers.
std::optional<std::map<std::string, std::string>> AgentHealth(const config::Config& cfg, std::string& why) {
  if (cfg.danqing.metrics_addr.empty()) {
    why = "its metrics are off (metricsAddr is empty)";
    return std::nullopt;
  }
  auto addr = metrics::ParseListenAddress(cfg.danqing.metrics_addr);
  if (!addr.ok()) {
    why = addr.status().ToString();
    return std::nullopt;
  }
  std::string host = addr->first;
  if (host.empty() || host == "0.0.0.0" || host == "::") host = "127.0.0.1";
  const std::string where = host + ":" + std::to_string(addr->second);
  httplib::Client client(host, addr->second);
  client.set_connection_timeout(1, 0);
  client.set_read_timeout(2, 0);
  auto r = client.Get("/metrics");
  if (!r) {
    why = "nothing answers on " + where + " (" + httplib::to_string(r.error()) + ")";
    return std::nullopt;
  }
  if (r->status != 200) {
    why = where + "/metrics answered HTTP " + std::to_string(r->status);
    return std::nullopt;
  }
  std::map<std::string, std::string> out;
  std::istringstream body(r->body);
  for (std::string line; std::getline(body, line);) {
    if (!line.starts_with("danqing_gpu_healthy{")) continue;
    const auto uuid = SampleLabel(line, "UUID");
    const size_t end = line.rfind('}');
    if (!uuid || end == std::string::npos) continue;
    const bool healthy = line.compare(end + 1, std::string::npos, " 1") == 0;
    out[*uuid] = healthy ? "" : SampleLabel(line, "reason").value_or("unhealthy");
  }
  if (out.empty()) {
    why = where + "/metrics has no danqing_gpu_healthy series (is it the node agent?)";
    return std::nullopt;
  }
  return out;
}

void CheckGpus(const config::Config& cfg, const BackendFactory& factory, Findings& f) {
  auto backend = factory(cfg);
  if (!backend.ok()) {
    f.Add(Level::kFail, "NVIDIA driver (NVML)", backend.status().ToString(),
          "install the NVIDIA driver on the node and make libnvidia-ml.so.1 visible to the agent "
          "(the NVIDIA container runtime, the host's driver root mounted at --container-driver-root, "
          "where libnvidia-ml.so.1 is looked for, or --nvml-lib)");
    return;
  }
  f.Add(Level::kOk, "NVIDIA driver (NVML)", (*backend)->Describe());
  auto inv = (*backend)->Discover();
  if (!inv.ok()) {
    f.Add(Level::kFail, "GPUs", inv.status().ToString(), "check `nvidia-smi` on the node; look for XIDs in dmesg");
    return;
  }
  f.Add(inv->gpus.empty() ? Level::kWarn : Level::kOk, "GPUs",
        std::to_string(inv->gpus.size()) + " GPU(s), driver " + inv->driver_version,
        inv->gpus.empty() ? "no GPU is visible: is this a GPU node, and is the agent's pod given the GPUs?" : "");
  for (const auto& e : inv->errors) {
    f.Add(Level::kFail, "GPU " + std::to_string(e.index), e.uuid + " cannot be read: " + e.status.ToString(),
          "the GPU is not served; check `nvidia-smi -q -i " + std::to_string(e.index) +
              "` and dmesg for XID 79 (fell off the bus); a reset or reboot may be needed");
  }
  for (const auto& disabled : inv->disabled_features) {
    f.Add(Level::kInfo, "driver features", disabled);
  }

  // Device nodes the containers get.
  const std::string dev_root =
      cfg.flags.nvidia_dev_root.empty() ? cfg.flags.nvidia_driver_root : cfg.flags.nvidia_dev_root;
  std::vector<std::string> missing;
  std::vector<std::string> nodes = {"/dev/nvidiactl", "/dev/nvidia-uvm"};
  for (const auto& g : inv->gpus) {
    if (g.minor_number) nodes.push_back("/dev/nvidia" + std::to_string(*g.minor_number));
  }
  for (const auto& n : nodes) {
    if (KindOf(deviceplugin::UnderRoot(dev_root, n)) != Kind::kCharDevice) {
      missing.push_back(deviceplugin::UnderRoot(dev_root, n));
    }
  }
  if (missing.empty()) {
    f.Add(Level::kOk, "device nodes", std::to_string(nodes.size()) + " present under " + dev_root);
  } else {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    f.Add(Level::kFail, "device nodes", "missing: " + list,
          "load the driver's modules (nvidia, nvidia-uvm: `nvidia-modprobe -u -c=0`) and, when the agent "
          "runs in a pod, mount /dev or set --nvidia-dev-root to where they are");
  }

  // The driver's files the CDI spec carries (cdi-* strategies only).
  if (UsesCdi(cfg)) {
    const deviceplugin::DriverFiles files =
        deviceplugin::FindDriverFiles({.local = cfg.flags.plugin.container_driver_root,
                                       .host = cfg.flags.nvidia_driver_root,
                                       .version = inv->driver_version,
                                       .hook_path = cfg.flags.plugin.nvidia_ctk_path});
    std::string why;
    for (const auto& w : files.warnings) why += (why.empty() ? "" : "; ") + w;
    if (files.library_dir.empty()) {
      f.Add(Level::kWarn, "CDI driver files", "the CDI spec goes " + why,
            "mount the host's driver root read-only at --container-driver-root (deploy/overlays/cdi), with "
            "--nvidia-driver-root its path on the host");
    } else {
      const size_t n = files.mounts.size();
      f.Add(Level::kOk, "CDI driver files",
            std::to_string(n) + (n == 1 ? " file" : " files") + " of driver " + inv->driver_version +
                " (libraries in " + files.library_dir + ") under " + cfg.flags.plugin.container_driver_root);
      if (!files.hook.empty()) {
        f.Add(Level::kOk, "CDI hook",
              files.hook + (deviceplugin::IsHostRoot(cfg.flags.nvidia_driver_root) ? " is on the node"
                                                                 : " (on the host; not visible here to check)"));
      } else if (cfg.flags.plugin.nvidia_ctk_path.empty()) {
        f.Add(Level::kInfo, "CDI hook",
              "none (nvidiaCTKPath is empty): the SONAME links are mounted instead, in " + files.library_dir +
                  " and " + std::string(deviceplugin::kNoHookLibraryDir) +
                  "; an image whose loader searches neither (no ld.so.cache entry is made) will not find libcuda");
      } else {
        f.Add(Level::kWarn, "CDI hook", "the CDI spec goes " + why,
              "install the NVIDIA Container Toolkit on the node, or set nvidiaCTKPath to its nvidia-ctk or "
              "nvidia-cdi-hook");
      }
    }
  }

  // Events.
  auto events = (*backend)->WatchEvents({});
  if (!events.ok()) {
    f.Add(Level::kWarn, "device events", events.status().ToString(),
          "XIDs are not seen as they happen; health relies on polling");
  } else if (!(*events)->errors().empty()) {
    for (const auto& e : (*events)->errors()) {
      f.Add(Level::kWarn, "device events", "GPU " + e.uuid + ": " + e.status.ToString(),
            "XIDs of this GPU are not seen as they happen; health relies on polling");
    }
  } else {
    f.Add(Level::kOk, "device events", "subscribed to XID, ECC and MIG events of every GPU");
  }

  // Health now, as the agent's first poll would judge it.
  health::MonitorOptions mo;
  if (auto h = HealthOptionsFrom(cfg); h.ok()) mo = h->monitor;
  health::Monitor monitor(mo);
  monitor.SetInventory(*inv);
  const auto now = health::Clock::now();
  for (const auto& g : inv->gpus) monitor.OnPoll(g.uuid, (*backend)->ReadSensors(g.uuid), now);
  const auto unhealthy = monitor.Unhealthy();
  std::string why;
  const auto agent = AgentHealth(cfg, why);
  if (agent) {
    f.Add(Level::kOk, "running agent", "answers; its view of each GPU (events included) is below");
  } else {
    f.Add(Level::kInfo, "running agent", why + "; GPU health below is one reading of the sensors: "
                                               "XIDs and ECC events are seen only by a running agent");
  }
  for (const auto& g : inv->gpus) {
    const std::string check = "GPU " + std::to_string(g.index) + " health";
    const std::string fix =
        "see `danqing-device-plugin gpus` for its sensors; conditions marked as needing a reset "
        "clear only after `nvidia-smi -r -i " + std::to_string(g.index) + "` (drain the node first)";
    if (agent) {
      auto seen = agent->find(g.uuid);
      if (seen != agent->end() && !seen->second.empty()) {
        f.Add(Level::kFail, check, g.uuid + " unhealthy (running agent): " + seen->second, fix);
        continue;
      }
    }
    if (auto it = unhealthy.find(g.uuid); it != unhealthy.end()) {
      f.Add(Level::kFail, check, g.uuid + " unhealthy: " + it->second, fix);
    } else {
      f.Add(Level::kOk, check, g.uuid + " healthy");
    }
  }
}

std::string_view Tag(Level l) {
  switch (l) {
    case Level::kOk: return "[ ok ]";
    case Level::kInfo: return "[info]";
    case Level::kWarn: return "[warn]";
    case Level::kFail: return "[FAIL]";
  }
  return "[ ?? ]";
}

// `j[key]` when `j` is an object that has it, else null.
const kube::Json* Member(const kube::Json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  const auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

std::string StringMember(const kube::Json* j, const char* key) {
  const kube::Json* m = j == nullptr ? nullptr : Member(*j, key);
  return m != nullptr && m->is_string() ? m->get<std::string>() : std::string();
}

constexpr char kDraFix[] =
    "apply deploy/overlays/dra/rbac.yaml (ClusterRole danqing-device-plugin-dra, bound to the "
    "agent's ServiceAccount)";

// The API server as the agent reaches it: the node's ResourceSlices listed
// with the agent's credentials, what those credentials may do (one
// SelfSubjectAccessReview per verb the driver needs), and the DeviceClasses
// that select this driver's devices.
void CheckDraApi(const config::Config& cfg, const DoctorOptions& options, Findings& f) {
  const auto& d = cfg.danqing;
  auto kc = options.kubeconfig.empty() ? kube::InClusterConfig(options.service_account_dir)
                                       : kube::LoadKubeconfig(options.kubeconfig);
  if (!kc.ok()) {
    f.Add(Level::kFail, "DRA API server", kc.status().message(),
          options.kubeconfig.empty()
              ? "run doctor in the agent's pod (kubectl exec ... -- danqing-device-plugin "
                "doctor), or give --kubeconfig"
              : "fix the kubeconfig named above (--kubeconfig, $KUBECONFIG)");
    return;
  }
  kc->connect_timeout = std::chrono::seconds(2);
  kc->request_timeout = std::chrono::seconds(5);
  auto client = kube::Client::Create(*kc);
  if (!client.ok()) {
    f.Add(Level::kFail, "DRA API server", client.status().message(),
          "fix the CA or client certificate named above");
    return;
  }
  kube::Client& c = **client;
  // "" or " through proxy http://proxy:3128 (HTTPS_PROXY)".
  const std::string via =
      c.proxy() ? " through proxy " + c.proxy()->Display() + " (" + c.proxy()->variable + ")" : "";
  const std::string slices = "/apis/resource.k8s.io/v1/resourceslices";
  auto list = c.Get(slices, {{"fieldSelector", "spec.nodeName=" + d.node_name +
                                                   ",spec.driver=" + d.dra_driver_name}});
  if (!list.ok()) {
    const kube::ApiError& e = list.error();
    std::string fix =
        e.reason == "ProxyRefused"
            ? "the proxy refused the tunnel: check its credentials and that it allows CONNECT "
              "to " +
                  kc->server + ", or list the server in NO_PROXY"
        : e.IsForbidden()    ? std::string(kDraFix)
        : e.IsUnauthorized() ? "the token was refused: is the ServiceAccount's "
                               "token mounted and current?"
        : e.http_status == 404
            ? "the server does not serve resource.k8s.io/v1 (Kubernetes 1.34+)"
            : "is the API server reachable from this node (" + kc->server + via + ")?";
    f.Add(Level::kFail, "DRA API server", e.ToString(), std::move(fix));
    if (!e.IsForbidden()) return;  // no answer: the other checks would say the same
  } else {
    const kube::Json* items = Member(list.value(), "items");
    const size_t n = items != nullptr && items->is_array() ? items->size() : 0;
    f.Add(Level::kOk, "DRA API server",
          kc->server + " answers" + via + "; " + std::to_string(n) + " ResourceSlice(s) of node " +
              d.node_name + " for " + d.dra_driver_name);
  }

  // Permissions: what the driver does, asked of the server for these
  // credentials (every authenticated user may ask).
  struct Need {
    const char* verb;
    const char* resource;
  };
  static constexpr Need kNeeds[] = {
      {"get", "resourceslices"},    {"list", "resourceslices"},   {"watch", "resourceslices"},
      {"create", "resourceslices"}, {"update", "resourceslices"}, {"delete", "resourceslices"},
      {"get", "resourceclaims"},    {"list", "deviceclasses"},
  };
  std::vector<std::string> denied;
  std::string review_error;
  for (const Need& n : kNeeds) {
    kube::Json review = {
        {"apiVersion", "authorization.k8s.io/v1"},
        {"kind", "SelfSubjectAccessReview"},
        {"spec",
         {{"resourceAttributes",
           {{"group", "resource.k8s.io"}, {"resource", n.resource}, {"verb", n.verb}}}}}};
    auto r = c.Create("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review);
    if (!r.ok()) {
      review_error = r.error().ToString();
      break;
    }
    const kube::Json* status = Member(r.value(), "status");
    const kube::Json* allowed = status == nullptr ? nullptr : Member(*status, "allowed");
    if (allowed == nullptr || !allowed->is_boolean() || !allowed->get<bool>()) {
      denied.push_back(std::string(n.verb) + " " + n.resource);
    }
  }
  if (!review_error.empty()) {
    f.Add(Level::kWarn, "DRA permissions", "cannot ask the server: " + review_error,
          "check by hand: kubectl auth can-i --as=system:serviceaccount:kube-system:"
          "danqing-device-plugin create resourceslices.resource.k8s.io");
  } else if (!denied.empty()) {
    std::string what;
    for (const auto& x : denied) what += (what.empty() ? "" : ", ") + x;
    f.Add(Level::kFail, "DRA permissions", "not allowed: " + what + " (resource.k8s.io)", kDraFix);
  } else {
    f.Add(Level::kOk, "DRA permissions",
          "resourceslices get/list/watch/create/update/delete, resourceclaims get, "
          "deviceclasses list");
  }

  // DeviceClasses whose CEL selectors name this driver.
  auto classes = c.Get("/apis/resource.k8s.io/v1/deviceclasses");
  if (!classes.ok()) {
    f.Add(Level::kWarn, "DRA DeviceClasses", "cannot list them: " + classes.error().ToString(),
          classes.error().IsForbidden() ? std::string(kDraFix) : std::string());
    return;
  }
  std::string names, extended;
  const std::string quoted = "\"" + d.dra_driver_name + "\"";
  const kube::Json* items = Member(classes.value(), "items");
  if (items != nullptr && items->is_array()) {
    for (const auto& dc : *items) {
      const kube::Json* spec = Member(dc, "spec");
      const kube::Json* selectors = spec == nullptr ? nullptr : Member(*spec, "selectors");
      bool ours = false;
      if (selectors != nullptr && selectors->is_array()) {
        for (const auto& sel : *selectors) {
          if (StringMember(Member(sel, "cel"), "expression").find(quoted) != std::string::npos) {
            ours = true;
          }
        }
      }
      if (!ours) continue;
      const std::string name = StringMember(Member(dc, "metadata"), "name");
      names += (names.empty() ? "" : ", ") + name;
      if (const std::string ext = StringMember(spec, "extendedResourceName"); !ext.empty()) {
        extended += (extended.empty() ? "" : ", ") + ext + " (" + name + ")";
      }
    }
  }
  if (names.empty()) {
    f.Add(Level::kWarn, "DRA DeviceClasses", "no DeviceClass selects driver " + d.dra_driver_name,
          "claims name devices through a class: kubectl apply -k deploy/overlays/dra "
          "(deviceclasses.yaml)");
  } else {
    f.Add(Level::kOk, "DRA DeviceClasses",
          names + (extended.empty() ? "" : "; extended resources: " + extended));
  }
}

// The DRA side (docs/dra.md): the plugin watcher's directory, this driver's
// registration socket answering GetInfo, the API server, the checkpoint,
// and where claims are read from.
void CheckDra(const config::Config& cfg, const DoctorOptions& options, Findings& f) {
  const auto& d = cfg.danqing;
  if (d.mode == "device-plugin") {
    f.Add(Level::kInfo, "DRA", "off (danqing.mode is device-plugin)");
    return;
  }
  struct stat st;
  if (::stat(d.dra_plugins_registry.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    f.Add(Level::kFail, "DRA registration directory",
          d.dra_plugins_registry + " is not a directory",
          "mount the kubelet's plugin registration directory into the agent (hostPath " +
              d.dra_plugins_registry + ", danqing.draPluginsRegistry)");
  } else if (::access(d.dra_plugins_registry.c_str(), W_OK | X_OK) != 0) {
    f.Add(Level::kFail, "DRA registration directory",
          d.dra_plugins_registry + " is not writable: " + std::strerror(errno),
          "the agent creates its registration socket there: mount it read-write and run the "
          "agent as root (the base DaemonSet does)");
  } else {
    f.Add(Level::kOk, "DRA registration directory", d.dra_plugins_registry);
    const std::string sock = d.dra_plugins_registry + "/" + d.dra_driver_name + "-reg.sock";
    auto stub = pluginregistration::Registration::NewStub(
        grpc::CreateChannel("unix:" + sock, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    pluginregistration::PluginInfo info;
    const grpc::Status gs = stub->GetInfo(&ctx, pluginregistration::InfoRequest(), &info);
    if (gs.ok() && info.name() == d.dra_driver_name) {
      f.Add(Level::kOk, "DRA registration socket",
            sock + " answers (endpoint " + info.endpoint() + ")");
    } else {
      f.Add(Level::kWarn, "DRA registration socket",
            sock + (gs.ok() ? " answers for another driver (" + info.name() + ")"
                            : " does not answer"),
            "start the agent in dra or split mode; it creates the socket once dra.sock serves");
    }
  }
  CheckDraApi(cfg, options, f);
  dra::Checkpoint cp(d.dra_checkpoint_dir);
  struct statfs fs {};
  if (::statfs(d.dra_checkpoint_dir.c_str(), &fs) == 0 && fs.f_type == TMPFS_MAGIC) {
    f.Add(Level::kWarn, "DRA checkpoint directory", d.dra_checkpoint_dir + " is on tmpfs",
          "a reboot loses the prepared claims' record: use a hostPath on the node's disk "
          "(danqing.draCheckpointDir)");
  }
  auto loaded = cp.Load();
  if (loaded.ok()) {
    f.Add(Level::kOk, "DRA checkpoint",
          cp.path() + ": " + std::to_string(loaded->size()) + " prepared claim(s)");
  } else if (loaded.status().code() == StatusCode::kNotFound) {
    f.Add(Level::kInfo, "DRA checkpoint",
          "none yet at " + cp.path() + " (no claim prepared on this node)");
  } else {
    f.Add(Level::kWarn, "DRA checkpoint", loaded.status().message(),
          "the agent rebuilds it from the claims' CDI specs at its next start; keep "
          "danqing.draCheckpointDir on "
          "persistent storage");
  }
  if (d.dra_claims_file.empty()) {
    f.Add(Level::kWarn, "DRA claims",
          "no source of ResourceClaims in this build (danqing.draClaimsFile is empty)",
          "every prepare fails until the agent reads claims from the API server");
  } else {
    f.Add(Level::kInfo, "DRA claims", "read from " + d.dra_claims_file);
  }
}

// Dynamic MIG (issue 26): MIG instances on the dynamic GPUs that no
// prepared claim holds (the agent destroys them only with
// danqing.draDynamicMigDestroyOrphans).
void CheckDynamicMig(const config::Config& cfg, const BackendFactory& factory, Findings& f) {
  if (cfg.danqing.mode == "device-plugin" || cfg.danqing.dra_dynamic_mig.empty()) return;
  auto control = dra::NvmlMigControl::Open(NvmlLibraryFor(cfg));
  auto backend = factory(cfg);
  auto inv = backend.ok() ? (*backend)->Discover() : Result<gpu::NodeInventory>(backend.status());
  if (!control.ok() || !inv.ok()) {
    f.Add(Level::kWarn, "dynamic MIG orphans",
          (control.ok() ? inv.status() : control.status()).message(),
          "see the NVIDIA driver check above");
    return;
  }
  std::vector<int> indices;
  for (const auto& g : inv->gpus) indices.push_back(g.index);
  auto state = dra::DynamicMig::LoadState(DynamicMigStateFile(cfg));
  auto claims = dra::Checkpoint(cfg.danqing.dra_checkpoint_dir).Load();
  std::map<std::string, std::vector<dra::MigInstance>> held;
  if (state.ok()) {
    for (const auto& [uid, list] : *state) {
      if (!claims.ok() || claims->contains(uid)) held[uid] = list;
    }
  }
  const auto orphans =
      dra::FindOrphanInstances(std::shared_ptr<dra::MigControl>(std::move(*control)),
                               DynamicMigConfigFrom(cfg), held, indices);
  if (orphans.empty()) {
    f.Add(Level::kOk, "dynamic MIG orphans",
          "every MIG instance on the dynamic GPUs is held by a prepared claim");
    return;
  }
  std::string detail;
  for (const auto& o : orphans) detail += (detail.empty() ? "" : "; ") + dra::DescribeOrphan(o);
  f.Add(Level::kWarn, "dynamic MIG orphans", detail,
        "destroy them with nvidia-smi mig -dci/-dgi, or set danqing.draDynamicMigDestroyOrphans "
        "and restart the agent");
}

}  // namespace

std::vector<Finding> RunDoctor(const Result<config::Config>& config, const BackendFactory& factory,
                               const DoctorOptions& options) {
  Findings f;
  config::Config cfg;
  if (config.ok()) {
    cfg = *config;
    f.Add(Level::kOk, "configuration",
          cfg.source.empty() ? "valid (no config file; flags, environment and defaults)" : cfg.source + " is valid");
    if (auto h = HealthOptionsFrom(cfg); h.ok()) {
      f.Add(Level::kInfo, "health checks", h->monitor.policy.Describe());
    }
  } else {
    f.Add(Level::kFail, "configuration", config.status().ToString(),
          "fix the setting named above (docs/configuration.md); the checks below use the defaults");
  }
  CheckGpus(cfg, factory, f);
  CheckKubelet(cfg, f);
  CheckCdi(cfg, options, f);
  CheckDra(cfg, options, f);
  CheckDynamicMig(cfg, factory, f);
  return f.list;
}

std::string RenderFindings(const std::vector<Finding>& findings) {
  std::string out;
  int fails = 0, warns = 0;
  for (const auto& x : findings) {
    out += std::string(Tag(x.level)) + " " + x.check + ": " + x.detail + "\n";
    if (!x.fix.empty()) out += "       fix: " + x.fix + "\n";
    fails += x.level == Level::kFail;
    warns += x.level == Level::kWarn;
  }
  out += std::to_string(findings.size()) + " checks: " + std::to_string(fails) + " failed, " +
         std::to_string(warns) + " warnings\n";
  return out;
}

bool AnyFailed(const std::vector<Finding>& findings) {
  return std::any_of(findings.begin(), findings.end(), [](const Finding& f) { return f.level == Finding::Level::kFail; });
}

}  // namespace danqing::agent
