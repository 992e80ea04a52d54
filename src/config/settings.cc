// The table of scalar settings and the generic code that applies them; see
// settings.h. docs/configuration.md documents every row.
//
// Thread-safety: the table is a function-local static, immutable once built.
#include "config/settings.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "config/values.h"

namespace danqing::config::internal {
namespace {

// Reasons shown by AcceptedButIgnored().
constexpr std::string_view kIgnoredGds =
    "Danqing does not set up GPUDirect Storage (NVIDIA_GDS) for containers";
constexpr std::string_view kIgnoredMofed =
    "Danqing does not set up MOFED (NVIDIA_MOFED) for containers";
constexpr std::string_view kIgnoredGdrcopy = "Danqing does not set up GDRCopy for containers";
constexpr std::string_view kIgnoredNodeFeatureApi =
    "a GPU feature discovery setting; Danqing does not run GFD";
constexpr std::string_view kIgnoredDiscovery =
    "Danqing always discovers devices through NVML (libnvidia-ml.so.1)";
constexpr std::string_view kIgnoredMpsRoot = "Danqing does not run MPS (sharing.mps)";
constexpr std::string_view kIgnoredKubeletSocket =
    "Danqing registers with the kubelet socket in danqing.devicePluginPath";
constexpr std::string_view kIgnoredCdiFeatureFlags =
    "Danqing does not use NVIDIA's CDI spec generator feature flags";
constexpr std::string_view kIgnoredGfd =
    "a GPU feature discovery setting; Danqing does not run GFD";
constexpr std::string_view kIgnoredImex = "Danqing does not inject IMEX channels";
// --- Setters for enum-like and list settings --------------------------------

std::string SetMigStrategy(Config& c, std::string_view t) {
  const auto v = ParseMigStrategy(t);
  if (!v) {
    return "invalid MIG strategy " + Quote(t) + "; expected " +
           JoinAlternatives(MigStrategyNames());
  }
  c.flags.mig_strategy = *v;
  return "";
}
std::string GetMigStrategy(const Config& c) {
  return std::string(Name(c.flags.mig_strategy));
}

std::string SetDeviceIdStrategy(Config& c, std::string_view t) {
  const auto v = ParseDeviceIdStrategy(t);
  if (!v) {
    return "invalid device ID strategy " + Quote(t) + "; expected " +
           JoinAlternatives(DeviceIdStrategyNames());
  }
  c.flags.plugin.device_id_strategy = *v;
  return "";
}
std::string GetDeviceIdStrategy(const Config& c) {
  return std::string(Name(c.flags.plugin.device_id_strategy));
}

std::string SetDeviceDiscoveryStrategy(Config& c, std::string_view t) {
  const auto v = ParseDeviceDiscoveryStrategy(t);
  if (!v) {
    return "invalid device discovery strategy " + Quote(t) + "; expected " +
           JoinAlternatives(DeviceDiscoveryStrategyNames());
  }
  c.flags.device_discovery_strategy = *v;
  return "";
}
std::string GetDeviceDiscoveryStrategy(const Config& c) {
  return std::string(Name(c.flags.device_discovery_strategy));
}

std::string SetLogLevel(Config& c, std::string_view t) {
  const auto names = LogLevelNames();
  if (std::find(names.begin(), names.end(), t) == names.end()) {
    return "invalid log level " + Quote(t) + "; expected " + JoinAlternatives(names);
  }
  c.danqing.log_level = std::string(t);
  return "";
}
std::string GetLogLevel(const Config& c) {
  return c.danqing.log_level;
}

std::string SetReplicaPolicy(Config& c, std::string_view t) {
  if (t != "distributed" && t != "packed") {
    return "invalid replica policy " + Quote(t) + "; expected distributed or packed";
  }
  c.danqing.replica_policy = std::string(t);
  return "";
}
std::string GetReplicaPolicy(const Config& c) { return c.danqing.replica_policy; }

// draPluginDir: empty (the default under /var/lib/kubelet/plugins), or an
// absolute directory whose dra.sock fits a unix socket address.
std::string CheckDraPluginDir(std::string_view path) {
  if (path.empty()) return "";
  if (std::string reason = CheckAbsolutePath(path); !reason.empty()) return reason;
  if (path.size() + std::string_view("/dra.sock").size() > 107) {
    return "directory " + Quote(path) +
           " is too long for its dra.sock to be a unix socket address (107 bytes)";
  }
  return "";
}

std::string SetMode(Config& c, std::string_view t) {
  if (t != "device-plugin" && t != "dra" && t != "split") {
    return "invalid mode " + Quote(t) + "; expected device-plugin, dra or split";
  }
  c.danqing.mode = std::string(t);
  return "";
}
std::string GetMode(const Config& c) {
  return c.danqing.mode;
}

// A DRA driver name is a DNS subdomain: lower-case labels of [a-z0-9-],
// dot-separated, at most 253 characters, with at least one dot.
std::string SetDraDriverName(Config& c, std::string_view t) {
  bool ok = !t.empty() && t.size() <= 253 && t.find('.') != std::string_view::npos;
  size_t label = 0;
  for (size_t i = 0; ok && i <= t.size(); ++i) {
    const char ch = i < t.size() ? t[i] : '.';
    if (ch == '.') {
      ok = label > 0 && label <= 63 && t[i - 1] != '-' && t[i - label] != '-';
      label = 0;
    } else if ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-') {
      ++label;
    } else {
      ok = false;
    }
  }
  if (!ok)
    return "invalid DRA driver name " + Quote(t) +
           "; expected a DNS subdomain such as gpu.danqing.io";
  c.danqing.dra_driver_name = std::string(t);
  return "";
}
std::string GetDraDriverName(const Config& c) {
  return c.danqing.dra_driver_name;
}

std::string SetDraGpus(Config& c, const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const auto& item : items) {
    if (item.empty()) return "empty GPU in the DRA GPU list";
    if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
  }
  c.danqing.dra_gpus = std::move(out);
  return "";
}
std::vector<std::string> GetDraGpus(const Config& c) {
  return c.danqing.dra_gpus;
}

