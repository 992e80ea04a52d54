// GPU health end to end: faults injected through the fake NVML's control
// socket, observed the way the kubelet sees them (the kubelet emulator's
// ListAndWatch view, Allocate and GetPreferredAllocation).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <map>
#include <thread>

#include <httplib.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include "agent/agent.h"
#include "config/config.h"
#include "gpu/nvml_backend.h"
#include "health/checker.h"
#include "metrics/agent_metrics.h"
#include "testing/kubelet/kubelet_emulator.h"
#include "testing/support/fake_node.h"
#include "testing/support/temp_dir.h"

namespace danqing {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using testing::FakeNode;
using testing::KubeletEmulator;
using Devices = std::vector<v1beta1::Device>;

constexpr char kGpu[] = "nvidia.com/gpu";

std::string DeviceUuid(const std::string& id) { return id.substr(0, id.find("::")); }

// id → health
std::map<std::string, std::string> Health(const Devices& devs) {
  std::map<std::string, std::string> out;
  for (const auto& d : devs) out[d.id()] = d.health();
  return out;
}

// True when exactly the devices whose ID starts with one of `sick` are
// Unhealthy (a GPU UUID prefix covers its replicas).
bool OnlySick(const Devices& devs, const std::vector<std::string>& sick) {
  if (devs.empty()) return false;
  for (const auto& d : devs) {
    bool should = false;
    for (const auto& s : sick) should = should || d.id().starts_with(s);
    if ((d.health() == KubeletEmulator::kUnhealthy) != should) return false;
  }
  return true;
}

class HealthAgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = std::make_unique<testing::TempDir>();
    dir_ = tmp_->path();
    ASSERT_FALSE(dir_.empty()) << "cannot make a directory under /tmp";
    kubelet_ = std::make_unique<KubeletEmulator>(dir_);
    ASSERT_TRUE(kubelet_->Start().ok());
  }
  void TearDown() override {
    if (agent_) agent_->Stop();
    agent_.reset();
    kubelet_.reset();
    tmp_.reset();
  }

  config::Config Config(std::string_view yaml = "version: v1\n") {
    auto parsed = config::ParseConfig(yaml, "test.yaml");
    EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
    config::Config cfg = parsed.ok() ? *parsed : config::Config{};
    cfg.danqing.device_plugin_path = dir_;
    cfg.danqing.cdi_root = dir_ + "/cdi";
    cfg.danqing.nvml_lib = testing::FakeNvmlLibrary();
    cfg.danqing.node_features_file = "";
    cfg.danqing.health_check_interval = 50ms;
    cfg.danqing.xid_quiet_period = 600ms;
    cfg.danqing.metrics_addr = "";  // off unless a test turns it on
    return cfg;
  }

  void StartAgent(const config::Config& cfg, const std::string& resource = kGpu) {
    agent_ = std::make_unique<agent::Agent>();
    Status st = agent_->Start(cfg);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_TRUE(kubelet_->WaitForRegistration(resource, 10s));
    ASSERT_TRUE(kubelet_->WaitForDevices(resource, [](const Devices& d) { return !d.empty(); }, 5s));
  }

  bool WaitSick(const std::string& resource, const std::vector<std::string>& sick,
                std::chrono::milliseconds timeout = 5s) {
    return kubelet_->WaitForDevices(resource, [&](const Devices& d) { return OnlySick(d, sick); }, timeout);
  }

  // NVML drops an event of a GPU no event set holds: an XID 62 is sent again
  // until `sick` are the unhealthy devices (or 5 s pass).
  bool XidUntilSick(const FakeNode& node, int gpu, const std::vector<std::string>& sick) {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < deadline) {
      node.Control(R"({"cmd":"xid","gpu":)" + std::to_string(gpu) + R"(,"xid":62})");
      if (WaitSick(kGpu, sick, 200ms)) return true;
    }
    return false;
  }

  std::string GpuUuid(const FakeNode& node, int index) {
    std::string reply = node.Control(R"({"cmd":"get","gpu":)" + std::to_string(index) + "}");
    auto at = reply.find("\"uuid\":\"");
    return reply.substr(at + 8, reply.find('"', at + 8) - at - 8);
  }

  std::unique_ptr<testing::TempDir> tmp_;
  std::string dir_;
  std::unique_ptr<KubeletEmulator> kubelet_;
  std::unique_ptr<agent::Agent> agent_;
};

