// Danqing's configuration: NVIDIA k8s-device-plugin's config file (schema
// version v1) accepted as it is, plus Danqing's own `danqing:` section, and
// the resolution of command-line flags > environment variables > config file.
//
// The file schema follows NVIDIA's api/config/v1 field for field (camelCase
// names, defaults, validation), so an existing ConfigMap works unchanged, but
// parsing is strict: unknown fields, wrong types and bad values are errors
// that name the file, the field path (`sharing.timeSlicing.resources[0].replicas`)
// and the line and column. Fields NVIDIA has but Danqing does not act on are
// accepted and listed by AcceptedButIgnored() so the caller can log them.
// docs/configuration.md is the user-facing reference.
//
// Error contract: every function returns Status/Result; no exception escapes.
// Malformed or invalid input is INVALID_ARGUMENT; a missing file NOT_FOUND; an
// unreadable one PERMISSION_DENIED or INVALID_ARGUMENT (e.g. a directory).
//
// Thread-safety: Config, CommandLine, FlagSpec and IgnoredSetting are values.
// All functions are reentrant and share no mutable state; FlagTable() returns
// an immutable table. ProcessEnvironment()'s lookup calls getenv(), which must
// not race with setenv()/putenv() in other threads.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace danqing::config {

// The only schema version there is (NVIDIA's `version: v1`).
inline constexpr std::string_view kVersion = "v1";

// Durations use Go's syntax in text ("1s", "500ms", "1m30s"), like NVIDIA.
using Duration = std::chrono::nanoseconds;

enum class MigStrategy { kNone, kSingle, kMixed };
enum class DeviceListStrategy { kEnvvar, kVolumeMounts, kCdiAnnotations, kCdiCri };
enum class DeviceIdStrategy { kUuid, kIndex };
enum class DeviceDiscoveryStrategy { kAuto, kNvml, kTegra };
enum class SharingStrategy { kNone, kTimeSlicing, kMps };

// The spelling used in files, flags and environment variables ("mixed",
// "volume-mounts", "uuid", "auto", "time-slicing").
std::string_view Name(MigStrategy v);
std::string_view Name(DeviceListStrategy v);
std::string_view Name(DeviceIdStrategy v);
std::string_view Name(DeviceDiscoveryStrategy v);
std::string_view Name(SharingStrategy v);

// flags.plugin: settings of the device plugin proper (NVIDIA-compatible).
struct PluginFlags {
  bool pass_device_specs = false;  // passDeviceSpecs
  // deviceListStrategy: a string or a list in files; never empty.
  std::vector<DeviceListStrategy> device_list_strategy{DeviceListStrategy::kEnvvar};
  DeviceIdStrategy device_id_strategy = DeviceIdStrategy::kUuid;  // deviceIDStrategy
  std::string cdi_annotation_prefix = "cdi.k8s.io/";              // cdiAnnotationPrefix
  std::string nvidia_ctk_path = "/usr/bin/nvidia-ctk";            // nvidiaCTKPath
  std::string container_driver_root = "/driver-root";             // containerDriverRoot
  // Accepted, ignored by Danqing (see AcceptedButIgnored()):
  std::string kubelet_socket = "/var/lib/kubelet/device-plugins/kubelet.sock";  // kubeletSocket
  std::vector<std::string> cdi_feature_flags;                                   // cdiFeatureFlags

  bool operator==(const PluginFlags&) const = default;
};

// flags.gfd: GPU feature discovery's settings. Accepted (the file is shared
// with GFD), ignored by Danqing.
struct GfdFlags {
  bool oneshot = false;
  bool no_timestamp = false;
  Duration sleep_interval = std::chrono::seconds(60);
  std::string output_file = "/etc/kubernetes/node-feature-discovery/features.d/gfd";
  std::string machine_type_file = "/sys/class/dmi/id/product_name";

  bool operator==(const GfdFlags&) const = default;
};

