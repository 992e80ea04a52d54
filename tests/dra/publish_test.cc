// The ResourceSlice publisher against the API server emulator: first
// publication, adoption after a restart, health taints added and removed,
// repair of slices changed behind its back, 409 and 410 handling, the API
// server down and back, several slices, other nodes' slices untouched.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "dra/publisher.h"
#include "metrics/registry.h"
#include "testing/support/temp_dir.h"
#include "tests/dra/slice_fixtures.h"

namespace danqing::dra {
namespace {

using namespace std::chrono_literals;
using kube::Json;

gpu::NodeInventory Inventory(int n) {
  gpu::NodeInventory inv;
  inv.driver_version = "550.54.15";
  inv.cuda_driver_version = 12040;
  for (int i = 0; i < n; ++i) {
    gpu::Gpu g;
    g.index = i;
    g.uuid = "GPU-" + std::to_string(1000 + i);
    g.name = "NVIDIA H100 80GB HBM3";
    g.architecture = "Hopper";
    g.memory_bytes = uint64_t{80} << 30;
    g.pci.bus_id = "00000000:10:00.0";
    g.cuda_major = 9;
    g.mig_mode = gpu::MigMode::kDisabled;
    inv.gpus.push_back(g);
  }
  inv.topology = gpu::Topology(static_cast<size_t>(n));
  return inv;
}

PublisherOptions Options() {
  PublisherOptions o;
  o.slices.node_name = "node-1";
  o.slices.sysfs_root.clear();
  o.min_backoff = 20ms;
  o.max_backoff = 200ms;
  return o;
}

std::vector<Json> NodeSlices(const std::vector<Json>& all, const std::string& node = "node-1",
                             const std::string& driver = "gpu.danqing.io") {
  std::vector<Json> out;
  for (const auto& s : all) {
    if (s["spec"].value("nodeName", "") == node && s["spec"].value("driver", "") == driver)
      out.push_back(s);
  }
  return out;
}

const Json* Device(const std::vector<Json>& slices, const std::string& name) {
  for (const auto& s : slices) {
    for (const auto& d : s["spec"]["devices"]) {
      if (d["name"] == name) return &d;
    }
  }
  return nullptr;
}

class PublishTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    fx_ = std::make_unique<testing::ApiFixture>(dir_.path());
    ASSERT_TRUE(fx_->error.empty()) << fx_->error;
  }
  uint64_t Writes() {
    auto c = fx_->server->Counts();
    return c["POST resourceslices"] + c["PUT resourceslices"] + c["DELETE resourceslices"];
  }
  testing::TempDir dir_;
  std::unique_ptr<testing::ApiFixture> fx_;
};

TEST_F(PublishTest, PublishesThenAdoptsAfterRestart) {
  {
    Publisher p(*fx_->client, Options());
    p.Update(Inventory(4), {});
    ASSERT_TRUE(p.Start().ok());
    ASSERT_TRUE(p.WaitSynced(10s)) << p.status().last_error;
    auto slices = NodeSlices(fx_->server->Slices());
    ASSERT_EQ(slices.size(), 1U);
    EXPECT_EQ(slices[0]["spec"]["devices"].size(), 4U);
    EXPECT_EQ(slices[0]["spec"]["pool"]["generation"], 1);
    EXPECT_EQ(p.status().generation, 1);
  }
  // The agent restarts with the same GPUs: nothing is written.
  const uint64_t writes = Writes();
  {
    Publisher p(*fx_->client, Options());
    p.Update(Inventory(4), {});
    ASSERT_TRUE(p.Start().ok());
    ASSERT_TRUE(p.WaitSynced(10s)) << p.status().last_error;
    EXPECT_EQ(p.status().generation, 1);
    EXPECT_EQ(Writes(), writes);
  }
  // A GPU is gone at the next start: a new generation without it.
  Publisher p(*fx_->client, Options());
  p.Update(Inventory(3), {});
  ASSERT_TRUE(p.Start().ok());
  ASSERT_TRUE(p.WaitSynced(10s)) << p.status().last_error;
  auto slices = NodeSlices(fx_->server->Slices());
  ASSERT_EQ(slices.size(), 1U);
  EXPECT_EQ(slices[0]["spec"]["devices"].size(), 3U);
  EXPECT_EQ(slices[0]["spec"]["pool"]["generation"], 2);
}

