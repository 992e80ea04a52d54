// NvmlBackend over the fake libnvidia-ml.so.1, loaded through the real dlopen
// path: every shipped profile's inventory, topology, MIG tree and sensors, and
// the start-up failures (init failing, malformed profile, lost GPU, old driver).
#include "gpu/nvml_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "testing/support/fake_node.h"
#include "testing/support/fifo.h"
#include "testing/support/temp_dir.h"

namespace danqing::gpu {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::SizeIs;
using danqing::testing::FakeNode;

constexpr uint64_t kGiB = 1024ULL * 1024ULL * 1024ULL;

// With the sysfs tree of the fake node in scope (it exports DANQING_SYSFS_ROOT).
std::unique_ptr<NvmlBackend> MustCreate(const std::string& lib = danqing::testing::FakeNvmlLibrary()) {
  const char* sysfs = std::getenv("DANQING_SYSFS_ROOT");
  auto b = NvmlBackend::Create(lib, sysfs != nullptr ? sysfs : "/sys");
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.ok() ? std::move(b).value() : nullptr;
}

NodeInventory MustDiscover(GpuBackend& b) {
  auto inv = b.Discover();
  EXPECT_TRUE(inv.ok()) << inv.status().ToString();
  return inv.ok() ? std::move(inv).value() : NodeInventory{};
}

// Writes a modified copy of a shipped profile to a temp file.
std::string WriteProfile(const std::string& base, const std::function<void(nlohmann::json&)>& edit) {
  std::ifstream in(danqing::testing::ProfilePath(base));
  nlohmann::json j = nlohmann::json::parse(in);
  edit(j);
  static int n = 0;
  std::string path = ::testing::TempDir() + "/profile-" + std::to_string(getpid()) + "-" +
                     std::to_string(n++) + ".json";
  std::ofstream(path) << j.dump(2);
  return path;
}

void ExpectSymmetric(const NodeInventory& inv) {
  const Topology& t = inv.topology;
  ASSERT_EQ(t.size(), inv.gpus.size());
  for (size_t a = 0; a < t.size(); ++a) {
    EXPECT_EQ(t.at(a, a).pcie, PcieLevel::kSame);
    for (size_t b = 0; b < t.size(); ++b) {
      EXPECT_EQ(t.at(a, b).nvlinks, t.at(b, a).nvlinks) << a << "," << b;
      EXPECT_EQ(t.at(a, b).pcie, t.at(b, a).pcie) << a << "," << b;
    }
  }
}

void ExpectUniqueIdentity(const NodeInventory& inv) {
  std::set<std::string> uuids, buses;
  for (const auto& g : inv.gpus) {
    EXPECT_TRUE(uuids.insert(g.uuid).second) << g.uuid;
    EXPECT_TRUE(buses.insert(g.pci.bus_id).second) << g.pci.bus_id;
    EXPECT_EQ(g.uuid.rfind("GPU-", 0), 0u) << g.uuid;
    for (const auto& m : g.mig_devices) {
      EXPECT_TRUE(uuids.insert(m.uuid).second) << m.uuid;
      EXPECT_EQ(m.uuid.rfind("MIG-", 0), 0u) << m.uuid;
    }
  }
}

TEST(NvmlBackendTest, A100NvSwitchInventoryAndTopology) {
  FakeNode node("a100-8x-nvswitch");
  auto b = MustCreate();
  ASSERT_NE(b, nullptr);
  EXPECT_THAT(b->Describe(), HasSubstr("libnvidia-ml.so.1"));
  NodeInventory inv = MustDiscover(*b);
  ASSERT_THAT(inv.gpus, SizeIs(8));
  EXPECT_TRUE(inv.errors.empty());
  EXPECT_EQ(inv.driver_version, "550.54.15");
  EXPECT_EQ(inv.cuda_driver_version, 12040);
  for (int i = 0; i < 8; ++i) {
    const Gpu& g = inv.gpus[static_cast<size_t>(i)];
    EXPECT_EQ(g.index, i);
    EXPECT_EQ(g.name, "NVIDIA A100-SXM4-80GB");
    EXPECT_EQ(g.architecture, "Ampere");
    EXPECT_EQ(g.cuda_major, 8);
    EXPECT_EQ(g.cuda_minor, 0);
    EXPECT_EQ(g.memory_bytes, 81920 * 1024ULL * 1024ULL);
    EXPECT_EQ(g.mig_mode, MigMode::kDisabled);
    ASSERT_TRUE(g.numa_node.has_value());
    EXPECT_EQ(*g.numa_node, i < 4 ? 0 : 1);
    ASSERT_TRUE(g.minor_number.has_value());
    EXPECT_EQ(g.pci.bus_id.size(), 16u) << g.pci.bus_id;
  }
  ExpectUniqueIdentity(inv);
  ExpectSymmetric(inv);
  // NVSwitch: every pair reaches the other over all 12 links.
  for (size_t a = 0; a < 8; ++a) {
    for (size_t c = 0; c < 8; ++c) {
      if (a != c) {
        EXPECT_EQ(inv.topology.at(a, c).nvlinks, 12) << a << "," << c;
      }
    }
  }
  // PCIe: pairs share a switch, a socket holds GPUs 0-3.
  EXPECT_EQ(inv.topology.at(0, 1).pcie, PcieLevel::kSwitch);
  EXPECT_EQ(inv.topology.at(0, 2).pcie, PcieLevel::kNumaNode);
  EXPECT_EQ(inv.topology.at(0, 4).pcie, PcieLevel::kSystem);
  EXPECT_EQ(inv.topology.at(6, 7).pcie, PcieLevel::kSwitch);
}

TEST(NvmlBackendTest, V100HybridCubeMeshIsNotAllToAll) {
  FakeNode node("v100-8x-dgx1");
  auto b = MustCreate();
  ASSERT_NE(b, nullptr);
  NodeInventory inv = MustDiscover(*b);
  ASSERT_THAT(inv.gpus, SizeIs(8));
  ExpectUniqueIdentity(inv);
  ExpectSymmetric(inv);
  int unlinked_pairs = 0, double_pairs = 0;
  for (size_t a = 0; a < 8; ++a) {
    int lanes = 0;
    for (size_t c = 0; c < 8; ++c) {
      if (a == c) continue;
      lanes += inv.topology.at(a, c).nvlinks;
      if (c > a && inv.topology.at(a, c).nvlinks == 0) ++unlinked_pairs;
      if (c > a && inv.topology.at(a, c).nvlinks == 2) ++double_pairs;
    }
    EXPECT_EQ(lanes, 6) << "GPU" << a << " has 6 NVLinks, all to peers";
    EXPECT_EQ(inv.gpus[a].name, "Tesla V100-SXM2-32GB");
    EXPECT_EQ(inv.gpus[a].architecture, "Volta");
    EXPECT_EQ(inv.gpus[a].brand, "Tesla");
  }
  EXPECT_GT(unlinked_pairs, 0);
  EXPECT_GT(double_pairs, 0);
  EXPECT_EQ(inv.topology.at(0, 5).nvlinks, 0);
  // Volta retires pages; it has no row remapping.
  auto s = b->ReadSensors(inv.gpus[0].uuid);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->retired_pages_pending, false);
  EXPECT_FALSE(s->remapped_rows_pending.has_value());
}