std::string SetDraDynamicMig(Config& c, const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const auto& item : items) {
    const bool digits = !item.empty() && std::all_of(item.begin(), item.end(),
                                                     [](char ch) { return ch >= '0' && ch <= '9'; });
    if (!(item == "all" || digits || item.rfind("GPU-", 0) == 0)) {
      return "dynamic MIG GPU " + Quote(item) + " is not an NVML index, a GPU UUID (GPU-...) or all";
    }
    if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
  }
  c.danqing.dra_dynamic_mig = std::move(out);
  return "";
}
std::vector<std::string> GetDraDynamicMig(const Config& c) {
  return c.danqing.dra_dynamic_mig;
}

std::string SetDeviceListStrategy(Config& c, const std::vector<std::string>& items) {
  if (items.empty()) {
    return "at least one device list strategy is required; expected " +
           JoinAlternatives(DeviceListStrategyNames());
  }
  std::vector<DeviceListStrategy> out;
  for (const std::string& item : items) {
    const auto v = ParseDeviceListStrategy(item);
    if (!v) {
      return "invalid device list strategy " + Quote(item) + "; expected " +
             JoinAlternatives(DeviceListStrategyNames());
    }
    if (std::find(out.begin(), out.end(), *v) == out.end()) out.push_back(*v);
  }
  c.flags.plugin.device_list_strategy = std::move(out);
  return "";
}
std::vector<std::string> GetDeviceListStrategy(const Config& c) {
  std::vector<std::string> out;
  for (const auto v : c.flags.plugin.device_list_strategy) out.emplace_back(Name(v));
  return out;
}

std::string SetCdiFeatureFlags(Config& c, const std::vector<std::string>& items) {
  c.flags.plugin.cdi_feature_flags = items;
  return "";
}
std::vector<std::string> GetCdiFeatureFlags(const Config& c) {
  return c.flags.plugin.cdi_feature_flags;
}

// --- The table ---------------------------------------------------------------