// Dynamic MIG's pool "<node>-mig" rides along: published, adopted after a
// restart, kept when a claim's instance exists (owned), and deleted when no
// dynamic GPU is left.
TEST_F(PublishTest, DynamicMigPoolIsPublishedAdoptedAndWithdrawn) {
  const MigGpuSpec gpu = A100_80GB(5, "GPU-dyn");
  auto mig_slices = [this] {
    std::vector<nlohmann::json> out;
    for (const auto& s : NodeSlices(fx_->server->Slices())) {
      if (s["spec"]["pool"]["name"] == "node-1-mig") out.push_back(s);
    }
    return out;
  };
  auto devices_of = [](const std::vector<nlohmann::json>& slices) {
    std::set<std::string> names;
    for (const auto& s : slices) {
      if (!s["spec"].contains("devices")) continue;
      for (const auto& d : s["spec"]["devices"]) names.insert(d["name"].get<std::string>());
    }
    return names;
  };
  {
    Publisher p(*fx_->client, Options());
    p.Update(Inventory(2), {});
    p.SetDynamicMig({gpu}, {});
    ASSERT_TRUE(p.Start().ok());
    ASSERT_TRUE(p.WaitSynced(10s)) << p.status().last_error;
    const auto mig = mig_slices();
    ASSERT_EQ(mig.size(), 2U);  // the counter set, then 25 placements
    EXPECT_EQ(mig[0]["spec"]["sharedCounters"][0]["name"], "gpu-5-mig");
    EXPECT_EQ(devices_of(mig).size(), 25U);
    EXPECT_EQ(mig[0]["spec"]["pool"]["generation"], 1);
  }
  // A restart with the same GPUs and instances writes nothing.
  uint64_t writes = Writes();
  Publisher p(*fx_->client, Options());
  p.Update(Inventory(2), {});
  p.SetDynamicMig({gpu}, {});
  ASSERT_TRUE(p.Start().ok());
  ASSERT_TRUE(p.WaitSynced(10s)) << p.status().last_error;
  EXPECT_EQ(Writes(), writes);
  EXPECT_EQ(p.status().generation, 1);
  // A claim's instance at 1g.10gb placement 6: as an owned instance the
  // placements stay as they were (no new generation); the same instance not
  // owned would be a static one.
  MigGpuSpec cut = gpu;
  cut.instances.push_back({.profile_id = 19,
                           .start = 6,
                           .gpu_instance_id = 13,
                           .compute_instance_id = 0,
                           .uuid = "MIG-x"});
  p.SetDynamicMig({cut}, {{"GPU-dyn", {13}}});
  ASSERT_TRUE(p.WaitSynced(10s));
  EXPECT_EQ(Writes(), writes);
  EXPECT_TRUE(devices_of(mig_slices()).contains("gpu-5-mig-1g10gb-at-6"));
  p.SetDynamicMig({cut}, {});
  ASSERT_TRUE(p.WaitSynced(10s));
  EXPECT_FALSE(devices_of(mig_slices()).contains("gpu-5-mig-1g10gb-at-6"));
  EXPECT_EQ(p.status().generation, 2);
  // No dynamic GPU left: the MIG pool's slices go, the node's pool stays.
  writes = Writes();
  p.SetDynamicMig({}, {});
  ASSERT_TRUE(p.WaitSynced(10s));
  EXPECT_TRUE(mig_slices().empty());
  EXPECT_EQ(NodeSlices(fx_->server->Slices()).size(), 1U);
}

TEST_F(PublishTest, HealthTaintIsAddedAndRemoved) {
  Publisher p(*fx_->client, Options());
  auto inv = Inventory(2);
  p.Update(inv, {});
  ASSERT_TRUE(p.Start().ok());
  ASSERT_TRUE(p.WaitSynced(10s));

  p.SetConditions({{inv.gpus[1].uuid, {"xid-79", true}}});
  ASSERT_TRUE(fx_->server->WaitForSlices(
      [](const std::vector<Json>& all) {
        auto s = NodeSlices(all);
        const Json* d = s.empty() ? nullptr : Device(s, "gpu-1");
        return d != nullptr && d->contains("taints");
      },
      10s));
  auto slices = NodeSlices(fx_->server->Slices());
  const Json* d = Device(slices, "gpu-1");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ((*d)["taints"][0]["key"], "gpu.danqing.io/unhealthy");
  EXPECT_EQ((*d)["taints"][0]["value"], "xid-79");
  EXPECT_EQ((*d)["taints"][0]["effect"], "NoExecute");
  EXPECT_TRUE((*d)["taints"][0].contains("timeAdded"));
  EXPECT_FALSE(Device(slices, "gpu-0")->contains("taints"));
  EXPECT_EQ(slices[0]["spec"]["pool"]["generation"], 2);
  ASSERT_TRUE(p.WaitSynced(10s));

  // Recovery: the taint goes, in a new generation.
  p.SetConditions({});
  ASSERT_TRUE(p.WaitSynced(10s));
  slices = NodeSlices(fx_->server->Slices());
  EXPECT_FALSE(Device(slices, "gpu-1")->contains("taints"));
  EXPECT_EQ(slices[0]["spec"]["pool"]["generation"], 3);

  // The same conditions again: nothing to publish.
  const uint64_t writes = Writes();
  p.SetConditions({});
  EXPECT_TRUE(p.WaitSynced(1s));
  EXPECT_EQ(Writes(), writes);
}

