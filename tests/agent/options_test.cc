// How the agent turns its configuration into the device plugin's options.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/agent.h"
#include "gpu/nvml_backend.h"
#include "testing/support/fake_node.h"

namespace danqing::agent {
namespace {

using ::testing::HasSubstr;

// `devices: N` shares the resource's first N devices, also where they have
// no plain GPU index (MIG devices are "0:1"); it used to become the indices
// "0".."N-1", which matched no MIG device and stopped the agent.
TEST(ResourceOptionsTest, ACountSharesTheFirstDevicesOfAMigResource) {
  danqing::testing::FakeNode node("a100-mig-mixed");
  auto b = gpu::NvmlBackend::Create(danqing::testing::FakeNvmlLibrary());
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  auto inv = b.value()->Discover();
  ASSERT_TRUE(inv.ok()) << inv.status().ToString();
  auto cfg = config::ParseConfig(
      "version: v1\nflags:\n  migStrategy: mixed\nsharing:\n  timeSlicing:\n    resources:\n"
      "    - name: nvidia.com/mig-1g.10gb\n      devices: 2\n      replicas: 3\n",
      "test.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  auto ro = ResourceOptionsFrom(*cfg);
  ASSERT_TRUE(ro.ok()) << ro.status().ToString();
  auto set = deviceplugin::BuildResources(*inv, *ro);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  const deviceplugin::Resource* whole = (*set)->Find("nvidia.com/mig-1g.10gb");
  const deviceplugin::Resource* shared = (*set)->Find("nvidia.com/mig-1g.10gb.shared");
  ASSERT_NE(shared, nullptr);
  ASSERT_EQ(shared->devices.size(), 6u);
  EXPECT_EQ(shared->replicas, 3);
  if (whole != nullptr) {
    for (const auto& d : whole->devices) {
      EXPECT_NE(d.device_uuid, shared->devices[0].device_uuid);
      EXPECT_NE(d.device_uuid, shared->devices[3].device_uuid);
    }
  }

  // More than the node has (a device lost at discovery): those it has, with
  // a warning.
  cfg = config::ParseConfig(
      "version: v1\nflags:\n  migStrategy: mixed\nsharing:\n  timeSlicing:\n    resources:\n"
      "    - name: nvidia.com/mig-1g.10gb\n      devices: 99\n      replicas: 3\n",
      "test.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  ro = ResourceOptionsFrom(*cfg);
  ASSERT_TRUE(ro.ok());
  set = deviceplugin::BuildResources(*inv, *ro);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  // All shared, so under the resource's own name.
  EXPECT_EQ((*set)->Find("nvidia.com/mig-1g.10gb.shared"), nullptr);
  ASSERT_NE((*set)->Find("nvidia.com/mig-1g.10gb"), nullptr);
  EXPECT_EQ((*set)->Find("nvidia.com/mig-1g.10gb")->replicas, 3);
  bool warned = false;
  for (const auto& w : (*set)->warnings)
    warned = warned || w.find("devices: 99") != std::string::npos;
  EXPECT_TRUE(warned);
}

// Issue 31 (4): a GPU a rediscovery cannot read is kept as the previous
// inventory knew it, in index order, with its topology links; a GPU NVML no
// longer counts is not, and other errors stay.
TEST(KeepUnreadableGpusTest, PutsBackWhatTheRediscoveryCouldNotRead) {
  auto gpu = [](int index) {
    gpu::Gpu g;
    g.index = index;
    g.uuid = "GPU-" + std::to_string(index);
    return g;
  };
  gpu::NodeInventory previous;
  previous.gpus = {gpu(0), gpu(1), gpu(2), gpu(3)};
  previous.topology = gpu::Topology(4);
  previous.topology.at(0, 1) = previous.topology.at(1, 0) = {12, gpu::PcieLevel::kSwitch};
  previous.topology.at(1, 2) = previous.topology.at(2, 1) = {4, gpu::PcieLevel::kSystem};
  gpu::NodeInventory fresh;
  fresh.gpus = {gpu(0), gpu(2)};  // 1 lost, 3 gone from NVML's count
  fresh.topology = gpu::Topology(2);
  fresh.topology.at(0, 1) = fresh.topology.at(1, 0) = {2, gpu::PcieLevel::kNumaNode};
  fresh.errors = {{1, "", Status(StatusCode::kDeviceLost, "GPU is lost")},
                  {0, "GPU-0", Status(StatusCode::kInternal, "MIG device 3 of GPU-0")}};

  EXPECT_THAT(KeepUnreadableGpus(previous, fresh), ::testing::ElementsAre("GPU-1"));
  ASSERT_EQ(fresh.gpus.size(), 3u);
  EXPECT_EQ(fresh.gpus[0].uuid, "GPU-0");
  EXPECT_EQ(fresh.gpus[1].uuid, "GPU-1");
  EXPECT_EQ(fresh.gpus[2].uuid, "GPU-2");
  ASSERT_EQ(fresh.topology.size(), 3u);
  EXPECT_EQ(fresh.topology.at(0, 1).nvlinks, 12);  // from the previous inventory
  EXPECT_EQ(fresh.topology.at(2, 1).nvlinks, 4);
  EXPECT_EQ(fresh.topology.at(0, 2).nvlinks, 2);  // from this discovery
  EXPECT_EQ(fresh.topology.at(2, 0).pcie, gpu::PcieLevel::kNumaNode);
  ASSERT_EQ(fresh.errors.size(), 1u);  // the MIG device's error stays
  EXPECT_EQ(fresh.errors[0].uuid, "GPU-0");
  // Nothing unreadable: nothing changes.
  EXPECT_TRUE(KeepUnreadableGpus(previous, fresh).empty());
  EXPECT_EQ(fresh.gpus.size(), 3u);
}

}  // namespace
}  // namespace danqing::agent