std::vector<Setting> BuildTable() {
  using CL = CommandLine;
  return {
      // flags: NVIDIA's shared settings.
      {.path = "flags.migStrategy",
       .flag = "mig-strategy",
       .env = "MIG_STRATEGY",
       .command_line = &CL::mig_strategy,
       .help = "How MIG devices are advertised: none, single or mixed",
       .binding = EnumField{SetMigStrategy, GetMigStrategy}},
      {.path = "flags.failOnInitError",
       .flag = "fail-on-init-error",
       .env = "FAIL_ON_INIT_ERROR",
       .command_line = &CL::fail_on_init_error,
       .help = "Exit when initialisation fails (no NVML, no GPUs); otherwise wait",
       .binding = BoolField{[](Config& c) -> bool& { return c.flags.fail_on_init_error; }}},
      {.path = "flags.nvidiaDriverRoot",
       .flag = "nvidia-driver-root",
       .flag_alias = "driver-root",
       .env = "NVIDIA_DRIVER_ROOT",
       .command_line = &CL::nvidia_driver_root,
       .help = "Root of the NVIDIA driver installation on the host ('/' or '/run/nvidia/driver')",
       .binding =
           StringField{[](Config& c) -> std::string& { return c.flags.nvidia_driver_root; }}},
      {.path = "flags.nvidiaDevRoot",
       .flag = "nvidia-dev-root",
       .flag_alias = "dev-root",
       .env = "NVIDIA_DEV_ROOT",
       .command_line = &CL::nvidia_dev_root,
       .help = "Root of the NVIDIA device nodes on the host (default: the driver root)",
       .binding = StringField{[](Config& c) -> std::string& { return c.flags.nvidia_dev_root; }}},
      {.path = "flags.mpsRoot",
       .flag = "mps-root",
       .env = "MPS_ROOT",
       .command_line = &CL::mps_root,
       .help = "Host directory for MPS daemon files (required by sharing.mps)",
       .binding = StringField{[](Config& c) -> std::string& { return c.flags.mps_root; }},
       .ignored_reason = kIgnoredMpsRoot},
      {.path = "flags.deviceDiscoveryStrategy",
       .flag = "device-discovery-strategy",
       .env = "DEVICE_DISCOVERY_STRATEGY",
       .command_line = &CL::device_discovery_strategy,
       .help = "How devices are discovered: auto, nvml or tegra",
       .binding = EnumField{SetDeviceDiscoveryStrategy, GetDeviceDiscoveryStrategy},
       .ignored_reason = kIgnoredDiscovery},
      {.path = "flags.gdsEnabled",
       .flag = "gds-enabled",
       .env = "GDS_ENABLED",
       .command_line = &CL::gds_enabled,
       .help = "Start containers with GPUDirect Storage enabled",
       .binding = BoolField{[](Config& c) -> bool& { return c.flags.gds_enabled; }},
       .ignored_reason = kIgnoredGds},
      {.path = "flags.mofedEnabled",
       .flag = "mofed-enabled",
       .env = "MOFED_ENABLED",
       .command_line = &CL::mofed_enabled,
       .help = "Start containers with MOFED enabled",
       .binding = BoolField{[](Config& c) -> bool& { return c.flags.mofed_enabled; }},
       .ignored_reason = kIgnoredMofed},
      {.path = "flags.gdrcopyEnabled",
       .flag = "gdrcopy-enabled",
       .env = "GDRCOPY_ENABLED",
       .command_line = &CL::gdrcopy_enabled,
       .help = "Start containers with GDRCopy enabled",
       .binding = BoolField{[](Config& c) -> bool& { return c.flags.gdrcopy_enabled; }},
       .ignored_reason = kIgnoredGdrcopy},
      {.path = "flags.useNodeFeatureAPI",
       .help = "GFD: publish labels through the NodeFeature API",
       .binding = BoolField{[](Config& c) -> bool& { return c.flags.use_node_feature_api; }},
       .ignored_reason = kIgnoredNodeFeatureApi},

      // flags.plugin: NVIDIA's device-plugin settings.
      {.path = "flags.plugin.passDeviceSpecs",
       .flag = "pass-device-specs",
       .env = "PASS_DEVICE_SPECS",
       .command_line = &CL::pass_device_specs,
       .help = "Pass the device nodes (DeviceSpecs) to the kubelet in Allocate",
       .binding = BoolField{[](Config& c) -> bool& { return c.flags.plugin.pass_device_specs; }}},
      {.path = "flags.plugin.deviceListStrategy",
       .flag = "device-list-strategy",
       .env = "DEVICE_LIST_STRATEGY",
       .command_line = &CL::device_list_strategy,
       .help = "How the device list reaches the container runtime, one or more of: envvar, "
               "volume-mounts, cdi-annotations, cdi-cri",
       .binding = ListField{SetDeviceListStrategy, GetDeviceListStrategy}},
      {.path = "flags.plugin.deviceIDStrategy",
       .flag = "device-id-strategy",
       .env = "DEVICE_ID_STRATEGY",
       .command_line = &CL::device_id_strategy,
       .help = "How devices are named to the container runtime: uuid or index",
       .binding = EnumField{SetDeviceIdStrategy, GetDeviceIdStrategy}},
      {.path = "flags.plugin.cdiAnnotationPrefix",
       .flag = "cdi-annotation-prefix",
       .env = "CDI_ANNOTATION_PREFIX",
       .command_line = &CL::cdi_annotation_prefix,
       .help = "Prefix of the CDI annotation keys (cdi-annotations strategy)",
       .binding = StringField{[](Config& c) -> std::string& {
         return c.flags.plugin.cdi_annotation_prefix;
       }}},
      {.path = "flags.plugin.nvidiaCTKPath",
       .flag = "nvidia-ctk-path",
       .flag_alias = "nvidia-cdi-hook-path",
       .env = "NVIDIA_CTK_PATH",
       .env_alias = "NVIDIA_CDI_HOOK_PATH",
       .command_line = &CL::nvidia_ctk_path,
       .help = "Host path of the CDI hook (nvidia-ctk or nvidia-cdi-hook) written into the CDI spec; "
               "empty: no hooks",
       .binding =
           StringField{[](Config& c) -> std::string& { return c.flags.plugin.nvidia_ctk_path; }, CheckHookPath}},
      {.path = "flags.plugin.containerDriverRoot",
       .flag = "container-driver-root",
       .flag_alias = "driver-root-ctr-path",
       .env = "CONTAINER_DRIVER_ROOT",
       .env_alias = "DRIVER_ROOT_CTR_PATH",
       .command_line = &CL::container_driver_root,
       .help = "Where the host's driver root is mounted inside this container (NVML is loaded, and the "
               "CDI spec's driver files found, from there)",
       .binding = StringField{[](Config& c) -> std::string& {
         return c.flags.plugin.container_driver_root;
       }}},
      {.path = "flags.plugin.kubeletSocket",
       .flag = "kubelet-socket",
       .env = "KUBELET_SOCKET",
       .command_line = &CL::kubelet_socket,
       .help = "NVIDIA: the kubelet's registration socket",
       .binding =
           StringField{[](Config& c) -> std::string& { return c.flags.plugin.kubelet_socket; }},
       .ignored_reason = kIgnoredKubeletSocket},
      {.path = "flags.plugin.cdiFeatureFlags",
       .flag = "cdi-feature-flags",
       .env = "CDI_FEATURE_FLAGS",
       .command_line = &CL::cdi_feature_flags,
       .help = "NVIDIA: feature flags for CDI spec generation",
       .binding = ListField{SetCdiFeatureFlags, GetCdiFeatureFlags},
       .ignored_reason = kIgnoredCdiFeatureFlags},

      // flags.gfd: GPU feature discovery's settings (the file is shared with GFD).
      {.path = "flags.gfd.oneshot",
       .help = "GFD: label once and exit",
       .binding = BoolField{[](Config& c) -> bool& { return c.flags.gfd.oneshot; }},
       .ignored_reason = kIgnoredGfd},
      {.path = "flags.gfd.noTimestamp",
       .help = "GFD: omit the timestamp label",
       .binding = BoolField{[](Config& c) -> bool& { return c.flags.gfd.no_timestamp; }},
       .ignored_reason = kIgnoredGfd},
      {.path = "flags.gfd.sleepInterval",
       .help = "GFD: time between labelling passes",
       .binding = DurationField{[](Config& c) -> Duration& { return c.flags.gfd.sleep_interval; },
                                /*number_is_nanoseconds=*/true},
       .ignored_reason = kIgnoredGfd},
      {.path = "flags.gfd.outputFile",
       .help = "GFD: where labels are written",
       .binding = StringField{[](Config& c) -> std::string& { return c.flags.gfd.output_file; }},
       .ignored_reason = kIgnoredGfd},
      {.path = "flags.gfd.machineTypeFile",
       .help = "GFD: file holding the machine type",
       .binding =
           StringField{[](Config& c) -> std::string& { return c.flags.gfd.machine_type_file; }},
       .ignored_reason = kIgnoredGfd},

      // imex: IMEX channels.
      {.path = "imex.channelIDs",
       .flag = "imex-channel-ids",
       .env = "IMEX_CHANNEL_IDS",
       .command_line = &CL::imex_channel_ids,
       .help = "IMEX channels to inject into containers: none or 0",
       .binding = IntListField{[](Config& c) -> std::vector<int>& { return c.imex.channel_ids; }},
       .ignored_reason = kIgnoredImex},
      {.path = "imex.required",
       .flag = "imex-required",
       .env = "IMEX_REQUIRED",
       .command_line = &CL::imex_required,
       .help = "Fail when the requested IMEX channels do not exist",
       .binding = BoolField{[](Config& c) -> bool& { return c.imex.required; }},
       .ignored_reason = kIgnoredImex},

      // danqing: Danqing's own settings.
      {.path = "danqing.devicePluginPath",
       .flag = "device-plugin-path",
       .env = "DANQING_DEVICE_PLUGIN_PATH",
       .command_line = &CL::device_plugin_path,
       .help = "Kubelet device-plugin directory: kubelet.sock and the plugin sockets",
       .binding =
           StringField{[](Config& c) -> std::string& { return c.danqing.device_plugin_path; },
                       CheckAbsolutePath},
       .nvidia = false},
      {.path = "danqing.podResourcesSocket",
       .flag = "pod-resources-socket",
       .env = "DANQING_POD_RESOURCES_SOCKET",
       .command_line = &CL::pod_resources_socket,
       .help = "Kubelet pod-resources API socket (which pod holds which device)",
       .binding =
           StringField{[](Config& c) -> std::string& { return c.danqing.pod_resources_socket; },
                       CheckSocketPath},
       .nvidia = false},
      {.path = "danqing.nvmlLib",
       .flag = "nvml-lib",
       .env = "DANQING_NVML_LIB",
       .command_line = &CL::nvml_lib,
       .help = "Path of libnvidia-ml.so.1 (default: the dynamic linker's search path)",
       .binding = StringField{[](Config& c) -> std::string& { return c.danqing.nvml_lib; }},
       .nvidia = false},
      {.path = "danqing.sysfsRoot",
       .flag = "sysfs-root",
       .env = "DANQING_SYSFS_ROOT",
       .command_line = &CL::sysfs_root,
       .help = "Where the host's sysfs is mounted; GPU NUMA nodes are read from its PCI devices",
       .binding = StringField{[](Config& c) -> std::string& { return c.danqing.sysfs_root; },
                              CheckAbsolutePath},
       .nvidia = false},
      {.path = "danqing.cdiRoot",
       .flag = "cdi-root",
       .env = "DANQING_CDI_ROOT",
       .command_line = &CL::cdi_root,
       .help = "Directory for the CDI specs Danqing writes",
       .binding = StringField{[](Config& c) -> std::string& { return c.danqing.cdi_root; },
                              CheckAbsolutePath},
       .nvidia = false},
      {.path = "danqing.healthCheckInterval",
       .flag = "health-check-interval",
       .env = "DANQING_HEALTH_CHECK_INTERVAL",
       .command_line = &CL::health_check_interval,
       .help = "How often GPU health is polled (Go duration: 500ms, 1s, 1m)",
       .binding =
           DurationField{[](Config& c) -> Duration& { return c.danqing.health_check_interval; },
                         /*number_is_nanoseconds=*/false, /*positive=*/true},
       .nvidia = false},
      {.path = "danqing.metricsAddr",
       .flag = "metrics-addr",
       .env = "DANQING_METRICS_ADDR",
       .command_line = &CL::metrics_addr,
       .help = "Listen address of the Prometheus /metrics endpoint",
       .binding = StringField{[](Config& c) -> std::string& { return c.danqing.metrics_addr; },
                              CheckListenAddress},
       .nvidia = false},
      {.path = "danqing.logLevel",
       .flag = "log-level",
       .env = "DANQING_LOG_LEVEL",
       .command_line = &CL::log_level,
       .help = "Log level: trace, debug, info, warn, error, critical or off",
       .binding = EnumField{SetLogLevel, GetLogLevel},
       .nvidia = false},
      {.path = "danqing.nodeFeaturesFile",
       .flag = "node-features-file",
       .env = "DANQING_NODE_FEATURES_FILE",
       .command_line = &CL::node_features_file,
       .help = "node-feature-discovery features file for GPU node labels (empty: none)",
       .binding = StringField{[](Config& c) -> std::string& { return c.danqing.node_features_file; }},
       .nvidia = false},
      {.path = "danqing.replicaPolicy",
       .flag = "replica-policy",
       .env = "DANQING_REPLICA_POLICY",
       .command_line = &CL::replica_policy,
       .help = "Placement of time-sliced replicas: distributed (spread over GPUs) or packed (fill one GPU first)",
       .binding = EnumField{SetReplicaPolicy, GetReplicaPolicy},
       .nvidia = false},
      {.path = "danqing.disableHealthChecks",
       .flag = "disable-health-checks",
       .env = "DP_DISABLE_HEALTHCHECKS",
       .command_line = &CL::disable_health_checks,
       .help = "XIDs that do not mark a GPU unhealthy (besides application errors): comma-separated, "
               "or \"xids\" (no XID counts) or \"all\" (no health checks at all)",
       .binding = StringField{[](Config& c) -> std::string& { return c.danqing.disable_health_checks; },
                              CheckXidSelection},
       .nvidia = false},
      {.path = "danqing.enableHealthChecks",
       .flag = "enable-health-checks",
       .env = "DP_ENABLE_HEALTHCHECKS",
       .command_line = &CL::enable_health_checks,
       .help = "XIDs that mark a GPU unhealthy even if ignored otherwise: comma-separated, or \"all\"",
       .binding = StringField{[](Config& c) -> std::string& { return c.danqing.enable_health_checks; },
                              CheckXidSelection},
       .nvidia = false},
      {.path = "danqing.resetXids",
       .flag = "reset-xids",
       .env = "DANQING_RESET_XIDS",
       .command_line = &CL::reset_xids,
       .help = "XIDs that need a GPU reset (never recover on their own), added to the built-in list",
       .binding = IntListField{[](Config& c) -> std::vector<int>& { return c.danqing.reset_xids; }},
       .nvidia = false},
      {.path = "danqing.xidQuietPeriod",
       .flag = "xid-quiet-period",
       .env = "DANQING_XID_QUIET_PERIOD",
       .command_line = &CL::xid_quiet_period,
       .help = "A GPU marked unhealthy by a recoverable XID or ECC growth is healthy again after this long "
               "without a new one (Go duration)",
       .binding = DurationField{[](Config& c) -> Duration& { return c.danqing.xid_quiet_period; }},
       .nvidia = false},
      {.path = "danqing.initRetryInterval",
       .flag = "init-retry-interval",
       .env = "DANQING_INIT_RETRY_INTERVAL",
       .command_line = &CL::init_retry_interval,
       .help = "With failOnInitError=false: how often NVML is retried while no GPU is served (Go duration)",
       .binding = DurationField{[](Config& c) -> Duration& { return c.danqing.init_retry_interval; },
                                /*number_is_nanoseconds=*/false, /*positive=*/true},
       .nvidia = false},
      {.path = "danqing.mode",
       .flag = "mode",
       .env = "DANQING_MODE",
       .command_line = &CL::mode,
       .help = "How GPUs are offered: device-plugin, dra (a DRA driver), or split (danqing.draGpus "
               "through DRA)",
       .binding = EnumField{SetMode, GetMode},
       .nvidia = false},
      {.path = "danqing.draDriverName",
       .flag = "dra-driver-name",
       .env = "DANQING_DRA_DRIVER_NAME",
       .command_line = &CL::dra_driver_name,
       .help = "The DRA driver's name (a DNS subdomain)",
       .binding = EnumField{SetDraDriverName, GetDraDriverName},
       .nvidia = false},
      {.path = "danqing.draGpus",
       .flag = "dra-gpus",
       .env = "DANQING_DRA_GPUS",
       .command_line = &CL::dra_gpus,
       .help = "In split mode, the GPUs served through DRA (UUIDs or NVML indices); the others "
               "stay with the "
               "device plugin",
       .binding = ListField{SetDraGpus, GetDraGpus},
       .nvidia = false},
      {.path = "danqing.draPluginsRegistry",
       .flag = "dra-plugins-registry",
       .env = "DANQING_DRA_PLUGINS_REGISTRY",
       .command_line = &CL::dra_plugins_registry,
       .help = "The kubelet's plugin registration directory",
       .binding =
           StringField{[](Config& c) -> std::string& { return c.danqing.dra_plugins_registry; },
                       CheckAbsolutePath},
       .nvidia = false},
      {.path = "danqing.draPluginDir",
       .flag = "dra-plugin-dir",
       .env = "DANQING_DRA_PLUGIN_DIR",
       .command_line = &CL::dra_plugin_dir,
       .help = "Directory of the DRA socket dra.sock (default /var/lib/kubelet/plugins/<driver>)",
       .binding = StringField{[](Config& c) -> std::string& { return c.danqing.dra_plugin_dir; },
                              CheckDraPluginDir},
       .nvidia = false},
      {.path = "danqing.draCheckpointDir",
       .flag = "dra-checkpoint-dir",
       .env = "DANQING_DRA_CHECKPOINT_DIR",
       .command_line = &CL::dra_checkpoint_dir,
       .help = "Persistent directory of the prepared-claims checkpoint",
       .binding =
           StringField{[](Config& c) -> std::string& { return c.danqing.dra_checkpoint_dir; },
                       CheckAbsolutePath},
       .nvidia = false},
      {.path = "danqing.draClaimsFile",
       .flag = "dra-claims-file",
       .env = "DANQING_DRA_CLAIMS_FILE",
       .command_line = &CL::dra_claims_file,
       .help = "Without an API server (no --kubeconfig, not in a pod): a ResourceClaim list "
               "(JSON) to read claims from",
       .binding = StringField{[](Config& c) -> std::string& { return c.danqing.dra_claims_file; }},
       .nvidia = false},
      {.path = "danqing.draDynamicMig",
       .flag = "dra-dynamic-mig",
       .env = "DANQING_DRA_DYNAMIC_MIG",
       .command_line = &CL::dra_dynamic_mig,
       .help = "GPUs in MIG mode whose MIG instances are created per claim (dynamic MIG): NVML "
               "indices, GPU UUIDs, or all",
       .binding = ListField{SetDraDynamicMig, GetDraDynamicMig},
       .nvidia = false},
      {.path = "danqing.draDynamicMigDestroyOrphans",
       .flag = "dra-dynamic-mig-destroy-orphans",
       .env = "DANQING_DRA_DYNAMIC_MIG_DESTROY_ORPHANS",
       .command_line = &CL::dra_dynamic_mig_destroy_orphans,
       .help = "Destroy MIG instances on dynamic-MIG GPUs that no prepared claim holds",
       .binding = BoolField{
           [](Config& c) -> bool& { return c.danqing.dra_dynamic_mig_destroy_orphans; }},
       .nvidia = false},
      {.path = "danqing.nodeName",
       .flag = "node-name",
       .env = "NODE_NAME",
       .command_line = &CL::node_name,
       .help = "This node's name: the DRA pool name (from the downward API)",
       .binding = StringField{[](Config& c) -> std::string& { return c.danqing.node_name; }},
       .nvidia = false},
      {.path = "danqing.kubeconfig",
       .flag = "kubeconfig",
       .env = "KUBECONFIG",
       .command_line = &CL::kubeconfig,
       .help = "DRA modes out of cluster: the kubeconfig of the API server to publish "
               "ResourceSlices to and read ResourceClaims from (in a pod: the service account)",
       .binding = StringField{[](Config& c) -> std::string& { return c.danqing.kubeconfig; }},
       .nvidia = false},
  };
}

