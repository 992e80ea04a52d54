// Tests of the config module: NVIDIA's v1 config files parse unchanged, the
// danqing: section, strict errors with file/path/line, flags > environment >
// file, the flag table, reporting, formatting and robustness on mutated input.
#include "config/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "config/yaml_tree.h"
#include "testing/support/fifo.h"
#include "testing/support/temp_dir.h"

namespace danqing::config {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using namespace std::chrono_literals;

// --- Helpers ------------------------------------------------------------------

Config MustParse(std::string_view yaml) {
  auto r = ParseConfig(yaml, "test.yaml");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : Config{};
}

Status ParseStatus(std::string_view yaml) {
  auto r = ParseConfig(yaml, "test.yaml");
  return r.status();
}

EnvLookup EnvFrom(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](std::string_view name) -> std::optional<std::string> {
    const auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

EnvLookup NoEnv() {
  return EnvFrom({});
}

// ctest runs each test as its own process, two at a time: the pid keeps two
// tests that write the same name from truncating each other's file.
std::string WriteTempFile(const std::string& name, std::string_view content) {
  const std::string path =
      ::testing::TempDir() + "/danqing_config_test_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  return path;
}

// --- NVIDIA's own examples parse to the expected values --------------------------

// The time-slicing ConfigMap from NVIDIA's README.
constexpr std::string_view kNvidiaTimeSlicing = R"(version: v1
flags:
  migStrategy: none
sharing:
  timeSlicing:
    renameByDefault: true
    failRequestsGreaterThanOne: false
    resources:
    - name: nvidia.com/gpu
      replicas: 4
)";

TEST(NvidiaConfigTest, TimeSlicingWithRenameByDefault) {
  const Config c = MustParse(kNvidiaTimeSlicing);
  EXPECT_EQ(c.version, "v1");
  EXPECT_EQ(c.source, "test.yaml");
  EXPECT_EQ(c.flags.mig_strategy, MigStrategy::kNone);
  ASSERT_TRUE(c.sharing.time_slicing.has_value());
  EXPECT_FALSE(c.sharing.mps.has_value());
  const ReplicatedResources& ts = *c.sharing.time_slicing;
  EXPECT_TRUE(ts.rename_by_default);
  EXPECT_FALSE(ts.fail_requests_greater_than_one);
  ASSERT_EQ(ts.resources.size(), 1u);
  EXPECT_EQ(ts.resources[0].name, "nvidia.com/gpu");
  EXPECT_EQ(ts.resources[0].rename, "nvidia.com/gpu.shared");
  EXPECT_EQ(ts.resources[0].advertised_name(), "nvidia.com/gpu.shared");
  EXPECT_EQ(ts.resources[0].replicas, 4);
  EXPECT_EQ(ts.resources[0].devices.kind, ReplicatedDevices::Kind::kAll);
  EXPECT_EQ(c.sharing.strategy(), SharingStrategy::kTimeSlicing);
  EXPECT_EQ(c.sharing.replicated(), &*c.sharing.time_slicing);
  EXPECT_EQ(c.origin.at("flags.migStrategy"), "test.yaml:3:16");
  EXPECT_EQ(c.origin.at("sharing.timeSlicing"), "test.yaml:6:5");
  // Everything not in the file keeps its default.
  EXPECT_TRUE(c.flags.fail_on_init_error);
  EXPECT_EQ(c.flags.plugin, PluginFlags{});
  EXPECT_EQ(c.danqing, DanqingSettings{});
}

// A mixed-MIG time-slicing config in the style of NVIDIA's docs.
constexpr std::string_view kNvidiaMixedMig = R"(version: v1
flags:
  migStrategy: mixed
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 2
    - name: nvidia.com/mig-1g.5gb
      replicas: 2
    - name: nvidia.com/mig-2g.10gb
      replicas: 2
    - name: nvidia.com/mig-3g.20gb
      replicas: 3
    - name: mig-7g.40gb
      replicas: 7
)";

TEST(NvidiaConfigTest, MixedMigTimeSlicing) {
  const Config c = MustParse(kNvidiaMixedMig);
  EXPECT_EQ(c.flags.mig_strategy, MigStrategy::kMixed);
  ASSERT_TRUE(c.sharing.time_slicing.has_value());
  const auto& rs = c.sharing.time_slicing->resources;
  ASSERT_EQ(rs.size(), 5u);
  std::vector<std::string> names;
  std::vector<int> replicas;
  for (const auto& r : rs) {
    names.push_back(r.name);
    replicas.push_back(r.replicas);
    EXPECT_EQ(r.rename, "");  // renameByDefault is off
    EXPECT_EQ(r.advertised_name(), r.name);
  }
  // NVIDIA prepends "nvidia.com/" to a bare name.
  EXPECT_THAT(names,
              ElementsAre("nvidia.com/gpu", "nvidia.com/mig-1g.5gb", "nvidia.com/mig-2g.10gb",
                          "nvidia.com/mig-3g.20gb", "nvidia.com/mig-7g.40gb"));
  EXPECT_THAT(replicas, ElementsAre(2, 2, 2, 3, 7));
}

// A full flags section as NVIDIA's helm chart renders it, shared with GFD.
constexpr std::string_view kNvidiaPluginSection = R"(version: v1
flags:
  migStrategy: "single"
  failOnInitError: false
  nvidiaDriverRoot: "/run/nvidia/driver"
  plugin:
    passDeviceSpecs: true
    deviceListStrategy:
    - envvar
    - cdi-annotations
    - cdi-cri
    deviceIDStrategy: index
    cdiAnnotationPrefix: "cdi.k8s.io/"
    nvidiaCTKPath: /usr/local/nvidia/toolkit/nvidia-ctk
    containerDriverRoot: /driver-root
  gfd:
    oneshot: false
    noTimestamp: false
    sleepInterval: 60s
    outputFile: /etc/kubernetes/node-feature-discovery/features.d/gfd
)";

TEST(NvidiaConfigTest, PluginSectionWithDeviceListStrategyList) {
  const Config c = MustParse(kNvidiaPluginSection);
  EXPECT_EQ(c.flags.mig_strategy, MigStrategy::kSingle);
  EXPECT_FALSE(c.flags.fail_on_init_error);
  EXPECT_EQ(c.flags.nvidia_driver_root, "/run/nvidia/driver");
  EXPECT_TRUE(c.flags.plugin.pass_device_specs);
  EXPECT_THAT(c.flags.plugin.device_list_strategy,
              ElementsAre(DeviceListStrategy::kEnvvar, DeviceListStrategy::kCdiAnnotations,
                          DeviceListStrategy::kCdiCri));
  EXPECT_EQ(c.flags.plugin.device_id_strategy, DeviceIdStrategy::kIndex);
  EXPECT_EQ(c.flags.plugin.cdi_annotation_prefix, "cdi.k8s.io/");
  EXPECT_EQ(c.flags.plugin.nvidia_ctk_path, "/usr/local/nvidia/toolkit/nvidia-ctk");
  EXPECT_EQ(c.flags.plugin.container_driver_root, "/driver-root");
  EXPECT_EQ(c.flags.gfd.sleep_interval, 60s);
  EXPECT_EQ(c.sharing.strategy(), SharingStrategy::kNone);
  EXPECT_EQ(c.sharing.replicated(), nullptr);
  // GFD settings equal to GFD's defaults are not worth a warning, and the
  // CDI hook path is used (the CDI spec's hooks).
  std::vector<std::string> ignored;
  for (const auto& i : AcceptedButIgnored(c)) ignored.push_back(i.path);
  EXPECT_THAT(ignored, ::testing::IsEmpty());
}

TEST(NvidiaConfigTest, MissingVersionIsV1AsInNvidiasParser) {
  auto cfg = ParseConfig("flags:\n  migStrategy: mixed\n", "test.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->version, "v1");
  EXPECT_EQ(cfg->flags.mig_strategy, MigStrategy::kMixed);
}

// YAML merge keys, which NVIDIA's parser (Go's YAML decoder) reads: a
// mapping's own keys written after `<<` win, then the earlier of several
// merged mappings; a merged key is no duplicate.
TEST(NvidiaConfigTest, MergeKeysAsNvidiasParserReadsThem) {
  const Config c = MustParse(R"(version: v1
flags:
  migStrategy: mixed
sharing:
  timeSlicing:
    resources:
    - &small
      name: nvidia.com/mig-1g.5gb
      replicas: 2
    - &large {name: nvidia.com/mig-3g.20gb, replicas: 8, devices: [0]}
    - <<: *small
      name: nvidia.com/mig-2g.10gb
    - <<: [*small, *large]
      name: nvidia.com/gpu
)");
  ASSERT_TRUE(c.sharing.time_slicing.has_value());
  const auto& r = c.sharing.time_slicing->resources;
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[2].name, "nvidia.com/mig-2g.10gb");
  EXPECT_EQ(r[2].replicas, 2);
  EXPECT_EQ(r[3].name, "nvidia.com/gpu");  // its own key
  EXPECT_EQ(r[3].replicas, 2);             // the earlier mapping's
  EXPECT_EQ(r[3].devices.list, std::vector<std::string>{"0"});  // only the later one has it

  // Tagged !!merge is a merge key too; an empty list merges nothing (as in Go).
  const Config tagged = MustParse("version: v1\nflags:\n  !!merge <<: {migStrategy: mixed}\n");
  EXPECT_EQ(tagged.flags.mig_strategy, MigStrategy::kMixed);
  const Config empty = MustParse("version: v1\nflags:\n  <<: []\n  migStrategy: single\n");
  EXPECT_EQ(empty.flags.mig_strategy, MigStrategy::kSingle);
}

