// Integration: a real Prometheus (Debian's package, loopback, temp dir)
// scrapes the exporter serving a fake node; the series and labels are checked
// through Prometheus's HTTP API. Skipped, visibly, where prometheus is absent.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "metrics/exporter.h"
#include "testing/kubelet/kubelet_emulator.h"
#include "tests/metrics/metrics_test_util.h"

namespace danqing::metrics {
namespace {

using nlohmann::json;

// GET /api/v1/query on Prometheus; the `data.result` array (empty on error).
json Query(int port, const std::string& promql) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_connection_timeout(2);
  cli.set_read_timeout(5);
  auto res = cli.Get("/api/v1/query", httplib::Params{{"query", promql}}, httplib::Headers{});
  if (!res || res->status != 200) return json::array();
  auto j = json::parse(res->body, nullptr, false);
  if (j.is_discarded() || j.value("status", "") != "success") return json::array();
  return j["data"]["result"];
}

// Polls `promql` until it returns at least `want` series, up to 60 s (an
// external server scraping on its own schedule: there is no event to wait on).
json WaitFor(int port, const std::string& promql, size_t want) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  json r = json::array();
  while (std::chrono::steady_clock::now() < deadline) {
    r = Query(port, promql);
    if (r.size() >= want) return r;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return r;
}

struct Prometheus {
  std::unique_ptr<danqing::testing::ChildProcess> proc;
  int port = 0;
};

// Starts a real Prometheus through the project's script, scraping `target`,
// on a port the kernel chooses as it binds (nothing to race), which it logs;
// waits until it answers /-/ready, up to 60 s. On failure `proc` is null and
// `log` holds its output.
Prometheus StartPrometheus(const std::string& dir, const std::string& target, std::string* log) {
  const std::string script =
      std::string(DANQING_SOURCE_DIR) + "/testing/prometheus/run-prometheus.sh";
  auto proc = std::make_unique<danqing::testing::ChildProcess>(
      std::vector<std::string>{"/bin/bash", script, dir + "/prom", target});
  static const std::regex kListening(R"(msg="Listening on" address=127\.0\.0\.1:([0-9]+))");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int port = 0;
  while (proc->Wait(0) < 0 && std::chrono::steady_clock::now() < deadline) {
    if (port == 0) {
      std::smatch m;
      const std::string out = proc->Output();
      if (std::regex_search(out, m, kListening)) port = std::stoi(m[1].str());
    }
    if (port != 0) {
      httplib::Client cli("127.0.0.1", port);
      cli.set_connection_timeout(1);
      auto res = cli.Get("/-/ready");
      if (res && res->status == 200) return {std::move(proc), port};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  *log = (port == 0 ? "no \"Listening on\" line in its log" : "port " + std::to_string(port) + " never ready") +
         std::string(":\n") + proc->Output();
  return {};
}

TEST(PrometheusTest, RealPrometheusScrapesSeriesAndLabels) {
  if (::access("/usr/bin/prometheus", X_OK) != 0) {
    GTEST_SKIP()
        << "prometheus not installed (Debian package prometheus); integration test skipped";
  }
  test::Node node("a100-mig-mixed");
  ASSERT_TRUE(node.inventory);
  const auto& g3 = node.inventory->gpus[3];
  test::TempDir dir;
  danqing::testing::PodResourcesEmulator kubelet(dir.path() + "/kubelet.sock");
  ASSERT_TRUE(kubelet.Start().ok());
  kubelet.SetPods({test::MakePod("art", "render-0", "main", {{"nvidia.com/gpu", {g3.uuid}}})});

  ExporterOptions o;
  o.listen = "127.0.0.1:0";
  o.interval = std::chrono::milliseconds(500);
  o.collector.hostname = "gpu-node-1";
  o.collector.kubelet_checkpoint = "";
  o.collector.pod_resources_socket = kubelet.socket_path();
  auto ex = Exporter::Start(o, node.MakeSources());
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();

  std::string log;
  auto prom = StartPrometheus(dir.path(), "127.0.0.1:" + std::to_string((*ex)->port()), &log);
  ASSERT_TRUE(prom.proc) << "Prometheus did not start:\n" << log;
  const int port = prom.port;

  auto up = WaitFor(port, "up{job=\"danqing\"} == 1", 1);
  ASSERT_EQ(up.size(), 1u) << "Prometheus never scraped the exporter:\n" << prom.proc->Output();

  auto util = WaitFor(port, "DCGM_FI_DEV_FB_USED", 4 + 4 + 7 + 2);
  ASSERT_EQ(util.size(), 17u) << util.dump();  // 4 GPUs + 13 MIG devices
  size_t mig = 0, with_pod = 0;
  for (const auto& s : util) {
    const auto& m = s["metric"];
    for (const char* l : {"gpu", "UUID", "device", "modelName", "Hostname", "pci_bus_id"}) {
      EXPECT_TRUE(m.contains(l)) << l << " missing in " << m.dump();
    }
    EXPECT_EQ(m["Hostname"], "gpu-node-1");
    EXPECT_EQ(m["job"], "danqing");
    if (m.contains("GPU_I_PROFILE")) {
      ++mig;
      EXPECT_TRUE(m.contains("GPU_I_ID"));
    }
    if (m.contains("pod")) {
      ++with_pod;
      EXPECT_EQ(m["UUID"], g3.uuid);
      EXPECT_EQ(m["namespace"], "art");
      EXPECT_EQ(m["pod"], "render-0");
      EXPECT_EQ(m["container"], "main");
    }
  }
  EXPECT_EQ(mig, 13u);
  EXPECT_EQ(with_pod, 1u);

  // NVML has no utilisation for MIG-enabled GPUs: only GPU 3 (MIG off) has it.
  auto gpu_util = WaitFor(port, "DCGM_FI_DEV_GPU_UTIL", 1);
  ASSERT_EQ(gpu_util.size(), 1u);
  EXPECT_EQ(gpu_util[0]["metric"]["UUID"], g3.uuid);
  auto pod = WaitFor(port, "danqing_pod_gpu_utilization{pod=\"render-0\",share=\"exclusive\"}", 1);
  EXPECT_EQ(pod.size(), 1u);
  auto build = WaitFor(port, "danqing_build_info", 1);
  EXPECT_EQ(build.size(), 1u);
  // Prometheus asks for OpenMetrics first; the exporter must have answered in it.
  auto om = WaitFor(port, "danqing_exporter_scrapes_total{format=\"openmetrics\"} > 0", 1);
  EXPECT_EQ(om.size(), 1u);
  auto health = WaitFor(port, "danqing_gpu_healthy == 1", 17);
  EXPECT_EQ(health.size(), 17u);
}

}  // namespace
}  // namespace danqing::metrics