TEST_F(HealthAgentTest, XidMarksTheGpuAndItsReplicasAndRecoversAfterTheQuietPeriod) {
  FakeNode node("a100-8x-nvswitch");
  config::Config cfg = Config(R"(version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 2
)");
  // The checks below run while the GPU is sick: a quiet period long enough for
  // them on a loaded machine (TSan), short enough to wait for the recovery.
  cfg.danqing.xid_quiet_period = 10s;
  StartAgent(cfg);
  ASSERT_EQ(kubelet_->Devices(kGpu).size(), 16u);
  const std::string gpu1 = GpuUuid(node, 1);

  node.Control(R"({"cmd":"xid","gpu":1,"xid":62})");
  ASSERT_TRUE(WaitSick(kGpu, {gpu1})) << ::testing::PrintToString(Health(kubelet_->Devices(kGpu)));

  // Refused by Allocate with a reason; never preferred.
  auto r = kubelet_->Allocate(kGpu, {gpu1 + "::0"});
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r.status.error_message(), HasSubstr("unhealthy"));
  EXPECT_THAT(r.status.error_message(), HasSubstr("xid-62"));
  std::vector<std::string> all;
  for (const auto& d : kubelet_->Devices(kGpu)) all.push_back(d.id());
  auto pref = kubelet_->GetPreferredAllocation(kGpu, all, {}, 4);
  ASSERT_TRUE(pref.status.ok()) << pref.status.error_message();
  for (const auto& id : pref.device_ids) EXPECT_NE(DeviceUuid(id), gpu1);

  // Quiet period (10 s) without a new XID: back in service on its own.
  ASSERT_TRUE(WaitSick(kGpu, {}, 20s));
  EXPECT_TRUE(kubelet_->Allocate(kGpu, {gpu1 + "::0"}).status.ok());
  auto t = agent_->HealthTransitions();
  EXPECT_EQ(t["unhealthy:xid"], 1u);
  EXPECT_EQ(t["healthy:xid"], 1u);
}

uint64_t PublishedEvents() {
  std::vector<uint64_t> counts;
  double sum = 0;
  metrics::AgentMetrics().health_event_publish_seconds.WithLabels({}).Read(counts, sum);
  return counts.empty() ? 0 : counts.back();
}

// Records, for each log line containing `needle`, how many health events
// the agent had published (danqing_health_event_publish_duration_seconds's
// count) when the line was written.
class PublishedWhenLoggedSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit PublishedWhenLoggedSink(std::string needle) : needle_(std::move(needle)) {}
  std::vector<uint64_t> seen() {
    std::lock_guard<std::mutex> l(mutex_);
    return seen_;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const std::string_view text(msg.payload.data(), msg.payload.size());
    if (text.find(needle_) == std::string_view::npos) return;
    seen_.push_back(PublishedEvents());
  }
  void flush_() override {}

 private:
  std::string needle_;
  std::vector<uint64_t> seen_;
};

TEST_F(HealthAgentTest, AnEventIsPublishedBeforeItIsLogged) {
  // The log line goes to a pipe whose reader the write wakes; that must not
  // stand between the event and the kubelet.
  FakeNode node("a100-8x-nvswitch");
  auto sink = std::make_shared<PublishedWhenLoggedSink>(" marked unhealthy");
  auto logger = spdlog::default_logger();
  logger->sinks().push_back(sink);  // no other thread logs yet
  StartAgent(Config());
  const std::string gpu2 = GpuUuid(node, 2);
  const uint64_t before = PublishedEvents();
  node.Control(R"({"cmd":"xid","gpu":2,"xid":48})");
  const bool sick = WaitSick(kGpu, {gpu2});
  agent_->Stop();
  agent_.reset();
  kubelet_.reset();  // no thread logs any more
  logger->sinks().pop_back();
  ASSERT_TRUE(sick);
  const auto seen = sink->seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], before + 1) << "logged before the list was handed to gRPC";
}

TEST_F(HealthAgentTest, ResetClassXidNeverRecovers) {
  FakeNode node("a100-8x-nvswitch");
  StartAgent(Config());
  const std::string gpu2 = GpuUuid(node, 2);
  node.Control(R"({"cmd":"xid","gpu":2,"xid":79})");
  ASSERT_TRUE(WaitSick(kGpu, {gpu2}));
  std::this_thread::sleep_for(1500ms);  // 2.5 quiet periods, 30 polls of a GPU that answers
  EXPECT_TRUE(OnlySick(kubelet_->Devices(kGpu), {gpu2}));
  bool found = false;
  for (const auto& h : agent_->Health()) {
    if (h.uuid != gpu2) continue;
    found = true;
    EXPECT_FALSE(h.healthy);
    EXPECT_TRUE(h.needs_reset);
    EXPECT_EQ(h.reason, "xid-79");
    EXPECT_EQ(h.xid_counts.at(79), 1u);
  }
  EXPECT_TRUE(found);
}

TEST_F(HealthAgentTest, ApplicationXidsAreIgnoredAndOperatorsCanChangeTheTable) {
  FakeNode node("a100-8x-nvswitch");
  config::Config cfg = Config();
  cfg.danqing.disable_health_checks = "62";  // DP_DISABLE_HEALTHCHECKS
  cfg.danqing.enable_health_checks = "13";   // DP_ENABLE_HEALTHCHECKS
  StartAgent(cfg);
  const std::string gpu0 = GpuUuid(node, 0), gpu1 = GpuUuid(node, 1), gpu3 = GpuUuid(node, 3);
  node.Control(R"({"cmd":"xid","gpu":0,"xid":62})");  // disabled by the operator
  node.Control(R"({"cmd":"xid","gpu":1,"xid":31})");  // application error
  node.Control(R"({"cmd":"xid","gpu":3,"xid":13})");  // application error, enabled by the operator
  // Events are handled in order: once GPU 3 is marked, 0 and 1 were judged.
  ASSERT_TRUE(WaitSick(kGpu, {gpu3}));
  std::this_thread::sleep_for(100ms);
  EXPECT_TRUE(OnlySick(kubelet_->Devices(kGpu), {gpu3}));
}

