// The agent in dra and split modes, on the fake NVML: the node plugin
// registered with the DRA kubelet emulator, claims read from the claims
// file, health from the agent's own checker in the DRA health stream, and
// the device plugin side (kubelet emulator) never offering a DRA GPU.
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "agent/agent.h"
#include "agent/doctor.h"
#include "config/config.h"
#include "dra/file_claim_source.h"
#include "dra/node_metrics.h"
#include "testing/kubelet/dra_kubelet_emulator.h"
#include "testing/kubelet/kubelet_emulator.h"
#include "testing/support/dra_agent_config.h"
#include "testing/support/fake_node.h"
#include "testing/support/temp_dir.h"

namespace danqing {
namespace {

using namespace std::chrono_literals;
namespace drav1 = k8s::io::kubelet::pkg::apis::dra::v1;
constexpr char kDriver[] = "gpu.danqing.io";

nlohmann::json ResourceClaim(const std::string& name, const std::string& uid,
                             const std::string& device,
                             nlohmann::json config = nlohmann::json::array()) {
  return {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceClaim"},
      {"metadata", {{"namespace", "default"}, {"name", name}, {"uid", uid}}},
      {"status",
       {{"allocation",
         {{"devices",
           {{"results",
             {{{"request", "gpu"}, {"driver", kDriver}, {"pool", "node-a"}, {"device", device}}}},
            {"config", config}}}}}}}};
}

class DraAgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = std::make_unique<testing::TempDir>();
    dir_ = tmp_->path();
    kubelet_ = std::make_unique<testing::KubeletEmulator>(dir_ + "/dp");
    std::filesystem::create_directories(dir_ + "/dp");
    ASSERT_TRUE(kubelet_->Start().ok());
    dra_kubelet_ = std::make_unique<testing::DraKubeletEmulator>(testing::DraKubeletOptions{
        dir_ + "/registry", {"v1.DRAPlugin", "v1beta1.DRAPlugin"}, 10'000ms});
    ASSERT_TRUE(dra_kubelet_->Start());
  }
  void TearDown() override {
    dra_kubelet_->StopHealth();
    if (agent_) agent_->Stop();
    agent_.reset();
    dra_kubelet_.reset();
    kubelet_.reset();
  }
  config::Config Config(const std::string& mode, std::vector<std::string> dra_gpus = {}) {
    config::Config cfg = testing::DraAgentConfig(dir_, mode, std::move(dra_gpus), "node-a");
    cfg.danqing.dra_claims_file = dir_ + "/claims.json";
    EXPECT_TRUE(config::Validate(cfg).ok()) << config::Validate(cfg).ToString();
    return cfg;
  }
  void WriteClaims(const nlohmann::json& items) {
    std::ofstream(dir_ + "/claims.json")
        << nlohmann::json{{"kind", "ResourceClaimList"}, {"items", items}}.dump();
  }
  drav1::NodePrepareResourceResponse Prepare(const std::string& name, const std::string& uid) {
    drav1::NodePrepareResourcesResponse resp;
    grpc::Status s = dra_kubelet_->Prepare(kDriver, {{"default", name, uid}}, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.claims().at(uid);
  }
  std::string GpuUuid(const testing::FakeNode& node, int index) {
    std::string reply = node.Control(R"({"cmd":"get","gpu":)" + std::to_string(index) + "}");
    auto at = reply.find("\"uuid\":\"");
    return reply.substr(at + 8, reply.find('"', at + 8) - at - 8);
  }

  std::unique_ptr<testing::TempDir> tmp_;
  std::string dir_;
  std::unique_ptr<testing::KubeletEmulator> kubelet_;
  std::unique_ptr<testing::DraKubeletEmulator> dra_kubelet_;
  std::unique_ptr<agent::Agent> agent_;
};

TEST_F(DraAgentTest, DraModeServesEveryGpuThroughDraAndStreamsTheCheckersHealth) {
  testing::FakeNode node("a100-8x-nvswitch");
  WriteClaims(nlohmann::json::array({ResourceClaim("train", "uid-3", "gpu-3")}));
  agent_ = std::make_unique<agent::Agent>();
  ASSERT_TRUE(agent_->Start(Config("dra")).ok());
  EXPECT_EQ(agent_->manager(), nullptr);  // no device plugin resource at all
  ASSERT_TRUE(dra_kubelet_->WaitForRegistrations(kDriver, 1, 10s));
  auto c = Prepare("train", "uid-3");
  ASSERT_EQ(c.error(), "");
  ASSERT_EQ(c.devices_size(), 1);
  EXPECT_EQ(c.devices(0).cdi_device_ids(0), "gpu.danqing.io/claim=uid-3-gpu-3");
  const auto spec =
      nlohmann::json::parse(std::ifstream(dir_ + "/cdi/gpu.danqing.io-claim_uid-3.json"));
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["deviceNodes"][0]["path"], "/dev/nvidia3");
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/state/checkpoint.json"));

  ASSERT_TRUE(dra_kubelet_->WatchHealth(kDriver));
  auto is = [](v1alpha1::HealthStatus h) {
    return [h](const v1alpha1::NodeWatchResourcesResponse& r) {
      return r.devices_size() == 1 && r.devices(0).health() == h;
    };
  };
  ASSERT_TRUE(dra_kubelet_->WaitForHealth(is(v1alpha1::HEALTHY), 10s));
  // An XID on that GPU: the health monitor's reason reaches the stream, and
  // the GPU recovers after the quiet period. NVML drops an event no event set
  // holds yet: sent again until seen.
  std::optional<v1alpha1::NodeWatchResourcesResponse> sick;
  for (int i = 0; i < 25 && !sick; ++i) {
    node.Control(R"({"cmd":"xid","gpu":3,"xid":62})");
    sick = dra_kubelet_->WaitForHealth(is(v1alpha1::UNHEALTHY), 200ms);
  }
  ASSERT_TRUE(sick);
  EXPECT_NE(sick->devices(0).message().find("62"), std::string::npos) << sick->devices(0).message();
  ASSERT_TRUE(dra_kubelet_->WaitForHealth(is(v1alpha1::HEALTHY), 10s));
}

TEST_F(DraAgentTest, SplitModeNeverOffersAGpuBothWays) {
  testing::FakeNode node("a100-8x-nvswitch");
  WriteClaims(
      nlohmann::json::array({ResourceClaim("a", "ua", "gpu-0"), ResourceClaim("b", "ub", "gpu-1"),
                             ResourceClaim("c", "uc", "gpu-2")}));
  agent_ = std::make_unique<agent::Agent>();
  ASSERT_TRUE(agent_->Start(Config("split", {"0", "1"})).ok());
  ASSERT_TRUE(kubelet_->WaitForRegistration("nvidia.com/gpu", 10s));
  ASSERT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/gpu", [](const auto& d) { return d.size() == 6; }, 10s));
  const std::string gpu0 = GpuUuid(node, 0);
  const std::string gpu1 = GpuUuid(node, 1);
  for (const auto& d : kubelet_->Devices("nvidia.com/gpu")) {
    EXPECT_NE(d.id(), gpu0);
    EXPECT_NE(d.id(), gpu1);
  }
  ASSERT_TRUE(dra_kubelet_->WaitForRegistrations(kDriver, 1, 10s));
  EXPECT_EQ(Prepare("a", "ua").error(), "");
  EXPECT_EQ(Prepare("b", "ub").error(), "");
  const std::string err = Prepare("c", "uc").error();
  EXPECT_NE(err.find("node-a/gpu-2 is unknown on this node"), std::string::npos) << err;
  // Claim b holds GPU 1: draGpus cannot give it to the device plugin.
  auto moved = Config("split", {"0"});
  Status st = agent_->Reload(moved);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("danqing.draGpus"), std::string::npos);
  EXPECT_EQ(Prepare("b", "ub").error(), "");
  // Other DRA settings still need a restart.
  auto renamed = Config("split", {"0", "1"});
  renamed.danqing.node_name = "node-b";
  st = agent_->Reload(renamed);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("nodeName"), std::string::npos) << st.message();
}

