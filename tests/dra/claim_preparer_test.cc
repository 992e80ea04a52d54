#include "dra/claim_preparer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "common/read_file.h"
#include "dra/node_metrics.h"
#include "testing/dra/fake_claim_source.h"
#include "tests/dra/dra_test_util.h"

namespace danqing::dra {
namespace {

using test::Claim;
using test::Gpus;

class PreparerTest : public ::testing::Test {
 protected:
  PreparerOptions Options() {
    PreparerOptions o;
    o.checkpoint_dir = tree_ / "state";
    o.cdi.cdi_root = tree_ / "cdi";
    o.cdi.dev_root = tree_.root();
    o.writer = [this](const std::string& path, std::string_view content) -> Status {
      if (disk_full_)
        return Unavailable("cannot write " + path + ".tmp.1: No space left on device");
      return AtomicFileWriter()(path, content);
    };
    return o;
  }
  std::unique_ptr<ClaimPreparer> Make() {
    auto p = std::make_unique<ClaimPreparer>(Options(), &source_, &slicer_);
    EXPECT_TRUE(p->Restore().ok());
    p->SetDevices(Gpus(4));
    return p;
  }
  std::string SpecPath(const std::string& uid) {
    return tree_ / ("cdi/gpu.danqing.io-claim_" + uid + ".json");
  }

  test::TempTree tree_;
  testing::FakeClaimSource source_;
  testing::FakeTimeSlicer slicer_;
  bool disk_full_ = false;
};

TEST_F(PreparerTest, PreparesWritesSpecAndIsIdempotent) {
  auto p = Make();
  source_.Put(Claim("c1", "uid-1", {"gpu-0"}));
  auto r = p->Prepare({"default", "c1", "uid-1"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->devices.size(), 1u);
  EXPECT_EQ(r->devices[0].cdi_ids, std::vector<std::string>{"gpu.danqing.io/claim=uid-1-gpu-0"});
  EXPECT_EQ(r->devices[0].requests, std::vector<std::string>{"gpu"});
  EXPECT_EQ(NodeMetrics().prepared_claims.WithLabels({}).value(), 1);
  const auto text = ReadTextFile(SpecPath("uid-1"));
  ASSERT_TRUE(text);
  const auto spec = nlohmann::json::parse(*text);
  EXPECT_EQ(spec["kind"], "gpu.danqing.io/claim");
  EXPECT_EQ(spec["devices"][0]["name"], "uid-1-gpu-0");
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["deviceNodes"][0]["path"], "/dev/nvidia0");
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["deviceNodes"][0]["hostPath"],
            tree_.root() + "/dev/nvidia0");
  // A repeat answers the same without reading the claim again.
  const auto gets = source_.gets();
  auto again = p->Prepare({"default", "c1", "uid-1"});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *r);
  EXPECT_EQ(source_.gets(), gets);
  // A repeat after the spec vanished writes it again.
  std::filesystem::remove(SpecPath("uid-1"));
  ASSERT_TRUE(p->Prepare({"default", "c1", "uid-1"}).ok());
  EXPECT_TRUE(std::filesystem::exists(SpecPath("uid-1")));
  // Unprepare removes it, twice is fine.
  ASSERT_TRUE(p->Unprepare({"default", "c1", "uid-1"}).ok());
  EXPECT_FALSE(std::filesystem::exists(SpecPath("uid-1")));
  EXPECT_TRUE(p->Prepared().empty());
  EXPECT_EQ(NodeMetrics().prepared_claims.WithLabels({}).value(), 0);
  EXPECT_TRUE(p->Unprepare({"default", "c1", "uid-1"}).ok());
}