TEST_F(HealthAgentTest, MigXidMarksOnlyThatMigDeviceAGpuXidAllOfThem) {
  FakeNode node("a100-mig-mixed");
  config::Config cfg = Config();
  cfg.flags.mig_strategy = config::MigStrategy::kMixed;
  // No recovery here: with the usual 600 ms a loaded machine (TSan, the other
  // resources still registering) could publish the cleared state before the
  // kubelet saw the sick one, since each stream sends only the latest state.
  cfg.danqing.xid_quiet_period = std::chrono::minutes(5);
  agent_ = std::make_unique<agent::Agent>();
  ASSERT_TRUE(agent_->Start(cfg).ok());
  const std::string res = "nvidia.com/mig-1g.10gb";
  ASSERT_TRUE(kubelet_->WaitForRegistration(res, 10s));
  ASSERT_TRUE(kubelet_->WaitForDevices(res, [](const Devices& d) { return d.size() >= 2; }, 5s));
  const std::string mig = kubelet_->Devices(res)[0].id();

  node.Control(R"({"cmd":"xid","uuid":")" + mig + R"(","xid":62})");
  ASSERT_TRUE(WaitSick(res, {mig})) << ::testing::PrintToString(Health(kubelet_->Devices(res)));

  // An XID on the parent GPU without instance ids: every MIG device on it.
  std::string parent;
  for (const auto& h : agent_->Health()) {
    if (h.uuid == mig) parent = h.gpu_uuid;
  }
  ASSERT_FALSE(parent.empty());
  std::vector<std::string> siblings;
  for (const auto& h : agent_->Health()) {
    if (h.gpu_uuid == parent && h.uuid != parent) siblings.push_back(h.uuid);
  }
  ASSERT_GE(siblings.size(), 2u);
  node.Control(R"({"cmd":"xid","uuid":")" + parent + R"(","xid":62})");
  ASSERT_TRUE(kubelet_->WaitForDevices(
      res,
      [&](const Devices& devs) {
        for (const auto& d : devs) {
          const bool on_parent = std::find(siblings.begin(), siblings.end(), d.id()) != siblings.end();
          if ((d.health() == KubeletEmulator::kUnhealthy) != on_parent) return false;
        }
        return true;
      },
      5s));
}

TEST_F(HealthAgentTest, PolledConditionsMarkWithinAPollAndClear) {
  FakeNode node("a100-8x-nvswitch");
  StartAgent(Config());
  const std::string gpu4 = GpuUuid(node, 4), gpu5 = GpuUuid(node, 5), gpu6 = GpuUuid(node, 6),
                    gpu7 = GpuUuid(node, 7);

  // Fell off the bus without an XID: NVML says GPU_IS_LOST; back when it answers.
  node.Control(R"({"cmd":"lost","gpu":4,"xid":false})");
  ASSERT_TRUE(WaitSick(kGpu, {gpu4}));
  node.Control(R"({"cmd":"lost","gpu":4,"lost":false})");
  ASSERT_TRUE(WaitSick(kGpu, {}));

  // Thermal slowdown, with hysteresis.
  node.Control(R"({"cmd":"set","gpu":5,"sensors":{"temperature_c":93,"throttle_reasons":64}})");
  ASSERT_TRUE(WaitSick(kGpu, {gpu5}));
  node.Control(R"({"cmd":"set","gpu":5,"sensors":{"temperature_c":91,"throttle_reasons":0}})");
  std::this_thread::sleep_for(300ms);  // 6 polls
  EXPECT_TRUE(OnlySick(kubelet_->Devices(kGpu), {gpu5}));
  node.Control(R"({"cmd":"set","gpu":5,"sensors":{"temperature_c":80}})");
  ASSERT_TRUE(WaitSick(kGpu, {}));

  // An essential NVML call failing for one GPU.
  node.Control(R"({"cmd":"fail","gpu":6,"function":"nvmlDeviceGetMemoryInfo","error":"UNKNOWN"})");
  ASSERT_TRUE(WaitSick(kGpu, {gpu6}));
  node.Control(R"({"cmd":"fail","gpu":6,"function":"nvmlDeviceGetMemoryInfo","error":null})");
  ASSERT_TRUE(WaitSick(kGpu, {}));

  // Uncorrectable ECC growth (polled) and the double-bit ECC event.
  node.Control(R"({"cmd":"ecc","gpu":7,"type":"double","count":2})");
  ASSERT_TRUE(WaitSick(kGpu, {gpu7}));
  std::this_thread::sleep_for(1s);  // past the quiet period: the DBE needs a reset
  EXPECT_TRUE(OnlySick(kubelet_->Devices(kGpu), {gpu7}));
  for (const auto& h : agent_->Health()) {
    if (h.uuid == gpu7) {
      EXPECT_THAT(h.reason, HasSubstr("double-bit-ecc"));
    }
  }
}