TEST(NvmlBackendTest, H100PcieAcrossTwoNumaNodes) {
  FakeNode node("h100-2x-pcie-2numa");
  auto b = MustCreate();
  ASSERT_NE(b, nullptr);
  NodeInventory inv = MustDiscover(*b);
  ASSERT_THAT(inv.gpus, SizeIs(2));
  EXPECT_EQ(inv.gpus[0].name, "NVIDIA H100 PCIe");
  EXPECT_EQ(inv.gpus[0].architecture, "Hopper");
  EXPECT_EQ(inv.gpus[0].cuda_major, 9);
  EXPECT_EQ(inv.gpus[0].numa_node, 0);
  EXPECT_EQ(inv.gpus[1].numa_node, 1);
  EXPECT_EQ(inv.topology.at(0, 1).nvlinks, 0);
  EXPECT_EQ(inv.topology.at(0, 1).pcie, PcieLevel::kSystem);
}

// The sysfs root is configurable: a FIFO as a numa_node file is no node,
// not a discovery blocked for good (issue 31).
TEST(NvmlBackendTest, ANumaNodeFileThatIsAFifoIsNoNode) {
  const danqing::testing::TempDir root;
  ASSERT_FALSE(root.path().empty());
  const std::string dir = root.path() + "/bus/pci/devices/0000:07:00.0";
  std::filesystem::create_directories(dir);
  danqing::testing::FifoGuard fifo(dir + "/numa_node");
  ASSERT_TRUE(fifo.made());
  PciInfo pci;
  pci.bus_id = "00000000:07:00.0";
  pci.bus = 7;
  const auto node = PciNumaNode(root.path(), pci);
  ASSERT_TRUE(fifo.Done()) << "blocked on the FIFO";
  EXPECT_FALSE(node.has_value());
}

