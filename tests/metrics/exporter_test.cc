// The collector and exporter over the fake NVML (through NvmlBackend) and the
// kubelet's pod resources emulator: every metric and label for each shipped
// profile, pod attribution, time-sliced splits from injected per-process
// figures, pods that disappear, a missing kubelet socket, concurrent
// scrapes, OpenMetrics negotiation and promtool.
#include "metrics/exporter.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "metrics/agent_metrics.h"
#include "testing/kubelet/kubelet_emulator.h"
#include "testing/support/loopback.h"
#include "tests/metrics/exposition.h"
#include "tests/metrics/metrics_test_util.h"

namespace danqing::metrics {
namespace {

using test::Parse;
using test::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kHost[] = "test-node";
constexpr double kMiB = 1024.0 * 1024.0;

CollectorOptions Options() {
  CollectorOptions o;
  o.hostname = kHost;
  o.kubelet_checkpoint = "";
  // The first List goes over a new channel to an emulator just started: far
  // more than the 500 ms default can pass under TSan on a loaded machine.
  o.pod_resources_timeout = std::chrono::seconds(10);
  return o;
}

std::string Text(const Snapshot& s, Format f = Format::kText004) {
  std::string out;
  Render(s.families, f, out);
  RenderEof(f, out);
  return out;
}

// Samples of `name` for one device: its GPU UUID and, for MIG, GPU_I_ID.
std::vector<const test::ParsedSample*> Series(const test::Exposition& e, const std::string& name,
                                              const std::string& gpu_uuid,
                                              const std::string& gi = "") {
  std::vector<const test::ParsedSample*> out;
  for (const auto* s : e.Find(name, {{"UUID", gpu_uuid}})) {
    auto it = s->labels.find("GPU_I_ID");
    std::string have = it == s->labels.end() ? "" : it->second;
    if (have == gi) out.push_back(s);
  }
  return out;
}

std::optional<double> One(const test::Exposition& e, const std::string& name,
                          const std::string& gpu_uuid, const std::string& gi = "") {
  auto s = Series(e, name, gpu_uuid, gi);
  if (s.size() != 1) return std::nullopt;
  return std::stod(s[0]->value);
}

// Runs promtool on `text`; its exit code and output.
danqing::testing::CommandResult Promtool(const std::string& text) {
  TempDir dir;
  std::string path = dir.path() + "/metrics.txt";
  test::WriteFile(path, text);
  return danqing::testing::RunCommand({"/bin/sh", "-c", "promtool check metrics < " + path});
}

bool HavePromtool() {
  return ::access("/usr/bin/promtool", X_OK) == 0;
}

// --- every metric and label of every profile ---------------------------------

class ProfileTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ProfileTest, EveryDeviceMetricAndLabel) {
  test::Node node(GetParam());
  ASSERT_TRUE(node.inventory);
  Registry reg;
  Collector c(Options(), node.MakeSources(), reg);
  auto snap = c.Collect();
  const std::string text = Text(*snap);
  auto e = Parse(text);
  ASSERT_TRUE(e.errors.empty()) << e.errors[0];

  // Every sample belongs to a family with HELP and TYPE.
  for (const auto& s : e.samples) {
    std::string base = s.name;
    for (std::string suffix : {"_bucket", "_count", "_sum"}) {
      if (!e.types.count(base) && base.ends_with(suffix)) base.resize(base.size() - suffix.size());
    }
    EXPECT_TRUE(e.types.count(base)) << s.name;
    EXPECT_TRUE(e.helps.count(base)) << s.name;
  }