TEST_F(HealthAgentTest, EventsKeepComingAfterAGpuFellOffTheBusAndFromItOnceItIsBack) {
  FakeNode node("a100-8x-nvswitch");
  StartAgent(Config());
  const std::string gpu0 = GpuUuid(node, 0), gpu4 = GpuUuid(node, 4);

  // GPU 4 falls off the bus without an XID: every wait on the event set that
  // holds it now fails. The poll thread marks it; the events thread replaces
  // the set, so the other GPUs' XIDs still arrive.
  node.Control(R"({"cmd":"lost","gpu":4,"xid":false})");
  ASSERT_TRUE(WaitSick(kGpu, {gpu4}));
  ASSERT_TRUE(XidUntilSick(node, 0, {gpu0, gpu4}))
      << ::testing::PrintToString(Health(kubelet_->Devices(kGpu)));

  // GPU 4 answers again: healthy by the next poll, and subscribed to events
  // again, so an XID from it is seen.
  node.Control(R"({"cmd":"lost","gpu":4,"lost":false})");
  ASSERT_TRUE(WaitSick(kGpu, {}));  // GPU 0's XID is past its 600 ms quiet period too
  EXPECT_TRUE(XidUntilSick(node, 4, {gpu4}))
      << ::testing::PrintToString(Health(kubelet_->Devices(kGpu)));
}

// Two GPUs lost one after the other: the second loss breaks the stream again
// and the agent subscribes afresh, after a discovery that no longer saw the
// first. Both are still watched for again, and their events seen once back.
TEST_F(HealthAgentTest, TwoGpusLostInTurnAreBothWatchedAgainOnceBack) {
  FakeNode node("a100-8x-nvswitch");
  StartAgent(Config());
  const std::string gpu0 = GpuUuid(node, 0), gpu5 = GpuUuid(node, 5), gpu6 = GpuUuid(node, 6);
  node.Control(R"({"cmd":"lost","gpu":5,"xid":false})");
  ASSERT_TRUE(WaitSick(kGpu, {gpu5}));
  // The stream without GPU 5 works: an XID of GPU 0 arrives (and was
  // subscribed after a discovery that did not see GPU 5).
  ASSERT_TRUE(XidUntilSick(node, 0, {gpu0, gpu5}));
  node.Control(R"({"cmd":"lost","gpu":6,"xid":false})");
  ASSERT_TRUE(WaitSick(kGpu, {gpu5, gpu6}, 5s));  // GPU 0's XID is past its quiet period
  node.Control(R"({"cmd":"lost","gpu":5,"lost":false})");
  node.Control(R"({"cmd":"lost","gpu":6,"lost":false})");
  ASSERT_TRUE(WaitSick(kGpu, {}));
  EXPECT_TRUE(XidUntilSick(node, 5, {gpu5}))
      << "GPU 5, lost first, is no longer watched for events";
  ASSERT_TRUE(WaitSick(kGpu, {}));
  EXPECT_TRUE(XidUntilSick(node, 6, {gpu6})) << "GPU 6 is no longer watched for events";
}

// A reload that replaces the health checker (new health options, or another
// NVML library, which also replaces the backend) keeps what the old one knew:
// a GPU that needs a reset stays unhealthy, with its reason.
TEST_F(HealthAgentTest, AReloadKeepsAGpuThatNeedsAResetUnhealthy) {
  FakeNode node("a100-8x-nvswitch");
  config::Config cfg = Config();
  StartAgent(cfg);
  const std::string gpu2 = GpuUuid(node, 2);
  node.Control(R"({"cmd":"xid","gpu":2,"xid":48})");  // double-bit ECC: needs a reset
  ASSERT_TRUE(WaitSick(kGpu, {gpu2}));
  auto reason = [&] {
    for (const auto& h : agent_->Health()) {
      if (h.uuid == gpu2) return h.reason;
    }
    return std::string("(not tracked)");
  };

  cfg.danqing.health_check_interval = 60ms;
  ASSERT_TRUE(agent_->Reload(cfg).ok());
  std::this_thread::sleep_for(300ms);  // several polls of the new checker
  EXPECT_TRUE(OnlySick(kubelet_->Devices(kGpu), {gpu2})) << ::testing::PrintToString(Health(kubelet_->Devices(kGpu)));
  EXPECT_THAT(reason(), HasSubstr("xid-48"));

  // The same library under another path: a new backend and checker.
  const std::string link = dir_ + "/libnvidia-ml.so.1";
  std::filesystem::create_symlink(cfg.danqing.nvml_lib, link);
  cfg.danqing.nvml_lib = link;
  ASSERT_TRUE(agent_->Reload(cfg).ok());
  std::this_thread::sleep_for(300ms);
  EXPECT_TRUE(OnlySick(kubelet_->Devices(kGpu), {gpu2})) << ::testing::PrintToString(Health(kubelet_->Devices(kGpu)));
  EXPECT_THAT(reason(), HasSubstr("xid-48"));
  // The new checker watches: another fault is seen.
  node.Control(R"({"cmd":"xid","gpu":3,"xid":48})");
  EXPECT_TRUE(WaitSick(kGpu, {gpu2, GpuUuid(node, 3)}));
}