TEST(DanqingConfigTest, ReplicaPolicy) {
  auto def = ParseConfig("version: v1\n", "test.yaml");
  ASSERT_TRUE(def.ok());
  EXPECT_EQ(def->danqing.replica_policy, "distributed");
  auto packed = ParseConfig("version: v1\ndanqing:\n  replicaPolicy: packed\n", "test.yaml");
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  EXPECT_EQ(packed->danqing.replica_policy, "packed");
  auto bad = ParseConfig("version: v1\ndanqing:\n  replicaPolicy: crowded\n", "test.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("test.yaml:3:18: danqing.replicaPolicy: "));
  EXPECT_THAT(bad.status().message(), HasSubstr("expected distributed or packed"));
}

TEST(NvidiaConfigTest, DeviceListStrategyAsAString) {
  const Config c =
      MustParse("version: v1\nflags:\n  plugin:\n    deviceListStrategy: volume-mounts\n");
  EXPECT_THAT(c.flags.plugin.device_list_strategy, ElementsAre(DeviceListStrategy::kVolumeMounts));
}

TEST(NvidiaConfigTest, DeviceSelections) {
  const Config c = MustParse(R"(version: v1
sharing:
  timeSlicing:
    resources:
    - name: gpu
      devices: [0, 1, "2"]
      replicas: 2
    - name: mig-1g.10gb
      devices: ["0:0", "1:2"]
      replicas: 3
    - name: mig-2g.20gb
      devices:
      - GPU-b1028956-cfa2-0990-bf4a-5da9abb51763
      - MIG-GPU-b1028956-cfa2-0990-bf4a-5da9abb51763/3/0
      - MIG-0c2d4e6f-1a2b-3c4d-5e6f-7a8b9c0d1e2f
      replicas: 2
    - name: mig-3g.40gb
      devices: 2
      replicas: 2
    - name: mig-4g.40gb
      devices: all
      replicas: 2
)");
  ASSERT_TRUE(c.sharing.time_slicing.has_value());
  const auto& rs = c.sharing.time_slicing->resources;
  ASSERT_EQ(rs.size(), 5u);
  EXPECT_EQ(rs[0].devices.kind, ReplicatedDevices::Kind::kList);
  EXPECT_THAT(rs[0].devices.list, ElementsAre("0", "1", "2"));
  EXPECT_THAT(rs[1].devices.list, ElementsAre("0:0", "1:2"));
  EXPECT_THAT(rs[2].devices.list, ElementsAre("GPU-b1028956-cfa2-0990-bf4a-5da9abb51763",
                                              "MIG-GPU-b1028956-cfa2-0990-bf4a-5da9abb51763/3/0",
                                              "MIG-0c2d4e6f-1a2b-3c4d-5e6f-7a8b9c0d1e2f"));
  EXPECT_EQ(rs[3].devices.kind, ReplicatedDevices::Kind::kCount);
  EXPECT_EQ(rs[3].devices.count, 2);
  EXPECT_EQ(rs[4].devices.kind, ReplicatedDevices::Kind::kAll);
}

TEST(NvidiaConfigTest, MpsDefaultsToFailingMultiDeviceRequests) {
  const Config c = MustParse(R"(version: v1
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 10
)");
  ASSERT_TRUE(c.sharing.mps.has_value());
  EXPECT_TRUE(c.sharing.mps->fail_requests_greater_than_one);
  EXPECT_EQ(c.sharing.strategy(), SharingStrategy::kMps);
}

TEST(NvidiaConfigTest, JsonInput) {
  const Config c = MustParse(R"({
  "version": "v1",
  "flags": {"migStrategy": "mixed", "failOnInitError": true,
            "plugin": {"deviceListStrategy": ["envvar", "volume-mounts"], "passDeviceSpecs": true}},
  "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 3,
                                             "devices": [0, 1]}]}},
  "danqing": {"healthCheckInterval": "250ms", "metricsAddr": "127.0.0.1:9500"}
})");
  EXPECT_EQ(c.flags.mig_strategy, MigStrategy::kMixed);
  EXPECT_THAT(c.flags.plugin.device_list_strategy,
              ElementsAre(DeviceListStrategy::kEnvvar, DeviceListStrategy::kVolumeMounts));
  EXPECT_TRUE(c.flags.plugin.pass_device_specs);
  ASSERT_TRUE(c.sharing.time_slicing.has_value());
  EXPECT_EQ(c.sharing.time_slicing->resources[0].replicas, 3);
  EXPECT_THAT(c.sharing.time_slicing->resources[0].devices.list, ElementsAre("0", "1"));
  EXPECT_EQ(c.danqing.health_check_interval, 250ms);
  EXPECT_EQ(c.danqing.metrics_addr, "127.0.0.1:9500");
}

TEST(NvidiaConfigTest, Yaml11BooleansAndNullsAsNvidiaReadsThem) {
  const Config c = MustParse(R"(version: v1
flags:
  failOnInitError: no
  gdsEnabled: On
  nvidiaDriverRoot:
  mpsRoot: ~
  plugin:
    passDeviceSpecs: yes
)");
  EXPECT_FALSE(c.flags.fail_on_init_error);
  EXPECT_TRUE(c.flags.gds_enabled);
  EXPECT_TRUE(c.flags.plugin.pass_device_specs);
  EXPECT_EQ(c.flags.nvidia_driver_root, "/");  // null keeps the default
  EXPECT_EQ(c.flags.mps_root, "");
  EXPECT_EQ(c.origin.count("flags.nvidiaDriverRoot"), 0u);
}

TEST(NvidiaConfigTest, NullSectionsAndTrailingDocumentMarker) {
  const Config c = MustParse("version: v1\nflags:\nsharing:\ndanqing:\n---\n");
  EXPECT_EQ(c.flags, Flags{});
  EXPECT_EQ(c.sharing, Sharing{});
}

TEST(NvidiaConfigTest, AllNvidiaFieldsAccepted) {
  const Config c = MustParse(R"(version: v1
flags:
  migStrategy: none
  failOnInitError: true
  mpsRoot: /run/nvidia/mps
  nvidiaDriverRoot: /
  nvidiaDevRoot: /
  gdrcopyEnabled: false
  gdsEnabled: false
  mofedEnabled: false
  useNodeFeatureAPI: false
  deviceDiscoveryStrategy: auto
  plugin:
    passDeviceSpecs: false
    deviceListStrategy: envvar
    deviceIDStrategy: uuid
    cdiAnnotationPrefix: cdi.k8s.io/
    nvidiaCTKPath: /usr/bin/nvidia-ctk
    containerDriverRoot: /driver-root
    kubeletSocket: /var/lib/kubelet/device-plugins/kubelet.sock
    cdiFeatureFlags: []
  gfd:
    oneshot: false
    noTimestamp: false
    sleepInterval: 60000000000
    outputFile: /etc/kubernetes/node-feature-discovery/features.d/gfd
    machineTypeFile: /sys/class/dmi/id/product_name
resources:
  gpus:
  - pattern: "*"
    name: gpu
  mig:
  - pattern: "1g.10gb"
    name: mig-1g.10gb
imex:
  channelIDs: [0]
  required: false
)");
  EXPECT_EQ(c.flags.gfd.sleep_interval, 60s);  // NVIDIA's Duration also takes nanoseconds
  EXPECT_EQ(c.flags.nvidia_dev_root, "/");
  ASSERT_EQ(c.resources.gpus.size(), 1u);
  EXPECT_EQ(c.resources.gpus[0].pattern, "*");
  EXPECT_EQ(c.resources.gpus[0].name, "nvidia.com/gpu");
  EXPECT_EQ(c.resources.mig[0].name, "nvidia.com/mig-1g.10gb");
  EXPECT_THAT(c.imex.channel_ids, ElementsAre(0));
}

// --- Danqing's section -------------------------------------------------------------

TEST(DanqingSectionTest, ParsesEverySetting) {
  const Config c = MustParse(R"(version: v1
danqing:
  devicePluginPath: /var/lib/kubelet/device-plugins-alt
  podResourcesSocket: /run/pod-resources/kubelet.sock
  nvmlLib: /usr/lib64/libnvidia-ml.so.1
  cdiRoot: /etc/cdi
  healthCheckInterval: 1m30s
  metricsAddr: "[::]:9400"
  logLevel: debug
)");
  EXPECT_EQ(c.danqing.device_plugin_path, "/var/lib/kubelet/device-plugins-alt");
  EXPECT_EQ(c.danqing.pod_resources_socket, "/run/pod-resources/kubelet.sock");
  EXPECT_EQ(c.danqing.nvml_lib, "/usr/lib64/libnvidia-ml.so.1");
  EXPECT_EQ(c.danqing.cdi_root, "/etc/cdi");
  EXPECT_EQ(c.danqing.health_check_interval, 90s);
  EXPECT_EQ(c.danqing.metrics_addr, "[::]:9400");
  EXPECT_EQ(c.danqing.log_level, "debug");
  EXPECT_EQ(c.origin.at("danqing.logLevel"), "test.yaml:9:13");
}