// Split reload: draGpus moves GPUs live, both ways, and is refused (running
// configuration kept, logged, counted) while a moving GPU is in use on the
// side it would leave: a prepared claim (DRA), a pod's allocation in the
// kubelet's pod resources (device plugin), or pod resources not answering.
TEST_F(DraAgentTest, SplitReloadMovesGpusBothWaysAndRefusesWhileInUse) {
  testing::FakeNode node("a100-8x-nvswitch");
  WriteClaims(
      nlohmann::json::array({ResourceClaim("a", "ua", "gpu-0"), ResourceClaim("b", "ub", "gpu-1"),
                             ResourceClaim("c", "uc", "gpu-2"), ResourceClaim("d", "ud", "gpu-3"),
                             ResourceClaim("f", "uf", "gpu-0")}));
  testing::PodResourcesEmulator pods(dir_ + "/pod-resources.sock");
  ASSERT_TRUE(pods.Start().ok());
  auto split = [&](std::vector<std::string> gpus) {
    auto cfg = Config("split", std::move(gpus));
    cfg.danqing.pod_resources_socket = pods.socket_path();
    return cfg;
  };
  std::vector<std::string> uuid;  // read through the fake NVML once the agent loaded it
  auto offered = [this](const std::string& id) {
    for (const auto& d : kubelet_->Devices("nvidia.com/gpu")) {
      if (d.id() == id) return true;
    }
    return false;
  };
  auto plugin_has = [this](size_t n, const std::string& with, const std::string& without) {
    return kubelet_->WaitForDevices(
        "nvidia.com/gpu",
        [&](const auto& ds) {
          bool has = with.empty(), lacks = true;
          for (const auto& d : ds) {
            has = has || d.id() == with;
            lacks = lacks && d.id() != without;
          }
          return ds.size() == n && has && lacks;
        },
        10s);
  };
  auto refused = [](const std::string& by) {
    return dra::NodeMetrics().split_reload_refused.WithLabels({by}).value();
  };

  agent_ = std::make_unique<agent::Agent>();
  ASSERT_TRUE(agent_->Start(split({"0", "1"})).ok());
  for (int i = 0; i < 8; ++i) uuid.push_back(GpuUuid(node, i));
  ASSERT_TRUE(plugin_has(6, "", uuid[1]));
  ASSERT_TRUE(dra_kubelet_->WaitForRegistrations(kDriver, 1, 10s));
  ASSERT_EQ(Prepare("a", "ua").error(), "");

  // DRA → device plugin: GPU 1 holds no claim.
  ASSERT_TRUE(agent_->Reload(split({"0"})).ok());
  EXPECT_TRUE(plugin_has(7, uuid[1], uuid[0]));
  EXPECT_NE(Prepare("b", "ub").error().find("node-a/gpu-1 is unknown on this node"),
            std::string::npos);

  // Device plugin → DRA: no pod holds GPU 2.
  ASSERT_TRUE(agent_->Reload(split({"0", "2"})).ok());
  EXPECT_TRUE(plugin_has(6, uuid[1], uuid[2]));
  EXPECT_EQ(Prepare("c", "uc").error(), "");

  // Refused: a pod holds GPU 3 through the device plugin.
  v1::PodResources render;
  render.set_namespace_("ml");
  render.set_name("render");
  auto* c = render.add_containers();
  c->set_name("main");
  auto* dev = c->add_devices();
  dev->set_resource_name("nvidia.com/gpu");
  dev->add_device_ids(uuid[3]);
  v1::PodResources render2 = render;  // two holders: still one refused reload
  render2.set_name("render-2");
  pods.SetPods({render, render2});
  const double before_plugin = refused("device-plugin");
  Status st = agent_->Reload(split({"0", "2", "3"}));
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("GPU 3 (" + uuid[3] + ") is allocated through the device plugin"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("pod ml/render container main"), std::string::npos);
  EXPECT_EQ(refused("device-plugin"), before_plugin + 1);
  EXPECT_TRUE(plugin_has(6, uuid[3], uuid[2])) << "GPU 3 offered again, as before";
  EXPECT_TRUE(offered(uuid[3]));
  EXPECT_NE(Prepare("d", "ud").error().find("unknown on this node"), std::string::npos);

  // A pod admitted between the first question and the withdrawal: the second
  // question sees it, and both sides are put back (GPU 5 offered again).
  pods.SetPods({});
  const std::string gpu5 = uuid[5];
  *render.mutable_containers(0)->mutable_devices(0)->mutable_device_ids(0) = gpu5;
  const int64_t calls = pods.CallCount();
  pods.SetPodsFromCall(calls + 2, {render});
  st = agent_->Reload(split({"0", "2", "5"}));
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("GPU 5 (" + gpu5 + ") is allocated through the device plugin"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(pods.CallCount(), calls + 2) << "asked before and after the withdrawal";
  EXPECT_TRUE(plugin_has(6, uuid[5], uuid[2])) << "GPU 5 withdrawn, then offered again";
  EXPECT_NE(Prepare("d", "ud").error().find("unknown on this node"), std::string::npos);
  pods.SetPods({});

  // Refused: claim a holds GPU 0 through DRA.
  const double before_dra = refused("dra");
  st = agent_->Reload(split({"2"}));
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("GPU 0 (" + uuid[0] + ") is held through DRA by claim default/a (ua"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(refused("dra"), before_dra + 1);
  EXPECT_FALSE(offered(uuid[0]));
  EXPECT_EQ(Prepare("a", "ua").error(), "") << "claim a still prepared";
  EXPECT_EQ(Prepare("f", "uf").error(), "") << "GPU 0 still served through DRA";

  // Released: the same reload goes through.
  drav1::NodeUnprepareResourcesResponse un;
  ASSERT_TRUE(
      dra_kubelet_->Unprepare(kDriver, {{"default", "a", "ua"}, {"default", "f", "uf"}}, &un).ok());
  ASSERT_TRUE(agent_->Reload(split({"2"})).ok());
  EXPECT_TRUE(plugin_has(7, uuid[0], uuid[2]));

  // Pod resources not answering: whether a GPU is allocated cannot be told.
  pods.Stop();
  st = agent_->Reload(split({"2", "4"}));
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("cannot tell whether GPU 4"), std::string::npos) << st.message();
  EXPECT_TRUE(plugin_has(7, uuid[4], uuid[2]));
}

// The agent hands its DRA device table to the exporter: a pod whose claim
// holds gpu-3 (pod resources dynamic_resources) labels GPU 3's series.
TEST_F(DraAgentTest, MetricsAttributeClaimDevicesToPods) {
  testing::FakeNode node("a100-8x-nvswitch");
  testing::PodResourcesEmulator pods(dir_ + "/pod-resources.sock");
  ASSERT_TRUE(pods.Start().ok());
  v1::PodResources train;
  train.set_namespace_("ml");
  train.set_name("train");
  auto* c = train.add_containers();
  c->set_name("main");
  testing::AddDynamicResource(*c, "ml", "train-gpu", {{kDriver, "node-a", "gpu-3", {}, {}}});
  pods.SetPods({train});
  auto cfg = Config("dra");
  cfg.danqing.metrics_addr = "127.0.0.1:0";
  cfg.danqing.pod_resources_socket = pods.socket_path();
  agent_ = std::make_unique<agent::Agent>();
  ASSERT_TRUE(agent_->Start(cfg).ok());
  const std::string gpu3 = GpuUuid(node, 3);
  httplib::Client cli("127.0.0.1", agent_->metrics_port());
  const std::string want = "UUID=\"" + gpu3 + "\"";
  std::string line;
  for (int i = 0; i < 50 && line.empty(); ++i) {
    auto r = cli.Get("/metrics");
    ASSERT_TRUE(r);
    std::istringstream in(r->body);
    for (std::string l; std::getline(in, l);) {
      if (l.rfind("DCGM_FI_DEV_FB_USED{", 0) == 0 && l.find(want) != std::string::npos &&
          l.find("pod=") != std::string::npos) {
        line = l;
      }
    }
    if (line.empty()) std::this_thread::sleep_for(100ms);
  }
  ASSERT_FALSE(line.empty()) << "GPU 3 never carried a pod label";
  EXPECT_NE(line.find("namespace=\"ml\""), std::string::npos) << line;
  EXPECT_NE(line.find("pod=\"train\""), std::string::npos) << line;
  EXPECT_NE(line.find("container=\"main\""), std::string::npos) << line;
}

const agent::Finding* Find(const std::vector<agent::Finding>& fs, const std::string& check) {
  for (const auto& f : fs) {
    if (f.check == check) return &f;
  }
  return nullptr;
}

TEST_F(DraAgentTest, DoctorChecksTheDraSide) {
  testing::FakeNode node("a100-8x-nvswitch");
  WriteClaims(nlohmann::json::array({ResourceClaim("train", "uid-1", "gpu-1")}));
  auto cfg = Config("dra");
  agent_ = std::make_unique<agent::Agent>();
  ASSERT_TRUE(agent_->Start(cfg).ok());
  ASSERT_TRUE(dra_kubelet_->WaitForRegistrations(kDriver, 1, 10s));
  ASSERT_EQ(Prepare("train", "uid-1").error(), "");
  auto running = agent::RunDoctor(cfg, agent::NvmlBackendFactory());
  using L = agent::Finding::Level;
  ASSERT_TRUE(Find(running, "DRA registration socket"));
  EXPECT_EQ(Find(running, "DRA registration socket")->level, L::kOk);
  ASSERT_TRUE(Find(running, "DRA checkpoint"));
  EXPECT_EQ(Find(running, "DRA checkpoint")->level, L::kOk);
  EXPECT_NE(Find(running, "DRA checkpoint")->detail.find("1 prepared claim(s)"), std::string::npos);
  EXPECT_EQ(Find(running, "DRA claims")->level, L::kInfo);

  agent_->Stop();
  agent_.reset();
  std::ofstream(dir_ + "/state/checkpoint.json", std::ios::trunc) << "{\"version\": 1";
  auto stopped = agent::RunDoctor(cfg, agent::NvmlBackendFactory());
  EXPECT_EQ(Find(stopped, "DRA registration socket")->level, L::kWarn);
  EXPECT_EQ(Find(stopped, "DRA checkpoint")->level, L::kWarn);
  EXPECT_NE(Find(stopped, "DRA checkpoint")->detail.find("corrupt"), std::string::npos);
  cfg.danqing.dra_plugins_registry = dir_ + "/no-registry";
  cfg.danqing.dra_claims_file = "";
  auto absent = agent::RunDoctor(cfg, agent::NvmlBackendFactory());
  EXPECT_EQ(Find(absent, "DRA registration directory")->level, L::kFail);
  EXPECT_EQ(Find(absent, "DRA claims")->level, L::kWarn);
  cfg.danqing.mode = "device-plugin";
  auto off = agent::RunDoctor(cfg, agent::NvmlBackendFactory());
  EXPECT_EQ(Find(off, "DRA")->level, L::kInfo);
  EXPECT_FALSE(Find(off, "DRA checkpoint"));
}

TEST_F(DraAgentTest, SplitNamingAnAbsentGpuFailsToStart) {
  testing::FakeNode node("a100-8x-nvswitch");
  agent_ = std::make_unique<agent::Agent>();
  Status st = agent_->Start(Config("split", {"GPU-not-here"}));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("danqing.draGpus: no GPU 'GPU-not-here'"), std::string::npos)
      << st.message();
}