// Issue 31 (4): a GPU lost (no XID) when a reload rediscovers the node
// dropped out of the list and stayed out once it answered again (Allocate:
// unknown device) until the next reload. It stays listed, unhealthy, and
// comes back as it does without the reload; so do all GPUs lost at once.
TEST_F(HealthAgentTest, GpusLostDuringAReloadStayListedUnhealthyAndComeBack) {
  FakeNode node("a100-8x-nvswitch");
  config::Config cfg = Config();
  StartAgent(cfg);
  std::vector<std::string> uuids;
  for (int i = 0; i < 8; ++i) uuids.push_back(GpuUuid(node, i));
  auto tracked_as = [&](const std::string& uuid) {
    for (const auto& h : agent_->Health()) {
      if (h.uuid == uuid) return h.healthy ? std::string("healthy") : h.reason;
    }
    return std::string("(not tracked)");
  };
  auto all_eight_healthy = [](const Devices& d) { return d.size() == 8 && OnlySick(d, {}); };

  node.Control(R"({"cmd":"lost","gpu":4,"xid":false})");
  ASSERT_TRUE(WaitSick(kGpu, {uuids[4]}));
  ASSERT_TRUE(agent_->Reload(cfg).ok());
  EXPECT_THAT(tracked_as(uuids[4]), HasSubstr("gpu-lost"));
  node.Control(R"({"cmd":"lost","gpu":4,"lost":false})");
  ASSERT_TRUE(kubelet_->WaitForDevices(kGpu, all_eight_healthy, 5s))
      << ::testing::PrintToString(Health(kubelet_->Devices(kGpu)));
  auto r = kubelet_->Allocate(kGpu, {uuids[4]});
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();

  // Every GPU at once.
  for (int i = 0; i < 8; ++i)
    node.Control(R"({"cmd":"lost","gpu":)" + std::to_string(i) + R"(,"xid":false})");
  ASSERT_TRUE(WaitSick(kGpu, uuids));
  ASSERT_TRUE(agent_->Reload(cfg).ok());
  for (const auto& uuid : uuids) EXPECT_THAT(tracked_as(uuid), HasSubstr("gpu-lost")) << uuid;
  EXPECT_THAT(kubelet_->Allocate(kGpu, {uuids[2]}).status.error_message(), HasSubstr("unhealthy"));
  for (int i = 0; i < 8; ++i)
    node.Control(R"({"cmd":"lost","gpu":)" + std::to_string(i) + R"(,"lost":false})");
  ASSERT_TRUE(kubelet_->WaitForDevices(kGpu, all_eight_healthy, 5s))
      << ::testing::PrintToString(Health(kubelet_->Devices(kGpu)));
  r = kubelet_->Allocate(kGpu, {uuids[2], uuids[7]});
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
}

TEST_F(HealthAgentTest, RowRemappingNeedsAReset) {
  FakeNode node("a100-8x-nvswitch");  // Ampere: row remapping, no page retirement
  StartAgent(Config());
  const std::string gpu0 = GpuUuid(node, 0), gpu1 = GpuUuid(node, 1);
  node.Control(R"({"cmd":"set","gpu":0,"sensors":{"remapped_rows":{"failure":true}}})");
  node.Control(R"({"cmd":"set","gpu":1,"sensors":{"remapped_rows":{"pending":true}}})");
  ASSERT_TRUE(WaitSick(kGpu, {gpu0, gpu1}));
  std::this_thread::sleep_for(1s);  // longer than the quiet period
  EXPECT_TRUE(OnlySick(kubelet_->Devices(kGpu), {gpu0, gpu1}));
  // After the reset the GPU reports no pending remap: back in service.
  node.Control(R"({"cmd":"set","gpu":1,"sensors":{"remapped_rows":{"pending":false}}})");
  ASSERT_TRUE(WaitSick(kGpu, {gpu0}));
}

TEST_F(HealthAgentTest, RetiredPagesPendingNeedsAReset) {
  FakeNode node("v100-8x-dgx1");  // Volta: page retirement
  StartAgent(Config());
  const std::string gpu3 = GpuUuid(node, 3);
  node.Control(R"({"cmd":"set","gpu":3,"sensors":{"retired_pages_pending":true}})");
  ASSERT_TRUE(WaitSick(kGpu, {gpu3}));
  std::this_thread::sleep_for(1s);
  EXPECT_TRUE(OnlySick(kubelet_->Devices(kGpu), {gpu3}));
}