template <typename... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <typename... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

// Reading through the mutable accessor is fine: nothing is written.
template <typename T>
const T& Read(T& (*ref)(Config&), const Config& c) {
  return ref(const_cast<Config&>(c));
}

std::string DurationReason(std::string_view text) {
  return "invalid duration " + Quote(text) +
         "; expected a number with a unit (ns, us, ms, s, m, h), e.g. \"500ms\", \"1s\", \"1m30s\"";
}

std::string ApplyDuration(const DurationField& f, Duration d, Config& c) {
  if (f.positive && d <= Duration::zero()) {
    return "duration must be greater than zero, got " + Quote(FormatDuration(d));
  }
  if (!f.positive && d < Duration::zero()) {
    return "duration must not be negative, got " + Quote(FormatDuration(d));
  }
  f.ref(c) = d;
  return "";
}

std::optional<int> ToInt(std::string_view text) {
  const auto v = ParseInteger(text);
  if (!v || *v < std::numeric_limits<int>::min() || *v > std::numeric_limits<int>::max()) {
    return std::nullopt;
  }
  return static_cast<int>(*v);
}

std::optional<NodeProblem> Problem(const YamlNode& at, std::string reason,
                                   std::string suffix = "") {
  return NodeProblem{&at, std::move(suffix), std::move(reason)};
}

}  // namespace