TEST_F(DraAgentTest, WithoutAClaimSourcePreparesFailClearly) {
  testing::FakeNode node("a100-8x-nvswitch");
  auto cfg = Config("dra");
  cfg.danqing.dra_claims_file = "";
  agent_ = std::make_unique<agent::Agent>();
  ASSERT_TRUE(agent_->Start(cfg).ok());
  ASSERT_TRUE(dra_kubelet_->WaitForRegistrations(kDriver, 1, 10s));
  const std::string err = Prepare("a", "ua").error();
  EXPECT_NE(err.find("no source of ResourceClaims"), std::string::npos) << err;
  EXPECT_NE(err.find("default/a (ua)"), std::string::npos) << err;
}

TEST(DraSplit, GpusAreChosenByUuidOrIndexAndLeaveTheDevicePluginsInventory) {
  gpu::NodeInventory inv;
  for (int i = 0; i < 3; ++i) {
    gpu::Gpu g;
    g.index = i;
    g.uuid = "GPU-" + std::string(1, static_cast<char>('a' + i));
    inv.gpus.push_back(g);
  }
  inv.topology = gpu::Topology(3);
  inv.topology.at(0, 2).nvlinks = 12;
  auto cfg = *config::ParseConfig("version: v1\n", "t.yaml");
  cfg.danqing.mode = "split";
  cfg.danqing.dra_gpus = {"1", "GPU-b", "GPU-c"};
  auto uuids = agent::DraGpuUuids(cfg, inv);
  ASSERT_TRUE(uuids.ok());
  EXPECT_EQ(*uuids, (std::vector<std::string>{"GPU-b", "GPU-c"}));
  cfg.danqing.dra_gpus = {"1"};
  auto rest = agent::WithoutGpus(inv, *agent::DraGpuUuids(cfg, inv));
  ASSERT_EQ(rest.gpus.size(), 2u);
  EXPECT_EQ(rest.gpus[1].uuid, "GPU-c");
  EXPECT_EQ(rest.topology.at(0, 1).nvlinks, 12);
  cfg.danqing.mode = "dra";
  EXPECT_EQ(agent::DraGpuUuids(cfg, inv)->size(), 3u);
  cfg.danqing.mode = "device-plugin";
  EXPECT_TRUE(agent::DraGpuUuids(cfg, inv)->empty());
}