  const auto& inv = *node.inventory;
  EXPECT_EQ(e.Value("danqing_gpus"), static_cast<double>(inv.gpus.size()));
  for (const auto& g : inv.gpus) {
    SCOPED_TRACE(g.uuid);
    auto sr = node.backend->ReadSensors(g.uuid);
    ASSERT_TRUE(sr.ok()) << sr.status().ToString();
    const gpu::Sensors& s = *sr;
    // Labels of every series of this GPU.
    auto all = Series(e, "danqing_gpu_sensors_up", g.uuid);
    ASSERT_EQ(all.size(), 1u);
    const auto& l = all[0]->labels;
    EXPECT_EQ(l.at("gpu"), std::to_string(g.index));
    EXPECT_EQ(l.at("device"), "nvidia" + std::to_string(*g.minor_number));
    EXPECT_EQ(l.at("modelName"), g.name);
    EXPECT_EQ(l.at("Hostname"), kHost);
    EXPECT_EQ(l.at("pci_bus_id"), g.pci.bus_id);
    EXPECT_EQ(l.count("namespace"), 0u);
    EXPECT_EQ(all[0]->value, "1");

    auto check = [&](const std::string& name, auto field, double scale = 1, bool floor = false) {
      if (field) {
        double want = static_cast<double>(*field) / scale;
        if (floor) want = std::floor(want);
        EXPECT_EQ(One(e, name, g.uuid), want) << name;
      } else {
        EXPECT_TRUE(Series(e, name, g.uuid).empty()) << name;
      }
    };
    check("DCGM_FI_DEV_GPU_UTIL", s.utilization_gpu);
    check("DCGM_FI_DEV_MEM_COPY_UTIL", s.utilization_memory);
    check("DCGM_FI_DEV_FB_USED", s.memory_used_bytes, kMiB, true);
    check("DCGM_FI_DEV_FB_FREE", s.memory_free_bytes, kMiB, true);
    check("DCGM_FI_DEV_FB_TOTAL", s.memory_total_bytes, kMiB, true);
    check("DCGM_FI_DEV_GPU_TEMP", s.temperature_c);
    check("DCGM_FI_DEV_POWER_USAGE", s.power_mw, 1000);
    check("DCGM_FI_DEV_SM_CLOCK", s.clock_sm_mhz);
    check("DCGM_FI_DEV_MEM_CLOCK", s.clock_mem_mhz);
    check("DCGM_FI_DEV_VIDEO_CLOCK", s.clock_video_mhz);
    check("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", s.throttle_reasons);
    check("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", s.ecc_volatile_corrected);
    check("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", s.ecc_volatile_uncorrected);
    check("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", s.ecc_aggregate_corrected);
    check("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", s.ecc_aggregate_uncorrected);
    check("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", s.remapped_rows_correctable);
    check("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", s.remapped_rows_uncorrectable);
    if (s.retired_pages_pending) {
      EXPECT_EQ(One(e, "DCGM_FI_DEV_RETIRED_PENDING", g.uuid), *s.retired_pages_pending ? 1 : 0);
    }
    if (s.remapped_rows_failure) {
      EXPECT_EQ(One(e, "DCGM_FI_DEV_ROW_REMAP_FAILURE", g.uuid), *s.remapped_rows_failure ? 1 : 0);
      EXPECT_EQ(One(e, "danqing_gpu_row_remap_pending", g.uuid), *s.remapped_rows_pending ? 1 : 0);
    }
    EXPECT_EQ(One(e, "DCGM_FI_DEV_XID_ERRORS", g.uuid), 0);
    if (s.throttle_reasons) {
      auto reasons = Series(e, "danqing_gpu_throttle_reason", g.uuid);
      EXPECT_EQ(reasons.size(), 9u);
      const std::map<std::string, uint64_t> bits = {{"gpu_idle", 0x1},
                                                    {"applications_clocks_setting", 0x2},
                                                    {"sw_power_cap", 0x4},
                                                    {"hw_slowdown", 0x8},
                                                    {"sync_boost", 0x10},
                                                    {"sw_thermal_slowdown", 0x20},
                                                    {"hw_thermal_slowdown", 0x40},
                                                    {"hw_power_brake_slowdown", 0x80},
                                                    {"display_clock_setting", 0x100}};
      for (const auto* r : reasons) {
        const std::string& name = r->labels.at("reason");
        ASSERT_TRUE(bits.count(name)) << name;
        EXPECT_EQ(r->value == "1", (*s.throttle_reasons & bits.at(name)) != 0) << name;
      }
    }
    auto healthy = Series(e, "danqing_gpu_healthy", g.uuid);
    ASSERT_EQ(healthy.size(), 1u);
    EXPECT_EQ(healthy[0]->value, "1");
    EXPECT_EQ(healthy[0]->labels.at("reason"), "");
    if (s.processes) {
      EXPECT_EQ(One(e, "danqing_gpu_processes", g.uuid), static_cast<double>(s.processes->size()));
    }

    for (const auto& m : g.mig_devices) {
      SCOPED_TRACE(m.uuid);
      std::string gi = std::to_string(m.gpu_instance_id);
      auto up = Series(e, "danqing_gpu_sensors_up", g.uuid, gi);
      ASSERT_EQ(up.size(), 1u);
      EXPECT_EQ(up[0]->labels.at("GPU_I_PROFILE"), m.profile);
      EXPECT_EQ(up[0]->labels.at("gpu"), std::to_string(g.index));
      auto ms = node.backend->ReadSensors(m.uuid);
      ASSERT_TRUE(ms.ok());
      if (ms->memory_total_bytes) {
        EXPECT_EQ(One(e, "DCGM_FI_DEV_FB_TOTAL", g.uuid, gi),
                  std::floor(*ms->memory_total_bytes / kMiB));
        EXPECT_EQ(One(e, "DCGM_FI_DEV_FB_USED", g.uuid, gi),
                  std::floor(*ms->memory_used_bytes / kMiB));
      }
      EXPECT_EQ(Series(e, "danqing_gpu_healthy", g.uuid, gi).size(), 1u);
    }
  }

  // OpenMetrics of the same snapshot.
  std::string om = Text(*snap, Format::kOpenMetrics100);
  EXPECT_TRUE(om.ends_with("# EOF\n"));
  EXPECT_THAT(om, HasSubstr("# TYPE DCGM_FI_DEV_ECC_SBE_VOL_TOTAL unknown\n"));

  if (!HavePromtool()) GTEST_SKIP() << "promtool not installed (Debian package prometheus)";
  // DCGM's `modelName` label is camelCase: the one lint promtool reports.
  auto r = Promtool(text);
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_THAT(line, HasSubstr("label names should be written in 'snake_case' not 'camelCase'"));
  }
  CollectorOptions snake = Options();
  snake.snake_case_labels = true;
  Collector c2(snake, node.MakeSources(), reg);
  auto clean = Promtool(Text(*c2.Collect()));
  EXPECT_EQ(clean.exit_code, 0) << clean.out;
}

INSTANTIATE_TEST_SUITE_P(Profiles, ProfileTest,
                         ::testing::Values("a100-8x-nvswitch", "a100-mig-mixed", "a100-mig-single",
                                           "h100-2x-pcie-2numa", "h200-1x", "t4-1x",
                                           "v100-16x-dgx2", "v100-8x-dgx1"),
                         [](const auto& p) {
                           std::string n = p.param;
                           for (char& ch : n) {
                             if (ch == '-') ch = '_';
                           }
                           return n;
                         });

// --- pods ---------------------------------------------------------------------