TEST(DefaultsTest, NoFileGivesDocumentedDefaults) {
  auto r = Resolve(CommandLine{}, NoEnv());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Config& c = *r;
  EXPECT_EQ(c.version, "v1");
  EXPECT_EQ(c.source, "");
  EXPECT_TRUE(c.origin.empty());
  EXPECT_EQ(c.flags.mig_strategy, MigStrategy::kNone);
  EXPECT_TRUE(c.flags.fail_on_init_error);
  EXPECT_EQ(c.flags.nvidia_driver_root, "/");
  EXPECT_EQ(c.flags.nvidia_dev_root, "/");  // follows the driver root
  EXPECT_EQ(c.flags.mps_root, "");
  EXPECT_EQ(c.flags.device_discovery_strategy, DeviceDiscoveryStrategy::kAuto);
  EXPECT_FALSE(c.flags.plugin.pass_device_specs);
  EXPECT_THAT(c.flags.plugin.device_list_strategy, ElementsAre(DeviceListStrategy::kEnvvar));
  EXPECT_EQ(c.flags.plugin.device_id_strategy, DeviceIdStrategy::kUuid);
  EXPECT_EQ(c.flags.plugin.cdi_annotation_prefix, "cdi.k8s.io/");
  EXPECT_EQ(c.flags.plugin.nvidia_ctk_path, "/usr/bin/nvidia-ctk");
  EXPECT_EQ(c.flags.plugin.container_driver_root, "/driver-root");
  EXPECT_EQ(c.danqing.device_plugin_path, "/var/lib/kubelet/device-plugins");
  EXPECT_EQ(c.danqing.pod_resources_socket, "/var/lib/kubelet/pod-resources/kubelet.sock");
  EXPECT_EQ(c.danqing.nvml_lib, "");
  EXPECT_EQ(c.danqing.cdi_root, "/var/run/cdi");
  EXPECT_EQ(c.danqing.health_check_interval, 1s);
  EXPECT_EQ(c.danqing.metrics_addr, ":9400");
  EXPECT_EQ(c.danqing.log_level, "info");
  EXPECT_EQ(c.sharing.strategy(), SharingStrategy::kNone);
  EXPECT_TRUE(AcceptedButIgnored(c).empty());
}

// --- Strict errors: file, field path, line and column ------------------------------

struct ErrorCase {
  const char* name;
  const char* yaml;
  const char* where;   // "test.yaml:<line>:<col>: <path>: " (or "test.yaml:<line>:<col>: ")
  const char* reason;  // a substring of the rest
};

class FileErrorTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(FileErrorTest, NamesFileFieldAndLine) {
  const ErrorCase& c = GetParam();
  const Status st = ParseStatus(c.yaml);
  ASSERT_FALSE(st.ok()) << c.name;
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), StartsWith(c.where));
  EXPECT_THAT(st.message(), HasSubstr(c.reason));
}