// flags: NVIDIA's command-line-equivalent settings.
struct Flags {
  MigStrategy mig_strategy = MigStrategy::kNone;  // migStrategy
  bool fail_on_init_error = true;                 // failOnInitError
  std::string nvidia_driver_root = "/";           // nvidiaDriverRoot
  // nvidiaDevRoot; Resolve() sets it to nvidia_driver_root when left empty.
  std::string nvidia_dev_root;
  std::string mps_root;  // mpsRoot; required when sharing.mps is used
  DeviceDiscoveryStrategy device_discovery_strategy = DeviceDiscoveryStrategy::kAuto;
  // Accepted, ignored by Danqing (see AcceptedButIgnored()):
  bool gds_enabled = false;           // gdsEnabled
  bool mofed_enabled = false;         // mofedEnabled
  bool gdrcopy_enabled = false;       // gdrcopyEnabled
  bool use_node_feature_api = false;  // useNodeFeatureAPI
  PluginFlags plugin;
  GfdFlags gfd;

  bool operator==(const Flags&) const = default;
};

// resources.gpus[i] / resources.mig[i]: a device-name pattern and the
// resource it is advertised as. Accepted, ignored (NVIDIA ignores it too).
struct ResourcePattern {
  std::string pattern;
  std::string name;  // fully qualified: "nvidia.com/..."

  bool operator==(const ResourcePattern&) const = default;
};

struct Resources {
  std::vector<ResourcePattern> gpus;
  std::vector<ResourcePattern> mig;

  bool operator==(const Resources&) const = default;
};

// Which devices of a resource are replicated: all of them (the default), the
// first `count`, or an explicit list. A list holds either NVML indices ("0",
// "1:0" for MIG device 0 of GPU 1) or UUIDs ("GPU-...", "MIG-..."), never both.
struct ReplicatedDevices {
  enum class Kind { kAll, kCount, kList };
  Kind kind = Kind::kAll;
  int count = 0;                  // kCount: > 0
  std::vector<std::string> list;  // kList: non-empty, no duplicates

  bool operator==(const ReplicatedDevices&) const = default;
};

// sharing.<strategy>.resources[i].
struct ReplicatedResource {
  std::string name;    // fully qualified: "nvidia.com/gpu", "nvidia.com/mig-1g.5gb"
  std::string rename;  // advertised name; empty = `name`. renameByDefault fills
                       // in name + ".shared" when the file gives none.
  ReplicatedDevices devices;
  int replicas = 2;  // >= 2

  // The name the kubelet sees: rename, else name.
  const std::string& advertised_name() const { return rename.empty() ? name : rename; }

  bool operator==(const ReplicatedResource&) const = default;
};

// sharing.timeSlicing / sharing.mps.
struct ReplicatedResources {
  bool rename_by_default = false;
  // For sharing.mps the file's default is true (NVIDIA's behaviour).
  bool fail_requests_greater_than_one = false;
  std::vector<ReplicatedResource> resources;  // non-empty, unique names

  bool operator==(const ReplicatedResources&) const = default;
};

struct Sharing {
  std::optional<ReplicatedResources> time_slicing;
  // Accepted (NVIDIA's rules are checked), ignored: Danqing does not run MPS.
  std::optional<ReplicatedResources> mps;

  // NVIDIA's rule: MPS when configured, else time-slicing when configured.
  SharingStrategy strategy() const;
  // The resources of strategy(); nullptr for kNone.
  const ReplicatedResources* replicated() const;

  bool operator==(const Sharing&) const = default;
};

// imex: IMEX channels for fabric-attached GPUs. Accepted, ignored.
struct Imex {
  std::vector<int> channel_ids;  // [] or [0]
  bool required = false;

  bool operator==(const Imex&) const = default;
};