TEST_F(HealthAgentTest, AGpuLostUnderTrafficFailsNoRequestForTheOthers) {
  FakeNode node("a100-8x-nvswitch");
  StartAgent(Config());
  std::vector<std::string> healthy;
  for (int i = 0; i < 7; ++i) healthy.push_back(GpuUuid(node, i));
  const std::string gpu7 = GpuUuid(node, 7);
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, failed{0};
  std::string first_error;
  std::mutex mu;
  auto traffic = [&](int seed) {
    for (int n = seed; !stop; ++n) {
      const std::string& a = healthy[n % healthy.size()];
      auto r = kubelet_->Allocate(kGpu, {a});
      auto p = kubelet_->GetPreferredAllocation(kGpu, healthy, {}, 2);
      if (r.status.ok() && p.status.ok() && p.device_ids.size() == 2) {
        ++ok;
      } else {
        ++failed;
        std::lock_guard lock(mu);
        if (first_error.empty()) first_error = r.status.error_message() + " / " + p.status.error_message();
      }
    }
  };
  std::thread t1(traffic, 0), t2(traffic, 3);
  std::this_thread::sleep_for(200ms);
  node.Control(R"({"cmd":"lost","gpu":7})");  // falls off the bus, XID 79
  ASSERT_TRUE(WaitSick(kGpu, {gpu7}));
  std::this_thread::sleep_for(300ms);
  stop = true;
  t1.join();
  t2.join();
  EXPECT_GT(ok.load(), 10);
  EXPECT_EQ(failed.load(), 0) << first_error;
  // The lost GPU itself is refused, with the reason.
  auto r = kubelet_->Allocate(kGpu, {gpu7});
  EXPECT_THAT(r.status.error_message(), HasSubstr("unhealthy"));
}

TEST_F(HealthAgentTest, WithoutFailOnInitErrorItServesNothingAndRetriesUntilNvmlWorks) {
  FakeNode node("a100-8x-nvswitch");
  const std::string broken = dir_ + "/broken.json";
  {
    std::ofstream(broken) << R"({"driver_version":"550.54.15","cuda_driver_version":12040,)"
                             R"("init_error":"DRIVER_NOT_LOADED","gpus":[]})";
  }
  setenv("FAKE_NVML_PROFILE", broken.c_str(), 1);
  config::Config cfg = Config();
  cfg.flags.fail_on_init_error = true;
  {
    agent::Agent strict;
    Status st = strict.Start(cfg);
    ASSERT_FALSE(st.ok());
    EXPECT_THAT(st.ToString(), HasSubstr("Driver Not Loaded"));
  }
  cfg.flags.fail_on_init_error = false;
  cfg.danqing.init_retry_interval = 100ms;
  agent_ = std::make_unique<agent::Agent>();
  ASSERT_TRUE(agent_->Start(cfg).ok());
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 10s));
  // The list the kubelet holds is one the plugin sent: empty.
  ASSERT_TRUE(kubelet_->WaitForStreamUpdates(kGpu, 1, 10s));
  std::this_thread::sleep_for(300ms);  // several failed retries
  EXPECT_TRUE(kubelet_->Devices(kGpu).empty());
  EXPECT_TRUE(agent_->degraded());
  // The driver comes up: the next retry serves the GPUs.
  setenv("FAKE_NVML_PROFILE", testing::ProfilePath("a100-8x-nvswitch").c_str(), 1);
  ASSERT_TRUE(kubelet_->WaitForDevices(kGpu, [](const Devices& d) { return d.size() == 8; }, 10s));
  EXPECT_FALSE(agent_->degraded());
}

TEST_F(HealthAgentTest, HealthAndProbesAreOnTheMetricsEndpoint) {
  FakeNode node("a100-8x-nvswitch");
  config::Config cfg = Config();
  cfg.danqing.metrics_addr = "127.0.0.1:0";
  cfg.danqing.xid_quiet_period = std::chrono::minutes(5);  // stays unhealthy until scraped
  StartAgent(cfg);
  const int port = agent_->metrics_port();
  ASSERT_GT(port, 0);
  httplib::Client cli("127.0.0.1", port);
  auto health = cli.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  // Ready once the agent has seen its Register call return (the kubelet may
  // have recorded the registration a moment earlier).
  auto ready = cli.Get("/readyz");
  for (int i = 0; i < 100 && ready && ready->status != 200; ++i) {
    std::this_thread::sleep_for(50ms);
    ready = cli.Get("/readyz");
  }
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200);

  const std::string gpu3 = GpuUuid(node, 3);
  node.Control(R"({"cmd":"xid","gpu":3,"xid":62})");
  ASSERT_TRUE(WaitSick(kGpu, {gpu3}));
  // The exporter collects every second; wait for a scrape that shows it.
  std::string body;
  for (int i = 0; i < 50; ++i) {
    auto r = cli.Get("/metrics");
    ASSERT_TRUE(r);
    body = r->body;
    if (body.find("reason=\"xid-62\"") != std::string::npos) break;
    std::this_thread::sleep_for(100ms);
  }
  auto has = [&](const std::string& needle) { return body.find(needle) != std::string::npos; };
  EXPECT_TRUE(has("danqing_gpu_healthy{"));
  EXPECT_TRUE(has("reason=\"xid-62\"} 0"));
  EXPECT_TRUE(has("DCGM_FI_DEV_XID_ERRORS{"));
  EXPECT_TRUE(has("danqing_health_transitions_total{transition=\"unhealthy:xid\"} 1"));
  EXPECT_TRUE(has("danqing_plugin_registrations_total{resource=\"nvidia.com/gpu\"}"));
  // The agent's own share of event-to-ListAndWatch latency, one sample per
  // event that changed health (the registry is per process: at least this one).
  const std::string count = "danqing_health_event_publish_duration_seconds_count ";
  const size_t at = body.find(count);
  ASSERT_NE(at, std::string::npos);
  EXPECT_GE(std::stod(body.substr(at + count.size())), 1.0);

  // The kubelet gone: not ready (nothing registered), still alive.
  kubelet_->Stop();
  bool not_ready = false;
  for (int i = 0; i < 50 && !not_ready; ++i) {
    auto r = cli.Get("/readyz");
    not_ready = r && r->status == 503;
    if (!not_ready) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(not_ready);
  auto alive = cli.Get("/healthz");
  ASSERT_TRUE(alive);
  EXPECT_EQ(alive->status, 200);
}