TEST(PodsTest, WholeGpuAndMigDevicesCarryPodLabels) {
  test::Node node("a100-mig-mixed");
  ASSERT_TRUE(node.inventory);
  const auto& g0 = node.inventory->gpus[0];
  const auto& g1 = node.inventory->gpus[1];
  const auto& g3 = node.inventory->gpus[3];
  const gpu::MigDevice* big = nullptr;
  for (const auto& m : g0.mig_devices) {
    if (m.profile == "3g.40gb") big = &m;
  }
  ASSERT_NE(big, nullptr);
  TempDir dir;
  danqing::testing::PodResourcesEmulator kubelet(dir.path() + "/kubelet.sock");
  ASSERT_TRUE(kubelet.Start().ok());
  kubelet.SetPods(
      {test::MakePod("art", "render-0", "main", {{"nvidia.com/mig-3g.40gb", {big->uuid}}}),
       test::MakePod("art", "render-1", "brush", {{"nvidia.com/gpu", {g3.uuid}}}),
       test::MakePod("other", "cpu-only", "app", {{"example.com/fpga", {"fpga-0"}}})});
  v1::AllocatableResourcesResponse alloc;
  auto* d = alloc.add_devices();
  d->set_resource_name("nvidia.com/gpu");
  d->add_device_ids(g3.uuid);
  kubelet.SetAllocatable(alloc);

  CollectorOptions o = Options();
  o.pod_resources_socket = kubelet.socket_path();
  Registry reg;
  Collector c(o, node.MakeSources(), reg);
  auto e = Parse(Text(*c.Collect()));
  ASSERT_TRUE(e.errors.empty());

  std::string gi = std::to_string(big->gpu_instance_id);
  auto fb = Series(e, "DCGM_FI_DEV_FB_USED", g0.uuid, gi);
  ASSERT_EQ(fb.size(), 1u);
  EXPECT_EQ(fb[0]->labels.at("namespace"), "art");
  EXPECT_EQ(fb[0]->labels.at("pod"), "render-0");
  EXPECT_EQ(fb[0]->labels.at("container"), "main");
  EXPECT_EQ(fb[0]->labels.at("GPU_I_PROFILE"), "3g.40gb");

  auto util = Series(e, "DCGM_FI_DEV_GPU_UTIL", g3.uuid);
  ASSERT_EQ(util.size(), 1u);
  EXPECT_EQ(util[0]->labels.at("pod"), "render-1");
  EXPECT_EQ(util[0]->labels.at("container"), "brush");
  auto s3 = node.backend->ReadSensors(g3.uuid);
  ASSERT_TRUE(s3.ok());
  EXPECT_EQ(e.Value("danqing_pod_gpu_utilization", {{"pod", "render-1"}, {"share", "exclusive"}}),
            *s3->utilization_gpu);
  EXPECT_EQ(e.Value("danqing_pod_gpu_memory_used_bytes", {{"pod", "render-1"}}),
            static_cast<double>(*s3->memory_used_bytes));
  EXPECT_EQ(e.Value("danqing_pod_gpu_devices", {{"pod", "render-1"}}), 1);
  EXPECT_EQ(One(e, "danqing_gpu_allocated_devices", g3.uuid), 1);
  EXPECT_EQ(One(e, "danqing_gpu_allocatable_devices", g3.uuid), 1);
  EXPECT_EQ(One(e, "danqing_gpu_containers", g3.uuid), 1);

  // GPU 1's MIG devices are free: no pod labels, allocated 0.
  for (const auto& m : g1.mig_devices) {
    std::string mgi = std::to_string(m.gpu_instance_id);
    for (const auto* s : Series(e, "DCGM_FI_DEV_FB_USED", g1.uuid, mgi)) {
      EXPECT_EQ(s->labels.count("pod"), 0u);
    }
    EXPECT_EQ(One(e, "danqing_gpu_allocated_devices", g1.uuid, mgi), 0);
  }
  EXPECT_TRUE(e.Find("danqing_pod_gpu_devices", {{"pod", "cpu-only"}}).empty());
  auto own = Parse(Text(Snapshot{0, {}, reg.Collect()}));
  EXPECT_EQ(own.Value("danqing_pod_resources_up"), 1);
}

// DRA: the pod resources' dynamic_resources name each claim's devices by
// driver, pool and device name; the agent's table maps them to UUIDs, and the
// devices carry the pods' labels as device-plugin devices do. Another pool's
// or another driver's device, or a name the table lacks, is not attributed.
TEST(PodsTest, DraClaimDevicesCarryPodLabels) {
  test::Node node("a100-mig-mixed");
  ASSERT_TRUE(node.inventory);
  const auto& g0 = node.inventory->gpus[0];
  const auto& g2 = node.inventory->gpus[2];
  const auto& g3 = node.inventory->gpus[3];
  ASSERT_FALSE(g0.mig_devices.empty());
  const gpu::MigDevice& mig = g0.mig_devices[0];
  TempDir dir;
  danqing::testing::PodResourcesEmulator kubelet(dir.path() + "/kubelet.sock");
  ASSERT_TRUE(kubelet.Start().ok());
  using danqing::testing::AddDynamicResource;
  auto pod = [](const std::string& name, const std::string& container) {
    return test::MakePod("ml", name, container, {});
  };
  v1::PodResources train = pod("train", "main");
  AddDynamicResource(
      *train.mutable_containers(0), "ml", "train-gpu",
      {{"gpu.danqing.io", "node-a", "gpu-3", {"gpu.danqing.io/claim=u1-gpu-3"}, {}}});
  v1::PodResources infer = pod("infer", "server");
  AddDynamicResource(*infer.mutable_containers(0), "ml", "infer-mig",
                     {{"gpu.danqing.io", "node-a", "gpu-0-mig-x", {}, {}}});
  v1::PodResources stray = pod("stray", "s");
  AddDynamicResource(*stray.mutable_containers(0), "ml", "elsewhere",
                     {{"gpu.danqing.io", "node-b", "gpu-2", {}, {}},    // another node's pool
                      {"gpu.example.com", "node-a", "gpu-2", {}, {}},   // another driver
                      {"gpu.danqing.io", "node-a", "gpu-9", {}, {}}});  // not on this node
  kubelet.SetPods({train, infer, stray});

  auto names = std::make_shared<DraDevices>();
  names->driver = "gpu.danqing.io";
  names->pool = "node-a";
  names->uuid_by_device = {{"gpu-3", g3.uuid}, {"gpu-2", g2.uuid}, {"gpu-0-mig-x", mig.uuid}};
  Sources sources = node.MakeSources();
  sources.dra_devices = [names] { return names; };
  CollectorOptions o = Options();
  o.pod_resources_socket = kubelet.socket_path();
  Registry reg;
  Collector c(o, sources, reg);
  auto e = Parse(Text(*c.Collect()));
  ASSERT_TRUE(e.errors.empty());

  auto util = Series(e, "DCGM_FI_DEV_GPU_UTIL", g3.uuid);
  ASSERT_EQ(util.size(), 1u);
  EXPECT_EQ(util[0]->labels.at("namespace"), "ml");
  EXPECT_EQ(util[0]->labels.at("pod"), "train");
  EXPECT_EQ(util[0]->labels.at("container"), "main");
  EXPECT_EQ(e.Value("danqing_pod_gpu_devices", {{"pod", "train"}}), 1);
  EXPECT_EQ(One(e, "danqing_gpu_allocated_devices", g3.uuid), 1);

  auto fb = Series(e, "DCGM_FI_DEV_FB_USED", g0.uuid, std::to_string(mig.gpu_instance_id));
  ASSERT_EQ(fb.size(), 1u);
  EXPECT_EQ(fb[0]->labels.at("pod"), "infer");

  for (const auto* x : Series(e, "DCGM_FI_DEV_FB_USED", g2.uuid)) {
    EXPECT_EQ(x->labels.count("pod"), 0u) << "another pool's or driver's device is not ours";
  }
  EXPECT_EQ(One(e, "danqing_gpu_allocated_devices", g2.uuid), 0);
  EXPECT_TRUE(e.Find("danqing_pod_gpu_devices", {{"pod", "stray"}}).empty());

  // Without the agent's table (device-plugin mode) claims are not attributed.
  Collector plain(o, node.MakeSources(), reg);
  auto p = Parse(Text(*plain.Collect()));
  EXPECT_EQ(Series(p, "DCGM_FI_DEV_GPU_UTIL", g3.uuid)[0]->labels.count("pod"), 0u);
}