// danqing: Danqing's own settings (not in NVIDIA's schema; NVIDIA's parser
// skips the section, so one file can serve both). To add a setting: a field
// here, one row in settings.cc, and a line in docs/configuration.md.
struct DanqingSettings {
  std::string device_plugin_path = "/var/lib/kubelet/device-plugins";  // devicePluginPath
  std::string pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
  std::string nvml_lib;                   // nvmlLib; empty = dlopen("libnvidia-ml.so.1")
  // sysfsRoot: where the host's /sys is; a GPU's NUMA node is its PCI
  // device's numa_node there.
  std::string sysfs_root = "/sys";
  std::string cdi_root = "/var/run/cdi";  // cdiRoot
  Duration health_check_interval = std::chrono::seconds(1);  // healthCheckInterval; > 0
  std::string metrics_addr = ":9400";                        // metricsAddr; "[host]:port"
  std::string log_level = "info";  // logLevel: trace|debug|info|warn|error|critical|off
  // replicaPolicy: how a request for time-sliced replicas is placed:
  // "distributed" spreads over GPUs (least loaded first), "packed" fills one GPU first.
  std::string replica_policy = "distributed";
  // nodeFeaturesFile: where GPU node labels are written for node-feature-discovery
  // (its local source directory); empty = do not write labels.
  std::string node_features_file = "/etc/kubernetes/node-feature-discovery/features.d/danqing";
  // Health checks (src/health): NVIDIA's DP_DISABLE_HEALTHCHECKS and
  // DP_ENABLE_HEALTHCHECKS ("all", "xids" or comma-separated XIDs), XIDs that
  // need a GPU reset on top of the built-in ones, and how long a device must
  // go without a new error of the recoverable kind before it is healthy again.
  std::string disable_health_checks;  // disableHealthChecks
  std::string enable_health_checks;   // enableHealthChecks
  std::vector<int> reset_xids;        // resetXids
  Duration xid_quiet_period = std::chrono::minutes(5);  // xidQuietPeriod; >= 0
  // failOnInitError=false: how often NVML is retried while no GPU is served.
  Duration init_retry_interval = std::chrono::seconds(30);  // initRetryInterval; > 0
  // DRA (issue 25, docs/dra.md). mode: "device-plugin" (the default: every
  // GPU through the device plugin), "dra" (every GPU through the DRA driver,
  // no device plugin), or "split" (the GPUs named in draGpus through DRA, the
  // others through the device plugin; a GPU is never offered both ways).
  std::string mode = "device-plugin";              // mode
  std::string dra_driver_name = "gpu.danqing.io";  // draDriverName
  std::vector<std::string> dra_gpus;               // draGpus: split only; GPU UUIDs or NVML indices
  std::string dra_plugins_registry = "/var/lib/kubelet/plugins_registry";  // draPluginsRegistry
  std::string dra_plugin_dir;  // draPluginDir; empty = /var/lib/kubelet/plugins/<draDriverName>
  std::string dra_checkpoint_dir = "/var/lib/kubelet/plugins/gpu.danqing.io";  // draCheckpointDir
  // draClaimsFile: where no API server is configured, claims are read from
  // this file (`kubectl get resourceclaims -A -o json`); empty = every
  // prepare fails with "no source of claims".
  std::string dra_claims_file;
  // kubeconfig (KUBECONFIG): the API server of the DRA side (ResourceSlices
  // published, ResourceClaims read) out of cluster; empty = the pod's
  // service account when in a pod (KUBERNETES_SERVICE_HOST set), else none.
  std::string kubeconfig;
  std::string node_name;  // nodeName (NODE_NAME): the DRA pool name; required in dra/split
  // Dynamic MIG (issue 26, docs/dra.md#dynamic-mig-issue-26): GPUs in MIG mode whose
  // instances are created per claim. NVML indices, GPU UUIDs, or "all"; empty = none.
  // Needs mode dra or split.
  std::vector<std::string> dra_dynamic_mig;      // draDynamicMig
  bool dra_dynamic_mig_destroy_orphans = false;  // draDynamicMigDestroyOrphans

  bool operator==(const DanqingSettings&) const = default;
};

struct Config {
  std::string version{kVersion};
  Flags flags;
  Resources resources;
  Sharing sharing;
  Imex imex;
  DanqingSettings danqing;

  // The config file the values came from; empty when none was used.
  std::string source;
  // Where each explicitly set value came from, by config path
  // ("flags.migStrategy" -> "config.yaml:3:16", "environment MIG_STRATEGY",
  // "flag --mig-strategy"). Paths not present hold their defaults. Sections
  // parsed as a whole ("sharing.timeSlicing", "resources") have one entry.
  std::map<std::string, std::string> origin;

