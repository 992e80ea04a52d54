// ResourceSlices from the inventory: device names, attributes, capacity,
// NVLink islands, health taints, splitting at the API's limits; every slice
// built here is accepted by the API server emulator's validation.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "dra/node_devices.h"
#include "dra/slices.h"
#include "testing/support/temp_dir.h"
#include "tests/dra/slice_fixtures.h"

namespace danqing::dra {
namespace {

constexpr char kSlices[] = "/apis/resource.k8s.io/v1/resourceslices";

gpu::Gpu MakeGpu(int index, std::string name = "NVIDIA A100-SXM4-80GB") {
  gpu::Gpu g;
  g.index = index;
  g.uuid = "GPU-0000000" + std::to_string(index);
  g.name = std::move(name);
  g.brand = "Tesla";
  g.architecture = "Ampere";
  g.memory_bytes = uint64_t{80} << 30;
  g.pci.bus_id = "00000000:" + std::string(index < 10 ? "0" : "") + std::to_string(index) + ":00.0";
  g.minor_number = static_cast<uint32_t>(index);
  g.numa_node = index % 2;
  g.cuda_major = 8;
  g.cuda_minor = 0;
  g.mig_mode = gpu::MigMode::kDisabled;
  return g;
}

gpu::NodeInventory MakeInventory(int n) {
  gpu::NodeInventory inv;
  inv.driver_version = "535.104.05";
  inv.cuda_driver_version = 12020;
  for (int i = 0; i < n; ++i) inv.gpus.push_back(MakeGpu(i));
  inv.topology = gpu::Topology(static_cast<size_t>(n));
  return inv;
}

SliceOptions Options() {
  SliceOptions o;
  o.node_name = "node-1";
  o.sysfs_root.clear();
  return o;
}

const SliceDevice* Find(const std::vector<SliceDevice>& ds, const std::string& name) {
  for (const auto& d : ds) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

TEST(SliceTest, MigMixedNodeFromFakeNvml) {
  auto inv = testing::DiscoverProfile(
      DANQING_FAKE_NVML_LIB, std::string(DANQING_FAKE_NVML_PROFILE_DIR) + "/a100-mig-mixed.json");
  ASSERT_TRUE(inv.ok()) << inv.status().ToString();
  auto devices = BuildDevices(*inv, {}, Options());
  // GPU0 3g+2g+1g+1g, GPU1 7x 1g, GPU2 2x 3g, GPU3 whole.
  ASSERT_EQ(devices.size(), 14U);
  std::set<std::string> names;
  for (const auto& d : devices) {
    EXPECT_TRUE(names.insert(d.name).second) << d.name;
    EXPECT_LE(d.name.size(), 63U);
    EXPECT_LE(d.attributes.size() + d.capacity.size(), 32U);
  }
  const SliceDevice* whole = Find(devices, "gpu-3");
  ASSERT_NE(whole, nullptr);
  EXPECT_EQ(whole->attributes["type"]["string"], "gpu");
  EXPECT_EQ(whole->attributes["productName"]["string"], inv->gpus[3].name);
  EXPECT_EQ(whole->attributes["uuid"]["string"], inv->gpus[3].uuid);
  EXPECT_EQ(whole->attributes["architecture"]["string"], inv->gpus[3].architecture);
  EXPECT_EQ(whole->attributes["driverVersion"]["version"], "550.54.15");
  EXPECT_EQ(whole->attributes["cudaDriverVersion"]["version"], "12.4.0");
  EXPECT_EQ(whole->attributes["cudaComputeCapability"]["version"], "8.0.0");
  EXPECT_EQ(whole->capacity["memory"]["value"], BinaryQuantity(inv->gpus[3].memory_bytes));
  EXPECT_EQ(whole->capacity["multiprocessors"]["value"], "108");
  EXPECT_FALSE(whole->attributes.contains("migProfile"));
  // The four GPUs share the NVSwitch fabric: one island.
  for (const auto& d : devices) EXPECT_EQ(d.attributes["nvlinkDomain"]["int"], 0) << d.name;

  const gpu::MigDevice& m = inv->gpus[0].mig_devices[0];
  const SliceDevice* mig = Find(devices, DeviceNameFor(inv->gpus[0], m));
  ASSERT_NE(mig, nullptr);
  EXPECT_EQ(mig->attributes["type"]["string"], "mig");
  EXPECT_EQ(mig->attributes["migProfile"]["string"], m.profile);
  EXPECT_EQ(mig->attributes["uuid"]["string"], m.uuid);
  EXPECT_EQ(mig->attributes["parentUUID"]["string"], inv->gpus[0].uuid);
  EXPECT_EQ(mig->capacity["memory"]["value"], BinaryQuantity(m.memory_bytes));
  EXPECT_EQ(mig->capacity["multiprocessors"]["value"], std::to_string(m.multiprocessor_count));
  // The MIG-enabled GPUs themselves are not devices (they would be allocated twice).
  EXPECT_EQ(Find(devices, "gpu-0"), nullptr);
  EXPECT_NE(Find(devices, "gpu-1-mig-1g10gb-7-0"), nullptr);

  // The API server accepts the slice.
  testing::TempDir dir;
  testing::ApiFixture fx(dir.path());
  ASSERT_TRUE(fx.error.empty()) << fx.error;
  auto slices = BuildSlices(devices, 1, Options());
  ASSERT_EQ(slices.size(), 1U);
  EXPECT_EQ(slices[0]["metadata"]["name"], "node-1-gpu.danqing.io-0");
  EXPECT_EQ(slices[0]["spec"]["pool"]["resourceSliceCount"], 1);
  auto r = fx.client->Create(kSlices, slices[0]);
  EXPECT_TRUE(r.ok()) << r.error().ToString();
}

TEST(SliceTest, DeviceNamesAreStableDnsLabels) {
  gpu::Gpu g = MakeGpu(3);
  gpu::MigDevice m;
  m.profile = "1g.10gb+me";
  m.gpu_instance_id = 13;
  m.compute_instance_id = 0;
  EXPECT_EQ(DeviceNameFor(g), "gpu-3");
  EXPECT_EQ(DeviceNameFor(g, m), "gpu-3-mig-1g10gb-me-13-0");
  m.profile = "";
  EXPECT_EQ(DeviceNameFor(g, m), "gpu-3-mig-unknown-13-0");
}

TEST(SliceTest, NvlinkIslands) {
  auto inv = MakeInventory(5);
  inv.topology.at(0, 1).nvlinks = 4;
  inv.topology.at(1, 0).nvlinks = 4;
  inv.topology.at(2, 3).nvlinks = 2;
  inv.topology.at(3, 2).nvlinks = 2;
  auto d = NvlinkDomains(inv);
  EXPECT_EQ(d["GPU-00000000"], 0);
  EXPECT_EQ(d["GPU-00000001"], 0);
  EXPECT_EQ(d["GPU-00000002"], 2);
  EXPECT_EQ(d["GPU-00000003"], 2);
  EXPECT_EQ(d["GPU-00000004"], 4);  // no NVLink: its own island

  auto devices = BuildDevices(inv, {}, Options());
  EXPECT_EQ(devices[3].attributes["nvlinkDomain"]["int"], 2);
  EXPECT_EQ(devices[4].attributes["nvlinkDomain"]["int"], 4);
  EXPECT_EQ(devices[1].attributes["numaNode"]["int"], 1);
  EXPECT_EQ(devices[1].attributes["driverVersion"]["version"],
            "535.104.5");  // leading zero dropped
}

TEST(SliceTest, HealthBecomesTaints) {
  auto inv = MakeInventory(3);
  gpu::MigDevice m;
  m.uuid = "MIG-a";
  m.parent_uuid = inv.gpus[2].uuid;
  m.profile = "3g.40gb";
  m.gpu_instance_id = 1;
  m.memory_bytes = uint64_t{40192} << 20;
  m.multiprocessor_count = 42;
  inv.gpus[2].mig_mode = gpu::MigMode::kEnabled;
  inv.gpus[2].mig_devices = {m};

  health::XidPolicy policy;
  auto conditions = ConditionsFromUnhealthy({{inv.gpus[0].uuid, "xid-79"},
                                             {inv.gpus[1].uuid, "thermal-slowdown,xid-62"},
                                             {"MIG-a", "row-remap-pending"}},
                                            policy);
  EXPECT_TRUE(conditions[inv.gpus[0].uuid].needs_reset);
  EXPECT_FALSE(conditions[inv.gpus[1].uuid].needs_reset);
  EXPECT_TRUE(conditions["MIG-a"].needs_reset);

  auto devices = BuildDevices(inv, conditions, Options());
  ASSERT_EQ(devices.size(), 3U);
  ASSERT_EQ(devices[0].taints.size(), 1U);
  EXPECT_EQ(devices[0].taints[0].key, "gpu.danqing.io/unhealthy");
  EXPECT_EQ(devices[0].taints[0].value, "xid-79");
  EXPECT_EQ(devices[0].taints[0].effect, "NoExecute");
  ASSERT_EQ(devices[1].taints.size(), 1U);
  EXPECT_EQ(devices[1].taints[0].value, "thermal-slowdown_xid-62");
  EXPECT_EQ(devices[1].taints[0].effect, "NoSchedule");
  ASSERT_EQ(devices[2].taints.size(), 1U);
  EXPECT_EQ(devices[2].name, "gpu-2-mig-3g40gb-1-0");
  EXPECT_EQ(devices[2].taints[0].effect, "NoExecute");

  // A condition on the parent GPU reaches its MIG devices.
  auto parent = BuildDevices(inv, {{inv.gpus[2].uuid, {"gpu-lost", false}}}, Options());
  ASSERT_EQ(parent[2].taints.size(), 1U);
  EXPECT_EQ(parent[2].taints[0].value, "gpu-lost");
  EXPECT_EQ(parent[2].taints[0].effect, "NoSchedule");

  // Recovery: no condition, no taint.
  auto healthy = BuildDevices(inv, {}, Options());
  for (const auto& d : healthy) EXPECT_TRUE(d.taints.empty());

  // From the monitor's snapshot (needs_reset as the monitor says).
  health::DeviceHealth h;
  h.uuid = inv.gpus[1].uuid;
  h.gpu_uuid = h.uuid;
  h.healthy = false;
  h.reason = "double-bit-ecc";
  h.needs_reset = true;
  health::DeviceHealth ok;
  ok.uuid = inv.gpus[0].uuid;
  auto snap = ConditionsFromSnapshot({h, ok});
  ASSERT_EQ(snap.size(), 1U);
  EXPECT_TRUE(snap[h.uuid].needs_reset);

  testing::TempDir dir;
  testing::ApiFixture fx(dir.path());
  ASSERT_TRUE(fx.error.empty()) << fx.error;
  auto r = fx.client->Create(kSlices, BuildSlices(devices, 1, Options())[0]);
  EXPECT_TRUE(r.ok()) << r.error().ToString();
}

TEST(SliceTest, SplitsAtTheApiLimits) {
  auto inv = MakeInventory(200);
  auto devices = BuildDevices(inv, {}, Options());
  auto slices = BuildSlices(devices, 7, Options());
  ASSERT_EQ(slices.size(), 2U);
  EXPECT_EQ(slices[0]["spec"]["devices"].size(), 128U);
  EXPECT_EQ(slices[1]["spec"]["devices"].size(), 72U);
  for (const auto& s : slices) {
    EXPECT_EQ(s["spec"]["pool"]["generation"], 7);
    EXPECT_EQ(s["spec"]["pool"]["resourceSliceCount"], 2);
    EXPECT_EQ(s["spec"]["pool"]["name"], "node-1");
    EXPECT_EQ(s["spec"]["nodeName"], "node-1");
    EXPECT_EQ(s["spec"]["driver"], "gpu.danqing.io");
  }
  EXPECT_EQ(slices[1]["metadata"]["name"], "node-1-gpu.danqing.io-1");

  // One tainted device: its slice holds at most 64.
  DeviceConditions bad{{inv.gpus[10].uuid, {"xid-48", true}}};
  auto tainted = BuildSlices(BuildDevices(inv, bad, Options()), 8, Options());
  ASSERT_EQ(tainted.size(), 3U);
  EXPECT_EQ(tainted[0]["spec"]["devices"].size(), 64U);
  EXPECT_EQ(tainted[1]["spec"]["devices"].size(), 128U);
  EXPECT_EQ(tainted[2]["spec"]["devices"].size(), 8U);

  testing::TempDir dir;
  testing::ApiFixture fx(dir.path());
  ASSERT_TRUE(fx.error.empty()) << fx.error;
  for (const auto& s : tainted) {
    auto r = fx.client->Create(kSlices, s);
    EXPECT_TRUE(r.ok()) << r.error().ToString();
  }

  // An empty pool is one empty slice.
  auto empty = BuildSlices({}, 1, Options());
  ASSERT_EQ(empty.size(), 1U);
  EXPECT_TRUE(empty[0]["spec"]["devices"].empty());
}

TEST(SliceTest, ServeFilterOwnerAndDriverName) {
  auto inv = MakeInventory(4);
  SliceOptions o = Options();
  o.driver = "gpu.example.com";
  o.serve = [](const gpu::Gpu& g) { return g.index >= 2; };
  o.node_uid = "node-uid-1";
  auto devices = BuildDevices(inv, {{inv.gpus[3].uuid, {"xid-62", false}}}, o);
  ASSERT_EQ(devices.size(), 2U);
  EXPECT_EQ(devices[0].name, "gpu-2");
  EXPECT_EQ(devices[1].taints[0].key, "gpu.example.com/unhealthy");
  auto slices = BuildSlices(devices, 1, o);
  EXPECT_EQ(slices[0]["metadata"]["name"], "node-1-gpu.example.com-0");
  EXPECT_EQ(slices[0]["metadata"]["ownerReferences"][0]["kind"], "Node");
  EXPECT_EQ(slices[0]["metadata"]["ownerReferences"][0]["uid"], "node-uid-1");
}

TEST(SliceTest, PcieRootFromSysfs) {
  testing::TempDir dir;
  namespace fs = std::filesystem;
  fs::create_directories(dir.path() + "/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0");
  fs::create_directories(dir.path() + "/bus/pci/devices");
  fs::create_directory_symlink("../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0",
                               dir.path() + "/bus/pci/devices/0000:3b:00.0");
  gpu::PciInfo pci;
  pci.bus_id = "00000000:3B:00.0";
  EXPECT_EQ(PcieRoot(dir.path(), pci), "pci0000:3a");
  pci.bus_id = "00000000:3C:00.0";
  EXPECT_EQ(PcieRoot(dir.path(), pci), std::nullopt);

  auto inv = MakeInventory(1);
  inv.gpus[0].pci.bus_id = "00000000:3B:00.0";
  SliceOptions o = Options();
  o.sysfs_root = dir.path();
  auto devices = BuildDevices(inv, {}, o);
  EXPECT_EQ(devices[0].attributes["resource.kubernetes.io/pcieRoot"]["string"], "pci0000:3a");
  EXPECT_EQ(devices[0].attributes["pcieBusID"]["string"], "0000:3b:00.0");
}

TEST(SliceTest, ValueFormats) {
  EXPECT_EQ(SemanticVersion("550.54.15"), "550.54.15");
  EXPECT_EQ(SemanticVersion("535.104.05"), "535.104.5");
  EXPECT_EQ(SemanticVersion("12.4"), "12.4.0");
  EXPECT_EQ(SemanticVersion("560"), "560.0.0");
  EXPECT_EQ(SemanticVersion("550.54.15-beta"), std::nullopt);
  EXPECT_EQ(SemanticVersion("1..2"), std::nullopt);
  EXPECT_EQ(SemanticVersion("1.2.3.4"), std::nullopt);
  EXPECT_EQ(BinaryQuantity(uint64_t{80} << 30), "80Gi");
  EXPECT_EQ(BinaryQuantity(uint64_t{40192} << 20), "40192Mi");
  EXPECT_EQ(BinaryQuantity(1000), "1000");
  EXPECT_EQ(BinaryQuantity(0), "0");
  EXPECT_EQ(LabelValue("xid-79,gpu-lost"), "xid-79_gpu-lost");
  EXPECT_EQ(LabelValue(",weird value!"), "weird-value");
  EXPECT_EQ(LabelValue(std::string(100, 'a')).size(), 63U);
  EXPECT_EQ(KnownMultiprocessors("NVIDIA H100 PCIe"), 114U);
  EXPECT_EQ(KnownMultiprocessors("NVIDIA H100 80GB HBM3"), 132U);
  EXPECT_EQ(KnownMultiprocessors("Mystery GPU"), 0U);
}

}  // namespace
}  // namespace danqing::dra
