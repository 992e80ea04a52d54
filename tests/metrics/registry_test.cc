// The metrics registry and formats, cgroup and checkpoint parsing, and the
// listen address: no NVML, no kubelet.
#include "metrics/registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "metrics/agent_metrics.h"
#include "metrics/exporter.h"
#include "metrics/pods.h"
#include "tests/metrics/exposition.h"

namespace danqing::metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string RenderAll(const Registry& r, Format f) {
  std::string out;
  Render(r.Collect(), f, out);
  RenderEof(f, out);
  return out;
}

TEST(RegistryTest, CounterGetsTotalSuffixInBothFormats) {
  Registry r;
  r.AddCounter("danqing_things", "Things done.", {"kind"}).WithLabels({"a"}).Inc(2);
  std::string text = RenderAll(r, Format::kText004);
  EXPECT_THAT(text, HasSubstr("# HELP danqing_things_total Things done.\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE danqing_things_total counter\n"));
  EXPECT_THAT(text, HasSubstr("danqing_things_total{kind=\"a\"} 2\n"));
  EXPECT_THAT(text, Not(HasSubstr("# EOF")));

  std::string om = RenderAll(r, Format::kOpenMetrics100);
  EXPECT_THAT(om, HasSubstr("# TYPE danqing_things counter\n"));
  EXPECT_THAT(om, HasSubstr("danqing_things_total{kind=\"a\"} 2\n"));
  EXPECT_TRUE(om.ends_with("# EOF\n"));
}

TEST(RegistryTest, CounterNeverGoesDown) {
  Registry r;
  Counter& c = r.AddCounter("c", "c").Get();
  c.Inc(3);
  c.Inc(-1);
  EXPECT_EQ(c.value(), 3);
}

TEST(RegistryTest, SameNameReturnsSameFamily) {
  Registry r;
  auto& a = r.AddCounter("x", "first", {"l"});
  auto& b = r.AddCounter("x", "second", {"l"});
  EXPECT_EQ(&a, &b);
  EXPECT_EQ(r.Collect().size(), 1u);
}

TEST(RegistryTest, EscapesLabelValuesAndHelp) {
  Registry r;
  r.AddGauge("g", "line1\nback\\slash \"q\"", {"v"}).WithLabels({"a\"b\\c\nd"}).Set(1);
  std::string text = RenderAll(r, Format::kText004);
  EXPECT_THAT(text, HasSubstr("# HELP g line1\\nback\\\\slash \"q\"\n"));
  EXPECT_THAT(text, HasSubstr("g{v=\"a\\\"b\\\\c\\nd\"} 1\n"));
  auto parsed = test::Parse(text);
  ASSERT_TRUE(parsed.errors.empty());
  EXPECT_EQ(parsed.Find("g")[0]->labels.at("v"), "a\"b\\c\nd");
  // OpenMetrics escapes quotes in HELP too.
  EXPECT_THAT(RenderAll(r, Format::kOpenMetrics100),
              HasSubstr("# HELP g line1\\nback\\\\slash \\\"q\\\"\n"));
}

TEST(RegistryTest, ValuesRoundTrip) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(42), "42");
  EXPECT_EQ(FormatValue(0.25), "0.25");
  EXPECT_EQ(FormatValue(1.0 / 0.0), "+Inf");
  EXPECT_EQ(FormatValue(-1.0 / 0.0), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
  EXPECT_EQ(std::stod(FormatValue(85899345920.0)), 85899345920.0);
  EXPECT_EQ(std::stod(FormatValue(0.1 + 0.2)), 0.1 + 0.2);
}