TEST_F(PreparerTest, OtherDriversResultsAreLeftAlone) {
  auto p = Make();
  auto a = Claim("c1", "uid-1", {"gpu-1"});
  a.devices.push_back({"nic", "net.example.com", "node-a", "eth0", std::nullopt});
  source_.Put(a);
  auto r = p->Prepare({"default", "c1", "uid-1"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->devices.size(), 1u);
  EXPECT_EQ(r->devices[0].device, "gpu-1");
}

TEST_F(PreparerTest, BadClaimsAreErrorsNamingClaimAndDevice) {
  auto p = Make();
  source_.Put(Claim("other-node", "u1", {"gpu-0"}, "node-b"));
  source_.Put(Claim("unknown", "u2", {"gpu-9"}));
  source_.Put(Claim("stale", "u3-new", {"gpu-0"}));
  struct Case {
    ClaimRef ref;
    std::vector<std::string> want;
  };
  const Case cases[] = {
      {{"default", "other-node", "u1"},
       {"default/other-node (u1)", "node-b/gpu-0", "not this node's"}},
      {{"default", "unknown", "u2"},
       {"default/unknown (u2)", "node-a/gpu-9", "unknown on this node"}},
      {{"default", "stale", "u3"}, {"default/stale (u3)", "UID"}},
      {{"default", "missing", "u4"}, {"default/missing (u4)", "not found"}},
  };
  for (const auto& c : cases) {
    auto r = p->Prepare(c.ref);
    ASSERT_FALSE(r.ok()) << c.ref.name;
    for (const auto& w : c.want)
      EXPECT_NE(r.status().message().find(w), std::string::npos) << r.status().message();
  }
  EXPECT_TRUE(p->Prepared().empty());
  EXPECT_EQ(p->stats().prepare_errors, 4u);
  EXPECT_GE(NodeMetrics().prepare_errors.WithLabels({}).value(), 4.0);
  EXPECT_FALSE(std::filesystem::exists(tree_ / "cdi/gpu.danqing.io-claim_u1.json"));
}

TEST_F(PreparerTest, UnhealthyDeviceIsRefusedWithTheReason) {
  auto p = Make();
  p->SetDevices(WithHealth(*Gpus(2), {{"GPU-1", "XID 79: GPU has fallen off the bus"}}));
  source_.Put(Claim("c", "u", {"gpu-1"}));
  auto r = p->Prepare({"default", "c", "u"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("gpu-1 (GPU-1) is unhealthy: XID 79"), std::string::npos)
      << r.status().message();
}

TEST_F(PreparerTest, MalformedOpaqueConfigNamesTheField) {
  auto p = Make();
  auto a = Claim("c", "u", {"gpu-0"});
  a.config.push_back(
      {{}, "other.example.com", nlohmann::json{{"anything", 1}}});  // not ours: ignored
  a.config.push_back(
      {{"gpu"},
       test::kDriver,
       nlohmann::json{{"sharing", {{"strategy", "TimeSlicing"}, {"interval", "Fast"}}}}});
  source_.Put(a);
  auto r = p->Prepare({"default", "c", "u"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("config[1].opaque.parameters.sharing.interval"),
            std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("default/c (u)"), std::string::npos);
}

TEST_F(PreparerTest, TimeSlicingIsAppliedSharedAndReset) {
  auto p = Make();
  const nlohmann::json short_slice = {
      {"sharing", {{"strategy", "TimeSlicing"}, {"interval", "Short"}}}};
  auto a = Claim("a", "ua", {"gpu-0"});
  a.config.push_back({{}, test::kDriver, short_slice});
  auto b = Claim("b", "ub", {"gpu-0"});
  b.config.push_back({{}, test::kDriver, short_slice});
  auto c = Claim("c", "uc", {"gpu-0"});
  c.config.push_back(
      {{},
       test::kDriver,
       nlohmann::json{{"sharing", {{"strategy", "TimeSlicing"}, {"interval", "Long"}}}}});
  source_.Put(a);
  source_.Put(b);
  source_.Put(c);
  ASSERT_TRUE(p->Prepare({"default", "a", "ua"}).ok());
  EXPECT_EQ(slicer_.SliceOf("GPU-0"), TimeSlice::kShort);
  ASSERT_TRUE(p->Prepare({"default", "b", "ub"}).ok());
  auto rc = p->Prepare({"default", "c", "uc"});
  ASSERT_FALSE(rc.ok());
  EXPECT_NE(rc.status().message().find("device gpu-0 (GPU GPU-0)"), std::string::npos)
      << rc.status().message();
  ASSERT_TRUE(p->Unprepare({"default", "a", "ua"}).ok());
  EXPECT_EQ(slicer_.SliceOf("GPU-0"), TimeSlice::kShort);  // b still holds it
  ASSERT_TRUE(p->Unprepare({"default", "b", "ub"}).ok());
  EXPECT_EQ(slicer_.SliceOf("GPU-0"), TimeSlice::kDefault);
  ASSERT_TRUE(p->Prepare({"default", "c", "uc"}).ok());
  EXPECT_EQ(slicer_.SliceOf("GPU-0"), TimeSlice::kLong);
}

TEST_F(PreparerTest, TimeSlicingNotSupportedStillPrepares) {
  auto p = Make();
  slicer_.Unsupported("GPU-2");
  auto a = Claim("a", "ua", {"gpu-2"});
  a.config.push_back(
      {{},
       test::kDriver,
       nlohmann::json{{"sharing", {{"strategy", "TimeSlicing"}, {"interval", "Medium"}}}}});
  source_.Put(a);
  ASSERT_TRUE(p->Prepare({"default", "a", "ua"}).ok());
  EXPECT_FALSE(slicer_.SliceOf("GPU-2"));
}

TEST_F(PreparerTest, FullDiskFailsClearlyAndLosesNothing) {
  auto p = Make();
  source_.Put(Claim("a", "ua", {"gpu-0"}));
  source_.Put(Claim("b", "ub", {"gpu-1"}));
  ASSERT_TRUE(p->Prepare({"default", "a", "ua"}).ok());
  const auto before = ReadTextFile(tree_ / "state/checkpoint.json");
  disk_full_ = true;
  auto r = p->Prepare({"default", "b", "ub"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("No space left on device"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("default/b (ub)"), std::string::npos);
  EXPECT_EQ(p->Prepared().size(), 1u);
  EXPECT_EQ(ReadTextFile(tree_ / "state/checkpoint.json"), before);
  EXPECT_FALSE(std::filesystem::exists(SpecPath("ub")));
  // Unprepare cannot record either: the claim stays prepared, to be retried.
  EXPECT_FALSE(p->Unprepare({"default", "a", "ua"}).ok());
  EXPECT_EQ(p->Prepared().count("ua"), 1u);
  disk_full_ = false;
  ASSERT_TRUE(p->Prepare({"default", "b", "ub"}).ok());
  ASSERT_TRUE(p->Unprepare({"default", "a", "ua"}).ok());
}

TEST_F(PreparerTest, RestartRestoresFromCheckpoint) {
  {
    auto p = Make();
    source_.Put(Claim("a", "ua", {"gpu-0", "gpu-1"}));
    ASSERT_TRUE(p->Prepare({"default", "a", "ua"}).ok());
  }
  auto p = Make();
  EXPECT_EQ(p->stats().restored_claims, 1u);
  EXPECT_EQ(p->Prepared().at("ua").devices.size(), 2u);
  ASSERT_TRUE(p->Unprepare({"default", "a", "ua"}).ok());
  EXPECT_FALSE(std::filesystem::exists(SpecPath("ua")));
}

TEST_F(PreparerTest, CorruptOrTruncatedCheckpointIsReportedAndRebuiltFromSpecs) {
  for (const char* damage : {"truncate", "flip", "garbage", "empty"}) {
    SCOPED_TRACE(damage);
    std::filesystem::remove_all(tree_ / "state");
    std::filesystem::remove_all(tree_ / "cdi");
    {
      auto p = Make();
      source_.Put(Claim("a", "ua", {"gpu-0"}));
      source_.Put(Claim("b", "ub", {"gpu-3"}));
      ASSERT_TRUE(p->Prepare({"default", "a", "ua"}).ok());
      ASSERT_TRUE(p->Prepare({"default", "b", "ub"}).ok());
    }
    const std::string path = tree_ / "state/checkpoint.json";
    std::string text = *ReadTextFile(path);
    if (std::string(damage) == "truncate") text.resize(text.size() / 2);
    if (std::string(damage) == "flip") text[text.find("gpu-3")] = 'x';  // JSON still parses
    if (std::string(damage) == "garbage") text = "\x01\x02 not json";
    if (std::string(damage) == "empty") text.clear();
    std::ofstream(path, std::ios::trunc) << text;
    const double counted = NodeMetrics().checkpoint_corrupt.WithLabels({}).value();
    auto p = Make();
    EXPECT_EQ(p->stats().corrupt_checkpoints, 1u);
    EXPECT_EQ(NodeMetrics().checkpoint_corrupt.WithLabels({}).value(), counted + 1);
    ASSERT_EQ(p->Prepared().size(), 2u);
    EXPECT_EQ(p->Prepared().at("ub").devices[0].device, "gpu-3");
    // Rebuilt: a good checkpoint again.
    Checkpoint cp(tree_ / "state");
    auto loaded = cp.Load();
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_EQ(loaded->size(), 2u);
  }
}

TEST_F(PreparerTest, SpecOfAnInterruptedPrepareIsRemovedAtRestore) {
  {
    auto p = Make();
    source_.Put(Claim("a", "ua", {"gpu-0"}));
    ASSERT_TRUE(p->Prepare({"default", "a", "ua"}).ok());
  }
  // What a crash between the spec's write and the checkpoint's leaves.
  PreparedClaim half{
      .uid = "ub", .ns = "default", .name = "b", .devices = {}, .time_slice = std::nullopt};
  ClaimCdiOptions cdi = Options().cdi;
  cdi.kind = "gpu.danqing.io/claim";
  ASSERT_TRUE(WriteClaimSpec(cdi, half, {}, AtomicFileWriter()).ok());
  ASSERT_TRUE(std::filesystem::exists(SpecPath("ub")));
  auto p = Make();
  EXPECT_FALSE(std::filesystem::exists(SpecPath("ub")));
  EXPECT_TRUE(std::filesystem::exists(SpecPath("ua")));
  EXPECT_EQ(p->stats().orphan_specs_removed, 1u);
  EXPECT_EQ(p->Prepared().size(), 1u);
}

TEST_F(PreparerTest, ConcurrentPreparesOnOneGpuAreSafe) {
  auto p = Make();
  const nlohmann::json slice = {{"sharing", {{"strategy", "TimeSlicing"}, {"interval", "Short"}}}};
  constexpr int kClaims = 16;
  for (int i = 0; i < kClaims; ++i) {
    auto a = Claim("c" + std::to_string(i), "u" + std::to_string(i), {"gpu-0"});
    a.devices[0].share_id = "share-" + std::to_string(i);
    a.config.push_back({{}, test::kDriver, slice});
    source_.Put(a);
  }
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < kClaims; ++i) {
    threads.emplace_back([&, i] {
      if (p->Prepare({"default", "c" + std::to_string(i), "u" + std::to_string(i)}).ok()) ++ok;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kClaims);
  EXPECT_EQ(p->Prepared().size(), static_cast<size_t>(kClaims));
  EXPECT_EQ(slicer_.calls(), 1);
  Checkpoint cp(tree_ / "state");
  auto loaded = cp.Load();
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->size(), static_cast<size_t>(kClaims));
  EXPECT_EQ(p->Prepared().at("u3").devices[0].cdi_ids[0], "gpu.danqing.io/claim=u3-gpu-0-share-3");
}

// Devices made at prepare (dynamic MIG's placements, through the agent's
// DeviceMaker): made once, unmade at unprepare and on every failure after.
class FakeMaker : public DeviceMaker {
 public:
  std::string pool() const override { return "node-a-mig"; }
  bool Makes(const std::string& device) const override {
    return device.find("-at-") != std::string::npos;
  }
  Result<NodeDevice> Make(const std::string& uid, const std::string& device) override {
    ++makes;
    if (device.find("-bad-") != std::string::npos)
      return ResourceExhausted("device " + device + ": placement taken");
    made.insert(uid + "|" + device);
    NodeDevice n;
    n.name = device;
    n.device.id = "MIG-" + device;
    n.device.device_uuid = n.device.id;
    n.device.gpu_uuid = "GPU-1";
    n.device.minor = 1;
    return n;
  }
  Status Unmake(const std::string& uid, const std::string& device) override {
    if (unmake_fails) return FailedPrecondition("nvmlGpuInstanceDestroy: In use");
    made.erase(uid + "|" + device);
    return Status::Ok();
  }
  int makes = 0;
  bool unmake_fails = false;
  std::set<std::string> made;
};

TEST_F(PreparerTest, MadeDevicesAreMadeOnceAndUnmadeOnUnprepare) {
  auto p = Make();
  FakeMaker maker;
  p->SetDeviceMaker(&maker);
  source_.Put(Claim("m", "um", {"gpu-1-mig-1g10gb-at-6"}, "node-a-mig"));
  auto r = p->Prepare({"default", "m", "um"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->devices[0].pool, "node-a-mig");
  EXPECT_EQ(r->devices[0].gpu_uuid, "GPU-1");
  EXPECT_EQ(maker.made, (std::set<std::string>{"um|gpu-1-mig-1g10gb-at-6"}));
  ASSERT_TRUE(std::filesystem::exists(SpecPath("um")));
  // A repeat answers from the checkpoint: nothing made again.
  ASSERT_TRUE(p->Prepare({"default", "m", "um"}).ok());
  EXPECT_EQ(maker.makes, 1);
  // Its spec lost: written again from the (idempotent) maker.
  std::filesystem::remove(SpecPath("um"));
  ASSERT_TRUE(p->Prepare({"default", "m", "um"}).ok());
  EXPECT_TRUE(std::filesystem::exists(SpecPath("um")));
  // NVML refuses the destroy: the claim stays prepared for the kubelet's retry.
  maker.unmake_fails = true;
  Status s = p->Unprepare({"default", "m", "um"});
  EXPECT_NE(s.message().find("gpu-1-mig-1g10gb-at-6"), std::string::npos) << s.message();
  EXPECT_EQ(p->Prepared().count("um"), 1u);
  maker.unmake_fails = false;
  ASSERT_TRUE(p->Unprepare({"default", "m", "um"}).ok());
  EXPECT_TRUE(maker.made.empty());
  EXPECT_TRUE(p->Prepared().empty());
}

TEST_F(PreparerTest, MadeDevicesAreUnmadeWhenTheClaimFailsLater) {
  auto p = Make();
  FakeMaker maker;
  p->SetDeviceMaker(&maker);
  // A later device of the claim fails: the first one's instance goes again.
  source_.Put(Claim("two", "u2", {"gpu-1-mig-1g10gb-at-0", "gpu-1-mig-bad-at-1"}, "node-a-mig"));
  auto r = p->Prepare({"default", "two", "u2"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("default/two (u2)"), std::string::npos);
  EXPECT_NE(r.status().message().find("gpu-1-mig-bad-at-1"), std::string::npos);
  EXPECT_TRUE(maker.made.empty());
  // A device of another pool that is not a placement: unknown.
  source_.Put(Claim("odd", "uo", {"gpu-1-mig-1g10gb-at-0", "gpu-7"}, "node-a-mig"));
  EXPECT_FALSE(p->Prepare({"default", "odd", "uo"}).ok());
  EXPECT_TRUE(maker.made.empty());
  // A full disk at the spec/checkpoint write.
  source_.Put(Claim("disk", "ud", {"gpu-1-mig-1g10gb-at-0"}, "node-a-mig"));
  disk_full_ = true;
  EXPECT_FALSE(p->Prepare({"default", "disk", "ud"}).ok());
  EXPECT_TRUE(maker.made.empty());
  disk_full_ = false;
  // The parent GPU unhealthy: refused, nothing left.
  p->SetDevices(WithHealth(*Gpus(4), {{"GPU-1", "xid-79"}}));
  auto sick = p->Prepare({"default", "disk", "ud"});
  ASSERT_FALSE(sick.ok());
  EXPECT_NE(sick.status().message().find("xid-79"), std::string::npos) << sick.status().message();
  EXPECT_TRUE(maker.made.empty());
  p->SetDevices(Gpus(4));
  ASSERT_TRUE(p->Prepare({"default", "disk", "ud"}).ok());
  EXPECT_EQ(maker.made.size(), 1u);
}

}  // namespace
}  // namespace danqing::dra