const ErrorCase kErrorCases[] = {
    {"UnknownTopLevelField", "version: v1\nsharring: {}\n", "test.yaml:2:1: sharring: ",
     "unknown field; expected one of: version, flags, resources, sharing, imex, danqing"},
    {"UnknownPluginFieldSuggestsCase",
     "version: v1\nflags:\n  plugin:\n    deviceIdStrategy: index\n",
     "test.yaml:4:5: flags.plugin.deviceIdStrategy: ", "did you mean \"deviceIDStrategy\"?"},
    {"UnknownDanqingField", "version: v1\ndanqing:\n  metricsPort: 9400\n",
     "test.yaml:3:3: danqing.metricsPort: ", "unknown field"},
    {"UnknownReplicaField",
     "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n      replicas: 2\n"
     "      count: 3\n",
     "test.yaml:7:7: sharing.timeSlicing.resources[0].count: ", "unknown field"},
    {"DuplicateField", "version: v1\nflags:\n  migStrategy: none\n  migStrategy: mixed\n",
     "test.yaml:4:3: flags.migStrategy: ", "duplicate field (first given at line 3)"},
    {"BoolGivenWord", "version: v1\nflags:\n  failOnInitError: maybe\n",
     "test.yaml:3:20: flags.failOnInitError: ",
     "expected a boolean (true or false), got string \"maybe\""},
    {"BoolGivenQuotedTrue", "version: v1\nflags:\n  failOnInitError: \"true\"\n",
     "test.yaml:3:20: flags.failOnInitError: ", "got string \"true\""},
    {"BoolGivenList", "version: v1\nflags:\n  plugin:\n    passDeviceSpecs: [true]\n",
     "test.yaml:4:22: flags.plugin.passDeviceSpecs: ", "got a list"},
    {"StringGivenMapping", "version: v1\nflags:\n  nvidiaDriverRoot: {a: b}\n",
     "test.yaml:3:21: flags.nvidiaDriverRoot: ", "expected a string, got a mapping"},
    {"BadMigStrategy", "version: v1\nflags:\n  migStrategy: bogus\n",
     "test.yaml:3:16: flags.migStrategy: ",
     "invalid MIG strategy \"bogus\"; expected none, single or mixed"},
    {"BadDeviceIdStrategy", "version: v1\nflags:\n  plugin:\n    deviceIDStrategy: serial\n",
     "test.yaml:4:23: flags.plugin.deviceIDStrategy: ", "expected uuid or index"},
    {"BadDeviceListStrategyItem",
     "version: v1\nflags:\n  plugin:\n    deviceListStrategy: [envvar, bogus]\n",
     "test.yaml:4:34: flags.plugin.deviceListStrategy[1]: ",
     "invalid device list strategy \"bogus\""},
    {"EmptyDeviceListStrategy", "version: v1\nflags:\n  plugin:\n    deviceListStrategy: []\n",
     "test.yaml:4:25: flags.plugin.deviceListStrategy: ", "at least one device list strategy"},
    {"BadDiscoveryStrategy", "version: v1\nflags:\n  deviceDiscoveryStrategy: wsl\n",
     "test.yaml:3:28: flags.deviceDiscoveryStrategy: ", "expected auto, nvml or tegra"},
    {"UnknownVersion", "version: v2\n",
     "test.yaml:1:10: version: ", "unknown version \"v2\"; the supported version is \"v1\""},
    {"NumericVersion", "version: 1\n", "test.yaml:1:10: version: ", "unknown version \"1\""},
    {"ReplicasBelowTwo",
     "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
     "      replicas: 1\n",
     "test.yaml:6:17: sharing.timeSlicing.resources[0].replicas: ",
     "number of replicas must be >= 2, got 1"},
    {"ReplicasNegativeInSecondResource",
     "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n      replicas: 2\n"
     "    - name: mig-1g.5gb\n      replicas: -3\n",
     "test.yaml:8:17: sharing.timeSlicing.resources[1].replicas: ", "must be >= 2, got -3"},
    {"ReplicasQuoted",
     "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n"
     "      replicas: \"4\"\n",
     "test.yaml:6:17: sharing.timeSlicing.resources[0].replicas: ",
     "expected an integer, got string \"4\""},
    {"ReplicasFloat",
     "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n"
     "      replicas: 4.5\n",
     "test.yaml:6:17: sharing.timeSlicing.resources[0].replicas: ",
     "expected an integer, got number 4.5"},
    {"ReplicasHuge",
     "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n"
     "      replicas: 99999999999999999999\n",
     "test.yaml:6:17: sharing.timeSlicing.resources[0].replicas: ", "out of range"},
    {"ReplicasMissing", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n",
     "test.yaml:5:7: sharing.timeSlicing.resources[0].replicas: ", "missing"},
    {"NameMissing", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - replicas: 2\n",
     "test.yaml:5:7: sharing.timeSlicing.resources[0].name: ", "missing"},
    {"NameInvalid",
     "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: GPU_big\n"
     "      replicas: 2\n",
     "test.yaml:5:13: sharing.timeSlicing.resources[0].name: ",
     "invalid resource name \"nvidia.com/GPU_big\""},
    {"NameOtherVendor",
     "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: example.com/gpu\n"
     "      replicas: 2\n",
     "test.yaml:5:13: sharing.timeSlicing.resources[0].name: ",
     "invalid resource name \"nvidia.com/example.com/gpu\""},
    {"NameTooLong",
     "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
     "    - name: gpu-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n      replicas: 2\n",
     "test.yaml:5:13: sharing.timeSlicing.resources[0].name: ", "longer than 63 characters"},
    {"RenameInvalid",
     "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n"
     "      rename: Shared GPU\n      replicas: 2\n",
     "test.yaml:6:15: sharing.timeSlicing.resources[0].rename: ", "invalid resource name"},
    {"DuplicateResourceName",
     "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
     "      replicas: 2\n    - name: gpu\n      replicas: 4\n",
     "test.yaml:7:13: sharing.timeSlicing.resources[1].name: ",
     "duplicate resource \"nvidia.com/gpu\"; sharing.timeSlicing.resources[0] (line 5)"},
    {"DuplicateAdvertisedName",
     "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: mig-1g.5gb\n"
     "      rename: shared\n      replicas: 2\n    - name: mig-2g.10gb\n      rename: shared\n"
     "      replicas: 2\n",
     "test.yaml:9:15: sharing.timeSlicing.resources[1].rename: ",
     "already advertised as \"nvidia.com/shared\""},
    {"DevicesMixIndicesAndUuids",
     "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n"
     "      devices: [0, GPU-b1028956-cfa2-0990-bf4a-5da9abb51763]\n      replicas: 2\n",
     "test.yaml:6:20: sharing.timeSlicing.resources[0].devices[1]: ", "mixes indices and UUIDs"},
    {"DevicesBadString",
     "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n"
     "      devices: some\n      replicas: 2\n",
     "test.yaml:6:16: sharing.timeSlicing.resources[0].devices: ",
     "the only valid string is \"all\""},
    {"DevicesZeroCount",
     "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n"
     "      devices: 0\n      replicas: 2\n",
     "test.yaml:6:16: sharing.timeSlicing.resources[0].devices: ",
     "a count of devices must be > 0"},
    {"DevicesEmptyList",
     "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n"
     "      devices: []\n      replicas: 2\n",
     "test.yaml:6:16: sharing.timeSlicing.resources[0].devices: ", "empty devices list"},
    {"DevicesBadUuid",
     "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n"
     "      devices:\n      - GPU-1234\n      replicas: 2\n",
     "test.yaml:7:9: sharing.timeSlicing.resources[0].devices[0]: ",
     "unsupported device \"GPU-1234\""},
    {"DevicesNegativeIndex",
     "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n"
     "      devices: [1, -1]\n      replicas: 2\n",
     "test.yaml:6:20: sharing.timeSlicing.resources[0].devices[1]: ", "must be >= 0"},
    {"DevicesDuplicate",
     "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n"
     "      devices: [1, \"1\"]\n      replicas: 2\n",
     "test.yaml:6:20: sharing.timeSlicing.resources[0].devices[1]: ", "duplicate device \"1\""},
    {"TimeSlicingWithoutResources",
     "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n",
     "test.yaml:4:5: sharing.timeSlicing.resources: ", "no resources specified"},
    {"TimeSlicingEmptyResources", "version: v1\nsharing:\n  timeSlicing:\n    resources: []\n",
     "test.yaml:4:16: sharing.timeSlicing.resources: ", "no resources specified"},
    {"MpsBadRenameByDefault",
     "version: v1\nsharing:\n  mps:\n    renameByDefault: 1\n    resources:\n    - name: gpu\n"
     "      replicas: 2\n",
     "test.yaml:4:22: sharing.mps.renameByDefault: ", "expected a boolean"},
    {"ResourcesPatternMissing", "version: v1\nresources:\n  gpus:\n  - name: gpu\n",
     "test.yaml:4:5: resources.gpus[0].pattern: ", "missing"},
    {"FlagsNotAMapping", "version: v1\nflags: [migStrategy]\n",
     "test.yaml:2:8: flags: ", "expected a mapping, got a list"},
    {"PluginNotAMapping", "version: v1\nflags:\n  plugin: true\n",
     "test.yaml:3:11: flags.plugin: ", "expected a mapping, got boolean true"},
    {"NonStringKey", "version: v1\nflags:\n  [a]: b\n",
     "test.yaml:3:3: flags: ", "field names must be strings"},
    {"HealthIntervalWithoutUnit", "version: v1\ndanqing:\n  healthCheckInterval: 5\n",
     "test.yaml:3:24: danqing.healthCheckInterval: ", "a bare number has no unit"},
    {"HealthIntervalZero", "version: v1\ndanqing:\n  healthCheckInterval: 0s\n",
     "test.yaml:3:24: danqing.healthCheckInterval: ", "must be greater than zero"},
    {"HealthIntervalGarbage", "version: v1\ndanqing:\n  healthCheckInterval: soon\n",
     "test.yaml:3:24: danqing.healthCheckInterval: ", "invalid duration \"soon\""},
    {"MetricsAddrWithoutColon", "version: v1\ndanqing:\n  metricsAddr: 9400\n",
     "test.yaml:3:16: danqing.metricsAddr: ", "has no port"},
    {"MetricsAddrBadPort", "version: v1\ndanqing:\n  metricsAddr: \":94000\"\n",
     "test.yaml:3:16: danqing.metricsAddr: ", "invalid port"},
    {"LogLevelUnknown", "version: v1\ndanqing:\n  logLevel: verbose\n",
     "test.yaml:3:13: danqing.logLevel: ",
     "expected trace, debug, info, warn, error, critical or off"},
    {"RelativeDevicePluginPath", "version: v1\ndanqing:\n  devicePluginPath: device-plugins\n",
     "test.yaml:3:21: danqing.devicePluginPath: ", "expected an absolute path"},
    {"RelativeHookPath", "version: v1\nflags:\n  plugin:\n    nvidiaCTKPath: nvidia-ctk\n",
     "test.yaml:4:20: flags.plugin.nvidiaCTKPath: ", "expected the absolute path of the CDI hook binary"},
    {"HookPathIsADirectory", "version: v1\nflags:\n  plugin:\n    nvidiaCTKPath: /usr/bin/\n",
     "test.yaml:4:20: flags.plugin.nvidiaCTKPath: ", "or empty for none"},
    {"SocketPathTooLong",
     "version: v1\ndanqing:\n  podResourcesSocket: /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.sock\n",
     "test.yaml:3:23: danqing.podResourcesSocket: ", "longer than 107 bytes"},
    {"ImexChannelNotInteger", "version: v1\nimex:\n  channelIDs: [a]\n",
     "test.yaml:3:16: imex.channelIDs[0]: ", "expected an integer, got string \"a\""},
    {"GfdDurationBad", "version: v1\nflags:\n  gfd:\n    sleepInterval: 1x\n",
     "test.yaml:4:20: flags.gfd.sleepInterval: ", "invalid duration"},
    {"FileIsAList", "- version: v1\n",
     "test.yaml:1:1: ", "the config file must be a mapping of fields"},
    {"FileIsAScalar", "just words\n", "test.yaml:1:1: ", "got string \"just words\""},
    {"MalformedYaml", "version: v1\nflags:\n  migStrategy: [none\n",
     "test.yaml:", "malformed YAML"},
    {"MalformedYamlTabs", "version: v1\nflags:\n\tmigStrategy: none\n",
     "test.yaml:3:", "malformed YAML"},
    {"TwoDocuments", "version: v1\n---\nversion: v1\n",
     "test.yaml:3:", "more than one YAML document"},
    {"MergeKeyOfAScalar", "version: v1\nflags:\n  <<: none\n",
     "test.yaml:3:3: ", "a merge key (<<) takes a mapping or a sequence of mappings"},
    {"MergeKeyOfNothing", "version: v1\nflags:\n  <<:\n  migStrategy: none\n",
     "test.yaml:3:3: ", "a merge key (<<) takes a mapping or a sequence of mappings"},
    {"MergeKeyOfAListWithAScalar", "version: v1\nflags:\n  <<: [{migStrategy: none}, 5]\n",
     "test.yaml:3:3: ", "a merge key (<<) takes a mapping or a sequence of mappings"},
    {"MergedMappingSetsAKeyTwice",
     "version: v1\nflags:\n  <<: {migStrategy: none, migStrategy: mixed}\n",
     "test.yaml:3:27: ", "migStrategy: set twice in a mapping merged with <<"},
    // Go's decoder lets the merge overwrite a key written before `<<`; YAML
    // 1.1 keeps the key: a file that the two read differently is refused.
    {"MergeOverAKeyWrittenBeforeIt",
     "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - &a {name: nvidia.com/gpu, replicas: 2}\n"
     "    - name: nvidia.com/mig-1g.5gb\n      <<: *a\n",
     "test.yaml:6:7: ", "name: set before the merge key (<<) and by the merged mapping too"},
    {"TwoMergeKeys",
     "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - &a {name: nvidia.com/gpu, replicas: 2}\n"
     "    - <<: *a\n      <<: *a\n",
     "test.yaml:7:7: ", "a second merge key (<<) in one mapping"},
    // Quoted, `<<` is an ordinary key, as in YAML 1.1 and Go's decoder.
    {"QuotedMergeKeyIsAField", "version: v1\nflags:\n  \"<<\": {migStrategy: none}\n",
     "test.yaml:3:3: flags.\"<<\": ", "unknown field"},
};

INSTANTIATE_TEST_SUITE_P(All, FileErrorTest, ::testing::ValuesIn(kErrorCases),
                         [](const ::testing::TestParamInfo<ErrorCase>& p) {
                           return std::string(p.param.name);
                         });

TEST(FileErrorTest, EmptyFile) {
  for (std::string_view text : {"", "\n\n", "# just a comment\n"}) {
    const Status st = ParseStatus(text);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(st.message(),
              "test.yaml: the config file is empty; expected a mapping that starts with "
              "`version: v1`");
  }
}

TEST(FileErrorTest, AliasBombIsRejectedCheaply) {
  std::string yaml = "version: v1\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 9; ++i) {
    yaml += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) yaml += (k ? ", *a" : "*a") + std::to_string(i - 1);
    yaml += "]\n";
  }
  const Status st = ParseStatus(yaml);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("nodes (after expanding aliases)"));
}

// A long scalar named many times: few nodes, but gigabytes once copied.
TEST(FileErrorTest, AliasesOfALongScalarAreRejectedCheaply) {
  std::string yaml = "version: v1\nlong: &a " + std::string(600 * 1024, 'x') + "\nmany: [";
  for (int i = 0; i < 20000; ++i) yaml += i ? ", *a" : "*a";
  yaml += "]\n";
  const Status st = ParseStatus(yaml);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("bytes of text (after expanding aliases)"));
}

TEST(FileErrorTest, AnAliasInsideTheNodeItNamesIsRejected) {
  const Status st = ParseStatus("version: v1\nx: &a [1, *a]\n");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(),
              HasSubstr("test.yaml:2:11: an alias (*) inside the node its anchor names"));
}

TEST(FileErrorTest, DeepNestingIsRejected) {
  const std::string yaml =
      "version: v1\nx: " + std::string(200, '[') + std::string(200, ']') + "\n";
  const Status st = ParseStatus(yaml);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("nesting deeper than"));
}