TEST(RegistryTest, HistogramBucketsAreCumulative) {
  Registry r;
  auto& h = r.AddHistogram("lat_seconds", "Latency.", {"r"}, {0.1, 1}, "seconds").WithLabels({"x"});
  h.Observe(0.05);
  h.Observe(0.1);  // le is inclusive
  h.Observe(0.5);
  h.Observe(7);
  auto p = test::Parse(RenderAll(r, Format::kText004));
  EXPECT_EQ(p.Value("lat_seconds_bucket", {{"le", "0.1"}}), 2);
  EXPECT_EQ(p.Value("lat_seconds_bucket", {{"le", "1"}}), 3);
  EXPECT_EQ(p.Value("lat_seconds_bucket", {{"le", "+Inf"}}), 4);
  EXPECT_EQ(p.Value("lat_seconds_count"), 4);
  EXPECT_DOUBLE_EQ(*p.Value("lat_seconds_sum"), 7.65);
  EXPECT_EQ(p.types["lat_seconds"], "histogram");
  EXPECT_THAT(RenderAll(r, Format::kOpenMetrics100), HasSubstr("# UNIT lat_seconds seconds\n"));
}

TEST(RegistryTest, ConcurrentIncrementsAreNotLost) {
  Registry r;
  auto& fam = r.AddCounter("n", "n", {"t"});
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&fam] {
      for (int i = 0; i < 10000; ++i) fam.WithLabels({"same"}).Inc();
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(fam.WithLabels({"same"}).value(), 40000);
}

TEST(RegistryTest, InfoFamily) {
  Registry r;
  r.AddInfo("danqing_build", "Build.", {"version"}).WithLabels({"1.2"}).Set(1);
  EXPECT_THAT(
      RenderAll(r, Format::kText004),
      HasSubstr("# TYPE danqing_build_info gauge\ndanqing_build_info{version=\"1.2\"} 1\n"));
  EXPECT_THAT(RenderAll(r, Format::kOpenMetrics100),
              HasSubstr("# TYPE danqing_build info\ndanqing_build_info{version=\"1.2\"} 1\n"));
}

TEST(RegistryTest, UnknownTypeNamesStayExact) {
  std::vector<MetricFamily> fams{
      {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "x", MetricType::kUnknown, "", {{"", {}, 3}}}};
  std::string text, om;
  Render(fams, Format::kText004, text);
  Render(fams, Format::kOpenMetrics100, om);
  EXPECT_THAT(
      text,
      HasSubstr("# TYPE DCGM_FI_DEV_ECC_SBE_VOL_TOTAL untyped\nDCGM_FI_DEV_ECC_SBE_VOL_TOTAL 3\n"));
  EXPECT_THAT(
      om,
      HasSubstr("# TYPE DCGM_FI_DEV_ECC_SBE_VOL_TOTAL unknown\nDCGM_FI_DEV_ECC_SBE_VOL_TOTAL 3\n"));
}