TEST(NvmlBackendTest, NumaNodesComeFromSysfsNotFromNvml) {
  // NVML's nvmlDeviceGetNumaNodeId names a node only where the GPU's memory is
  // one (and the fake answers it from the profile); the node next to the PCI
  // slot is sysfs's numa_node.
  FakeNode node("h100-2x-pcie-2numa");
  auto b = MustCreate();
  ASSERT_NE(b, nullptr);
  NodeInventory inv = MustDiscover(*b);
  ASSERT_THAT(inv.gpus, SizeIs(2));
  // The fake tree says what the profile says: 0 and 1.
  EXPECT_EQ(PciNumaNode(node.sysfs_root(), inv.gpus[0].pci), 0);
  // Another tree: GPU 0 on node 1, GPU 1 on a host that does not say (-1).
  const std::string root = node.sysfs_root() + "-other";
  auto write = [&](const PciInfo& pci, const std::string& value) {
    char address[32];
    std::snprintf(address, sizeof address, "%04x:%02x:%02x.0", pci.domain, pci.bus, pci.device);
    const std::string dir = root + "/bus/pci/devices/" + address;
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/numa_node") << value << "\n";
  };
  write(inv.gpus[0].pci, "1");
  write(inv.gpus[1].pci, "-1");
  auto other = NvmlBackend::Create(danqing::testing::FakeNvmlLibrary(), root);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  NodeInventory inv2 = MustDiscover(**other);
  EXPECT_EQ(inv2.gpus[0].numa_node, 1);
  EXPECT_FALSE(inv2.gpus[1].numa_node.has_value());
  // No sysfs entry at all: no node, whatever NVML says.
  auto none = NvmlBackend::Create(danqing::testing::FakeNvmlLibrary(), root + "/nothing");
  ASSERT_TRUE(none.ok());
  NodeInventory inv3 = MustDiscover(**none);
  EXPECT_FALSE(inv3.gpus[0].numa_node.has_value());
  std::filesystem::remove_all(root);
}

TEST(NvmlBackendTest, SingleT4WithoutMigOrNvlink) {
  FakeNode node("t4-1x");
  auto b = MustCreate();
  ASSERT_NE(b, nullptr);
  NodeInventory inv = MustDiscover(*b);
  ASSERT_THAT(inv.gpus, SizeIs(1));
  const Gpu& g = inv.gpus[0];
  EXPECT_EQ(g.name, "Tesla T4");
  EXPECT_EQ(g.architecture, "Turing");
  EXPECT_EQ(g.cuda_major, 7);
  EXPECT_EQ(g.cuda_minor, 5);
  EXPECT_EQ(g.mig_mode, MigMode::kUnsupported);
  EXPECT_TRUE(g.mig_devices.empty());
  auto s = b->ReadSensors(g.uuid);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->temperature_c.has_value());
  EXPECT_FALSE(s->remapped_rows_pending.has_value()) << "T4 has no row remapping";
  EXPECT_TRUE(s->failures.empty());
}

