// The agent as a DRA driver end to end, on loopback: the real agent (fake
// NVML underneath) with its API client made from a kubeconfig as main makes
// it (agent::ApiClientFor), the API server emulator (HTTPS, the real REST
// paths and JSON) and the DRA kubelet emulator (registration, v1 node
// service over the plugin's unix socket). The test plays the scheduler: it
// reads the published ResourceSlice and writes a ResourceClaim with
// status.allocation naming one of its devices.
//   * publish → allocate → prepare (claim GET) → CDI IDs and spec → unprepare
//   * a GPU fails and recovers: its taint appears in the slice, then goes
//   * the API server restarts: the agent catches up
//   * the agent stops mid-prepare: the checkpoint keeps what was prepared
//   * a MIG re-partition (and reload) is a new pool generation; split mode
//     publishes only its DRA GPUs
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "agent/agent.h"
#include "agent/doctor.h"
#include "config/config.h"
#include "dra/nvml_mig_control.h"
#include "testing/kubelet/dra_kubelet_emulator.h"
#include "testing/kubelet/kubelet_emulator.h"
#include "testing/support/dra_agent_config.h"
#include "testing/support/fake_node.h"
#include "testing/support/temp_dir.h"
#include "tests/dra/slice_fixtures.h"

namespace danqing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
namespace drav1 = k8s::io::kubelet::pkg::apis::dra::v1;
constexpr char kDriver[] = "gpu.danqing.io";
constexpr char kNode[] = "node-a";
constexpr char kTaintKey[] = "gpu.danqing.io/unhealthy";

// The node's slices of our driver.
std::vector<json> NodeSlices(const std::vector<json>& all) {
  std::vector<json> out;
  for (const auto& s : all) {
    const json& spec = s.at("spec");
    if (spec.contains("nodeName") && spec.at("nodeName") == kNode && spec.contains("driver") &&
        spec.at("driver") == kDriver)
      out.push_back(s);
  }
  return out;
}

const json* FindDevice(const std::vector<json>& slices, const std::string& name) {
  for (const auto& s : slices) {
    if (!s["spec"].contains("devices")) continue;  // a slice of counter sets
    for (const auto& d : s["spec"]["devices"]) {
      if (d["name"] == name) return &d;
    }
  }
  return nullptr;
}

// The taint of our key on `device` in the node's slices, or null.
std::optional<json> TaintOf(const std::vector<json>& all, const std::string& device) {
  const auto slices = NodeSlices(all);
  const json* d = FindDevice(slices, device);
  if (d == nullptr || !d->contains("taints")) return std::nullopt;
  for (const auto& t : (*d)["taints"]) {
    if (t["key"] == kTaintKey) return t;
  }
  return std::nullopt;
}

int64_t Generation(const std::vector<json>& all) {
  const auto slices = NodeSlices(all);
  return slices.empty() ? 0 : slices[0]["spec"]["pool"]["generation"].get<int64_t>();
}

// A ClaimSource in front of the agent's own (the API reader) that can hold
// reads at a gate: the agent stopped while a prepare waits for the API.
class GatedSource : public dra::ClaimSource {
 public:
  struct Gate {
    std::mutex mu;
    std::condition_variable cv;
    bool open = true;
    int waiting = 0;
    std::optional<Status> fail;
  };
  GatedSource(std::unique_ptr<dra::ClaimSource> inner, Gate* gate)
      : inner_(std::move(inner)), gate_(gate) {}
  Result<dra::ClaimAllocation> Get(const std::string& ns, const std::string& name,
                                   const std::string& uid) override {
    {
      std::unique_lock l(gate_->mu);
      ++gate_->waiting;
      gate_->cv.notify_all();
      gate_->cv.wait(l, [&] { return gate_->open; });
      --gate_->waiting;
      if (gate_->fail) return *gate_->fail;
    }
    return inner_->Get(ns, name, uid);
  }

 private:
  std::unique_ptr<dra::ClaimSource> inner_;
  Gate* gate_;
};