// Time-sliced GPU 0 of the DGX A100 shared by three pods; four processes:
// pod a (cgroup v2, systemd), pod b (cgroup v1, cgroupfs), a host process,
// and one whose /proc entry is gone.
// A GPU instance split into two compute instances: each is its own series
// (GPU_CI_ID tells them apart); before, both had one label set, and
// Prometheus kept one of the two samples at random.
TEST(ExporterTest, ComputeInstancesOfOneGpuInstanceAreSeparateSeries) {
  auto inv = std::make_shared<gpu::NodeInventory>();
  gpu::Gpu g;
  g.index = 0;
  g.uuid = "GPU-split";
  g.name = "NVIDIA A100-SXM4-80GB";
  g.minor_number = 0;
  g.pci.bus_id = "00000000:07:00.0";
  g.mig_mode = gpu::MigMode::kEnabled;
  for (uint32_t ci = 0; ci < 2; ++ci) {
    gpu::MigDevice m;
    m.uuid = "MIG-ci" + std::to_string(ci);
    m.parent_uuid = g.uuid;
    m.index = static_cast<int>(ci);
    m.gpu_instance_id = 1;
    m.compute_instance_id = ci;
    m.profile = "4g.40gb";
    g.mig_devices.push_back(m);
  }
  gpu::MigDevice whole;  // alone in its GPU instance: dcgm-exporter's labels only
  whole.uuid = "MIG-whole";
  whole.parent_uuid = g.uuid;
  whole.index = 2;
  whole.gpu_instance_id = 2;
  whole.profile = "3g.40gb";
  g.mig_devices.push_back(whole);
  inv->gpus.push_back(g);
  Sources src;
  src.inventory = [inv] { return std::shared_ptr<const gpu::NodeInventory>(inv); };
  src.read_sensors = [](const std::string& uuid) -> Result<gpu::Sensors> {
    gpu::Sensors x;
    x.uuid = uuid;
    x.utilization_gpu = uuid == "MIG-ci0" ? 10 : 90;
    return x;
  };
  CollectorOptions o = Options();
  Registry reg;
  Collector c(o, src, reg);
  auto e = Parse(Text(*c.Collect()));
  ASSERT_TRUE(e.errors.empty());
  auto gi1 = Series(e, "DCGM_FI_DEV_GPU_UTIL", g.uuid, "1");
  ASSERT_EQ(gi1.size(), 2u);
  std::set<std::string> ci_ids;
  for (const auto* s : gi1) ci_ids.insert(s->labels.at("GPU_CI_ID"));
  EXPECT_EQ(ci_ids, (std::set<std::string>{"0", "1"}));
  EXPECT_EQ(e.Value("DCGM_FI_DEV_GPU_UTIL", {{"GPU_I_ID", "1"}, {"GPU_CI_ID", "0"}}), 10);
  EXPECT_EQ(e.Value("DCGM_FI_DEV_GPU_UTIL", {{"GPU_I_ID", "1"}, {"GPU_CI_ID", "1"}}), 90);
  auto gi2 = Series(e, "DCGM_FI_DEV_GPU_UTIL", g.uuid, "2");
  ASSERT_EQ(gi2.size(), 1u);
  EXPECT_EQ(gi2[0]->labels.count("GPU_CI_ID"), 0u);
}