const std::vector<Setting>& Settings() {
  static const std::vector<Setting> table = BuildTable();
  return table;
}

const Setting* FindSetting(std::string_view path) {
  for (const Setting& s : Settings()) {
    if (s.path == path) return &s;
  }
  return nullptr;
}

bool IsTableSection(std::string_view path) {
  const std::string prefix = std::string(path) + ".";
  return std::any_of(Settings().begin(), Settings().end(),
                     [&](const Setting& s) { return s.path.substr(0, prefix.size()) == prefix; });
}

std::vector<std::string_view> TableChildren(std::string_view section) {
  const std::string prefix = std::string(section) + ".";
  std::vector<std::string_view> out;
  for (const Setting& s : Settings()) {
    if (s.path.substr(0, prefix.size()) != prefix) continue;
    std::string_view rest = s.path.substr(prefix.size());
    rest = rest.substr(0, rest.find('.'));
    if (std::find(out.begin(), out.end(), rest) == out.end()) out.push_back(rest);
  }
  return out;
}

std::string Describe(const YamlNode& node) {
  switch (node.kind) {
    case YamlNode::Kind::kNull: return "null";
    case YamlNode::Kind::kSequence: return "a list";
    case YamlNode::Kind::kMapping: return "a mapping";
    case YamlNode::Kind::kScalar: break;
  }
  if (node.plain) {
    switch (ResolvePlain(node.scalar)) {
      case PlainType::kBool: return "boolean " + node.scalar;
      case PlainType::kInt: return "integer " + node.scalar;
      case PlainType::kFloat: return "number " + node.scalar;
      case PlainType::kNull: return "null";
      case PlainType::kString: break;
    }
  }
  return "string " + Quote(node.scalar);
}