// The parse's peak under the plain build. Sanitizers change what a process
// holds (shadow memory, ASan's quarantine of freed blocks): there only the
// refusal is checked here; the config fuzzer checks the bound under ASan
// with limits of its own (scripts/fuzz.sh).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr long kParsePeakKb = 0;
#else
constexpr long kParsePeakKb = 96L * 1024;
#endif

// Files under the size and depth limits whose shape made yaml-cpp build
// hundreds of MB before any limit could refuse them (issue 31): each is
// parsed in a child process, whose peak resident memory (the test's own
// ~10 MB included) must stay well under the agent's 128 Mi limit. The last
// two are the largest the token count lets through: they reach yaml-cpp.
TEST(FileErrorTest, HostileShapesAreRefusedInBoundedMemory) {
  constexpr std::size_t kSize = (1 << 20) - 64;  // under the 1 MiB limit
  const auto repeat = [](std::string_view unit, std::size_t bytes) {
    std::string out;
    out.reserve(bytes + unit.size());
    while (out.size() + unit.size() <= bytes) out += unit;
    return out;
  };
  const std::pair<const char*, std::string> kShapes[] = {
      {"unclosed brackets", "version: v1\nx: " + std::string(kSize, '[')},
      {"unclosed braces", std::string(kSize, '{')},
      {"JSON list", "[" + repeat("1,", kSize) + "1]"},
      {"flow list in a mapping", "version: v1\nx: [" + repeat("1,", kSize) + "1]\n"},
      {"flow mapping of empty entries", "{" + repeat("a,", kSize) + "a}"},
      {"nested lists", "version: v1\nx: " + repeat("[1,", kSize)},
      {"block list", "version: v1\nx:\n" + repeat("- 1\n", kSize)},
      {"anchors", "version: v1\nx: [" + repeat("&a a,", kSize) + "a]\n"},
      {"JSON list at the token limit",
       "[" + repeat("1,", 2 * (internal::kMaxYamlTokens - 10)) + "1]"},
      {"block list at the token limit",
       "version: v1\nx:\n" + repeat("- 1\n", 4 * (internal::kMaxYamlTokens - 10))},
  };
  for (const auto& [name, text] : kShapes) {
    SCOPED_TRACE(name);
    ASSERT_LE(text.size(), internal::kMaxYamlBytes);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto cfg = ParseConfig(text, "hostile.yaml");
      const bool refused = !cfg.ok() && cfg.status().code() == StatusCode::kInvalidArgument &&
                           cfg.status().message().find("out of memory") == std::string::npos;
      ::_exit(refused ? 0 : 1);
    }
    int status = 0;
    rusage usage{};
    ASSERT_EQ(::wait4(pid, &status, 0, &usage), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "the parsing child died: status " << status;
    EXPECT_EQ(WEXITSTATUS(status), 0) << "accepted, or refused for another reason";
    if (kParsePeakKb > 0) {
      EXPECT_LT(usage.ru_maxrss, kParsePeakKb) << "peak resident kB of the parsing child";
    }
  }
  // Refused at once, saying why and where.
  const Status st = ParseStatus("version: v1\nx: " + std::string(kSize, '['));
  EXPECT_THAT(st.message(), HasSubstr("test.yaml:2:"));
  EXPECT_THAT(st.message(), HasSubstr("YAML tokens"));
}

// The token count reads indicators, not words: comments and long strings
// cost next to nothing, so a config of ordinary size is never near it.
TEST(FileErrorTest, LongCommentsAndStringsDoNotCountAsTokens) {
  std::string yaml = "version: v1\n";
  for (int i = 0; i < 8000; ++i)
    yaml += "# the time-slicing replicas of every GPU on this node type\n";
  yaml += "flags:\n  migStrategy: \"" + std::string(100000, 'x') + "\"\n";
  ASSERT_LT(yaml.size(), internal::kMaxYamlBytes);
  const Status st = ParseStatus(yaml);
  EXPECT_THAT(st.message(), Not(HasSubstr("tokens")));
  EXPECT_THAT(st.message(), HasSubstr("flags.migStrategy"));
}

// --- Files on disk ---------------------------------------------------------------------

TEST(LoadConfigFileTest, ReadsAndNamesTheFile) {
  const std::string path = WriteTempFile("ok.yaml", kNvidiaTimeSlicing);
  auto r = LoadConfigFile(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->source, path);
  EXPECT_EQ(r->origin.at("flags.migStrategy"), path + ":3:16");

  const std::string bad = WriteTempFile("bad.yaml", "version: v1\nflags:\n  migStrategy: 7\n");
  const Status st = LoadConfigFile(bad).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), StartsWith(bad + ":3:16: flags.migStrategy: "));
}

TEST(LoadConfigFileTest, MissingFileAndDirectory) {
  const Status missing = LoadConfigFile(::testing::TempDir() + "/no-such-config.yaml").status();
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("no-such-config.yaml"));

  const Status dir = LoadConfigFile(::testing::TempDir()).status();
  EXPECT_FALSE(dir.ok());
  EXPECT_THAT(dir.message(), HasSubstr("cannot read config file"));
}

// A FIFO (or a link to one) as the config file blocked open() forever, at
// start and on a reload, and the reload with it the thread that takes
// SIGTERM. Refused at once, as is a device.
TEST(LoadConfigFileTest, AFifoOrDeviceIsRefusedWithoutBlocking) {
  const testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  testing::FifoGuard fifo(dir.path() + "/config.yaml");
  ASSERT_TRUE(fifo.made());
  const std::string link = dir.path() + "/link.yaml";
  ASSERT_EQ(::symlink(fifo.path().c_str(), link.c_str()), 0);
  const Status direct = LoadConfigFile(fifo.path()).status();
  const Status linked = LoadConfigFile(link).status();
  ASSERT_TRUE(fifo.Done()) << "blocked on the FIFO";
  EXPECT_EQ(direct.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(direct.message(),
            "cannot read config file \"" + fifo.path() + "\": not a regular file: a FIFO");
  EXPECT_THAT(linked.message(), HasSubstr("not a regular file: a FIFO"));

  const Status zero = LoadConfigFile("/dev/zero").status();
  EXPECT_EQ(zero.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(zero.message(), HasSubstr("not a regular file: a character device"));
}

TEST(LoadConfigFileTest, OversizedFileIsRejected) {
  const std::string path =
      WriteTempFile("big.yaml", "version: v1\n# " + std::string(2 << 20, 'x') + "\n");
  const Status st = LoadConfigFile(path).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("larger than"));
}

// --- Flags > environment > file ------------------------------------------------------

constexpr std::string_view kLayeredFile = R"(version: v1
flags:
  migStrategy: single
  failOnInitError: false
  nvidiaDriverRoot: /run/nvidia/driver
  plugin:
    deviceListStrategy: [volume-mounts]
danqing:
  metricsAddr: ":9401"
  healthCheckInterval: 5s
  logLevel: warn
)";

TEST(ResolveTest, FileOnly) {
  CommandLine cl;
  cl.config_file = WriteTempFile("layered.yaml", kLayeredFile);
  auto r = Resolve(cl, NoEnv());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->source, *cl.config_file);
  EXPECT_EQ(r->flags.mig_strategy, MigStrategy::kSingle);
  EXPECT_FALSE(r->flags.fail_on_init_error);
  EXPECT_EQ(r->flags.nvidia_dev_root, "/run/nvidia/driver");  // follows the driver root
  EXPECT_THAT(r->flags.plugin.device_list_strategy, ElementsAre(DeviceListStrategy::kVolumeMounts));
  EXPECT_EQ(r->danqing.metrics_addr, ":9401");
  EXPECT_EQ(r->danqing.health_check_interval, 5s);
  EXPECT_EQ(r->danqing.log_level, "warn");
}