TEST(NvmlBackendTest, MixedMigGeometryTree) {
  FakeNode node("a100-mig-mixed");
  auto b = MustCreate();
  ASSERT_NE(b, nullptr);
  NodeInventory inv = MustDiscover(*b);
  ASSERT_THAT(inv.gpus, SizeIs(4));
  EXPECT_TRUE(inv.errors.empty());
  ExpectUniqueIdentity(inv);
  auto profiles = [](const Gpu& g) {
    std::multiset<std::string> p;
    for (const auto& m : g.mig_devices) p.insert(m.profile);
    return p;
  };
  EXPECT_EQ(inv.gpus[0].mig_mode, MigMode::kEnabled);
  EXPECT_EQ(profiles(inv.gpus[0]),
            (std::multiset<std::string>{"1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"}));
  EXPECT_EQ(profiles(inv.gpus[1]), (std::multiset<std::string>{"1g.10gb", "1g.10gb", "1g.10gb",
                                                               "1g.10gb", "1g.10gb", "1g.10gb",
                                                               "1g.10gb"}));
  EXPECT_EQ(profiles(inv.gpus[2]), (std::multiset<std::string>{"3g.40gb", "3g.40gb"}));
  EXPECT_EQ(inv.gpus[3].mig_mode, MigMode::kDisabled);
  EXPECT_TRUE(inv.gpus[3].mig_devices.empty());
  for (const auto& g : inv.gpus) {
    std::set<uint32_t> gi_ids;
    for (const auto& m : g.mig_devices) {
      EXPECT_EQ(m.parent_uuid, g.uuid);
      EXPECT_EQ(m.parent_index, g.index);
      EXPECT_TRUE(gi_ids.insert(m.gpu_instance_id).second);
      EXPECT_GT(m.memory_bytes, 0u);
      EXPECT_GT(m.multiprocessor_count, 0u);
      if (m.profile == "1g.10gb") {
        EXPECT_EQ(m.gpu_instance_profile_id, 19u);
        EXPECT_EQ(m.gpu_instance_slices, 1u);
        EXPECT_GT(m.memory_bytes, 9 * kGiB);
        EXPECT_LT(m.memory_bytes, 10 * kGiB);
      }
      if (m.profile == "3g.40gb") {
        EXPECT_EQ(m.gpu_instance_slices, 3u);
      }
      // Sensors of a MIG device read through its own handle.
      auto s = b->ReadSensors(m.uuid);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      ASSERT_TRUE(s->memory_total_bytes.has_value());
      EXPECT_EQ(*s->memory_total_bytes, m.memory_bytes);
    }
  }
}

TEST(NvmlBackendTest, SingleMigGeometryIsUniform) {
  FakeNode node("a100-mig-single");
  auto b = MustCreate();
  ASSERT_NE(b, nullptr);
  NodeInventory inv = MustDiscover(*b);
  ASSERT_THAT(inv.gpus, SizeIs(2));
  for (const auto& g : inv.gpus) {
    EXPECT_EQ(g.name, "NVIDIA A100-SXM4-40GB");
    ASSERT_THAT(g.mig_devices, SizeIs(7));
    for (const auto& m : g.mig_devices) EXPECT_EQ(m.profile, "1g.5gb");
  }
}

TEST(NvmlBackendTest, H200) {
  FakeNode node("h200-1x");
  auto b = MustCreate();
  ASSERT_NE(b, nullptr);
  NodeInventory inv = MustDiscover(*b);
  ASSERT_THAT(inv.gpus, SizeIs(1));
  const Gpu& g = inv.gpus[0];
  EXPECT_EQ(g.name, "NVIDIA H200");
  EXPECT_EQ(g.architecture, "Hopper");
  EXPECT_EQ(g.brand, "NVIDIA");
  EXPECT_EQ(g.cuda_major, 9);
  EXPECT_GT(g.memory_bytes, 139 * kGiB);
  EXPECT_EQ(g.mig_mode, MigMode::kDisabled);
}