class DraE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path();
    api_ = std::make_unique<testing::ApiFixture>(dir_);
    ASSERT_TRUE(api_->error.empty()) << api_->error;
    dra_kubelet_ = std::make_unique<testing::DraKubeletEmulator>(
        testing::DraKubeletOptions{dir_ + "/registry", {"v1.DRAPlugin"}, 10'000ms});
    ASSERT_TRUE(dra_kubelet_->Start());
    // A kubeconfig for the emulator, as an operator would give --kubeconfig.
    ASSERT_TRUE(api_->WriteKubeconfig(dir_ + "/kubeconfig"));
  }
  void TearDown() override {
    if (agent_) agent_->Stop();
    agent_.reset();
    client_.reset();
    dra_kubelet_.reset();
  }
  config::Config Config(const std::string& mode = "dra", std::vector<std::string> dra_gpus = {}) {
    config::Config cfg = testing::DraAgentConfig(dir_, mode, std::move(dra_gpus), kNode);
    cfg.danqing.kubeconfig = dir_ + "/kubeconfig";
    EXPECT_TRUE(config::Validate(cfg).ok()) << config::Validate(cfg).ToString();
    return cfg;
  }
  // Starts the agent as main does: the API client from the configuration,
  // claims read through it, slices published through it.
  void StartAgent(GatedSource::Gate* gate = nullptr, config::Config cfg = {}) {
    if (cfg.danqing.node_name.empty()) cfg = Config();
    if (!client_) {
      auto client = agent::ApiClientFor(cfg);
      ASSERT_TRUE(client.ok()) << client.status().ToString();
      ASSERT_NE(*client, nullptr);
      client_ = std::move(client).value();
    }
    agent::ClaimSourceFactory claims = agent::ApiClaimSourceFactory(*client_);
    if (gate != nullptr) {
      claims = [claims, gate](const config::Config& c) -> std::unique_ptr<dra::ClaimSource> {
        return std::make_unique<GatedSource>(claims(c), gate);
      };
    }
    agent_ = std::make_unique<agent::Agent>(agent::NvmlBackendFactory(), nullptr, claims,
                                            agent::ApiLink{client_.get(), 20ms, 200ms});
    ASSERT_TRUE(agent_->Start(cfg).ok());
    ASSERT_NE(agent_->dra_publisher(), nullptr);
  }
  // Waits for the node's slices to satisfy `pred`.
  bool WaitSlices(const std::function<bool(const std::vector<json>&)>& pred,
                  std::chrono::milliseconds timeout = 10s) {
    return api_->server->WaitForSlices(pred, timeout);
  }
  // The scheduler's part: a claim allocated `devices` of this node's pool.
  json Allocate(const std::string& name, const std::vector<std::string>& devices,
                const std::string& pool = kNode) {
    json results = json::array();
    for (const auto& d : devices)
      results.push_back({{"request", "gpu"}, {"driver", kDriver}, {"pool", pool}, {"device", d}});
    return api_->server->PutClaim(
        {{"metadata", {{"namespace", "ml"}, {"name", name}}},
         {"spec",
          {{"devices",
            {{"requests",
              {{{"name", "gpu"}, {"exactly", {{"deviceClassName", "gpu.danqing.io"}}}}}}}}}},
         {"status", {{"allocation", {{"devices", {{"results", results}}}}}}}});
  }
  static std::string Uid(const json& claim) { return claim["metadata"]["uid"]; }
  drav1::NodePrepareResourceResponse Prepare(const std::string& name, const std::string& uid) {
    drav1::NodePrepareResourcesResponse resp;
    grpc::Status s = dra_kubelet_->Prepare(kDriver, {{"ml", name, uid}}, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.claims().contains(uid) ? resp.claims().at(uid)
                                       : drav1::NodePrepareResourceResponse();
  }
  std::string Unprepare(const std::string& name, const std::string& uid) {
    drav1::NodeUnprepareResourcesResponse resp;
    grpc::Status s = dra_kubelet_->Unprepare(kDriver, {{"ml", name, uid}}, &resp);
    if (!s.ok()) return s.error_message();
    return resp.claims().at(uid).error();
  }
  std::string SpecPath(const std::string& uid) const {
    return dir_ + "/cdi/gpu.danqing.io-claim_" + uid + ".json";
  }
  uint64_t ClaimGets() { return api_->server->Counts()["GET resourceclaims"]; }

  testing::TempDir tmp_;
  std::string dir_;
  std::unique_ptr<testing::ApiFixture> api_;
  std::unique_ptr<testing::DraKubeletEmulator> dra_kubelet_;
  std::unique_ptr<kube::Client> client_;
  std::unique_ptr<agent::Agent> agent_;
};

TEST_F(DraE2eTest, PublishedDeviceIsAllocatedPreparedAndUnprepared) {
  testing::FakeNode node("a100-mig-mixed");
  StartAgent();
  // One device per whole GPU and per MIG device: GPU0 4 MIG, GPU1 7, GPU2 2, GPU3 whole.
  ASSERT_TRUE(WaitSlices([](const auto& all) {
    const auto s = NodeSlices(all);
    return s.size() == 1 && s[0]["spec"]["devices"].size() == 14;
  })) << json(api_->server->Slices()).dump();
  const auto slices = NodeSlices(api_->server->Slices());
  EXPECT_EQ(slices[0]["spec"]["pool"]["name"], kNode);
  // The names the node plugin knows are the names published (one function).
  const json* mig = FindDevice(slices, "gpu-0-mig-1g10gb-9-0");
  ASSERT_NE(mig, nullptr) << slices[0]["spec"]["devices"].dump();
  EXPECT_EQ((*mig)["attributes"]["migProfile"]["string"], "1g.10gb");
  ASSERT_NE(FindDevice(slices, "gpu-3"), nullptr);

  ASSERT_TRUE(dra_kubelet_->WaitForRegistrations(kDriver, 1, 10s));
  const json claim = Allocate("train", {"gpu-0-mig-1g10gb-9-0", "gpu-3"});
  const std::string uid = Uid(claim);
  const uint64_t gets = ClaimGets();
  auto c = Prepare("train", uid);
  ASSERT_EQ(c.error(), "");
  EXPECT_EQ(ClaimGets(), gets + 1);  // the allocation was read from the API server
  ASSERT_EQ(c.devices_size(), 2);
  EXPECT_EQ(c.devices(0).device_name(), "gpu-0-mig-1g10gb-9-0");
  EXPECT_EQ(c.devices(0).pool_name(), kNode);
  EXPECT_EQ(c.devices(0).cdi_device_ids(0),
            "gpu.danqing.io/claim=" + uid + "-gpu-0-mig-1g10gb-9-0");
  EXPECT_EQ(c.devices(1).cdi_device_ids(0), "gpu.danqing.io/claim=" + uid + "-gpu-3");
  ASSERT_TRUE(std::filesystem::exists(SpecPath(uid)));
  const json spec = json::parse(std::ifstream(SpecPath(uid)));
  EXPECT_EQ(spec["kind"], "gpu.danqing.io/claim");
  ASSERT_EQ(spec["devices"].size(), 2U);
  EXPECT_EQ(spec["devices"][1]["containerEdits"]["deviceNodes"][0]["path"], "/dev/nvidia3");

  // Repeated: the same answer without another read.
  EXPECT_EQ(Prepare("train", uid).devices(1).cdi_device_ids(0), c.devices(1).cdi_device_ids(0));
  EXPECT_EQ(ClaimGets(), gets + 1);

  EXPECT_EQ(Unprepare("train", uid), "");
  EXPECT_FALSE(std::filesystem::exists(SpecPath(uid)));
  EXPECT_TRUE(agent_->dra_preparer()->Prepared().empty());

  // Bad allocations are answered with the claim and the device named.
  const json other = Allocate("elsewhere", {"gpu-1"}, "node-b");
  const std::string err = Prepare("elsewhere", Uid(other)).error();
  EXPECT_NE(err.find("node-b/gpu-1 is not this node's"), std::string::npos) << err;
  EXPECT_NE(err.find("ml/elsewhere"), std::string::npos) << err;
  const json unknown = Allocate("unknown", {"gpu-9"});
  EXPECT_NE(Prepare("unknown", Uid(unknown)).error().find("node-a/gpu-9 is unknown"),
            std::string::npos);
  const std::string gone = Prepare("never-made", "uid-x").error();
  EXPECT_NE(gone.find("ResourceClaim ml/never-made"), std::string::npos) << gone;
  EXPECT_NE(gone.find("not found"), std::string::npos) << gone;
}

TEST_F(DraE2eTest, FailedGpuIsTaintedThenUntaintedWhenItRecovers) {
  testing::FakeNode node("a100-mig-mixed");
  StartAgent();
  ASSERT_TRUE(WaitSlices([](const auto& all) { return Generation(all) == 1; }));
  ASSERT_TRUE(agent_->dra_publisher()->WaitSynced(10s));
  ASSERT_FALSE(TaintOf(api_->server->Slices(), "gpu-3"));

  // GPU 3 falls off the bus (no XID): tainted NoSchedule with the reason.
  node.Control(R"({"cmd":"lost","gpu":3,"xid":false})");
  ASSERT_TRUE(WaitSlices([](const auto& all) { return TaintOf(all, "gpu-3").has_value(); }));
  auto now = api_->server->Slices();
  const json taint = *TaintOf(now, "gpu-3");
  EXPECT_EQ(taint["value"], "gpu-lost");
  EXPECT_EQ(taint["effect"], "NoSchedule");
  EXPECT_TRUE(taint.contains("timeAdded"));
  EXPECT_GT(Generation(now), 1);
  EXPECT_FALSE(TaintOf(now, "gpu-0-mig-1g10gb-9-0"));  // other GPUs untouched
  // A claim on it is not prepared meanwhile.
  ASSERT_TRUE(dra_kubelet_->WaitForRegistrations(kDriver, 1, 10s));
  const json claim = Allocate("on-lost", {"gpu-3"});
  const std::string err = Prepare("on-lost", Uid(claim)).error();
  EXPECT_NE(err.find("unhealthy"), std::string::npos) << err;

  // It answers again: the taint is removed.
  node.Control(R"({"cmd":"lost","gpu":3,"lost":false})");
  ASSERT_TRUE(WaitSlices([](const auto& all) { return !TaintOf(all, "gpu-3").has_value(); }));
  EXPECT_EQ(Prepare("on-lost", Uid(claim)).error(), "");

  // A reset-class XID on a MIG GPU: every MIG device of it NoExecute. NVML
  // drops an event no event set holds yet: sent again until seen.
  bool seen = false;
  for (int i = 0; i < 25 && !seen; ++i) {
    node.Control(R"({"cmd":"xid","gpu":2,"xid":79})");
    seen = WaitSlices(
        [](const auto& all) {
          return TaintOf(all, "gpu-2-mig-3g40gb-1-0").has_value() &&
                 TaintOf(all, "gpu-2-mig-3g40gb-2-0").has_value();
        },
        200ms);
  }
  ASSERT_TRUE(seen);
  now = api_->server->Slices();
  EXPECT_EQ((*TaintOf(now, "gpu-2-mig-3g40gb-1-0"))["effect"], "NoExecute");
  EXPECT_EQ((*TaintOf(now, "gpu-2-mig-3g40gb-1-0"))["value"], "xid-79");
  EXPECT_FALSE(TaintOf(now, "gpu-3"));
}

TEST_F(DraE2eTest, ApiServerRestartIsCaughtUp) {
  testing::FakeNode node("a100-mig-mixed");
  StartAgent();
  ASSERT_TRUE(WaitSlices([](const auto& all) { return Generation(all) == 1; }));
  ASSERT_TRUE(dra_kubelet_->WaitForRegistrations(kDriver, 1, 10s));
  const json claim = Allocate("train", {"gpu-1-mig-1g10gb-7-0"});

  api_->server->Stop();
  // Meanwhile: a GPU is lost (the slices cannot follow) and a prepare
  // cannot read its claim (the kubelet is told, and retries).
  node.Control(R"({"cmd":"lost","gpu":3,"xid":false})");
  for (int i = 0; i < 200 && agent_->dra_publisher()->status().passes_failed == 0; ++i)
    std::this_thread::sleep_for(25ms);
  EXPECT_GT(agent_->dra_publisher()->status().passes_failed, 0U);
  EXPECT_FALSE(agent_->dra_publisher()->status().synced);
  const std::string err = Prepare("train", Uid(claim)).error();
  EXPECT_NE(err.find("ml/train"), std::string::npos) << err;
  EXPECT_TRUE(agent_->dra_preparer()->Prepared().empty());

  ASSERT_TRUE(api_->server->Restart().ok());
  ASSERT_TRUE(WaitSlices([](const auto& all) { return TaintOf(all, "gpu-3").has_value(); }));
  ASSERT_TRUE(agent_->dra_publisher()->WaitSynced(10s));
  EXPECT_EQ(Prepare("train", Uid(claim)).error(), "");
  node.Control(R"({"cmd":"lost","gpu":3,"lost":false})");
  ASSERT_TRUE(WaitSlices([](const auto& all) { return !TaintOf(all, "gpu-3").has_value(); }));
}

TEST_F(DraE2eTest, AgentStoppedMidPrepareKeepsPreparedClaims) {
  testing::FakeNode node("a100-mig-mixed");
  GatedSource::Gate gate;
  StartAgent(&gate);
  ASSERT_TRUE(dra_kubelet_->WaitForRegistrations(kDriver, 1, 10s));
  const json first = Allocate("first", {"gpu-3"});
  const json second = Allocate("second", {"gpu-1-mig-1g10gb-8-0"});
  const auto done = Prepare("first", Uid(first));
  ASSERT_EQ(done.error(), "");

  // The second prepare waits for its claim when the agent goes down.
  {
    std::lock_guard l(gate.mu);
    gate.open = false;
  }
  drav1::NodePrepareResourcesResponse pending;
  grpc::Status pending_status;
  std::thread prepare([&] {
    pending_status = dra_kubelet_->Prepare(kDriver, {{"ml", "second", Uid(second)}}, &pending);
  });
  {
    std::unique_lock l(gate.mu);
    ASSERT_TRUE(gate.cv.wait_for(l, 10s, [&] { return gate.waiting == 1; }));
  }
  std::thread stopper([&] { agent_->Stop(); });
  {
    std::lock_guard l(gate.mu);
    gate.fail = Unavailable("the agent was stopped");
    gate.open = true;
    gate.cv.notify_all();
  }
  stopper.join();
  prepare.join();
  if (pending_status.ok()) {
    EXPECT_NE(pending.claims().at(Uid(second)).error(), "");
  }
  EXPECT_FALSE(std::filesystem::exists(SpecPath(Uid(second))));
  agent_.reset();
  {
    std::lock_guard l(gate.mu);
    gate.fail.reset();
  }

  // The restarted agent has the first claim from its checkpoint (no claim
  // read), and prepares the second afresh.
  StartAgent(&gate);
  ASSERT_TRUE(dra_kubelet_->WaitForRegistrations(kDriver, 2, 10s));
  const auto prepared = agent_->dra_preparer()->Prepared();
  ASSERT_EQ(prepared.size(), 1U);
  EXPECT_TRUE(prepared.contains(Uid(first)));
  const uint64_t gets = ClaimGets();
  const auto again = Prepare("first", Uid(first));
  ASSERT_EQ(again.error(), "");
  EXPECT_EQ(again.devices(0).cdi_device_ids(0), done.devices(0).cdi_device_ids(0));
  EXPECT_EQ(ClaimGets(), gets);
  const auto fresh = Prepare("second", Uid(second));
  ASSERT_EQ(fresh.error(), "");
  EXPECT_EQ(ClaimGets(), gets + 1);
  EXPECT_TRUE(std::filesystem::exists(SpecPath(Uid(second))));
  // The restart with the same GPUs adopted the slices: still generation 1.
  EXPECT_EQ(Generation(api_->server->Slices()), 1);
  EXPECT_EQ(Unprepare("first", Uid(first)), "");
  EXPECT_EQ(Unprepare("second", Uid(second)), "");
  EXPECT_FALSE(std::filesystem::exists(SpecPath(Uid(first))));
}

bool HasDevices(const std::vector<json>& all, const std::vector<std::string>& names) {
  const auto slices = NodeSlices(all);
  for (const auto& n : names) {
    if (FindDevice(slices, n) == nullptr) return false;
  }
  return true;
}

size_t DeviceCount(const std::vector<json>& all) {
  size_t n = 0;
  for (const auto& s : NodeSlices(all)) n += s["spec"]["devices"].size();
  return n;
}

TEST_F(DraE2eTest, MigRepartitionIsANewPoolGeneration) {
  testing::FakeNode node("a100-mig-mixed");
  StartAgent();
  ASSERT_TRUE(WaitSlices([](const auto& all) { return DeviceCount(all) == 14; }));
  ASSERT_TRUE(agent_->dra_publisher()->WaitSynced(10s));
  ASSERT_EQ(Generation(api_->server->Slices()), 1);
  // GPU 2: 2×3g.40gb becomes 3g.40gb + 2g.20gb + 1g.10gb (the agent's owner
  // reloads on NVML's MIG change event; the test does it).
  node.Control(R"({"cmd":"mig","gpu":2,"mig":{"mode":1,"devices":[
    {"profile":"3g.40gb","gpu_instance_id":1,"compute_instance_id":0,"uuid":"MIG-14eaed19-a382-b446-b2f3-8a60956ecaa8","placement_start":0},
    {"profile":"2g.20gb","gpu_instance_id":3,"compute_instance_id":0,"uuid":"MIG-aaaaaaaa-bbbb-cccc-dddd-000000000001","placement_start":4},
    {"profile":"1g.10gb","gpu_instance_id":9,"compute_instance_id":0,"uuid":"MIG-aaaaaaaa-bbbb-cccc-dddd-000000000002","placement_start":6}]}})");
  ASSERT_TRUE(agent_->Reload(Config()).ok());
  ASSERT_TRUE(WaitSlices([](const auto& all) {
    return DeviceCount(all) == 15 &&
           HasDevices(all,
                      {"gpu-2-mig-3g40gb-1-0", "gpu-2-mig-2g20gb-3-0", "gpu-2-mig-1g10gb-9-0"});
  })) << json(api_->server->Slices()).dump();
  const auto all = api_->server->Slices();
  EXPECT_FALSE(HasDevices(all, {"gpu-2-mig-3g40gb-2-0"}));
  EXPECT_EQ(Generation(all), 2);
  // The node plugin knows the new devices by the published names.
  ASSERT_TRUE(dra_kubelet_->WaitForRegistrations(kDriver, 1, 10s));
  const json claim = Allocate("small", {"gpu-2-mig-1g10gb-9-0"});
  EXPECT_EQ(Prepare("small", Uid(claim)).error(), "");
  const json old = Allocate("old", {"gpu-2-mig-3g40gb-2-0"});
  EXPECT_NE(Prepare("old", Uid(old)).error().find("unknown on this node"), std::string::npos);
  // A reload with nothing changed writes no new generation.
  ASSERT_TRUE(agent_->Reload(Config()).ok());
  ASSERT_TRUE(agent_->dra_publisher()->WaitSynced(10s));
  EXPECT_EQ(Generation(api_->server->Slices()), 2);
  // The API server is chosen at start: a reload that changes it is refused.
  auto moved = Config();
  moved.danqing.kubeconfig = dir_ + "/other-kubeconfig";
  const Status st = agent_->Reload(moved);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("danqing.kubeconfig"), std::string::npos) << st.message();
}