TEST(ResolveTest, EnvironmentOverridesFile) {
  CommandLine cl;
  cl.config_file = WriteTempFile("layered.yaml", kLayeredFile);
  auto r = Resolve(cl, EnvFrom({{"MIG_STRATEGY", "mixed"},
                                {"FAIL_ON_INIT_ERROR", "TRUE"},
                                {"DEVICE_LIST_STRATEGY", "envvar, cdi-cri"},
                                {"DANQING_METRICS_ADDR", "127.0.0.1:9402"},
                                {"DANQING_HEALTH_CHECK_INTERVAL", "250ms"}}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->flags.mig_strategy, MigStrategy::kMixed);
  EXPECT_TRUE(r->flags.fail_on_init_error);
  EXPECT_THAT(r->flags.plugin.device_list_strategy,
              ElementsAre(DeviceListStrategy::kEnvvar, DeviceListStrategy::kCdiCri));
  EXPECT_EQ(r->danqing.metrics_addr, "127.0.0.1:9402");
  EXPECT_EQ(r->danqing.health_check_interval, 250ms);
  EXPECT_EQ(r->danqing.log_level, "warn");  // not overridden: the file's
  EXPECT_EQ(r->origin.at("flags.migStrategy"), "environment variable MIG_STRATEGY");
  EXPECT_EQ(r->origin.at("danqing.logLevel"), *cl.config_file + ":11:13");
}

TEST(ResolveTest, FlagsOverrideEnvironmentAndFile) {
  CommandLine cl;
  cl.config_file = WriteTempFile("layered.yaml", kLayeredFile);
  cl.mig_strategy = "none";
  cl.fail_on_init_error = "no";
  cl.device_list_strategy = "cdi-annotations";
  cl.metrics_addr = ":9403";
  cl.health_check_interval = "2s";
  cl.log_level = "error";
  auto r = Resolve(cl, EnvFrom({{"MIG_STRATEGY", "mixed"},
                                {"FAIL_ON_INIT_ERROR", "true"},
                                {"DEVICE_LIST_STRATEGY", "envvar"},
                                {"DANQING_METRICS_ADDR", ":9402"},
                                {"DANQING_LOG_LEVEL", "debug"}}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->flags.mig_strategy, MigStrategy::kNone);
  EXPECT_FALSE(r->flags.fail_on_init_error);
  EXPECT_THAT(r->flags.plugin.device_list_strategy,
              ElementsAre(DeviceListStrategy::kCdiAnnotations));
  EXPECT_EQ(r->danqing.metrics_addr, ":9403");
  EXPECT_EQ(r->danqing.health_check_interval, 2s);
  EXPECT_EQ(r->danqing.log_level, "error");
  EXPECT_EQ(r->origin.at("flags.migStrategy"), "flag --mig-strategy");
}

TEST(ResolveTest, ConfigFileFromEnvironmentAndFlagPrecedence) {
  const std::string env_file =
      WriteTempFile("env.yaml", "version: v1\nflags:\n  migStrategy: single\n");
  const std::string flag_file =
      WriteTempFile("flag.yaml", "version: v1\nflags:\n  migStrategy: mixed\n");

  auto from_env = Resolve(CommandLine{}, EnvFrom({{"CONFIG_FILE", env_file}}));
  ASSERT_TRUE(from_env.ok()) << from_env.status().ToString();
  EXPECT_EQ(from_env->source, env_file);
  EXPECT_EQ(from_env->flags.mig_strategy, MigStrategy::kSingle);

  CommandLine cl;
  cl.config_file = flag_file;
  auto from_flag = Resolve(cl, EnvFrom({{"CONFIG_FILE", env_file}}));
  ASSERT_TRUE(from_flag.ok()) << from_flag.status().ToString();
  EXPECT_EQ(from_flag->source, flag_file);
  EXPECT_EQ(from_flag->flags.mig_strategy, MigStrategy::kMixed);

  // An explicitly empty --config-file means "no file", even with CONFIG_FILE set.
  cl.config_file = "";
  auto none = Resolve(cl, EnvFrom({{"CONFIG_FILE", env_file}}));
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(none->source, "");
  EXPECT_EQ(none->flags.mig_strategy, MigStrategy::kNone);
}

TEST(ResolveTest, MissingConfigFileSaysWhoNamedIt) {
  const Status st =
      Resolve(CommandLine{}, EnvFrom({{"CONFIG_FILE", "/nonexistent/danqing.yaml"}})).status();
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_THAT(st.message(), HasSubstr("/nonexistent/danqing.yaml"));
  EXPECT_THAT(st.message(), HasSubstr("named by environment variable CONFIG_FILE"));
}

TEST(ResolveTest, InvalidFileContentIsReportedAsIs) {
  CommandLine cl;
  cl.config_file = WriteTempFile("invalid.yaml", "version: v1\nflags:\n  bogus: 1\n");
  const Status st = Resolve(cl, NoEnv()).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), StartsWith(*cl.config_file + ":3:3: flags.bogus: unknown field"));
}

TEST(ResolveTest, EmptyEnvironmentValuesCountAsUnset) {
  auto r =
      Resolve(CommandLine{},
              EnvFrom({{"MIG_STRATEGY", ""}, {"FAIL_ON_INIT_ERROR", ""}, {"CONFIG_FILE", ""}}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->flags.mig_strategy, MigStrategy::kNone);
  EXPECT_TRUE(r->flags.fail_on_init_error);
}

TEST(ResolveTest, NvidiaEnvironmentAliases) {
  auto r = Resolve(CommandLine{}, EnvFrom({{"NVIDIA_CDI_HOOK_PATH", "/opt/hook"},
                                           {"DRIVER_ROOT_CTR_PATH", "/host-driver"},
                                           {"NVIDIA_DEV_ROOT", "/dev-root"}}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->flags.plugin.nvidia_ctk_path, "/opt/hook");
  EXPECT_EQ(r->flags.plugin.container_driver_root, "/host-driver");
  EXPECT_EQ(r->flags.nvidia_dev_root, "/dev-root");
  EXPECT_EQ(r->flags.nvidia_driver_root, "/");
}

TEST(ResolveTest, EveryStringSettingFromEnvironment) {
  auto r = Resolve(CommandLine{}, EnvFrom({{"NVIDIA_DRIVER_ROOT", "/run/nvidia/driver"},
                                           {"PASS_DEVICE_SPECS", "1"},
                                           {"DEVICE_ID_STRATEGY", "index"},
                                           {"CDI_ANNOTATION_PREFIX", "nvidia.cdi.k8s.io/"},
                                           {"NVIDIA_CTK_PATH", "/usr/local/bin/nvidia-ctk"},
                                           {"CONTAINER_DRIVER_ROOT", "/host"},
                                           {"MPS_ROOT", "/run/nvidia/mps"},
                                           {"DANQING_DEVICE_PLUGIN_PATH", "/dp"},
                                           {"DANQING_POD_RESOURCES_SOCKET", "/pr/kubelet.sock"},
                                           {"DANQING_NVML_LIB", "/lib/libnvidia-ml.so.1"},
                                           {"DANQING_CDI_ROOT", "/etc/cdi"},
                                           {"DANQING_LOG_LEVEL", "trace"}}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->flags.nvidia_driver_root, "/run/nvidia/driver");
  EXPECT_EQ(r->flags.nvidia_dev_root, "/run/nvidia/driver");
  EXPECT_TRUE(r->flags.plugin.pass_device_specs);
  EXPECT_EQ(r->flags.plugin.device_id_strategy, DeviceIdStrategy::kIndex);
  EXPECT_EQ(r->flags.plugin.cdi_annotation_prefix, "nvidia.cdi.k8s.io/");
  EXPECT_EQ(r->flags.plugin.nvidia_ctk_path, "/usr/local/bin/nvidia-ctk");
  EXPECT_EQ(r->flags.plugin.container_driver_root, "/host");
  EXPECT_EQ(r->flags.mps_root, "/run/nvidia/mps");
  EXPECT_EQ(r->danqing.device_plugin_path, "/dp");
  EXPECT_EQ(r->danqing.pod_resources_socket, "/pr/kubelet.sock");
  EXPECT_EQ(r->danqing.nvml_lib, "/lib/libnvidia-ml.so.1");
  EXPECT_EQ(r->danqing.cdi_root, "/etc/cdi");
  EXPECT_EQ(r->danqing.log_level, "trace");
}

struct BadValueCase {
  const char* variable;
  const char* value;
  const char* reason;
};

class BadEnvironmentTest : public ::testing::TestWithParam<BadValueCase> {};

TEST_P(BadEnvironmentTest, NamesTheVariable) {
  const BadValueCase& c = GetParam();
  const Status st = Resolve(CommandLine{}, EnvFrom({{c.variable, c.value}})).status();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), StartsWith(std::string("environment variable ") + c.variable + "=\"" +
                                       c.value + "\": "));
  EXPECT_THAT(st.message(), HasSubstr(c.reason));
}

INSTANTIATE_TEST_SUITE_P(
    All, BadEnvironmentTest,
    ::testing::Values(
        BadValueCase{"FAIL_ON_INIT_ERROR", "maybe",
                     "invalid boolean \"maybe\"; expected true/false"},
        BadValueCase{"PASS_DEVICE_SPECS", "2", "invalid boolean"},
        BadValueCase{"MIG_STRATEGY", "bogus", "invalid MIG strategy \"bogus\""},
        BadValueCase{"MIG_STRATEGY", "Mixed", "expected none, single or mixed"},
        BadValueCase{"DEVICE_ID_STRATEGY", "serial", "invalid device ID strategy"},
        BadValueCase{"DEVICE_LIST_STRATEGY", "envvar,,cdi-cri", "empty item in list"},
        BadValueCase{"DEVICE_LIST_STRATEGY", "envvar,cdi", "invalid device list strategy \"cdi\""},
        BadValueCase{"DANQING_HEALTH_CHECK_INTERVAL", "10", "invalid duration \"10\""},
        BadValueCase{"DANQING_HEALTH_CHECK_INTERVAL", "-1s", "must be greater than zero"},
        BadValueCase{"DANQING_LOG_LEVEL", "loud", "invalid log level \"loud\""},
        BadValueCase{"DANQING_METRICS_ADDR", "localhost", "has no port"},
        BadValueCase{"DANQING_CDI_ROOT", "cdi", "expected an absolute path"},
        BadValueCase{"NVIDIA_CDI_HOOK_PATH", "nvidia-cdi-hook", "absolute path of the CDI hook"},
        BadValueCase{"NVIDIA_CTK_PATH", "/usr/bin/.", "absolute path of the CDI hook"},
        BadValueCase{"IMEX_CHANNEL_IDS", "zero", "invalid integer \"zero\""}));

TEST(ResolveTest, BadFlagNamesTheFlag) {
  CommandLine cl;
  cl.mig_strategy = "bogus";
  Status st = Resolve(cl, NoEnv()).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), StartsWith("flag --mig-strategy=\"bogus\": invalid MIG strategy"));
  EXPECT_THAT(st.message(), HasSubstr("(setting flags.migStrategy)"));

  CommandLine cl2;
  cl2.health_check_interval = "fast";
  st = Resolve(cl2, NoEnv()).status();
  EXPECT_THAT(st.message(), StartsWith("flag --health-check-interval=\"fast\": invalid duration"));
}