TEST(NvmlBackendTest, Dgx2SixteenGpusAllReachableOverNvlink) {
  FakeNode node("v100-16x-dgx2");
  auto b = MustCreate();
  ASSERT_NE(b, nullptr);
  NodeInventory inv = MustDiscover(*b);
  ASSERT_THAT(inv.gpus, SizeIs(16));
  ExpectUniqueIdentity(inv);
  ExpectSymmetric(inv);
  for (size_t a = 0; a < 16; ++a) {
    for (size_t c = 0; c < 16; ++c) {
      if (a != c) {
        EXPECT_GT(inv.topology.at(a, c).nvlinks, 0) << a << "," << c;
      }
    }
  }
  EXPECT_EQ(inv.topology.at(0, 1).pcie, PcieLevel::kSwitch);
  EXPECT_EQ(inv.topology.at(0, 8).pcie, PcieLevel::kSystem);
}

TEST(NvmlBackendTest, SensorsOfAHealthyGpu) {
  FakeNode node("a100-8x-nvswitch");
  auto b = MustCreate();
  ASSERT_NE(b, nullptr);
  NodeInventory inv = MustDiscover(*b);
  ASSERT_FALSE(inv.gpus.empty());
  auto s = b->ReadSensors(inv.gpus[0].uuid);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->utilization_gpu.has_value());
  EXPECT_TRUE(s->temperature_c.has_value());
  EXPECT_TRUE(s->power_mw.has_value());
  EXPECT_TRUE(s->clock_sm_mhz.has_value());
  EXPECT_TRUE(s->clock_mem_mhz.has_value());
  EXPECT_TRUE(s->throttle_reasons.has_value());
  EXPECT_EQ(s->ecc_volatile_uncorrected, 0u);
  EXPECT_FALSE(s->retired_pages_pending.has_value()) << "Ampere remaps rows instead";
  EXPECT_EQ(s->remapped_rows_failure, false);
  EXPECT_TRUE(s->processes.has_value());
  EXPECT_EQ(*s->memory_total_bytes, inv.gpus[0].memory_bytes);
  EXPECT_TRUE(s->failures.empty());
}

TEST(NvmlBackendTest, UnknownUuidIsNotFound) {
  FakeNode node("t4-1x");
  auto b = MustCreate();
  ASSERT_NE(b, nullptr);
  MustDiscover(*b);
  auto s = b->ReadSensors("GPU-00000000-0000-0000-0000-000000000000");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(s.status().message(), HasSubstr("GPU-00000000-0000-0000-0000-000000000000"));
}

TEST(NvmlBackendTest, InitFailureIsUnavailableWithNvmlReason) {
  FakeNode node(WriteProfile("t4-1x", [](nlohmann::json& j) { j["init_error"] = "DRIVER_NOT_LOADED"; }));
  auto b = NvmlBackend::Create(danqing::testing::FakeNvmlLibrary());
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(b.status().message(), AllOf(HasSubstr("nvmlInit"), HasSubstr("(NVML return 9)")));
}

TEST(NvmlBackendTest, MalformedProfileFailsInit) {
  std::string path = ::testing::TempDir() + "/broken-" + std::to_string(getpid()) + ".json";
  std::ofstream(path) << "{\"gpus\": [ {\"uuid\": ";
  FakeNode node(path);
  auto b = NvmlBackend::Create(danqing::testing::FakeNvmlLibrary());
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kUnavailable);
}

TEST(NvmlBackendTest, LostGpuAtStartDoesNotHideTheOthers) {
  FakeNode node(WriteProfile("a100-8x-nvswitch", [](nlohmann::json& j) { j["gpus"][1]["lost"] = true; }));
  auto b = MustCreate();
  ASSERT_NE(b, nullptr);
  NodeInventory inv = MustDiscover(*b);
  ASSERT_THAT(inv.gpus, SizeIs(7));
  ASSERT_THAT(inv.errors, SizeIs(1));
  EXPECT_EQ(inv.errors[0].index, 1);
  EXPECT_EQ(inv.errors[0].status.code(), StatusCode::kDeviceLost);
  EXPECT_EQ(inv.gpus[1].index, 2);
  EXPECT_EQ(inv.topology.size(), 7u);
  EXPECT_EQ(inv.topology.at(0, 1).nvlinks, 12);
}