std::optional<NodeProblem> ApplyNode(const Setting& s, const YamlNode& value, Config& config) {
  return std::visit(
      Overloaded{
          [&](const StringField& f) -> std::optional<NodeProblem> {
            // Like NVIDIA's parser, any scalar is taken as text for a string.
            if (!value.is_scalar())
              return Problem(value, "expected a string, got " + Describe(value));
            if (f.check) {
              if (std::string reason = f.check(value.scalar); !reason.empty()) {
                return Problem(value, std::move(reason));
              }
            }
            f.ref(config) = value.scalar;
            return std::nullopt;
          },
          [&](const BoolField& f) -> std::optional<NodeProblem> {
            const auto b = value.is_scalar() && value.plain ? YamlBool(value.scalar) : std::nullopt;
            if (!b)
              return Problem(value, "expected a boolean (true or false), got " + Describe(value));
            f.ref(config) = *b;
            return std::nullopt;
          },
          [&](const DurationField& f) -> std::optional<NodeProblem> {
            if (!value.is_scalar()) {
              return Problem(value, "expected a duration such as \"1s\", got " + Describe(value));
            }
            std::optional<Duration> d;
            if (value.plain && ResolvePlain(value.scalar) == PlainType::kInt) {
              if (!f.number_is_nanoseconds) {
                return Problem(value, "a bare number has no unit; write a duration such as " +
                                          Quote(value.scalar + "s") + " or " +
                                          Quote(value.scalar + "ms"));
              }
              const auto n = ParseInteger(value.scalar);
              if (!n) return Problem(value, "duration " + value.scalar + " is out of range");
              d = Duration(*n);
            } else {
              d = ParseDuration(value.scalar);
              if (!d) return Problem(value, DurationReason(value.scalar));
            }
            if (std::string reason = ApplyDuration(f, *d, config); !reason.empty()) {
              return Problem(value, std::move(reason));
            }
            return std::nullopt;
          },
          [&](const EnumField& f) -> std::optional<NodeProblem> {
            if (!value.is_scalar())
              return Problem(value, "expected a string, got " + Describe(value));
            if (std::string reason = f.set(config, value.scalar); !reason.empty()) {
              return Problem(value, std::move(reason));
            }
            return std::nullopt;
          },
          [&](const ListField& f) -> std::optional<NodeProblem> {
            std::vector<std::string> items;
            if (value.is_scalar()) {
              items.push_back(value.scalar);
            } else if (value.is_sequence()) {
              for (std::size_t i = 0; i < value.items.size(); ++i) {
                const YamlNode& item = value.items[i];
                if (!item.is_scalar()) {
                  return Problem(item, "expected a string, got " + Describe(item),
                                 "[" + std::to_string(i) + "]");
                }
                items.push_back(item.scalar);
              }
            } else {
              return Problem(value,
                             "expected a string or a list of strings, got " + Describe(value));
            }
            if (std::string reason = f.set(config, items); !reason.empty()) {
              // Point at the offending item when there is one.
              if (value.is_sequence()) {
                for (std::size_t i = 0; i < items.size(); ++i) {
                  if (reason.find(Quote(items[i])) != std::string::npos) {
                    return Problem(value.items[i], std::move(reason),
                                   "[" + std::to_string(i) + "]");
                  }
                }
              }
              return Problem(value, std::move(reason));
            }
            return std::nullopt;
          },
          [&](const IntListField& f) -> std::optional<NodeProblem> {
            if (!value.is_sequence()) {
              return Problem(value, "expected a list of integers, got " + Describe(value));
            }
            std::vector<int> out;
            for (std::size_t i = 0; i < value.items.size(); ++i) {
              const YamlNode& item = value.items[i];
              const bool is_int =
                  item.is_scalar() && item.plain && ResolvePlain(item.scalar) == PlainType::kInt;
              const auto v = is_int ? ToInt(item.scalar) : std::nullopt;
              if (!v) {
                return Problem(item, "expected an integer, got " + Describe(item),
                               "[" + std::to_string(i) + "]");
              }
              out.push_back(*v);
            }
            f.ref(config) = std::move(out);
            return std::nullopt;
          },
      },
      s.binding);
}