  bool operator==(const Config&) const = default;
};

// ---------------------------------------------------------------------------
// The file layer.

// Parses the text of a config file (YAML or JSON) over the defaults. `source`
// names the file in messages. Checks everything that concerns the file alone:
// schema, types, enum values, `version: v1` present, NVIDIA's value rules
// (replicas >= 2, resource names, device lists) and duplicate resources.
// Cross-setting checks that flags or environment could change are Validate()'s.
// INVALID_ARGUMENT: "<source>:<line>:<col>: <field path>: <reason>".
Result<Config> ParseConfig(std::string_view text, std::string_view source);

// Reads and parses a file; `source` in messages is `path`.
Result<Config> LoadConfigFile(const std::string& path);

// ---------------------------------------------------------------------------
// Flags > environment > file.

// Looks up an environment variable; nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(std::string_view)>;

// The process environment (getenv).
EnvLookup ProcessEnvironment();

// Values given on the command line, as text, unset when the flag was absent.
// The main fills it from its flag parser (FlagTable() names each field's flag)
// and Resolve() parses it exactly as it parses environment variables, so
// errors read the same. For a boolean flag given bare (`--pass-device-specs`)
// the main stores "true". A list flag given several times is joined with ','.
struct CommandLine {
  std::optional<std::string> config_file;  // --config-file

  // NVIDIA-compatible flags.
  std::optional<std::string> mig_strategy;               // --mig-strategy
  std::optional<std::string> fail_on_init_error;         // --fail-on-init-error
  std::optional<std::string> nvidia_driver_root;         // --nvidia-driver-root
  std::optional<std::string> nvidia_dev_root;            // --nvidia-dev-root
  std::optional<std::string> mps_root;                   // --mps-root
  std::optional<std::string> device_discovery_strategy;  // --device-discovery-strategy
  std::optional<std::string> gds_enabled;                // --gds-enabled
  std::optional<std::string> mofed_enabled;              // --mofed-enabled
  std::optional<std::string> gdrcopy_enabled;            // --gdrcopy-enabled
  std::optional<std::string> pass_device_specs;          // --pass-device-specs
  std::optional<std::string> device_list_strategy;       // --device-list-strategy
  std::optional<std::string> device_id_strategy;         // --device-id-strategy
  std::optional<std::string> cdi_annotation_prefix;      // --cdi-annotation-prefix
  std::optional<std::string> nvidia_ctk_path;            // --nvidia-ctk-path
  std::optional<std::string> container_driver_root;      // --container-driver-root
  std::optional<std::string> kubelet_socket;             // --kubelet-socket
  std::optional<std::string> cdi_feature_flags;          // --cdi-feature-flags
  std::optional<std::string> imex_channel_ids;           // --imex-channel-ids
  std::optional<std::string> imex_required;              // --imex-required

  // Danqing's flags.
  std::optional<std::string> device_plugin_path;     // --device-plugin-path
  std::optional<std::string> pod_resources_socket;   // --pod-resources-socket
  std::optional<std::string> nvml_lib;               // --nvml-lib
  std::optional<std::string> sysfs_root;             // --sysfs-root
  std::optional<std::string> cdi_root;               // --cdi-root
  std::optional<std::string> metrics_addr;           // --metrics-addr
  std::optional<std::string> health_check_interval;  // --health-check-interval
  std::optional<std::string> log_level;              // --log-level
  std::optional<std::string> replica_policy;         // --replica-policy
  std::optional<std::string> node_features_file;     // --node-features-file
  std::optional<std::string> disable_health_checks;  // --disable-health-checks
  std::optional<std::string> enable_health_checks;   // --enable-health-checks
  std::optional<std::string> reset_xids;             // --reset-xids
  std::optional<std::string> xid_quiet_period;       // --xid-quiet-period
  std::optional<std::string> init_retry_interval;    // --init-retry-interval
  std::optional<std::string> mode;                   // --mode
  std::optional<std::string> dra_driver_name;        // --dra-driver-name
  std::optional<std::string> dra_gpus;               // --dra-gpus
  std::optional<std::string> dra_plugins_registry;   // --dra-plugins-registry
  std::optional<std::string> dra_plugin_dir;         // --dra-plugin-dir
  std::optional<std::string> dra_checkpoint_dir;     // --dra-checkpoint-dir
  std::optional<std::string> dra_claims_file;        // --dra-claims-file
  std::optional<std::string> node_name;              // --node-name
  std::optional<std::string> kubeconfig;             // --kubeconfig
  std::optional<std::string> dra_dynamic_mig;        // --dra-dynamic-mig
  std::optional<std::string> dra_dynamic_mig_destroy_orphans;  // --dra-dynamic-mig-destroy-orphans
};