TEST(ResolveTest, BadEnvironmentIsAnErrorEvenWhenAFlagOverridesIt) {
  // Each layer is checked as it is applied: a bad variable is an error even
  // when a flag would override it, so mistakes in a DaemonSet do not hide.
  CommandLine cl;
  cl.fail_on_init_error = "true";
  const Status st = Resolve(cl, EnvFrom({{"FAIL_ON_INIT_ERROR", "maybe"}})).status();
  EXPECT_THAT(st.message(), HasSubstr("FAIL_ON_INIT_ERROR"));
}

// --- Validate: checks across settings ----------------------------------------------------

constexpr std::string_view kMpsFile = R"(version: v1
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
)";

TEST(ValidateTest, MpsNeedsMpsRoot) {
  CommandLine cl;
  cl.config_file = WriteTempFile("mps.yaml", kMpsFile);
  Status st = Resolve(cl, NoEnv()).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("sharing.mps (" + *cl.config_file +
                                      ":4:5) requires "
                                      "flags.mpsRoot (--mps-root, MPS_ROOT)"));

  // Valid as NVIDIA checks it, and still refused: Danqing runs no MPS daemon.
  const Status refused = Resolve(cl, EnvFrom({{"MPS_ROOT", "/run/nvidia/mps"}})).status();
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("sharing.mps (" + *cl.config_file +
                                           ":4:5) is not supported: Danqing does not run an MPS control daemon"));
  EXPECT_THAT(refused.message(), HasSubstr("sharing.timeSlicing"));
}

TEST(ValidateTest, MpsIsNotSupportedWithMixedMig) {
  CommandLine cl;
  cl.config_file = WriteTempFile("mps.yaml", kMpsFile);
  cl.mig_strategy = "mixed";
  cl.mps_root = "/run/nvidia/mps";
  const Status st = Resolve(cl, NoEnv()).status();
  EXPECT_THAT(st.message(), HasSubstr("is not supported with flags.migStrategy (flag "
                                      "--mig-strategy) = mixed"));
}

TEST(ValidateTest, ImexChannelIds) {
  Config c;
  c.imex.channel_ids = {0};
  EXPECT_TRUE(Validate(c).ok());
  c.imex.channel_ids = {1};
  EXPECT_THAT(Validate(c).message(), HasSubstr("imex.channelIDs must be [] or [0]"));
  CommandLine cl;
  cl.imex_channel_ids = "0,1";
  EXPECT_THAT(Resolve(cl, NoEnv()).status().message(),
              HasSubstr("imex.channelIDs (flag --imex-channel-ids) must be [] or [0]"));
}

TEST(ValidateTest, EmptyDeviceListStrategy) {
  Config c;
  c.flags.plugin.device_list_strategy.clear();
  EXPECT_EQ(Validate(c).code(), StatusCode::kInvalidArgument);
  CommandLine cl;
  cl.device_list_strategy = "";
  EXPECT_THAT(Resolve(cl, NoEnv()).status().message(),
              HasSubstr("at least one device list strategy is required"));
}

// --- Reporting: accepted but ignored ------------------------------------------------------

TEST(IgnoredTest, ListsNonDefaultIgnoredSettingsWithOrigin) {
  const Config c = MustParse(R"(version: v1
flags:
  gdsEnabled: true
  mofedEnabled: false
  plugin:
    kubeletSocket: /other/kubelet.sock
  gfd:
    oneshot: true
resources:
  gpus:
  - pattern: "*A100*"
    name: a100
imex:
  channelIDs: [0]
)");
  const auto ignored = AcceptedButIgnored(c);
  std::vector<std::string> paths;
  for (const auto& i : ignored) paths.push_back(i.path);
  // mofedEnabled is at its default (false), so it is not worth reporting.
  EXPECT_THAT(paths, ElementsAre("flags.gdsEnabled", "flags.plugin.kubeletSocket",
                                 "flags.gfd.oneshot", "imex.channelIDs", "resources"));
  EXPECT_EQ(ignored[0].origin, "test.yaml:3:15");
  EXPECT_THAT(ignored[0].ToString(),
              StartsWith("flags.gdsEnabled (test.yaml:3:15) is accepted but ignored: "));
  EXPECT_EQ(ignored[4].origin, "test.yaml:10:3");
}