TEST_F(DraE2eTest, SplitModePublishesOnlyItsDraGpus) {
  testing::FakeNode node("a100-mig-mixed");
  std::filesystem::create_directories(dir_ + "/dp");
  testing::KubeletEmulator kubelet(dir_ + "/dp");
  ASSERT_TRUE(kubelet.Start().ok());
  StartAgent(nullptr, Config("split", {"0", "3"}));
  ASSERT_TRUE(WaitSlices([](const auto& all) {
    return DeviceCount(all) == 5 && HasDevices(all, {"gpu-3", "gpu-0-mig-3g40gb-2-0"});
  })) << json(api_->server->Slices()).dump();
  const auto all = api_->server->Slices();
  for (const auto& s : NodeSlices(all)) {
    for (const auto& d : s["spec"]["devices"]) {
      const std::string name = d["name"];
      EXPECT_TRUE(name.starts_with("gpu-0-") || name == "gpu-3") << name;
    }
  }
  agent_->Stop();
  agent_.reset();
  kubelet.Stop();
}

// The binary as the DaemonSet runs it: main builds the API client from
// --kubeconfig and hands it to the agent.
TEST_F(DraE2eTest, TheBinaryPublishesWithAKubeconfigAndRefusesABadOne) {
  testing::FakeNode node("a100-mig-mixed");
  const std::vector<std::string> common = {DANQING_DEVICE_PLUGIN_BIN,
                                           "--config-file=",
                                           "--nvml-lib",
                                           testing::FakeNvmlLibrary(),
                                           "--mode",
                                           "dra",
                                           "--node-name",
                                           kNode,
                                           "--cdi-root",
                                           dir_ + "/cdi",
                                           "--node-features-file=",
                                           "--metrics-addr",
                                           "127.0.0.1:0",
                                           "--device-plugin-path",
                                           dir_ + "/dp",
                                           "--dra-plugins-registry",
                                           dir_ + "/registry",
                                           "--dra-plugin-dir",
                                           dir_ + "/plugins",
                                           "--dra-checkpoint-dir",
                                           dir_ + "/state",
                                           "--kubeconfig"};
  auto bad = common;
  bad.push_back(dir_ + "/no-such-kubeconfig");
  const auto refused = testing::RunCommand(bad);
  EXPECT_EQ(refused.exit_code, 2) << refused.out;
  EXPECT_NE(refused.out.find("danqing.kubeconfig"), std::string::npos) << refused.out;

  auto good = common;
  good.push_back(dir_ + "/kubeconfig");
  testing::ChildProcess agent(good);
  ASSERT_TRUE(WaitSlices([](const auto& all) {
    const auto s = NodeSlices(all);
    return s.size() == 1 && s[0]["spec"]["devices"].size() == 14;
  })) << agent.Output();
  ASSERT_TRUE(dra_kubelet_->WaitForRegistrations(kDriver, 1, 10s)) << agent.Output();
  const json claim = Allocate("by-binary", {"gpu-1-mig-1g10gb-13-0"});
  EXPECT_EQ(Prepare("by-binary", Uid(claim)).error(), "");
  EXPECT_TRUE(agent.Signal(SIGTERM));
  EXPECT_EQ(agent.Wait(10'000), 0) << agent.Output();
}

// Dynamic MIG (issue 26) through the wired agent: GPU 2 in MIG mode with
// nothing on it, listed in danqing.draDynamicMig.
json FakeMigDevices(const testing::FakeNode& node, int gpu) {
  const std::string out = node.Control(R"({"cmd":"get","gpu":)" + std::to_string(gpu) + "}");
  const json reply = json::parse(out, nullptr, false);
  if (!reply.is_object() || !reply.contains("gpu") || !reply["gpu"].contains("mig")) {
    ADD_FAILURE() << "fake NVML get: " << out;
    return json::array();
  }
  return reply["gpu"]["mig"].value("devices", json::array());
}

// The slices of one pool (all of this node and driver in these tests).
std::vector<json> PoolSlices(const std::vector<json>& all, const std::string& pool) {
  std::vector<json> out;
  for (const auto& s : all) {
    if (s.at("spec").at("pool").at("name") == pool) out.push_back(s);
  }
  return out;
}

std::vector<json> MigPoolSlices(const std::vector<json>& all) {
  return PoolSlices(all, std::string(kNode) + "-mig");
}

TEST_F(DraE2eTest, DynamicMigPlacementIsPublishedCutAtPrepareAndDestroyedAtUnprepare) {
  testing::FakeNode node("a100-mig-mixed");
  config::Config cfg = Config();
  cfg.danqing.dra_dynamic_mig = {"2"};
  StartAgent(nullptr, cfg);
  ASSERT_NE(agent_->dynamic_mig(), nullptr);
  // GPU 2's two static 3g.40gb instances are orphans to dynamic MIG: reported, kept.
  EXPECT_EQ(agent_->dynamic_mig_orphans().size(), 2U);
  EXPECT_EQ(FakeMigDevices(node, 2).size(), 2U);
  // The operator empties GPU 2 (MIG mode stays on); the reload that follows
  // the MIG config change (main's, here the test's) republishes.
  node.Control(R"({"cmd":"mig","gpu":2,"mig":{"mode":1,"devices":[]}})");
  ASSERT_TRUE(agent_->Reload(cfg).ok());
  const std::string placement = "gpu-2-mig-1g10gb-at-6";
  // The MIG pool: GPU 2's counter set and its placements, each consuming
  // counters; the static pool keeps the other GPUs and none of GPU 2.
  ASSERT_TRUE(WaitSlices([&](const auto& all) {
    return FindDevice(MigPoolSlices(all), placement) != nullptr;
  })) << json(api_->server->Slices()).dump();
  auto all = api_->server->Slices();
  const auto mig_pool = MigPoolSlices(all);
  bool counters = false;
  for (const auto& s : mig_pool) {
    if (!s["spec"].contains("sharedCounters")) continue;
    for (const auto& set : s["spec"]["sharedCounters"]) counters |= set["name"] == "gpu-2-mig";
  }
  EXPECT_TRUE(counters) << json(mig_pool).dump();
  const json* offered = FindDevice(mig_pool, placement);
  ASSERT_NE(offered, nullptr);
  EXPECT_EQ((*offered)["consumesCounters"][0]["counterSet"], "gpu-2-mig");
  EXPECT_TRUE((*offered)["attributes"]["dynamic"]["bool"].get<bool>());
  const std::vector<json> static_pool = PoolSlices(all, kNode);
  ASSERT_FALSE(static_pool.empty());
  for (const auto& s : static_pool) {
    for (const auto& d : s["spec"]["devices"])
      EXPECT_NE(d["name"].get<std::string>().rfind("gpu-2-", 0), 0U) << d["name"];
  }
  EXPECT_NE(FindDevice(static_pool, "gpu-0-mig-1g10gb-9-0"), nullptr);

  // The scheduler allocates the placement; the kubelet prepares it.
  ASSERT_TRUE(dra_kubelet_->WaitForRegistrations(kDriver, 1, 10s));
  const std::string pool = std::string(kNode) + "-mig";
  const json claim = Allocate("cut", {placement}, pool);
  const std::string uid = Uid(claim);
  auto c = Prepare("cut", uid);
  ASSERT_EQ(c.error(), "");
  ASSERT_EQ(c.devices_size(), 1);
  EXPECT_EQ(c.devices(0).pool_name(), pool);
  EXPECT_EQ(c.devices(0).cdi_device_ids(0), "gpu.danqing.io/claim=" + uid + "-" + placement);
  json made = FakeMigDevices(node, 2);
  ASSERT_EQ(made.size(), 1U) << made.dump();
  EXPECT_EQ(made[0]["placement_start"], 6);
  EXPECT_EQ(agent_->dynamic_mig()->Held().at(uid).at(0).mig_uuid, made[0]["uuid"]);
  // The CDI device is the claim's placement on the parent's /dev/nvidia2
  // (the nvidia-cap nodes come from /proc/driver/nvidia-caps/mig-minors,
  // absent here: dynamic_mig_test covers them).
  const json spec = json::parse(std::ifstream(SpecPath(uid)));
  ASSERT_EQ(spec["devices"].size(), 1U) << spec.dump();
  EXPECT_EQ(spec["devices"][0]["name"], uid + "-" + placement);
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["deviceNodes"][0]["path"], "/dev/nvidia2")
      << spec.dump();
  // A repeat: same CDI IDs, nothing created again.
  EXPECT_EQ(Prepare("cut", uid).devices(0).cdi_device_ids(0), c.devices(0).cdi_device_ids(0));
  EXPECT_EQ(FakeMigDevices(node, 2).size(), 1U);
  // The instance's MIG config change does not take the placement off the offer.
  ASSERT_TRUE(agent_->dra_publisher()->WaitSynced(10s));
  EXPECT_NE(FindDevice(MigPoolSlices(api_->server->Slices()), placement), nullptr);

  // A second claim at an overlapping placement fails, naming claim and device;
  // nothing of it is left on the GPU.
  const json clash = Allocate("clash", {"gpu-2-mig-3g40gb-at-4"}, pool);
  const std::string err = Prepare("clash", Uid(clash)).error();
  EXPECT_NE(err.find("ml/clash"), std::string::npos) << err;
  EXPECT_NE(err.find("gpu-2-mig-3g40gb-at-4"), std::string::npos) << err;
  EXPECT_EQ(FakeMigDevices(node, 2).size(), 1U);
  // A claim whose second device fails gives back the instance of its first.
  const json half = Allocate("half", {"gpu-2-mig-1g10gb-at-0", "gpu-9"}, pool);
  EXPECT_NE(Prepare("half", Uid(half)).error(), "");
  EXPECT_EQ(FakeMigDevices(node, 2).size(), 1U);

  // The agent restarts: the prepared claim's instance is kept. (The test
  // holds NVML open meanwhile: the fake's GPUs live while it is initialised,
  // as a real GPU's instances outlive the agent.)
  auto hold = dra::NvmlMigControl::Open(testing::FakeNvmlLibrary());
  ASSERT_TRUE(hold.ok()) << hold.status().message();
  agent_->Stop();
  agent_.reset();
  StartAgent(nullptr, cfg);
  ASSERT_EQ(FakeMigDevices(node, 2).size(), 1U);
  EXPECT_TRUE(agent_->dynamic_mig_orphans().empty());
  EXPECT_EQ(agent_->dynamic_mig()->Held().count(uid), 1U);
  ASSERT_TRUE(dra_kubelet_->WaitForRegistrations(kDriver, 2, 10s));

  // Unprepare destroys it.
  EXPECT_EQ(Unprepare("cut", uid), "");
  EXPECT_EQ(FakeMigDevices(node, 2).size(), 0U);
  EXPECT_TRUE(agent_->dynamic_mig()->Held().empty());
}

// The lines of /metrics for MIG devices of GPU `gpu` with `profile`.
std::vector<std::string> MigMetricLines(int port, int gpu, const std::string& profile) {
  httplib::Client c("127.0.0.1", port);
  auto r = c.Get("/metrics");
  std::vector<std::string> out;
  if (!r || r->status != 200) {
    ADD_FAILURE() << "GET /metrics failed";
    return out;
  }
  std::istringstream in(r->body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("DCGM_FI_", 0) == 0 &&
        line.find("gpu=\"" + std::to_string(gpu) + "\"") != std::string::npos &&
        line.find("GPU_I_PROFILE=\"" + profile + "\"") != std::string::npos)
      out.push_back(line);
  }
  return out;
}