std::string ApplyText(const Setting& s, std::string_view text, Config& config) {
  return std::visit(
      Overloaded{
          [&](const StringField& f) -> std::string {
            if (f.check) {
              if (std::string reason = f.check(text); !reason.empty()) return reason;
            }
            f.ref(config) = std::string(text);
            return "";
          },
          [&](const BoolField& f) -> std::string {
            const auto b = ParseBool(text);
            if (!b) {
              return "invalid boolean " + Quote(text) +
                     "; expected true/false, 1/0, yes/no, y/n, t/f or on/off";
            }
            f.ref(config) = *b;
            return "";
          },
          [&](const DurationField& f) -> std::string {
            const auto d = ParseDuration(TrimBlanks(text));
            if (!d) return DurationReason(text);
            return ApplyDuration(f, *d, config);
          },
          [&](const EnumField& f) -> std::string { return f.set(config, TrimBlanks(text)); },
          [&](const ListField& f) -> std::string {
            std::vector<std::string> items = SplitList(text);
            if (items.size() == 1 && items[0].empty()) items.clear();
            for (const std::string& item : items) {
              if (item.empty()) return "empty item in list " + Quote(text);
            }
            return f.set(config, items);
          },
          [&](const IntListField& f) -> std::string {
            std::vector<int> out;
            if (!TrimBlanks(text).empty()) {
              for (const std::string& item : SplitList(text)) {
                const auto v = ToInt(item);
                if (!v) return "invalid integer " + Quote(item) + " in list " + Quote(text);
                out.push_back(*v);
              }
            }
            f.ref(config) = std::move(out);
            return "";
          },
      },
      s.binding);
}