TEST(PodsTest, TimeSlicedSplitFromPerProcessFigures) {
  test::Node node("a100-8x-nvswitch");
  ASSERT_TRUE(node.inventory);
  const auto& g0 = node.inventory->gpus[0];
  node.fake.Control(R"({"cmd":"processes","gpu":0,"processes":[
      {"pid":1001,"used_memory_mib":1000,"sm_util":30,"mem_util":5},
      {"pid":1002,"used_memory_mib":3000,"sm_util":50,"mem_util":9},
      {"pid":1003,"used_memory_mib":500,"sm_util":10},
      {"pid":1004,"used_memory_mib":200,"sm_util":5}]})");

  TempDir dir;
  const std::string uid_a = "11111111-2222-3333-4444-555555555555";
  const std::string uid_b = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";
  const std::string cid(64, 'c');
  std::string proc = dir.path() + "/proc";
  test::WriteFile(proc + "/1001/cgroup",
                  "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
                  "11111111_2222_3333_4444_555555555555.slice/cri-containerd-" +
                      cid + ".scope\n");
  test::WriteFile(proc + "/1002/cgroup", "12:memory:/kubepods/besteffort/pod" + uid_b + "/" + cid +
                                             "\n1:cpu:/kubepods/besteffort/pod" + uid_b + "/" +
                                             cid + "\n");
  test::WriteFile(proc + "/1003/cgroup", "0::/system.slice/ollama.service\n");
  const std::string id0 = g0.uuid + "::0", id1 = g0.uuid + "::1", id2 = g0.uuid + "::2";
  std::string checkpoint = dir.path() + "/kubelet_internal_checkpoint";
  test::WriteFile(
      checkpoint,
      R"({"Data":{"PodDeviceEntries":[
      {"PodUID":")" +
          uid_a +
          R"(","ContainerName":"main","ResourceName":"nvidia.com/gpu","DeviceIDs":{"-1":[")" + id0 +
          R"("]}},
      {"PodUID":")" +
          uid_b +
          R"(","ContainerName":"worker","ResourceName":"nvidia.com/gpu","DeviceIDs":{"-1":[")" +
          id1 + R"("]}},
      {"PodUID":"99999999-9999-9999-9999-999999999999","ContainerName":"idle","ResourceName":"nvidia.com/gpu","DeviceIDs":{"-1":[")" +
          id2 + R"("]}}
      ],"RegisteredDevices":{}},"Checksum":1})");

  danqing::testing::PodResourcesEmulator kubelet(dir.path() + "/kubelet.sock");
  ASSERT_TRUE(kubelet.Start().ok());
  kubelet.SetPods({test::MakePod("art", "a", "main", {{"nvidia.com/gpu", {id0}}}),
                   test::MakePod("art", "b", "worker", {{"nvidia.com/gpu", {id1}}}),
                   test::MakePod("art", "c", "idle", {{"nvidia.com/gpu", {id2}}})});

  CollectorOptions o = Options();
  o.pod_resources_socket = kubelet.socket_path();
  o.proc_root = proc;
  o.kubelet_checkpoint = checkpoint;
  Registry reg;
  Collector c(o, node.MakeSources(), reg);
  auto e = Parse(Text(*c.Collect()));
  ASSERT_TRUE(e.errors.empty());

  auto mem = [&](const std::string& pod) {
    return e.Value("danqing_pod_gpu_memory_used_bytes",
                   {{"pod", pod}, {"UUID", g0.uuid}, {"share", "shared"}});
  };
  auto util = [&](const std::string& pod) {
    return e.Value("danqing_pod_gpu_utilization",
                   {{"pod", pod}, {"UUID", g0.uuid}, {"share", "shared"}});
  };
  EXPECT_EQ(mem("a"), 1000 * kMiB);
  EXPECT_EQ(util("a"), 30);
  EXPECT_EQ(mem("b"), 3000 * kMiB);
  EXPECT_EQ(util("b"), 50);
  EXPECT_EQ(mem("c"), 0);
  EXPECT_EQ(util("c"), 0);
  EXPECT_EQ(e.Find("danqing_pod_gpu_utilization", {{"pod", "a"}})[0]->labels.at("container"),
            "main");
  EXPECT_EQ(e.Find("danqing_pod_gpu_utilization", {{"pod", "b"}})[0]->labels.at("container"),
            "worker");
  EXPECT_EQ(One(e, "danqing_gpu_unattributed_processes", g0.uuid), 2);
  EXPECT_EQ(One(e, "danqing_gpu_processes", g0.uuid), 4);
  EXPECT_EQ(One(e, "danqing_gpu_allocated_devices", g0.uuid), 3);
  EXPECT_EQ(One(e, "danqing_gpu_containers", g0.uuid), 3);
  // The device's own series stay single, without pod labels (no copies per pod).
  auto dev = Series(e, "DCGM_FI_DEV_GPU_UTIL", g0.uuid);
  ASSERT_EQ(dev.size(), 1u);
  EXPECT_EQ(dev[0]->labels.count("pod"), 0u);

  // Without the checkpoint the pods cannot be told apart: all unattributed, counted.
  o.kubelet_checkpoint = dir.path() + "/missing";
  Collector c2(o, node.MakeSources(), reg);
  auto e2 = Parse(Text(*c2.Collect()));
  EXPECT_EQ(One(e2, "danqing_gpu_unattributed_processes", g0.uuid), 4);
  auto own = Parse(Text(Snapshot{0, {}, reg.Collect()}));
  EXPECT_GE(own.Value("danqing_kubelet_checkpoint_errors_total", {{"reason", "missing"}}), 1);
}

// --- the exporter over HTTP ---------------------------------------------------

struct Served {
  explicit Served(const std::string& profile, const std::string& socket = "", Sources extra = {})
      : node(profile) {
    ExporterOptions o;
    o.listen = "127.0.0.1:0";
    o.interval = std::chrono::hours(1);  // only CollectNow drives collections
    o.collector = Options();
    o.collector.pod_resources_socket = socket;
    Sources s = node.MakeSources();
    s.health = extra.health;
    s.health_transitions = extra.health_transitions;
    auto r = Exporter::Start(o, s);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok()) exporter = std::move(r).value();
  }
  test::Node node;
  std::unique_ptr<Exporter> exporter;
};

