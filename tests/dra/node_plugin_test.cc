// The DRA node plugin end to end, against the DRA kubelet emulator: plugin
// registration, prepare/unprepare over gRPC (v1 and v1beta1), the kubelet's
// restart, deleted sockets, an agent restart mid-prepare, a corrupt
// checkpoint, bad claims, and the health stream.
#include "dra/node_plugin.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "testing/dra/fake_claim_source.h"
#include "testing/kubelet/dra_kubelet_emulator.h"
#include "tests/dra/dra_test_util.h"

namespace danqing::dra {
namespace {

namespace drav1 = k8s::io::kubelet::pkg::apis::dra::v1;
using namespace std::chrono_literals;
using test::Claim;
using test::kDriver;

class NodePluginTest : public ::testing::Test {
 protected:
  void StartPlugin() {
    PreparerOptions po;
    po.checkpoint_dir = tree_ / "state";
    po.cdi.cdi_root = tree_ / "cdi";
    po.cdi.dev_root = tree_.root();
    preparer_ = std::make_unique<ClaimPreparer>(po, &source_, &slicer_);
    NodePluginOptions no;
    no.registry_dir = tree_ / "registry";
    no.plugin_dir = tree_ / "plugins/gpu";
    plugin_ = std::make_unique<NodePlugin>(no, preparer_.get());
    preparer_->SetDevices(test::Gpus(4));
    ASSERT_TRUE(plugin_->Start().ok());
  }
  void StopPlugin() {
    plugin_.reset();
    preparer_.reset();
  }
  void StartKubelet(std::vector<std::string> versions = {"v1.DRAPlugin", "v1beta1.DRAPlugin"}) {
    kubelet_ = std::make_unique<testing::DraKubeletEmulator>(
        testing::DraKubeletOptions{tree_ / "registry", std::move(versions), 10'000ms});
    ASSERT_TRUE(kubelet_->Start());
  }
  drav1::NodePrepareResourcesResponse Prepare(std::vector<testing::DraClaimRef> claims) {
    drav1::NodePrepareResourcesResponse resp;
    grpc::Status s = kubelet_->Prepare(kDriver, claims, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }
  drav1::NodeUnprepareResourcesResponse Unprepare(std::vector<testing::DraClaimRef> claims) {
    drav1::NodeUnprepareResourcesResponse resp;
    grpc::Status s = kubelet_->Unprepare(kDriver, claims, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }
  std::string SpecPath(const std::string& uid) {
    return tree_ / ("cdi/gpu.danqing.io-claim_" + uid + ".json");
  }

  void TearDown() override {
    if (kubelet_) {
      kubelet_->StopHealth();
      kubelet_->Stop();
    }
    StopPlugin();
  }

  test::TempTree tree_;
  testing::FakeClaimSource source_;
  testing::FakeTimeSlicer slicer_;
  std::unique_ptr<ClaimPreparer> preparer_;
  std::unique_ptr<NodePlugin> plugin_;
  std::unique_ptr<testing::DraKubeletEmulator> kubelet_;
};

TEST_F(NodePluginTest, RegistersThenPreparesAndUnprepares) {
  StartPlugin();
  EXPECT_TRUE(std::filesystem::exists(tree_ / "registry/gpu.danqing.io-reg.sock"));
  StartKubelet();
  ASSERT_TRUE(kubelet_->WaitForRegistrations(kDriver, 1, 10s));
  auto info = kubelet_->Plugin(kDriver);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->version, "v1.DRAPlugin");
  EXPECT_EQ(info->endpoint, tree_ / "plugins/gpu/dra.sock");
  EXPECT_EQ(info->supported, (std::vector<std::string>{"v1.DRAPlugin", "v1beta1.DRAPlugin",
                                                       "v1alpha1.DRAResourceHealth"}));
  EXPECT_EQ(plugin_->status().registered_notices, 1u);

  source_.Put(Claim("train", "uid-1", {"gpu-2"}));
  auto resp = Prepare({{"default", "train", "uid-1"}});
  const auto& c = resp.claims().at("uid-1");
  EXPECT_EQ(c.error(), "");
  ASSERT_EQ(c.devices_size(), 1);
  EXPECT_EQ(c.devices(0).pool_name(), "node-a");
  EXPECT_EQ(c.devices(0).device_name(), "gpu-2");
  EXPECT_EQ(c.devices(0).request_names(0), "gpu");
  ASSERT_EQ(c.devices(0).cdi_device_ids_size(), 1);
  EXPECT_EQ(c.devices(0).cdi_device_ids(0), "gpu.danqing.io/claim=uid-1-gpu-2");
  EXPECT_FALSE(c.devices(0).has_share_id());
  ASSERT_TRUE(std::filesystem::exists(SpecPath("uid-1")));

  auto un = Unprepare({{"default", "train", "uid-1"}});
  EXPECT_EQ(un.claims().at("uid-1").error(), "");
  EXPECT_FALSE(std::filesystem::exists(SpecPath("uid-1")));

  // A stopped plugin takes its sockets away: the kubelet deregisters it.
  StopPlugin();
  EXPECT_FALSE(std::filesystem::exists(tree_ / "registry/gpu.danqing.io-reg.sock"));
  EXPECT_FALSE(std::filesystem::exists(tree_ / "plugins/gpu/dra.sock"));
  ASSERT_TRUE(kubelet_->WaitForDeregistration(kDriver, 10s));
  drav1::NodePrepareResourcesResponse resp2;
  EXPECT_EQ(kubelet_->Prepare(kDriver, {{"default", "train", "uid-1"}}, &resp2).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(NodePluginTest, OlderKubeletUsesV1beta1) {
  StartPlugin();
  StartKubelet({"v1beta1.DRAPlugin"});
  ASSERT_TRUE(kubelet_->WaitForRegistrations(kDriver, 1, 10s));
  EXPECT_EQ(kubelet_->Plugin(kDriver)->version, "v1beta1.DRAPlugin");
  auto a = Claim("c", "u", {"gpu-0"});
  a.devices[0].share_id = "7f3c";
  source_.Put(a);
  auto resp = Prepare({{"default", "c", "u"}});
  ASSERT_EQ(resp.claims().at("u").devices_size(), 1);
  EXPECT_EQ(resp.claims().at("u").devices(0).share_id(), "7f3c");
  EXPECT_EQ(resp.claims().at("u").devices(0).cdi_device_ids(0),
            "gpu.danqing.io/claim=u-gpu-0-7f3c");
}

TEST_F(NodePluginTest, KubeletWithoutAKnownVersionRefuses) {
  StartPlugin();
  StartKubelet({"v2.DRAPlugin"});
  ASSERT_TRUE(kubelet_->WaitForRefusals(1, 10s));
  EXPECT_FALSE(kubelet_->Plugin(kDriver));
  EXPECT_EQ(plugin_->status().rejected_notices, 1u);
  EXPECT_NE(plugin_->status().last_rejection.find("supported versions"), std::string::npos);
}

TEST_F(NodePluginTest, KubeletRestartKeepsPreparedClaims) {
  StartPlugin();
  StartKubelet();
  ASSERT_TRUE(kubelet_->WaitForRegistrations(kDriver, 1, 10s));
  source_.Put(Claim("c", "u", {"gpu-1"}));
  auto first = Prepare({{"default", "c", "u"}});
  const auto gets = source_.gets();
  kubelet_->Restart();
  ASSERT_TRUE(kubelet_->WaitForRegistrations(kDriver, 2, 10s));
  // The restarted kubelet repeats the prepare: the same answer, from memory.
  auto again = Prepare({{"default", "c", "u"}});
  EXPECT_EQ(again.claims().at("u").SerializeAsString(), first.claims().at("u").SerializeAsString());
  EXPECT_EQ(source_.gets(), gets);
}

TEST_F(NodePluginTest, DeletedRegistrationSocketIsMadeAgain) {
  StartPlugin();
  StartKubelet();
  ASSERT_TRUE(kubelet_->WaitForRegistrations(kDriver, 1, 10s));
  source_.Put(Claim("c", "u", {"gpu-1"}));
  Prepare({{"default", "c", "u"}});
  std::filesystem::remove(tree_ / "registry/gpu.danqing.io-reg.sock");
  ASSERT_TRUE(kubelet_->WaitForRegistrations(kDriver, 2, 10s));
  EXPECT_TRUE(std::filesystem::exists(tree_ / "registry/gpu.danqing.io-reg.sock"));
  EXPECT_EQ(preparer_->Prepared().count("u"), 1u);
  auto un = Unprepare({{"default", "c", "u"}});
  EXPECT_EQ(un.claims().at("u").error(), "");
}

TEST_F(NodePluginTest, DeletedDraSocketIsServedAgainAndReregistered) {
  StartPlugin();
  StartKubelet();
  ASSERT_TRUE(kubelet_->WaitForRegistrations(kDriver, 1, 10s));
  std::filesystem::remove(tree_ / "plugins/gpu/dra.sock");
  ASSERT_TRUE(kubelet_->WaitForRegistrations(kDriver, 2, 10s));
  EXPECT_GE(plugin_->status().node_serves, 2u);
  source_.Put(Claim("c", "u", {"gpu-0"}));
  auto resp = Prepare({{"default", "c", "u"}});
  EXPECT_EQ(resp.claims().at("u").error(), "");
}

TEST_F(NodePluginTest, AgentRestartMidPrepare) {
  StartPlugin();
  StartKubelet();
  ASSERT_TRUE(kubelet_->WaitForRegistrations(kDriver, 1, 10s));
  source_.Put(Claim("a", "ua", {"gpu-0"}));
  source_.Put(Claim("b", "ub", {"gpu-1"}));
  auto a = Prepare({{"default", "a", "ua"}});
  // B's prepare hangs on a slow API server; the agent dies meanwhile. What a
  // death between B's two writes leaves: its spec, not its checkpoint entry.
  source_.CloseGate();
  std::thread hung([&] {
    drav1::NodePrepareResourcesResponse resp;
    (void)kubelet_->Prepare(kDriver, {{"default", "b", "ub"}}, &resp);
  });
  source_.WaitForWaiters(1);
  source_.FailWith(Unavailable("connection refused"));
  source_.OpenGate();
  hung.join();
  StopPlugin();
  PreparedClaim half{
      .uid = "ub", .ns = "default", .name = "b", .devices = {}, .time_slice = std::nullopt};
  ClaimCdiOptions cdi;
  cdi.cdi_root = tree_ / "cdi";
  cdi.kind = "gpu.danqing.io/claim";
  ASSERT_TRUE(WriteClaimSpec(cdi, half, {}, AtomicFileWriter()).ok());
  source_.FailWith(std::nullopt);

  StartPlugin();
  ASSERT_TRUE(kubelet_->WaitForRegistrations(kDriver, 2, 10s));
  EXPECT_EQ(preparer_->stats().restored_claims, 1u);
  EXPECT_EQ(preparer_->stats().orphan_specs_removed, 1u);
  // The kubelet retries both: A from the checkpoint, B prepared afresh.
  auto both = Prepare({{"default", "a", "ua"}, {"default", "b", "ub"}});
  EXPECT_EQ(both.claims().at("ua").SerializeAsString(), a.claims().at("ua").SerializeAsString());
  EXPECT_EQ(both.claims().at("ub").error(), "");
  EXPECT_EQ(both.claims().at("ub").devices(0).cdi_device_ids(0), "gpu.danqing.io/claim=ub-gpu-1");
  EXPECT_TRUE(std::filesystem::exists(SpecPath("ub")));
}

TEST_F(NodePluginTest, CorruptCheckpointIsRebuiltAndServed) {
  StartPlugin();
  StartKubelet();
  ASSERT_TRUE(kubelet_->WaitForRegistrations(kDriver, 1, 10s));
  source_.Put(Claim("a", "ua", {"gpu-3"}));
  Prepare({{"default", "a", "ua"}});
  StopPlugin();
  std::ofstream(tree_ / "state/checkpoint.json", std::ios::trunc) << "{\"version\": 1, \"checks";
  StartPlugin();
  EXPECT_EQ(preparer_->stats().corrupt_checkpoints, 1u);
  ASSERT_TRUE(kubelet_->WaitForRegistrations(kDriver, 2, 10s));
  auto un = Unprepare({{"default", "a", "ua"}});
  EXPECT_EQ(un.claims().at("ua").error(), "");
  EXPECT_FALSE(std::filesystem::exists(SpecPath("ua")));
}

TEST_F(NodePluginTest, EveryClaimIsAnsweredWithErrorsNamingClaimAndDevice) {
  StartPlugin();
  StartKubelet();
  ASSERT_TRUE(kubelet_->WaitForRegistrations(kDriver, 1, 10s));
  preparer_->SetDevices(WithHealth(*test::Gpus(4), {{"GPU-3", "XID 48: double-bit ECC error"}}));
  source_.Put(Claim("good", "u1", {"gpu-0"}));
  source_.Put(Claim("elsewhere", "u2", {"gpu-0"}, "node-b"));
  source_.Put(Claim("ghost", "u3", {"gpu-42"}));
  source_.Put(Claim("sick", "u4", {"gpu-3"}));
  auto bad = Claim("badcfg", "u5", {"gpu-1"});
  bad.config.push_back(
      {{}, kDriver, nlohmann::json{{"sharing", {{"strategy", "TimeSlicing"}}}, {"mode", "x"}}});
  source_.Put(bad);
  auto resp = Prepare({{"default", "good", "u1"},
                       {"default", "elsewhere", "u2"},
                       {"default", "ghost", "u3"},
                       {"default", "sick", "u4"},
                       {"default", "badcfg", "u5"}});
  ASSERT_EQ(resp.claims_size(), 5);
  EXPECT_EQ(resp.claims().at("u1").error(), "");
  const std::pair<const char*, std::vector<std::string>> want[] = {
      {"u2", {"default/elsewhere (u2)", "node-b/gpu-0", "not this node's"}},
      {"u3", {"default/ghost (u3)", "node-a/gpu-42", "unknown"}},
      {"u4", {"default/sick (u4)", "gpu-3", "unhealthy: XID 48"}},
      {"u5", {"default/badcfg (u5)", "parameters.mode: unknown field"}},
  };
  for (const auto& [uid, parts] : want) {
    const std::string& e = resp.claims().at(uid).error();
    for (const auto& p : parts) EXPECT_NE(e.find(p), std::string::npos) << uid << ": " << e;
    EXPECT_EQ(resp.claims().at(uid).devices_size(), 0);
  }
}

TEST_F(NodePluginTest, HealthStreamReportsPreparedDevices) {
  StartPlugin();
  StartKubelet();
  ASSERT_TRUE(kubelet_->WaitForRegistrations(kDriver, 1, 10s));
  source_.Put(Claim("c", "u", {"gpu-1"}));
  Prepare({{"default", "c", "u"}});
  ASSERT_TRUE(kubelet_->WatchHealth(kDriver));
  auto healthy = [](const v1alpha1::NodeWatchResourcesResponse& r) {
    return r.devices_size() == 1 && r.devices(0).health() == v1alpha1::HEALTHY;
  };
  auto first = kubelet_->WaitForHealth(healthy, 10s);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->devices(0).device().pool_name(), "node-a");
  EXPECT_EQ(first->devices(0).device().device_name(), "gpu-1");
  EXPECT_GT(first->devices(0).last_updated_time(), 0);
  EXPECT_EQ(first->devices(0).health_check_timeout_seconds(), 60);

  // A reason longer than the kubelet takes, with a multi-byte character at the cut.
  std::string reason = "XID 79: GPU has fallen off the bus ";
  while (reason.size() < 1022) reason += "x";
  reason += "\xe4\xb8\xb9 more";
  preparer_->SetDevices(WithHealth(*test::Gpus(4), {{"GPU-1", reason}}));
  auto sick = kubelet_->WaitForHealth(
      [](const v1alpha1::NodeWatchResourcesResponse& r) {
        return r.devices_size() == 1 && r.devices(0).health() == v1alpha1::UNHEALTHY;
      },
      10s);
  ASSERT_TRUE(sick);
  EXPECT_EQ(sick->devices(0).message().rfind("XID 79", 0), 0u);
  EXPECT_LE(sick->devices(0).message().size(), 1024u);
  EXPECT_EQ(sick->devices(0).message().size(), 1022u);  // the 3-byte character is not split
  // Another GPU's trouble is not this stream's.
  preparer_->SetDevices(test::Gpus(4));
  ASSERT_TRUE(kubelet_->WaitForHealth(healthy, 10s));
  // Unprepared: the device leaves the stream.
  Unprepare({{"default", "c", "u"}});
  ASSERT_TRUE(kubelet_->WaitForHealth(
      [](const v1alpha1::NodeWatchResourcesResponse& r) { return r.devices_size() == 0; }, 10s));
}

TEST(CutUtf8, NeverSplitsASequence) {
  EXPECT_EQ(CutUtf8("abc", 10), "abc");
  EXPECT_EQ(CutUtf8("ab\xe4\xb8\xb9", 4), "ab");
  EXPECT_EQ(CutUtf8("ab\xe4\xb8\xb9", 5), "ab\xe4\xb8\xb9");
}

}  // namespace
}  // namespace danqing::dra