// A backend whose subscription takes a while, as NVML's does on a node with
// many GPUs (one registration per GPU).
class SlowToSubscribe : public gpu::GpuBackend {
 public:
  explicit SlowToSubscribe(gpu::GpuBackend& real) : real_(real) {}
  Result<gpu::NodeInventory> Discover() override { return real_.Discover(); }
  Result<gpu::Sensors> ReadSensors(const std::string& uuid) override { return real_.ReadSensors(uuid); }
  Result<std::unique_ptr<gpu::EventStream>> WatchEvents(const std::vector<std::string>& gpus) override {
    std::this_thread::sleep_for(300ms);
    return real_.WatchEvents(gpus);
  }
  std::string Describe() const override { return real_.Describe(); }

 private:
  gpu::GpuBackend& real_;
};

TEST(CheckerTest, AnEventRaisedOnceStartReturnedIsSeen) {
  FakeNode node("a100-8x-nvswitch");
  auto backend = gpu::NvmlBackend::Create(testing::FakeNvmlLibrary());
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  auto inventory = (*backend)->Discover();
  ASSERT_TRUE(inventory.ok()) << inventory.status().ToString();
  SlowToSubscribe slow(**backend);
  health::CheckerOptions opts;
  opts.poll_interval = 50ms;
  health::Checker checker(slow, opts, [](const auto&) {});
  checker.Start(*inventory);
  // The agent registers with the kubelet right after Start: an XID from then
  // on must mark the GPU, even while the events thread had not yet run.
  node.Control(R"({"cmd":"xid","gpu":3,"xid":79})");
  const std::string uuid = inventory->gpus[3].uuid;
  bool sick = false;
  for (int i = 0; i < 300 && !sick; ++i) {
    sick = checker.Unhealthy().contains(uuid);
    if (!sick) std::this_thread::sleep_for(10ms);
  }
  checker.Stop();
  EXPECT_TRUE(sick);
}

// A backend that runs a hook (once) as the checker subscribes again, before
// the new event set exists: what the hook does happens in the gap.
class HookOnResubscribe : public gpu::GpuBackend {
 public:
  explicit HookOnResubscribe(gpu::GpuBackend& real) : real_(real) {}
  void Arm(std::function<void()> hook) {
    std::lock_guard lock(mu_);
    hook_ = std::move(hook);
  }
  Result<gpu::NodeInventory> Discover() override { return real_.Discover(); }
  Result<gpu::Sensors> ReadSensors(const std::string& uuid) override {
    return real_.ReadSensors(uuid);
  }
  Result<std::unique_ptr<gpu::EventStream>> WatchEvents(
      const std::vector<std::string>& gpus) override {
    std::function<void()> hook;
    {
      std::lock_guard lock(mu_);
      hook = std::exchange(hook_, nullptr);
    }
    if (hook) hook();
    return real_.WatchEvents(gpus);
  }
  std::string Describe() const override { return real_.Describe(); }

 private:
  gpu::GpuBackend& real_;
  std::mutex mu_;
  std::function<void()> hook_;
};