TEST(IgnoredTest, EnvironmentOriginIsReported) {
  auto r = Resolve(CommandLine{}, EnvFrom({{"GDS_ENABLED", "true"}}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto ignored = AcceptedButIgnored(*r);
  ASSERT_EQ(ignored.size(), 1u);
  EXPECT_EQ(ignored[0].origin, "environment variable GDS_ENABLED");
}

// --- The flag table --------------------------------------------------------------------------

TEST(FlagTableTest, NvidiaAndDanqingFlagsWithEnvAndDefaults) {
  std::map<std::string, FlagSpec> by_name;
  std::vector<std::optional<std::string> CommandLine::*> fields;
  for (const FlagSpec& f : FlagTable()) {
    EXPECT_TRUE(by_name.emplace(std::string(f.name), f).second) << "duplicate flag " << f.name;
    ASSERT_NE(f.field, nullptr) << f.name;
    EXPECT_EQ(std::find(fields.begin(), fields.end(), f.field), fields.end())
        << "two flags share a CommandLine field: " << f.name;
    fields.push_back(f.field);
    EXPECT_FALSE(f.env.empty()) << f.name;
    EXPECT_FALSE(f.help.empty()) << f.name;
  }
  EXPECT_EQ(FlagTable().front().name, "config-file");

  struct Expected {
    const char* flag;
    const char* env;
    const char* path;
    const char* default_value;
    FlagKind kind;
  };
  const Expected expected[] = {
      {"config-file", "CONFIG_FILE", "", "", FlagKind::kString},
      {"mig-strategy", "MIG_STRATEGY", "flags.migStrategy", "none", FlagKind::kString},
      {"fail-on-init-error", "FAIL_ON_INIT_ERROR", "flags.failOnInitError", "true",
       FlagKind::kBool},
      {"nvidia-driver-root", "NVIDIA_DRIVER_ROOT", "flags.nvidiaDriverRoot", "/",
       FlagKind::kString},
      {"nvidia-dev-root", "NVIDIA_DEV_ROOT", "flags.nvidiaDevRoot", "", FlagKind::kString},
      {"pass-device-specs", "PASS_DEVICE_SPECS", "flags.plugin.passDeviceSpecs", "false",
       FlagKind::kBool},
      {"device-list-strategy", "DEVICE_LIST_STRATEGY", "flags.plugin.deviceListStrategy", "envvar",
       FlagKind::kList},
      {"device-id-strategy", "DEVICE_ID_STRATEGY", "flags.plugin.deviceIDStrategy", "uuid",
       FlagKind::kString},
      {"cdi-annotation-prefix", "CDI_ANNOTATION_PREFIX", "flags.plugin.cdiAnnotationPrefix",
       "cdi.k8s.io/", FlagKind::kString},
      {"nvidia-ctk-path", "NVIDIA_CTK_PATH", "flags.plugin.nvidiaCTKPath", "/usr/bin/nvidia-ctk",
       FlagKind::kString},
      {"container-driver-root", "CONTAINER_DRIVER_ROOT", "flags.plugin.containerDriverRoot",
       "/driver-root", FlagKind::kString},
      {"mps-root", "MPS_ROOT", "flags.mpsRoot", "", FlagKind::kString},
      {"device-plugin-path", "DANQING_DEVICE_PLUGIN_PATH", "danqing.devicePluginPath",
       "/var/lib/kubelet/device-plugins", FlagKind::kString},
      {"pod-resources-socket", "DANQING_POD_RESOURCES_SOCKET", "danqing.podResourcesSocket",
       "/var/lib/kubelet/pod-resources/kubelet.sock", FlagKind::kString},
      {"nvml-lib", "DANQING_NVML_LIB", "danqing.nvmlLib", "", FlagKind::kString},
      {"cdi-root", "DANQING_CDI_ROOT", "danqing.cdiRoot", "/var/run/cdi", FlagKind::kString},
      {"metrics-addr", "DANQING_METRICS_ADDR", "danqing.metricsAddr", ":9400", FlagKind::kString},
      {"health-check-interval", "DANQING_HEALTH_CHECK_INTERVAL", "danqing.healthCheckInterval",
       "1s", FlagKind::kDuration},
      {"log-level", "DANQING_LOG_LEVEL", "danqing.logLevel", "info", FlagKind::kString},
  };
  for (const Expected& e : expected) {
    SCOPED_TRACE(e.flag);
    ASSERT_EQ(by_name.count(e.flag), 1u);
    const FlagSpec& f = by_name.at(e.flag);
    EXPECT_EQ(f.env, e.env);
    EXPECT_EQ(f.config_path, e.path);
    EXPECT_EQ(f.default_value, e.default_value);
    EXPECT_EQ(f.kind, e.kind);
    // Danqing runs no MPS (its CDI spec does carry the nvidia-ctk hook).
    EXPECT_EQ(f.ignored, std::string_view(e.flag) == "mps-root");
    EXPECT_EQ(f.nvidia, std::string_view(e.path).substr(0, 8) != "danqing.");
  }
  EXPECT_TRUE(by_name.at("gds-enabled").ignored);
  EXPECT_EQ(by_name.at("nvidia-dev-root").alias, "dev-root");
  EXPECT_EQ(by_name.at("nvidia-ctk-path").env_alias, "NVIDIA_CDI_HOOK_PATH");
}

TEST(FlagTableTest, EveryFlagRoundTripsThroughResolve) {
  // Setting each flag to its own default text is accepted and changes nothing
  // (nvidia-dev-root aside, whose default is derived).
  const auto defaults = Resolve(CommandLine{}, NoEnv());
  ASSERT_TRUE(defaults.ok());
  for (const FlagSpec& f : FlagTable()) {
    if (f.name == "config-file" || f.default_value.empty()) continue;
    CommandLine cl;
    cl.*(f.field) = f.default_value;
    auto r = Resolve(cl, NoEnv());
    ASSERT_TRUE(r.ok()) << f.name << ": " << r.status().ToString();
    EXPECT_EQ(r->flags, defaults->flags) << f.name;
    EXPECT_EQ(r->danqing, defaults->danqing) << f.name;
  }
}

// --- Text parsers ---------------------------------------------------------------------------

TEST(ParseBoolTest, AcceptsGoAndYesNoSpellingsCaseInsensitively) {
  for (const char* t : {"true", "TRUE", "True", "t", "T", "1", "yes", "YES", "y", "on", " true "}) {
    EXPECT_EQ(ParseBool(t), std::optional<bool>(true)) << t;
  }
  for (const char* f : {"false", "FALSE", "f", "0", "no", "No", "n", "off"}) {
    EXPECT_EQ(ParseBool(f), std::optional<bool>(false)) << f;
  }
  for (const char* bad : {"", "maybe", "2", "truee", "yes please"}) {
    EXPECT_EQ(ParseBool(bad), std::nullopt) << bad;
  }
}

TEST(DurationTest, ParsesGoSyntax) {
  EXPECT_EQ(ParseDuration("1s"), Duration(1s));
  EXPECT_EQ(ParseDuration("500ms"), Duration(500ms));
  EXPECT_EQ(ParseDuration("1m30s"), Duration(90s));
  EXPECT_EQ(ParseDuration("1.5h"), Duration(90min));
  EXPECT_EQ(ParseDuration("2h45m10.5s"), Duration(2h + 45min + 10500ms));
  EXPECT_EQ(ParseDuration("10us"), Duration(10us));
  EXPECT_EQ(ParseDuration("10\xC2\xB5s"), Duration(10us));
  EXPECT_EQ(ParseDuration("7ns"), Duration(7ns));
  EXPECT_EQ(ParseDuration(".5s"), Duration(500ms));
  EXPECT_EQ(ParseDuration("0"), Duration(0));
  EXPECT_EQ(ParseDuration("-2s"), Duration(-2s));
  EXPECT_EQ(ParseDuration("2562047h"), Duration(2562047h));
  for (const char* bad : {"", "1", "s", "1x", "1.s.", "--1s", "1s2", "9999999999h", ".s", "1 s"}) {
    EXPECT_EQ(ParseDuration(bad), std::nullopt) << bad;
  }
}

TEST(DurationTest, FormatsLikeGo) {
  EXPECT_EQ(FormatDuration(0s), "0s");
  EXPECT_EQ(FormatDuration(1s), "1s");
  EXPECT_EQ(FormatDuration(500ms), "500ms");
  EXPECT_EQ(FormatDuration(1500us), "1.5ms");
  EXPECT_EQ(FormatDuration(90s), "1m30s");
  EXPECT_EQ(FormatDuration(1h), "1h0m0s");
  EXPECT_EQ(FormatDuration(1h + 2min + 3500ms), "1h2m3.5s");
  EXPECT_EQ(FormatDuration(7ns), "7ns");
  EXPECT_EQ(FormatDuration(-2s), "-2s");
  for (Duration d : {Duration(1), Duration(999), Duration(1234567), Duration(86400s + 1ns),
                     Duration(std::numeric_limits<std::int64_t>::max()),
                     Duration(std::numeric_limits<std::int64_t>::min())}) {
    EXPECT_EQ(ParseDuration(FormatDuration(d)), d) << FormatDuration(d);
  }
}

TEST(NamesTest, Spellings) {
  EXPECT_EQ(Name(MigStrategy::kMixed), "mixed");
  EXPECT_EQ(Name(DeviceListStrategy::kCdiCri), "cdi-cri");
  EXPECT_EQ(Name(DeviceIdStrategy::kIndex), "index");
  EXPECT_EQ(Name(DeviceDiscoveryStrategy::kTegra), "tegra");
  EXPECT_EQ(Name(SharingStrategy::kTimeSlicing), "time-slicing");
}

// --- FormatConfig round trip --------------------------------------------------------------

void ExpectSameSettings(const Config& a, const Config& b) {
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.flags, b.flags);
  EXPECT_EQ(a.resources, b.resources);
  EXPECT_EQ(a.sharing, b.sharing);
  EXPECT_EQ(a.imex, b.imex);
  EXPECT_EQ(a.danqing, b.danqing);
}

TEST(FormatConfigTest, RoundTrips) {
  for (std::string_view text : {kNvidiaTimeSlicing, kNvidiaMixedMig, kNvidiaPluginSection, kMpsFile,
                                std::string_view("version: v1\n")}) {
    const Config original = MustParse(text);
    const std::string formatted = FormatConfig(original);
    auto again = ParseConfig(formatted, "formatted.yaml");
    ASSERT_TRUE(again.ok()) << again.status().ToString() << "\n" << formatted;
    ExpectSameSettings(original, *again);
  }
}

TEST(FormatConfigTest, RoundTripsUnusualValues) {
  Config c;
  c.flags.nvidia_driver_root = "/path with \"quotes\"\tand\\backslash";
  c.flags.plugin.cdi_feature_flags = {"a", "b"};
  c.flags.gfd.sleep_interval = 1500ms;
  c.danqing.health_check_interval = 1h + 1ns;
  c.danqing.nvml_lib = "libnvidia-ml.so.1";
  c.resources.mig.push_back({"*", "nvidia.com/mig-x"});
  ReplicatedResources ts;
  ts.resources.push_back({"nvidia.com/gpu", "nvidia.com/gpu.shared", {}, 3});
  ReplicatedDevices count;
  count.kind = ReplicatedDevices::Kind::kCount;
  count.count = 2;
  ts.resources.push_back({"nvidia.com/mig-1g.5gb", "", count, 2});
  ReplicatedDevices list;
  list.kind = ReplicatedDevices::Kind::kList;
  list.list = {"0:1", "2"};
  ts.resources.push_back({"nvidia.com/mig-2g.10gb", "", list, 5});
  c.sharing.time_slicing = ts;
  const std::string formatted = FormatConfig(c);
  auto again = ParseConfig(formatted, "formatted.yaml");
  ASSERT_TRUE(again.ok()) << again.status().ToString() << "\n" << formatted;
  ExpectSameSettings(c, *again);
}

// --- Robustness: mutated files never crash -----------------------------------------------

TEST(RobustnessTest, RandomMutationsGiveOkOrInvalidArgument) {
  const std::string seed = std::string(kNvidiaPluginSection) + R"(sharing:
  timeSlicing:
    renameByDefault: true
    resources:
    - name: nvidia.com/gpu
      devices: [0, "1", 2]
      replicas: 4
    - name: mig-1g.5gb
      devices: ["0:0"]
      replicas: 2
resources:
  gpus:
  - pattern: "*"
    name: gpu
danqing:
  healthCheckInterval: 1s
  metricsAddr: ":9400"
)";
  ASSERT_TRUE(ParseConfig(seed, "seed.yaml").ok());

  const std::string alphabet = "{}[]:,-#&*!|>'\"%@`?~ \n\t0123456789abcxyzAZ.\\/\x01\xff";
  std::mt19937 rng(20240611);  // fixed: the same mutations every run
  auto pick = [&](std::size_t n) {
    return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng);
  };
  int ok = 0;
  int errors = 0;
  for (int round = 0; round < 600; ++round) {
    std::string text = seed;
    const int edits = 1 + static_cast<int>(pick(4));
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const std::size_t at = pick(text.size());
      switch (pick(6)) {
        case 0: text[at] = alphabet[pick(alphabet.size())]; break;           // replace
        case 1: text.insert(at, 1, alphabet[pick(alphabet.size())]); break;  // insert
        case 2: text.erase(at, 1 + pick(8)); break;                          // delete
        case 3: {                                                            // duplicate a line
          const std::size_t start = text.rfind('\n', at);
          const std::size_t end = text.find('\n', at);
          const std::size_t s = start == std::string::npos ? 0 : start + 1;
          const std::size_t len = (end == std::string::npos ? text.size() : end) - s;
          text.insert(s, text.substr(s, len) + "\n");
          break;
        }
        case 4: text.insert(at, "&x *x "); break;  // alias noise
        default: text.resize(at); break;           // truncate
      }
    }
    auto r = ParseConfig(text, "mutated.yaml");
    if (r.ok()) {
      ++ok;
      // Whatever parses must format and parse back to the same settings.
      auto again = ParseConfig(FormatConfig(*r), "formatted.yaml");
      ASSERT_TRUE(again.ok()) << again.status().ToString();
      ExpectSameSettings(*r, *again);
    } else {
      ++errors;
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
      EXPECT_THAT(r.status().message(), StartsWith("mutated.yaml")) << text;
    }
  }
  EXPECT_EQ(ok + errors, 600);
  RecordProperty("parsed_ok", ok);
  EXPECT_GT(errors, 0);
}

}  // namespace
}  // namespace danqing::config