TEST(ExporterTest, PodThatDisappearsBetweenScrapes) {
  TempDir dir;
  danqing::testing::PodResourcesEmulator kubelet(dir.path() + "/kubelet.sock");
  ASSERT_TRUE(kubelet.Start().ok());
  Served s("t4-1x", kubelet.socket_path());
  ASSERT_TRUE(s.exporter);
  const std::string uuid = s.node.inventory->gpus[0].uuid;
  kubelet.SetPods({test::MakePod("art", "render-7", "main", {{"nvidia.com/gpu", {uuid}}})});
  ASSERT_TRUE(s.exporter->CollectNow().ok());
  auto first = Parse(test::Get(s.exporter->port()).body);
  ASSERT_EQ(first.Find("DCGM_FI_DEV_GPU_UTIL", {{"pod", "render-7"}}).size(), 1u);

  kubelet.SetPods({});
  ASSERT_TRUE(s.exporter->CollectNow().ok());
  auto second = Parse(test::Get(s.exporter->port()).body);
  EXPECT_TRUE(second.Find("DCGM_FI_DEV_GPU_UTIL", {{"pod", "render-7"}}).empty());
  EXPECT_TRUE(second.Find("danqing_pod_gpu_utilization", {{"pod", "render-7"}}).empty());
  ASSERT_EQ(second.Find("DCGM_FI_DEV_GPU_UTIL", {{"UUID", uuid}}).size(), 1u);
  EXPECT_EQ(second.Find("DCGM_FI_DEV_GPU_UTIL", {{"UUID", uuid}})[0]->labels.count("pod"), 0u);
  EXPECT_EQ(second.Value("danqing_gpu_allocated_devices", {{"UUID", uuid}}), 0);
}

TEST(ExporterTest, KubeletSocketMissingStillServesAndSaysWhy) {
  TempDir dir;
  const std::string sock = dir.path() + "/kubelet.sock";
  Served s("a100-mig-single", sock);
  ASSERT_TRUE(s.exporter);
  auto r = test::Get(s.exporter->port());
  ASSERT_EQ(r.status, 200);
  auto e = Parse(r.body);
  EXPECT_EQ(e.Find("DCGM_FI_DEV_FB_USED").size(), 2u +
                                                      s.node.inventory->gpus[0].mig_devices.size() +
                                                      s.node.inventory->gpus[1].mig_devices.size());
  EXPECT_GE(e.Value("danqing_pod_resources_errors_total", {{"reason", "socket_missing"}}), 1);
  EXPECT_EQ(e.Value("danqing_pod_resources_up"), 0);
  EXPECT_TRUE(e.Find("danqing_gpu_allocated_devices").empty());  // unknown, not "0"

  // The kubelet comes back: pods again, without restarting the exporter.
  danqing::testing::PodResourcesEmulator kubelet(sock);
  ASSERT_TRUE(kubelet.Start().ok());
  const auto& m = s.node.inventory->gpus[1].mig_devices[0];
  kubelet.SetPods({test::MakePod("art", "p", "c", {{"nvidia.com/mig-1g.5gb", {m.uuid}}})});
  ASSERT_TRUE(s.exporter->CollectNow().ok());
  auto e2 = Parse(test::Get(s.exporter->port()).body);
  EXPECT_EQ(e2.Value("danqing_pod_resources_up"), 1);
  EXPECT_EQ(e2.Find("DCGM_FI_DEV_FB_USED",
                    {{"pod", "p"}, {"GPU_I_ID", std::to_string(m.gpu_instance_id)}})
                .size(),
            1u);
}

TEST(ExporterTest, OpenMetricsNegotiation) {
  Served s("h200-1x");
  ASSERT_TRUE(s.exporter);
  auto om = test::Get(s.exporter->port(), test::kPrometheusAccept);
  ASSERT_EQ(om.status, 200);
  EXPECT_THAT(om.content_type, HasSubstr("application/openmetrics-text; version=1.0.0"));
  EXPECT_TRUE(om.body.ends_with("# EOF\n"));
  EXPECT_THAT(om.body, HasSubstr("# TYPE danqing_exporter_scrapes counter\n"));
  EXPECT_THAT(om.body, HasSubstr("# TYPE danqing_build info\n"));
  EXPECT_THAT(om.body, HasSubstr("# UNIT danqing_pod_gpu_memory_used_bytes bytes\n"));

  auto text = test::Get(s.exporter->port());
  ASSERT_EQ(text.status, 200);
  EXPECT_THAT(text.content_type, HasSubstr("text/plain; version=0.0.4"));
  EXPECT_THAT(text.body, Not(HasSubstr("# EOF")));
  EXPECT_THAT(text.body, HasSubstr("# TYPE danqing_exporter_scrapes_total counter\n"));
  auto e = Parse(text.body);
  EXPECT_GE(e.Value("danqing_exporter_scrapes_total", {{"format", "openmetrics"}}), 1);
  EXPECT_GE(e.Value("danqing_exporter_scrapes_total", {{"format", "text"}}), 1);
  EXPECT_EQ(e.Value("danqing_build_info", {{"version", BuildVersion()}}), 1);
  if (HavePromtool()) {
    // promtool reads the text format; the only lint is DCGM's camelCase label.
    auto r = Promtool(text.body);
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) EXPECT_THAT(line, HasSubstr("camelCase"));
  }
}