TEST_F(DraE2eTest, DynamicMigInstanceIsInMetricsAfterTheReloadItsEventAsksFor) {
  testing::FakeNode node("a100-mig-mixed");
  config::Config cfg = Config();
  cfg.danqing.dra_dynamic_mig = {"2"};
  cfg.danqing.metrics_addr = "127.0.0.1:0";
  auto client = agent::ApiClientFor(cfg);
  ASSERT_TRUE(client.ok() && *client != nullptr);
  client_ = std::move(client).value();
  // main re-runs Reload when the agent asks (a MIG config change); the test too.
  std::atomic<int> asked{0};
  agent_ = std::make_unique<agent::Agent>(
      agent::NvmlBackendFactory(), [&asked] { ++asked; }, agent::ApiClaimSourceFactory(*client_),
      agent::ApiLink{client_.get(), 20ms, 200ms});
  ASSERT_TRUE(agent_->Start(cfg).ok());
  node.Control(R"({"cmd":"mig","gpu":2,"mig":{"mode":1,"devices":[]}})");
  ASSERT_TRUE(agent_->Reload(cfg).ok());
  const int port = agent_->metrics_port();
  ASSERT_GT(port, 0);
  EXPECT_TRUE(MigMetricLines(port, 2, "1g.10gb").empty());
  EXPECT_TRUE(MigMetricLines(port, 2, "3g.40gb").empty()) << "the reload's layout is scraped";

  const std::string placement = "gpu-2-mig-1g10gb-at-6";
  ASSERT_TRUE(WaitSlices(
      [&](const auto& all) { return FindDevice(MigPoolSlices(all), placement) != nullptr; }));
  ASSERT_TRUE(dra_kubelet_->WaitForRegistrations(kDriver, 1, 10s));
  const int before = asked.load();
  const json claim = Allocate("metered", {placement}, std::string(kNode) + "-mig");
  ASSERT_EQ(Prepare("metered", Uid(claim)).error(), "");
  const uint32_t gi = agent_->dynamic_mig()->Held().at(Uid(claim)).at(0).gpu_instance_id;
  // The instance's creation is a MIG config change: the agent asks for the
  // reload, after which one scrape shows the instance.
  for (int i = 0; i < 200 && asked.load() == before; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_GT(asked.load(), before) << "no MIG config change event after the create";
  ASSERT_TRUE(agent_->Reload(cfg).ok());
  const auto lines = MigMetricLines(port, 2, "1g.10gb");
  ASSERT_FALSE(lines.empty());
  for (const auto& l : lines)
    EXPECT_NE(l.find("GPU_I_ID=\"" + std::to_string(gi) + "\""), std::string::npos) << l;
  // Its health rides the parent GPU's in the kubelet's health stream.
  ASSERT_TRUE(dra_kubelet_->WatchHealth(kDriver));
  EXPECT_TRUE(dra_kubelet_->WaitForHealth(
      [&](const v1alpha1::NodeWatchResourcesResponse& r) {
        return r.devices_size() == 1 && r.devices(0).device().device_name() == placement &&
               r.devices(0).health() == v1alpha1::HEALTHY;
      },
      10s));
  // The placement is still offered after that reload (no republish loop drops it).
  ASSERT_TRUE(agent_->dra_publisher()->WaitSynced(10s));
  EXPECT_NE(FindDevice(MigPoolSlices(api_->server->Slices()), placement), nullptr);

  EXPECT_EQ(Unprepare("metered", Uid(claim)), "");
  ASSERT_TRUE(agent_->Reload(cfg).ok());
  EXPECT_TRUE(MigMetricLines(port, 2, "1g.10gb").empty());
}

TEST_F(DraE2eTest, DoctorReportsDynamicMigOrphansButNotTheInstancesOfClaims) {
  testing::FakeNode node("a100-mig-mixed");
  // NVML held open for the test: the fake's GPUs keep what the test does to them.
  auto hold = dra::NvmlMigControl::Open(testing::FakeNvmlLibrary());
  ASSERT_TRUE(hold.ok()) << hold.status().message();
  config::Config cfg = Config();
  cfg.danqing.dra_dynamic_mig = {"2"};
  auto orphans = [&cfg]() -> std::optional<agent::Finding> {
    for (const auto& f : agent::RunDoctor(cfg, agent::NvmlBackendFactory())) {
      if (f.check == "dynamic MIG orphans") return f;
    }
    return std::nullopt;
  };
  // GPU 2's two static 3g.40gb instances: no claim holds them.
  auto found = orphans();
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->level, agent::Finding::Level::kWarn);
  EXPECT_NE(found->detail.find("GPU 2: MIG 3g.40gb at memory slice 0"), std::string::npos)
      << found->detail;
  EXPECT_NE(found->detail.find("GPU 2: MIG 3g.40gb at memory slice 4"), std::string::npos)
      << found->detail;
  EXPECT_NE(found->fix.find("draDynamicMigDestroyOrphans"), std::string::npos);

  // Emptied, then an instance made for a claim: held, so not an orphan.
  node.Control(R"({"cmd":"mig","gpu":2,"mig":{"mode":1,"devices":[]}})");
  StartAgent(nullptr, cfg);
  ASSERT_TRUE(dra_kubelet_->WaitForRegistrations(kDriver, 1, 10s));
  const json claim = Allocate("held", {"gpu-2-mig-2g20gb-at-2"}, std::string(kNode) + "-mig");
  ASSERT_EQ(Prepare("held", Uid(claim)).error(), "");
  ASSERT_EQ(FakeMigDevices(node, 2).size(), 1U);
  found = orphans();
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->level, agent::Finding::Level::kOk) << found->detail;
  // Without the DRA side the check is not run.
  cfg.danqing.dra_dynamic_mig.clear();
  EXPECT_FALSE(orphans().has_value());
}