TEST(NvmlBackendTest, OldDriverStillDiscoversWithFeaturesOff) {
  FakeNode node("a100-mig-mixed");
  auto b = MustCreate(danqing::testing::FakeNvmlLegacyLibrary());
  ASSERT_NE(b, nullptr);
  NodeInventory inv = MustDiscover(*b);
  ASSERT_THAT(inv.gpus, SizeIs(4));
  EXPECT_FALSE(inv.disabled_features.empty());
  EXPECT_EQ(inv.gpus[0].numa_node, 0) << "from sysfs, whatever the library has";
  // MIG names come from slice count and memory when the V call is absent.
  ASSERT_FALSE(inv.gpus[0].mig_devices.empty());
  std::multiset<std::string> p;
  for (const auto& m : inv.gpus[0].mig_devices) p.insert(m.profile);
  EXPECT_EQ(p, (std::multiset<std::string>{"1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"}));
  EXPECT_EQ(inv.topology.at(0, 1).nvlinks, 12) << "NVLink falls back to the v1 remote-PCI call";
  auto s = b->ReadSensors(inv.gpus[3].uuid);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE(s->processes.has_value());
  EXPECT_FALSE(s->remapped_rows_pending.has_value());
  EXPECT_TRUE(s->temperature_c.has_value());
  EXPECT_TRUE(s->throttle_reasons.has_value()) << "throttle reasons via the older symbol";
}

}  // namespace
TEST(NvmlBackendTest, R535DriversWith32ByteProcessEntriesUnderV3AreReadAsSuch) {
  // Drivers 535.43 to 535.86 wrote 32-byte entries under
  // nvmlDeviceGetComputeRunningProcesses_v3; read as 24-byte ones, every
  // process after the first gets a wrong PID and memory.
  for (const std::string driver : {"535.54.03", "535.104.05", "550.54.15"}) {
    SCOPED_TRACE(driver);
    FakeNode node(WriteProfile("t4-1x", [&](nlohmann::json& j) { j["driver_version"] = driver; }));
    auto b = MustCreate();
    ASSERT_NE(b, nullptr);
    NodeInventory inv = MustDiscover(*b);
    node.Control(R"({"cmd":"processes","gpu":0,"processes":[
        {"pid":4242,"used_memory_mib":2048},{"pid":4243,"used_memory_mib":512},
        {"pid":4244,"used_memory_mib":64}]})");
    auto s = b->ReadSensors(inv.gpus[0].uuid);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_TRUE(s->processes.has_value());
    ASSERT_THAT(*s->processes, SizeIs(3));
    const std::vector<std::pair<uint32_t, uint64_t>> want = {
        {4242, 2048ULL << 20}, {4243, 512ULL << 20}, {4244, 64ULL << 20}};
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ((*s->processes)[i].pid, want[i].first) << i;
      EXPECT_EQ((*s->processes)[i].used_memory_bytes, want[i].second) << i;
    }
  }
}

TEST(ProcessInfoStrideTest, OnlyTheR535DriversThatChangedTheEntry) {
  EXPECT_EQ(ProcessInfoStride("535.43.02"), 32u);
  EXPECT_EQ(ProcessInfoStride("535.86.10"), 32u);
  EXPECT_EQ(ProcessInfoStride("535.98"), 24u);
  EXPECT_EQ(ProcessInfoStride("535.104.05"), 24u);
  EXPECT_EQ(ProcessInfoStride("530.30.02"), 24u);
  EXPECT_EQ(ProcessInfoStride("550.54.15"), 24u);
  EXPECT_EQ(ProcessInfoStride(""), 24u);
  EXPECT_EQ(ProcessInfoStride("garbage"), 24u);
}

}  // namespace danqing::gpu