TEST_F(PublishTest, RepairsSlicesChangedOrDeletedBehindItsBack) {
  Publisher p(*fx_->client, Options());
  p.Update(Inventory(3), {});
  ASSERT_TRUE(p.Start().ok());
  ASSERT_TRUE(p.WaitSynced(10s));
  const std::string name = "node-1-gpu.danqing.io-0";

  Json edited = *fx_->server->Slice(name);
  edited["spec"]["devices"].erase(0);
  fx_->server->PutSlice(edited);
  ASSERT_TRUE(fx_->server->WaitForSlices(
      [&](const std::vector<Json>& all) {
        auto s = NodeSlices(all);
        return s.size() == 1 && s[0]["spec"]["devices"].size() == 3;
      },
      10s));
  EXPECT_EQ((*fx_->server->Slice(name))["spec"]["pool"]["generation"],
            1);  // same devices, same generation

  ASSERT_TRUE(fx_->server->DeleteSlice(name));
  ASSERT_TRUE(fx_->server->WaitForSlices(
      [&](const std::vector<Json>& all) { return NodeSlices(all).size() == 1; }, 10s))
      << [&] {
           std::string s;
           for (const auto& [k, v] : fx_->server->Counts()) s += k + "=" + std::to_string(v) + " ";
           for (const auto& sl : fx_->server->Slices()) s += sl.dump();
           return s;
         }();
  ASSERT_TRUE(p.WaitSynced(10s));
  EXPECT_GE(p.status().repairs, 2U);
}

TEST_F(PublishTest, ConflictIsReadAgainAndRetried) {
  // No watch allowed: the publisher's view of the slice goes stale.
  fx_->server->SetRbac("test-token",
                       {"list resourceslices", "get resourceslices", "create resourceslices",
                        "update resourceslices", "delete resourceslices"});
  Publisher p(*fx_->client, Options());
  auto inv = Inventory(2);
  p.Update(inv, {});
  ASSERT_TRUE(p.Start().ok());
  ASSERT_TRUE(p.WaitSynced(10s));
  const std::string name = "node-1-gpu.danqing.io-0";
  Json other = *fx_->server->Slice(name);
  other["metadata"]["labels"] = {{"team", "infra"}};
  fx_->server->PutSlice(other);  // someone else's write: a new resourceVersion

  p.SetConditions({{inv.gpus[0].uuid, {"xid-62", false}}});
  ASSERT_TRUE(p.WaitSynced(10s)) << p.status().last_error;
  EXPECT_GE(p.status().conflicts, 1U);
  EXPECT_GE(fx_->server->Counts()["status 409"], 1U);
  Json now = *fx_->server->Slice(name);
  EXPECT_TRUE(Device({now}, "gpu-0")->contains("taints"));
  EXPECT_EQ(now["metadata"]["labels"]["team"], "infra");  // the other writer's label kept
}

TEST_F(PublishTest, ApiServerDownIsSurvivedAndCaughtUp) {
  Publisher p(*fx_->client, Options());
  auto inv = Inventory(2);
  p.Update(inv, {});
  ASSERT_TRUE(p.Start().ok());
  ASSERT_TRUE(p.WaitSynced(10s));
  fx_->server->Stop();
  p.SetConditions({{inv.gpus[0].uuid, {"gpu-lost", false}}});
  EXPECT_FALSE(p.WaitSynced(500ms));
  EXPECT_GE(p.status().passes_failed, 1U);
  EXPECT_FALSE(p.status().last_error.empty());
  ASSERT_TRUE(fx_->server->Restart().ok());
  ASSERT_TRUE(p.WaitSynced(10s)) << p.status().last_error;
  EXPECT_TRUE(p.status().last_error.empty());
  EXPECT_TRUE(Device(NodeSlices(fx_->server->Slices()), "gpu-0")->contains("taints"));

  // And 500s / 429s are retried the same way.
  fx_->server->FailNext(3, 500);
  p.SetConditions({});
  ASSERT_TRUE(p.WaitSynced(10s)) << p.status().last_error;
  EXPECT_FALSE(Device(NodeSlices(fx_->server->Slices()), "gpu-0")->contains("taints"));
}