TEST(DynamicMigGpus, OnlyDraServedGpusInMigModeAreDynamic) {
  gpu::NodeInventory inv;
  for (int i = 0; i < 4; ++i) {
    gpu::Gpu g;
    g.index = i;
    g.uuid = "GPU-" + std::to_string(i);
    g.mig_mode = i == 3 ? gpu::MigMode::kDisabled : gpu::MigMode::kEnabled;
    inv.gpus.push_back(g);
  }
  const std::vector<std::string> dra = {"GPU-1", "GPU-2", "GPU-3"};
  dra::DynamicMigConfig listed;
  listed.gpus = {"0", "1", "GPU-3"};  // 0: the device plugin's; 3: not in MIG mode
  EXPECT_EQ(agent::DynamicMigGpus(listed, inv, dra), (std::vector<int>{1}));
  dra::DynamicMigConfig all;
  all.gpus = {"all"};
  EXPECT_EQ(agent::DynamicMigGpus(all, inv, dra), (std::vector<int>{1, 2}));
  EXPECT_TRUE(agent::DynamicMigGpus(dra::DynamicMigConfig{}, inv, dra).empty());
}

TEST(DraApiClient, ComesFromTheKubeconfigOrThePodOrNothing) {
  auto cfg = *config::ParseConfig("version: v1\n", "t.yaml");
  cfg.danqing.mode = "device-plugin";
  cfg.danqing.kubeconfig = "/nonexistent/kubeconfig";
  auto off = agent::ApiClientFor(cfg);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(*off, nullptr);  // device-plugin mode needs no API server
  cfg.danqing.mode = "dra";
  cfg.danqing.node_name = "n";
  auto missing = agent::ApiClientFor(cfg);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("danqing.kubeconfig"), std::string::npos)
      << missing.status().message();
  EXPECT_NE(missing.status().message().find("/nonexistent/kubeconfig"), std::string::npos)
      << missing.status().message();
  cfg.danqing.kubeconfig = "";
  if (std::getenv("KUBERNETES_SERVICE_HOST") == nullptr) {
    auto none = agent::ApiClientFor(cfg);
    ASSERT_TRUE(none.ok());
    EXPECT_EQ(*none, nullptr);
  }
}

}  // namespace
}  // namespace danqing