// The node's metrics port ignores Range: httplib 0.11 would build each of
// any number of ranges of the scrape in memory (a 100 KB scrape, 20,000
// ranges: 2 GB in the agent).
TEST(ExporterTest, RangesAreIgnored) {
  Served s("h200-1x");
  ASSERT_TRUE(s.exporter);
  httplib::Client cli("127.0.0.1", s.exporter->port());
  std::string ranges = "bytes=0-";
  for (int i = 0; i < 100; ++i) ranges += ",0-";
  auto res = cli.Get("/metrics", httplib::Headers{{"Range", ranges}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_THAT(res->get_header_value("Content-Type"), HasSubstr("text/plain"));
  EXPECT_LT(res->body.size(), test::Get(s.exporter->port()).body.size() * 2);
}

TEST(ExporterTest, ConcurrentScrapesWhileCollecting) {
  Served s("v100-16x-dgx2");
  ASSERT_TRUE(s.exporter);
  const size_t gpus = s.node.inventory->gpus.size();
  std::atomic<int> bad{0}, good{0};
  std::atomic<bool> done{false};
  std::thread collector([&] {
    while (!done) ASSERT_TRUE(s.exporter->CollectNow().ok());
  });
  std::vector<std::thread> scrapers;
  for (int t = 0; t < 6; ++t) {
    scrapers.emplace_back([&, t] {
      for (int i = 0; i < 15; ++i) {
        bool om = (t + i) % 2 == 0;
        auto r = test::Get(s.exporter->port(), om ? test::kPrometheusAccept : "");
        auto e = Parse(r.body);
        bool ok = r.status == 200 && e.errors.empty() &&
                  e.Find("DCGM_FI_DEV_GPU_TEMP").size() == gpus &&
                  (!om || r.body.ends_with("# EOF\n"));
        (ok ? good : bad)++;
      }
    });
  }
  for (auto& t : scrapers) t.join();
  done = true;
  collector.join();
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(good, 90);
}

TEST(ExporterTest, HealthXidsAndTransitions) {
  // As the health monitor reports: an entry for every GPU and MIG device.
  Sources extra;
  std::shared_ptr<const gpu::NodeInventory> inventory;
  std::string sick_mig;
  extra.health = [&inventory, &sick_mig] {
    std::vector<DeviceHealth> out;
    if (!inventory) return out;  // a collection as the exporter starts
    for (const auto& g : inventory->gpus) {
      DeviceHealth h;
      h.uuid = g.uuid;
      if (&g == &inventory->gpus[0]) {
        h.healthy = false;
        h.reason = "xid-79";
        h.xid_counts = {{79, 1}, {13, 2}};
        h.last_xid = 79;
      }
      out.push_back(h);
      for (const auto& m : g.mig_devices) {
        DeviceHealth mh;
        mh.uuid = m.uuid;
        if (m.uuid == sick_mig) {
          mh.healthy = false;
          mh.reason = "xid-62";
        }
        out.push_back(mh);
      }
    }
    return out;
  };
  extra.health_transitions = [] {
    return std::map<std::string, uint64_t>{{"unhealthy:xid", 1}, {"healthy:gpu-lost", 0}};
  };
  Served s("a100-mig-mixed", "", extra);
  ASSERT_TRUE(s.exporter);
  inventory = s.node.inventory;
  const auto& g0 = s.node.inventory->gpus[0];
  const auto& g1 = s.node.inventory->gpus[1];
  ASSERT_FALSE(g0.mig_devices.empty());
  ASSERT_GE(g1.mig_devices.size(), 2u);
  sick_mig = g1.mig_devices[0].uuid;
  ASSERT_TRUE(s.exporter->CollectNow().ok());
  auto e = Parse(test::Get(s.exporter->port()).body);
  auto h = Series(e, "danqing_gpu_healthy", g0.uuid);
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0]->value, "0");
  EXPECT_EQ(h[0]->labels.at("reason"), "xid-79");
  // Its MIG devices are out with it, though their own entries say healthy
  // (the kubelet is told the same).
  for (const auto& m : g0.mig_devices) {
    auto mh = Series(e, "danqing_gpu_healthy", g0.uuid, std::to_string(m.gpu_instance_id));
    ASSERT_EQ(mh.size(), 1u);
    EXPECT_EQ(mh[0]->value, "0");
    EXPECT_EQ(mh[0]->labels.at("reason"), "xid-79");
  }
  // A MIG device's own condition is its alone.
  for (const auto& m : g1.mig_devices) {
    auto mh = Series(e, "danqing_gpu_healthy", g1.uuid, std::to_string(m.gpu_instance_id));
    ASSERT_EQ(mh.size(), 1u);
    const bool sick = m.uuid == sick_mig;
    EXPECT_EQ(mh[0]->value, sick ? "0" : "1") << m.uuid;
    EXPECT_EQ(mh[0]->labels.at("reason"), sick ? "xid-62" : "") << m.uuid;
  }
  EXPECT_EQ(One(e, "DCGM_FI_DEV_XID_ERRORS", g0.uuid), 79);
  EXPECT_EQ(e.Value("danqing_gpu_xid_errors_total", {{"UUID", g0.uuid}, {"xid", "13"}}), 2);
  EXPECT_EQ(e.Value("danqing_gpu_xid_errors_total", {{"UUID", g0.uuid}, {"xid", "79"}}), 1);
  EXPECT_EQ(One(e, "danqing_gpu_healthy", g1.uuid), 1);
  EXPECT_EQ(e.Value("danqing_health_transitions_total", {{"transition", "unhealthy:xid"}}), 1);
}

TEST(ExporterTest, NvmlFailuresAndLostGpuAreCounted) {
  Served s("a100-8x-nvswitch");
  ASSERT_TRUE(s.exporter);
  const auto& g2 = s.node.inventory->gpus[2];
  const auto& g1 = s.node.inventory->gpus[1];
  auto before = Parse(test::Get(s.exporter->port()).body);
  double unknown_before =
      before.Value("danqing_nvml_errors_total", {{"code", "internal"}}).value_or(0) +
      before.Value("danqing_nvml_errors_total", {{"code", "unavailable"}}).value_or(0);
  s.node.fake.Control(
      R"({"cmd":"fail","gpu":2,"function":"nvmlDeviceGetTemperature","error":"UNKNOWN"})");
  s.node.fake.Control(R"({"cmd":"lost","gpu":1,"xid":false})");
  ASSERT_TRUE(s.exporter->CollectNow().ok());
  auto e = Parse(test::Get(s.exporter->port()).body);
  EXPECT_TRUE(Series(e, "DCGM_FI_DEV_GPU_TEMP", g2.uuid).empty());
  EXPECT_TRUE(One(e, "DCGM_FI_DEV_POWER_USAGE", g2.uuid).has_value());
  EXPECT_EQ(One(e, "danqing_gpu_sensors_up", g1.uuid), 0);
  EXPECT_TRUE(Series(e, "DCGM_FI_DEV_GPU_UTIL", g1.uuid).empty());
  double errors = 0;
  for (const auto* smp : e.Find("danqing_nvml_errors_total")) errors += std::stod(smp->value);
  EXPECT_GT(errors, unknown_before);
  EXPECT_GE(errors, 2);  // the temperature read and the lost GPU
}