// How a flag takes its value, for registering it with a flag parser.
enum class FlagKind {
  kString,
  kBool,      // true/false/1/0/yes/no/t/f/on/off, any case; bare flag = true
  kList,      // comma-separated; may be repeated
  kDuration,  // Go syntax: "1s", "500ms", "1m30s"
};

// One row per flag, for registering all flags uniformly.
struct FlagSpec {
  std::string_view name = {};         // "mig-strategy" (register as "--mig-strategy")
  std::string_view alias = {};        // NVIDIA's other spelling ("dev-root"), or empty
  std::string_view env = {};          // "MIG_STRATEGY"
  std::string_view env_alias = {};    // NVIDIA's other variable ("NVIDIA_CDI_HOOK_PATH"), or empty
  std::string_view config_path = {};  // "flags.migStrategy"; empty for --config-file
  std::string_view help = {};
  std::string default_value = {};  // as text; "" when the default is empty
  FlagKind kind = FlagKind::kString;
  std::optional<std::string> CommandLine::*field = nullptr;
  bool nvidia = true;    // false: a Danqing addition
  bool ignored = false;  // accepted for compatibility, not acted on
};

// Every flag, --config-file first, then in docs/configuration.md's order.
const std::vector<FlagSpec>& FlagTable();

// The effective configuration: defaults, then the config file (--config-file,
// else $CONFIG_FILE; none when both are unset or empty), then environment
// variables (an empty value counts as unset), then flags; then Validate().
// nvidia_dev_root defaults to nvidia_driver_root. Errors name the file and
// field, or the variable ("environment variable MIG_STRATEGY=\"bogus\": ..."),
// or the flag ("flag --mig-strategy=\"bogus\": ...").
Result<Config> Resolve(const CommandLine& command_line, const EnvLookup& env);

// Checks that involve several settings, as NVIDIA's plugin does at start-up:
// sharing.mps needs flags.mpsRoot and is not supported with migStrategy
// mixed; imex.channelIDs is [] or [0]; deviceListStrategy is not empty.
// INVALID_ARGUMENT naming the settings and where they came from.
Status Validate(const Config& config);

// ---------------------------------------------------------------------------
// Reporting.

// A setting that was given a non-default value but that Danqing does not act
// on (NVIDIA features Danqing lacks, GFD settings, `resources`, MPS, IMEX).
struct IgnoredSetting {
  std::string path;    // "flags.gdsEnabled"
  std::string origin;  // as Config::origin
  std::string reason;  // why it has no effect

  // "flags.gdsEnabled (config.yaml:4:15) is accepted but ignored: <reason>"
  std::string ToString() const;

  bool operator==(const IgnoredSetting&) const = default;
};

// The ignored settings of `config`, in FlagTable()/schema order.
std::vector<IgnoredSetting> AcceptedButIgnored(const Config& config);

// `config` as a v1 config file (YAML) with every setting spelled out;
// ParseConfig() of the result gives back the same settings. For logging the
// effective configuration and for `--print-config`-style tools.
std::string FormatConfig(const Config& config);

// Text parsers shared by the environment, flag and file layers; exposed for
// the main and for tests. OK/nullopt contracts: nullopt means "not valid".
std::optional<bool> ParseBool(std::string_view text);          // see FlagKind::kBool
std::optional<Duration> ParseDuration(std::string_view text);  // Go's time.ParseDuration
std::string FormatDuration(Duration d);                        // "1m30s", "500ms", "0s"

}  // namespace danqing::config