TEST_F(PublishTest, WatchExpiryRelistsAndRepairStillWorks) {
  Publisher p(*fx_->client, Options());
  p.Update(Inventory(2), {});
  ASSERT_TRUE(p.Start().ok());
  ASSERT_TRUE(p.WaitSynced(10s));
  fx_->server->Compact();
  fx_->server->ExpireWatches();
  for (int i = 0; i < 500 && p.status().relists == 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_GE(p.status().relists, 1U);
  ASSERT_TRUE(p.WaitSynced(10s));
  // The watch was re-opened from the new list: a deletion is still seen.
  ASSERT_TRUE(fx_->server->DeleteSlice("node-1-gpu.danqing.io-0"));
  EXPECT_TRUE(fx_->server->WaitForSlices(
      [](const std::vector<Json>& all) { return NodeSlices(all).size() == 1; }, 10s));
}

TEST_F(PublishTest, WatchEndedByTheServerIsReopened) {
  PublisherOptions o = Options();
  o.watch_timeout = 1s;  // timeoutSeconds=1: the server ends each watch after a second
  Publisher p(*fx_->client, o);
  p.Update(Inventory(2), {});
  ASSERT_TRUE(p.Start().ok());
  ASSERT_TRUE(p.WaitSynced(10s));
  std::this_thread::sleep_for(2500ms);
  EXPECT_GE(fx_->server->Counts()["WATCH resourceslices"], 3U);
  ASSERT_TRUE(fx_->server->DeleteSlice("node-1-gpu.danqing.io-0"));
  EXPECT_TRUE(fx_->server->WaitForSlices(
      [](const std::vector<Json>& all) { return NodeSlices(all).size() == 1; }, 10s));
}

TEST_F(PublishTest, SeveralSlicesShrinkAndOthersUntouched) {
  // Someone else's slices: another node, and another driver on this node.
  Json foreign = BuildSlices({}, 5, [] {
    SliceOptions o;
    o.node_name = "node-2";
    return o;
  }())[0];
  fx_->server->PutSlice(foreign);
  Json other_driver = BuildSlices({}, 1, [] {
    SliceOptions o;
    o.node_name = "node-1";
    o.driver = "nic.example.com";
    return o;
  }())[0];
  fx_->server->PutSlice(other_driver);

  Publisher p(*fx_->client, Options());
  p.Update(Inventory(200), {});
  ASSERT_TRUE(p.Start().ok());
  ASSERT_TRUE(p.WaitSynced(20s)) << p.status().last_error;
  auto slices = NodeSlices(fx_->server->Slices());
  ASSERT_EQ(slices.size(), 2U);
  for (const auto& s : slices) EXPECT_EQ(s["spec"]["pool"]["resourceSliceCount"], 2);

  p.Update(Inventory(100), {});
  ASSERT_TRUE(p.WaitSynced(20s)) << p.status().last_error;
  slices = NodeSlices(fx_->server->Slices());
  ASSERT_EQ(slices.size(), 1U);
  EXPECT_EQ(slices[0]["spec"]["devices"].size(), 100U);
  EXPECT_EQ(slices[0]["spec"]["pool"]["resourceSliceCount"], 1);
  EXPECT_EQ(NodeSlices(fx_->server->Slices(), "node-2").size(), 1U);
  EXPECT_EQ(NodeSlices(fx_->server->Slices(), "node-1", "nic.example.com").size(), 1U);
}

TEST_F(PublishTest, RefusesBadOptionsAndCountsInTheRegistry) {
  PublisherOptions o = Options();
  o.slices.node_name.clear();
  Publisher no_node(*fx_->client, o);
  EXPECT_EQ(no_node.Start().code(), StatusCode::kInvalidArgument);
  o = Options();
  o.slices.driver = "Bad_Driver";
  Publisher bad_driver(*fx_->client, o);
  EXPECT_EQ(bad_driver.Start().code(), StatusCode::kInvalidArgument);

  Publisher p(*fx_->client, Options());
  p.Update(Inventory(1), {});
  ASSERT_TRUE(p.Start().ok());
  ASSERT_TRUE(p.WaitSynced(10s));
  bool found = false;
  for (const auto& f : metrics::DefaultRegistry().Collect()) {
    if (f.name != "danqing_dra_slice_publish") continue;
    for (const auto& s : f.samples) {
      if (s.labels == metrics::Labels{{"result", "ok"}} && s.value >= 1) found = true;
    }
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace danqing::dra