TEST(ExporterTest, BadOptions) {
  ExporterOptions o;
  o.listen = "nonsense";
  EXPECT_EQ(Exporter::Start(o, {}).status().code(), StatusCode::kInvalidArgument);
  o.listen = "127.0.0.1:0";
  o.interval = std::chrono::milliseconds(0);
  EXPECT_EQ(Exporter::Start(o, {}).status().code(), StatusCode::kInvalidArgument);
  // A port that is taken.
  o.interval = std::chrono::milliseconds(1000);
  auto first = Exporter::Start(o, {});
  ASSERT_TRUE(first.ok());
  o.listen = "127.0.0.1:" + std::to_string((*first)->port());
  EXPECT_EQ(Exporter::Start(o, {}).status().code(), StatusCode::kUnavailable);
}

using danqing::testing::ConnectLoopback;
using danqing::testing::RawExchange;

// The agent's port is reachable from the pod network, and the agent has a
// 128 MiB memory limit: a request line without a newline, or a body, must
// not be read into memory (httplib 0.11 alone would grow it without end).
TEST(ExporterTest, OverlongRequestsAndBodiesAreRefusedUnread) {
  ExporterOptions o;
  o.listen = "127.0.0.1:0";
  auto ex = Exporter::Start(o, {});
  ASSERT_TRUE(ex.ok());
  const int port = (*ex)->port();
  EXPECT_THAT(RawExchange(port, "GET /", 8u << 20), ::testing::StartsWith("HTTP/1.1 431"));
  const std::string post = RawExchange(port, "POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 1u << 20);
  EXPECT_THAT(post, ::testing::StartsWith("HTTP/1.1 411")) << post.substr(0, 200);
  const std::string body =
      RawExchange(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n", 0);
  EXPECT_THAT(body, ::testing::StartsWith("HTTP/1.1 400")) << body.substr(0, 200);  // a GET takes none
  EXPECT_THAT(body, HasSubstr("takes no body"));
  EXPECT_EQ(test::Get(port).status, 200) << "still serving";
}

// A handful of idle connections held the agent's four HTTP threads (5 s
// keep-alive each), and the kubelet's liveness probe (1 s timeout) failed:
// connections waiting for bytes now hold no thread (issue 31, item 7).
TEST(ExporterTest, ProbesAreAnsweredWhileIdleConnectionsWait) {
  ExporterOptions o;
  o.listen = "127.0.0.1:0";
  auto ex = Exporter::Start(o, {});
  ASSERT_TRUE(ex.ok());
  const int port = (*ex)->port();
  std::vector<int> idle;
  for (int i = 0; i < 16; ++i) {
    const int fd = ConnectLoopback(port);
    ASSERT_GE(fd, 0);
    if (i >= 12) {
      const std::string half = "GET /healthz HTTP/1.1\r\nHo";
      ASSERT_EQ(::send(fd, half.data(), half.size(), MSG_NOSIGNAL),
                static_cast<ssize_t>(half.size()));
    }
    idle.push_back(fd);
  }
  httplib::Client probe("127.0.0.1", port);
  probe.set_connection_timeout(1, 0);
  probe.set_read_timeout(1, 0);
  for (const char* path : {"/healthz", "/readyz", "/metrics"}) {
    auto res = probe.Get(path);
    ASSERT_TRUE(res) << path << " not answered within 1 s";
    EXPECT_EQ(res->status, 200) << path;
  }
  // A known path with another method: 405, naming the methods it has.
  const std::string options =
      RawExchange(port, "OPTIONS /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 0);
  EXPECT_THAT(options, ::testing::StartsWith("HTTP/1.1 405")) << options;
  EXPECT_THAT(options, HasSubstr("Allow: GET, HEAD\r\n"));
  for (int fd : idle) ::close(fd);
}

// The default address (":9400", no host) is every address: IPv4 and IPv6
// clients both reach it, so the kubelet's probes work on IPv6 clusters.
TEST(ExporterTest, NoHostListensOnIpv4AndIpv6) {
  ExporterOptions o;
  o.listen = ":0";
  auto ex = Exporter::Start(o, {});
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  EXPECT_EQ(test::Get((*ex)->port()).status, 200) << "IPv4";
  const int probe = ::socket(AF_INET6, SOCK_STREAM, 0);
  if (probe < 0) GTEST_SKIP() << "no IPv6 in this kernel";
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_port = htons(static_cast<uint16_t>((*ex)->port()));
  addr.sin6_addr = in6addr_loopback;
  const bool v6 = ::connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  const int error = errno;
  ::close(probe);
  if (!v6 && error == EADDRNOTAVAIL) GTEST_SKIP() << "no IPv6 loopback here";
  EXPECT_TRUE(v6) << "IPv6: " << std::strerror(error);
  httplib::Client c6("::1", (*ex)->port());
  c6.set_connection_timeout(5);
  auto res = c6.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

TEST(ExporterTest, NoSourcesServesAgentMetricsOnly) {
  ExporterOptions o;
  o.listen = "127.0.0.1:0";
  auto ex = Exporter::Start(o, {});
  ASSERT_TRUE(ex.ok());
  auto e = Parse(test::Get((*ex)->port()).body);
  EXPECT_TRUE(e.errors.empty());
  EXPECT_TRUE(e.Find("DCGM_FI_DEV_GPU_UTIL").empty());
  EXPECT_EQ(e.Value("danqing_build_info", {{"version", BuildVersion()}}), 1);
  (*ex)->Stop();
  (*ex)->Stop();  // idempotent
  EXPECT_EQ((*ex)->CollectNow().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace danqing::metrics