std::string ValueText(const Setting& s, const Config& config) {
  return std::visit(
      Overloaded{
          [&](const StringField& f) -> std::string { return Read(f.ref, config); },
          [&](const BoolField& f) -> std::string { return Read(f.ref, config) ? "true" : "false"; },
          [&](const DurationField& f) -> std::string {
            return FormatDuration(Read(f.ref, config));
          },
          [&](const EnumField& f) -> std::string { return f.get(config); },
          [&](const ListField& f) -> std::string {
            std::string out;
            for (const std::string& item : f.get(config)) {
              out += (out.empty() ? "" : ",") + item;
            }
            return out;
          },
          [&](const IntListField& f) -> std::string {
            std::string out;
            for (const int v : Read(f.ref, config)) {
              out += (out.empty() ? "" : ",") + std::to_string(v);
            }
            return out;
          },
      },
      s.binding);
}

std::string ValueYaml(const Setting& s, const Config& config) {
  return std::visit(
      Overloaded{
          [&](const StringField& f) -> std::string { return Quote(Read(f.ref, config)); },
          [&](const BoolField& f) -> std::string { return Read(f.ref, config) ? "true" : "false"; },
          [&](const DurationField& f) -> std::string {
            return Quote(FormatDuration(Read(f.ref, config)));
          },
          [&](const EnumField& f) -> std::string { return Quote(f.get(config)); },
          [&](const ListField& f) -> std::string {
            std::string out = "[";
            for (const std::string& item : f.get(config)) {
              out += (out.size() > 1 ? ", " : "") + Quote(item);
            }
            return out + "]";
          },
          [&](const IntListField& f) -> std::string {
            std::string out = "[";
            for (const int v : Read(f.ref, config)) {
              out += (out.size() > 1 ? ", " : "") + std::to_string(v);
            }
            return out + "]";
          },
      },
      s.binding);
}

FlagKind KindOf(const Setting& s) {
  return std::visit(Overloaded{
                        [](const StringField&) { return FlagKind::kString; },
                        [](const BoolField&) { return FlagKind::kBool; },
                        [](const DurationField&) { return FlagKind::kDuration; },
                        [](const EnumField&) { return FlagKind::kString; },
                        [](const ListField&) { return FlagKind::kList; },
                        [](const IntListField&) { return FlagKind::kList; },
                    },
                    s.binding);
}

}  // namespace danqing::config::internal