TEST(NegotiateTest, Formats) {
  // What Prometheus 2.42 sends.
  EXPECT_EQ(
      NegotiateFormat("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                      "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"),
      Format::kOpenMetrics100);
  EXPECT_EQ(NegotiateFormat(""), Format::kText004);
  EXPECT_EQ(NegotiateFormat("*/*"), Format::kText004);
  EXPECT_EQ(NegotiateFormat("text/plain;version=0.0.4"), Format::kText004);
  EXPECT_EQ(NegotiateFormat("application/openmetrics-text"), Format::kOpenMetrics100);
  EXPECT_EQ(NegotiateFormat("Application/OpenMetrics-Text; Version=1.0.0"),
            Format::kOpenMetrics100);
  // Only a version we do not write: text.
  EXPECT_EQ(NegotiateFormat("application/openmetrics-text;version=0.0.1"), Format::kText004);
  // Text preferred by q.
  EXPECT_EQ(NegotiateFormat("application/openmetrics-text;q=0.2,text/plain;q=0.9"),
            Format::kText004);
  EXPECT_EQ(NegotiateFormat("application/openmetrics-text;q=0"), Format::kText004);
  EXPECT_EQ(NegotiateFormat("garbage;;;=,"), Format::kText004);
  EXPECT_THAT(std::string(ContentType(Format::kOpenMetrics100)),
              HasSubstr("application/openmetrics-text; version=1.0.0"));
  EXPECT_THAT(std::string(ContentType(Format::kText004)), HasSubstr("text/plain; version=0.0.4"));
}

TEST(NamesTest, Valid) {
  EXPECT_TRUE(ValidMetricName("DCGM_FI_DEV_GPU_UTIL"));
  EXPECT_TRUE(ValidMetricName("a:b_c1"));
  EXPECT_FALSE(ValidMetricName("1abc"));
  EXPECT_FALSE(ValidMetricName("a-b"));
  EXPECT_FALSE(ValidMetricName(""));
  EXPECT_TRUE(ValidLabelName("GPU_I_PROFILE"));
  EXPECT_FALSE(ValidLabelName("a:b"));
}

TEST(AgentMetricsTest, RegisteredInDefaultRegistry) {
  AgentMetrics().registrations.WithLabels({"nvidia.com/gpu"}).Inc();
  AgentMetrics().allocate_seconds.WithLabels({"nvidia.com/gpu"}).Observe(0.0003);
  AgentMetrics().reloads.WithLabels({"failed"}).Inc();
  auto p = test::Parse(RenderAll(DefaultRegistry(), Format::kText004));
  EXPECT_EQ(p.Value("danqing_build_info", {{"version", BuildVersion()}}), 1);
  EXPECT_GE(*p.Value("danqing_plugin_registrations_total", {{"resource", "nvidia.com/gpu"}}), 1);
  EXPECT_GE(
      *p.Value("danqing_plugin_allocate_duration_seconds_count", {{"resource", "nvidia.com/gpu"}}),
      1);
  EXPECT_GE(*p.Value("danqing_config_reloads_total", {{"result", "failed"}}), 1);
}

// --- cgroup paths -----------------------------------------------------------

constexpr char kUid[] = "8dd4b4c9-3b6e-4d0e-9c62-9b1b3b1a2f10";
constexpr char kCid[] = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";

TEST(CgroupTest, V2SystemdContainerd) {
  auto id = ParseCgroup(
      std::string("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod") +
      "8dd4b4c9_3b6e_4d0e_9c62_9b1b3b1a2f10.slice/cri-containerd-" + kCid + ".scope\n");
  ASSERT_TRUE(id);
  EXPECT_EQ(id->pod_uid, kUid);
  EXPECT_EQ(id->container_id, kCid);
}

TEST(CgroupTest, V2SystemdGuaranteedCrio) {
  auto id = ParseCgroup(
      std::string(
          "0::/kubepods.slice/kubepods-pod8dd4b4c9_3b6e_4d0e_9c62_9b1b3b1a2f10.slice/crio-") +
      kCid + ".scope");
  ASSERT_TRUE(id);
  EXPECT_EQ(id->pod_uid, kUid);
  EXPECT_EQ(id->container_id, kCid);
}

TEST(CgroupTest, V1CgroupfsDocker) {
  std::string text = std::string("12:pids:/kubepods/besteffort/pod") + kUid + "/" + kCid + "\n" +
                     "11:memory:/kubepods/besteffort/pod" + kUid + "/" + kCid + "\n" +
                     "1:name=systemd:/\n";
  auto id = ParseCgroup(text);
  ASSERT_TRUE(id);
  EXPECT_EQ(id->pod_uid, kUid);
  EXPECT_EQ(id->container_id, kCid);
}

TEST(CgroupTest, V1SystemdDockerScope) {
  auto id =
      ParseCgroup(std::string("4:devices:/kubepods.slice/kubepods-besteffort.slice/") +
                  "kubepods-besteffort-pod8dd4b4c9_3b6e_4d0e_9c62_9b1b3b1a2f10.slice/docker-" +
                  kCid + ".scope\n");
  ASSERT_TRUE(id);
  EXPECT_EQ(id->pod_uid, kUid);
  EXPECT_EQ(id->container_id, kCid);
}

TEST(CgroupTest, KindNestedAndPodLevelOnly) {
  auto id = ParseCgroup(
      std::string("0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/") +
      "kubelet-kubepods-besteffort-pod8dd4b4c9_3b6e_4d0e_9c62_9b1b3b1a2f10.slice\n");
  ASSERT_TRUE(id);
  EXPECT_EQ(id->pod_uid, kUid);
  EXPECT_EQ(id->container_id, "");
}

TEST(CgroupTest, NotAPod) {
  EXPECT_FALSE(ParseCgroup("0::/system.slice/sshd.service\n"));
  EXPECT_FALSE(ParseCgroup("0::/\n"));
  EXPECT_FALSE(ParseCgroup(""));
  EXPECT_FALSE(ParseCgroup("garbage without colons\n"));
  EXPECT_FALSE(ParseCgroup("0::/kubepods/burstable/podnot-a-uid/abc\n"));
  EXPECT_FALSE(ParseCgroup("0::/kubepods.slice/kubepods-burstable.slice\n"));
}

TEST(CgroupTest, ReadFromProcRoot) {
  std::string root = ::testing::TempDir() + "/proc-" + std::to_string(::getpid());
  std::filesystem::create_directories(root + "/77");
  std::ofstream(root + "/77/cgroup") << "0::/kubepods/pod" << kUid << "/" << kCid << "\n";
  auto id = ReadProcessCgroup(root, 77);
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(id->has_value());
  EXPECT_EQ((*id)->pod_uid, kUid);
  auto missing = ReadProcessCgroup(root, 78);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  std::filesystem::remove_all(root);
}

// --- kubelet checkpoint -----------------------------------------------------

TEST(CheckpointTest, NumaMapAndListForms) {
  auto e = ParseCheckpoint(R"({"Data":{"PodDeviceEntries":[
      {"PodUID":"u1","ContainerName":"c1","ResourceName":"nvidia.com/gpu","DeviceIDs":{"0":["GPU-a::0"],"1":["GPU-b::2"]},"AllocResp":"Cg=="},
      {"PodUID":"u2","ContainerName":"c2","ResourceName":"nvidia.com/gpu","DeviceIDs":["GPU-a::1"]}],
      "RegisteredDevices":{"nvidia.com/gpu":["GPU-a::0"]}},"Checksum":12345})");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_EQ(e->size(), 2u);
  EXPECT_EQ((*e)[0].pod_uid, "u1");
  EXPECT_EQ((*e)[0].container, "c1");
  EXPECT_EQ((*e)[0].device_ids, (std::vector<std::string>{"GPU-a::0", "GPU-b::2"}));
  EXPECT_EQ((*e)[1].device_ids, (std::vector<std::string>{"GPU-a::1"}));
  auto empty = ParseCheckpoint(R"({"Data":{"PodDeviceEntries":null},"Checksum":1})");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(CheckpointTest, BadInput) {
  EXPECT_EQ(ParseCheckpoint("not json").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseCheckpoint("[]").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseCheckpoint(R"({"Checksum":1})").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseCheckpoint(R"({"Data":{"PodDeviceEntries":{}}})").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      ParseCheckpoint(R"({"Data":{"PodDeviceEntries":[{"ContainerName":"c"}]}})").status().code(),
      StatusCode::kInvalidArgument);
}

TEST(DeviceIdTest, Replicas) {
  EXPECT_EQ(DeviceUuidOf("GPU-abc::3"), "GPU-abc");
  EXPECT_EQ(DeviceUuidOf("MIG-abc"), "MIG-abc");
  EXPECT_EQ(DeviceUuidOf("GPU-abc"), "GPU-abc");
}

TEST(ListenAddressTest, Forms) {
  EXPECT_EQ(*ParseListenAddress(":9400"), std::make_pair(std::string(""), 9400));  // every address
  EXPECT_EQ(*ParseListenAddress("127.0.0.1:0"), std::make_pair(std::string("127.0.0.1"), 0));
  EXPECT_EQ(*ParseListenAddress("[::1]:9400"), std::make_pair(std::string("::1"), 9400));
  for (const char* bad : {"9400", "host:", "host:abc", ":70000", "::1:9400", ":-1", ":94x"}) {
    EXPECT_EQ(ParseListenAddress(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace danqing::metrics