// NVML delivers an event only to the sets registered when it happened, and
// has no call to read past XIDs; the fake is as faithful. Faults while the
// event stream was broken (issue 31: a failed wait, then a new
// subscription) raised events no set saw; each is found from its trace.
void FaultsWhileTheEventStreamWasBroken(std::chrono::milliseconds poll_interval) {
  FakeNode node("a100-8x-nvswitch");
  auto backend = gpu::NvmlBackend::Create(testing::FakeNvmlLibrary());
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  auto inventory = (*backend)->Discover();
  ASSERT_TRUE(inventory.ok()) << inventory.status().ToString();
  const auto uuid = [&](int i) { return inventory->gpus[static_cast<size_t>(i)].uuid; };
  HookOnResubscribe hooked(**backend);
  health::CheckerOptions opts;
  opts.poll_interval = poll_interval;
  // GPU 7, polled last, shows when the first poll (the ECC baselines) is over.
  node.Control(R"({"cmd":"fail","gpu":7,"function":"nvmlDeviceGetMemoryInfo","error":"UNKNOWN"})");
  health::Checker checker(hooked, opts, [](const auto&) {});
  checker.Start(*inventory);
  const auto wait_for =
      [&](const std::function<bool(const std::map<std::string, std::string>&)>& done) {
        for (int i = 0; i < 500; ++i) {
          if (done(checker.Unhealthy())) return true;
          std::this_thread::sleep_for(10ms);
        }
        return false;
      };
  ASSERT_TRUE(wait_for([&](const auto& sick) { return sick.contains(uuid(7)); }));

  hooked.Arm([&node] {
    // The failed stream's set is still there but never read again; the new
    // one is not yet registered: these events reach no one.
    node.Control(R"({"cmd":"ecc","gpu":2,"type":"double"})");
    node.Control(R"({"cmd":"set","gpu":3,"sensors":{"remapped_rows":{"pending":true}}})");
    node.Control(R"({"cmd":"lost","gpu":5})");
    node.Control(R"({"cmd":"fail","function":"nvmlEventSetWait","error":null})");
  });
  node.Control(R"({"cmd":"fail","function":"nvmlEventSetWait","error":"UNKNOWN"})");
  const bool marked = wait_for([&](const auto& sick) {
    return sick.contains(uuid(2)) && sick.contains(uuid(3)) && sick.contains(uuid(5));
  });
  const auto sick = checker.Unhealthy();
  checker.Stop();
  ASSERT_TRUE(marked);
  EXPECT_THAT(sick.at(uuid(2)),
              HasSubstr("double-bit-ecc"));  // needs a reset, as the event's would
  EXPECT_EQ(sick.at(uuid(3)), "row-remap-pending");
  EXPECT_EQ(sick.at(uuid(5)), "gpu-lost");
  for (const auto& h : checker.Snapshot()) {
    if (h.uuid == uuid(2)) {
      EXPECT_TRUE(h.needs_reset);
    }
  }
}

// Not at the next poll (an hour away): as soon as events are watched again.
TEST(CheckerTest, FaultsWhileTheEventStreamWasBrokenMarkTheirGpusAtOnce) {
  FaultsWhileTheEventStreamWasBroken(1h);
}

// Polled as often as the agent does, the ECC error was seen before too, but
// only as the poll's own condition, which clears after the quiet period.
TEST(CheckerTest, ADoubleBitErrorWhileTheEventStreamWasBrokenNeedsAReset) {
  FaultsWhileTheEventStreamWasBroken(50ms);
}

// NVML queues an event only for a set already subscribed, so a re-partition
// made between the inventory's discovery and the checker's subscription
// raises no event. The checker compares the layout once subscribed.
class CheckerMigCatchUpTest : public ::testing::Test {
 protected:
  // Counts on_mig_change calls of a checker started on the inventory
  // discovered before `between` ran, for up to `wait`.
  int MigChangesReported(const std::function<void(const FakeNode&)>& between, std::chrono::milliseconds wait) {
    FakeNode node("a100-mig-mixed");
    auto backend = gpu::NvmlBackend::Create(testing::FakeNvmlLibrary());
    EXPECT_TRUE(backend.ok()) << backend.status().ToString();
    if (!backend.ok()) return -1;
    auto inventory = (*backend)->Discover();
    EXPECT_TRUE(inventory.ok()) << inventory.status().ToString();
    if (!inventory.ok()) return -1;
    between(node);
    std::atomic<int> changes{0};
    health::CheckerOptions opts;
    opts.poll_interval = 50ms;
    health::Checker checker(**backend, opts, [](const auto&) {}, [&] { ++changes; });
    checker.Start(*inventory);
    const auto until = std::chrono::steady_clock::now() + wait;
    while (changes.load() == 0 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(10ms);
    checker.Stop();
    return changes.load();
  }
};

TEST_F(CheckerMigCatchUpTest, ARepartitionBeforeTheSubscriptionIsReported) {
  const int reported = MigChangesReported(
      [](const FakeNode& node) {
        // GPU 2 goes from 3g.40gb x2 to one 7g.80gb while no event set exists.
        node.Control(R"({"cmd":"mig","gpu":2,"mig":{"mode":1,"pending":1,"devices":[
            {"profile":"7g.80gb","gpu_instance_id":0,"uuid":"MIG-5d2b8f6e-0a7c-5e11-9d3f-7b1c2a9e4f01"}]}})");
      },
      10s);
  EXPECT_EQ(reported, 1);
}

TEST_F(CheckerMigCatchUpTest, AnUnchangedLayoutOrAnotherFaultIsNotAMigChange) {
  // A GPU lost meanwhile is the poll thread's (it marks it unhealthy), not a
  // reason to rebuild the resources.
  const int reported = MigChangesReported(
      [](const FakeNode& node) { node.Control(R"({"cmd":"lost","gpu":1})"); }, 1500ms);
  EXPECT_EQ(reported, 0);
}

}  // namespace
}  // namespace danqing