TEST(DraGpusCommand, ShowsWhichWayEachGpuIsServed) {
  testing::FakeNode node("a100-8x-nvswitch");
  auto r = testing::RunCommand({DANQING_DEVICE_PLUGIN_BIN, "--nvml-lib", testing::FakeNvmlLibrary(),
                                "gpus", "--json", "--no-sensors", "--log-level", "error",
                                "--config-file=", "--mode", "split", "--dra-gpus", "2,5",
                                "--node-name", "node-a"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["serving"]["gpus"].size(), 8u);
  EXPECT_EQ(j["serving"]["mode"], "split");
  for (const auto& g : j["serving"]["gpus"]) {
    const int i = g["index"];
    EXPECT_EQ(g["by"], (i == 2 || i == 5) ? "dra" : "device-plugin") << i;
    if (i == 5) {
      EXPECT_EQ(g["draDevice"], "gpu-5");
    }
  }
  auto table = testing::RunCommand(
      {DANQING_DEVICE_PLUGIN_BIN, "--nvml-lib", testing::FakeNvmlLibrary(), "gpus", "--no-sensors",
       "--log-level", "error", "--config-file=", "--mode", "dra", "--node-name", "node-a"});
  ASSERT_EQ(table.exit_code, 0) << table.out;
  EXPECT_NE(table.out.find("Served (mode dra):"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("DRA gpu.danqing.io device gpu-7"), std::string::npos) << table.out;
}

// A MIG-enabled GPU served through DRA is published as its MIG devices only:
// `gpus` names those, not the whole GPU.
TEST(DraGpusCommand, MigGpusAreShownAsTheirMigDevices) {
  testing::FakeNode node("a100-mig-mixed");  // GPU 0: 4 MIG devices, GPU 3: no MIG
  auto r = testing::RunCommand({DANQING_DEVICE_PLUGIN_BIN, "--nvml-lib", testing::FakeNvmlLibrary(),
                                "gpus", "--json", "--no-sensors", "--log-level", "error",
                                "--config-file=", "--mode", "split", "--dra-gpus", "0,3",
                                "--node-name", "node-a"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  bool saw0 = false;
  for (const auto& g : j["serving"]["gpus"]) {
    if (g["index"] == 0) {
      saw0 = true;
      EXPECT_FALSE(g.contains("draDevice")) << g.dump();
      ASSERT_EQ(g["draDevices"].size(), 4u) << g.dump();
      for (const auto& n : g["draDevices"]) {
        EXPECT_EQ(n.get<std::string>().rfind("gpu-0-mig-", 0), 0u) << n;
      }
    }
    if (g["index"] == 3) {
      EXPECT_EQ(g["draDevices"], nlohmann::json::array({"gpu-3"}));
    }
    if (g["index"] == 1) {
      EXPECT_EQ(g["by"], "device-plugin");
    }
  }
  EXPECT_TRUE(saw0);
  auto table = testing::RunCommand({DANQING_DEVICE_PLUGIN_BIN, "--nvml-lib",
                                    testing::FakeNvmlLibrary(), "gpus", "--no-sensors",
                                    "--log-level", "error", "--config-file=", "--mode", "split",
                                    "--dra-gpus", "0", "--node-name", "node-a"});
  ASSERT_EQ(table.exit_code, 0) << table.out;
  EXPECT_NE(table.out.find("DRA gpu.danqing.io MIG devices gpu-0-mig-"), std::string::npos)
      << table.out;
}

TEST(DraConfig, SettingsAreCheckedWithTheFieldNamed) {
  auto bad_mode = config::ParseConfig("version: v1\ndanqing:\n  mode: both\n", "c.yaml");
  ASSERT_FALSE(bad_mode.ok());
  EXPECT_NE(bad_mode.status().message().find("danqing.mode"), std::string::npos)
      << bad_mode.status().message();
  auto bad_name =
      config::ParseConfig("version: v1\ndanqing:\n  draDriverName: GPU_Danqing\n", "c.yaml");
  ASSERT_FALSE(bad_name.ok());
  EXPECT_NE(bad_name.status().message().find("danqing.draDriverName"), std::string::npos);
  auto relative =
      config::ParseConfig("version: v1\ndanqing:\n  draPluginDir: plugins/gpu\n", "c.yaml");
  ASSERT_FALSE(relative.ok());
  EXPECT_NE(relative.status().message().find("danqing.draPluginDir"), std::string::npos);
  auto split =
      config::ParseConfig("version: v1\ndanqing:\n  mode: split\n  nodeName: n\n", "c.yaml");
  ASSERT_TRUE(split.ok());
  Status st = config::Validate(*split);
  EXPECT_NE(st.message().find("danqing.draGpus"), std::string::npos) << st.message();
  auto dra = config::ParseConfig("version: v1\ndanqing:\n  mode: dra\n", "c.yaml");
  ASSERT_TRUE(dra.ok());
  EXPECT_NE(config::Validate(*dra).message().find("danqing.nodeName"), std::string::npos);
  auto ok = config::ParseConfig(
      "version: v1\ndanqing:\n  mode: split\n  nodeName: n\n  draGpus: [\"0\", \"GPU-x\"]\n  "
      "draDriverName: "
      "gpu.example.com\n",
      "c.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(config::Validate(*ok).ok());
  EXPECT_EQ(ok->danqing.dra_gpus, (std::vector<std::string>{"0", "GPU-x"}));
}

TEST(ClaimFile, ParsesResourceClaimsWithTheOneParserAndNamesBadFields) {
  testing::TempDir tmp;
  const std::string path = tmp.path() + "/claims.json";
  auto write = [&](const nlohmann::json& items) {
    std::ofstream(path, std::ios::trunc)
        << nlohmann::json{{"kind", "ResourceClaimList"}, {"items", items}}.dump();
  };
  dra::FileClaimSource source(path);
  write(nlohmann::json::array(
      {ResourceClaim("a", "ua", "gpu-0",
                     nlohmann::json::array(
                         {{{"source", "FromClaim"},
                           {"requests", {"gpu"}},
                           {"opaque",
                            {{"driver", kDriver},
                             {"parameters", {{"sharing", {{"strategy", "TimeSlicing"}}}}}}}}}))}));
  auto good = source.Get("default", "a", "ua");
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->devices[0].device, "gpu-0");
  EXPECT_EQ(good->config[0].requests, std::vector<std::string>{"gpu"});
  EXPECT_EQ(good->config[0].driver, kDriver);
  // Another UID: the claim the kubelet asked for is gone.
  EXPECT_EQ(source.Get("default", "a", "u-other").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(source.Get("default", "zz", "ua").status().code(), StatusCode::kNotFound);
  auto j = ResourceClaim("a", "ua", "gpu-0");
  j["status"]["allocation"]["devices"]["results"][0].erase("pool");
  write(nlohmann::json::array({j}));
  auto bad = source.Get("default", "a", "ua");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("status.allocation.devices.results[0].pool: missing"),
            std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("claims file"), std::string::npos);
  j.erase("status");
  write(nlohmann::json::array({j}));
  EXPECT_EQ(source.Get("default", "a", "ua").status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace danqing
