// Resource building (MIG strategies, time-slicing, health propagation) and
// Allocate responses, on hand-built inventories.
#include "deviceplugin/resource.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <regex>

#include "deviceplugin/allocate.h"

namespace danqing::deviceplugin {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

gpu::Gpu MakeGpu(int index, gpu::MigMode mig = gpu::MigMode::kDisabled) {
  gpu::Gpu g;
  g.index = index;
  g.uuid = "GPU-" + std::to_string(index);
  g.name = "NVIDIA A100-SXM4-80GB";
  g.minor_number = static_cast<uint32_t>(index);
  g.numa_node = index / 2;
  g.mig_mode = mig;
  return g;
}

gpu::MigDevice MakeMig(const gpu::Gpu& parent, int index, const std::string& profile, uint32_t gi) {
  gpu::MigDevice m;
  m.uuid = "MIG-" + std::to_string(parent.index) + "-" + std::to_string(index);
  m.parent_uuid = parent.uuid;
  m.parent_index = parent.index;
  m.index = index;
  m.profile = profile;
  m.gpu_instance_id = gi;
  m.compute_instance_id = 0;
  return m;
}

gpu::NodeInventory Node(std::vector<gpu::Gpu> gpus) {
  gpu::NodeInventory inv;
  inv.gpus = std::move(gpus);
  inv.topology = gpu::Topology(inv.gpus.size());
  return inv;
}

std::vector<std::string> Ids(const Resource& r) {
  std::vector<std::string> out;
  for (const auto& d : r.devices) out.push_back(d.id);
  return out;
}

TEST(ResourceTest, WholeGpusByDefault) {
  auto set = BuildResources(Node({MakeGpu(0), MakeGpu(1)}), {});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  ASSERT_THAT((*set)->resources, SizeIs(1));
  const Resource& r = (*set)->resources[0];
  EXPECT_EQ(r.name, "nvidia.com/gpu");
  EXPECT_THAT(Ids(r), ElementsAre("GPU-0", "GPU-1"));
  EXPECT_EQ(r.devices[1].index, "1");
  EXPECT_TRUE((*set)->allocators.count("nvidia.com/gpu"));
}

TEST(ResourceTest, EmptyNodeStillAdvertisesZero) {
  auto set = BuildResources(Node({}), {});
  ASSERT_TRUE(set.ok());
  ASSERT_THAT((*set)->resources, SizeIs(1));
  EXPECT_TRUE((*set)->resources[0].devices.empty());
}

TEST(ResourceTest, MigMixedOneResourcePerProfile) {
  auto g0 = MakeGpu(0, gpu::MigMode::kEnabled);
  g0.mig_devices = {MakeMig(g0, 0, "3g.40gb", 1), MakeMig(g0, 1, "1g.10gb", 2), MakeMig(g0, 2, "1g.10gb", 3)};
  ResourceOptions o;
  o.mig_strategy = MigStrategy::kMixed;
  auto set = BuildResources(Node({g0, MakeGpu(1)}), o);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  const Resource* big = (*set)->Find("nvidia.com/mig-3g.40gb");
  const Resource* small = (*set)->Find("nvidia.com/mig-1g.10gb");
  const Resource* whole = (*set)->Find("nvidia.com/gpu");
  ASSERT_TRUE(big && small && whole);
  EXPECT_THAT(Ids(*small), ElementsAre("MIG-0-1", "MIG-0-2"));
  EXPECT_EQ(small->devices[0].index, "0:1");
  EXPECT_EQ(small->devices[0].gpu_uuid, "GPU-0");
  EXPECT_THAT(Ids(*whole), ElementsAre("GPU-1"));
}

// A media-extension profile ("1g.10gb+me") is a valid resource name only with
// the '+' made '.', as NVIDIA names it; every name must pass the kubelet's rule.
TEST(ResourceTest, MigMediaExtensionProfileGivesAValidResourceName) {
  auto g0 = MakeGpu(0, gpu::MigMode::kEnabled);
  g0.mig_devices = {MakeMig(g0, 0, "1g.10gb+me", 1), MakeMig(g0, 1, "1g.10gb", 2)};
  ResourceOptions o;
  o.mig_strategy = MigStrategy::kMixed;
  auto set = BuildResources(Node({g0}), o);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  const Resource* me = (*set)->Find("nvidia.com/mig-1g.10gb.me");
  ASSERT_NE(me, nullptr);
  EXPECT_THAT(Ids(*me), ElementsAre("MIG-0-0"));
  EXPECT_NE((*set)->Find("nvidia.com/mig-1g.10gb"), nullptr);
  const std::regex qualified(R"([a-z0-9.-]+/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)");
  for (const auto& r : (*set)->resources) EXPECT_TRUE(std::regex_match(r.name, qualified)) << r.name;
}

// A 3g GPU instance split into 1c compute instances: each is a third of a
// 3g, not a 3g, and is not advertised (as in NVIDIA's plugin), with a
// warning; the whole-GI compute instance on the other GPU instance is.
TEST(ResourceTest, ComputeInstancesSmallerThanTheirGpuInstanceAreNotAdvertised) {
  auto g0 = MakeGpu(0, gpu::MigMode::kEnabled);
  auto whole = MakeMig(g0, 0, "3g.40gb", 1), part_a = MakeMig(g0, 1, "3g.40gb", 2), part_b = MakeMig(g0, 2, "3g.40gb", 2);
  whole.gpu_instance_slices = whole.compute_instance_slices = 3;
  part_a.gpu_instance_slices = part_b.gpu_instance_slices = 3;
  part_a.compute_instance_slices = part_b.compute_instance_slices = 1;
  part_b.compute_instance_id = 1;
  g0.mig_devices = {whole, part_a, part_b};
  for (MigStrategy strategy : {MigStrategy::kMixed, MigStrategy::kSingle}) {
    ResourceOptions o;
    o.mig_strategy = strategy;
    auto set = BuildResources(Node({g0}), o);
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    const Resource* r = (*set)->Find(strategy == MigStrategy::kMixed ? "nvidia.com/mig-3g.40gb" : "nvidia.com/gpu");
    ASSERT_NE(r, nullptr);
    EXPECT_THAT(Ids(*r), ElementsAre("MIG-0-0"));
    ASSERT_EQ((*set)->warnings.size(), 2u);
    EXPECT_THAT((*set)->warnings[0], ::testing::HasSubstr("1c.3g.40gb"));
  }
}

TEST(ResourceTest, MigSingleUniformAdvertisesAsGpu) {
  auto g0 = MakeGpu(0, gpu::MigMode::kEnabled), g1 = MakeGpu(1, gpu::MigMode::kEnabled);
  g0.mig_devices = {MakeMig(g0, 0, "1g.10gb", 1)};
  g1.mig_devices = {MakeMig(g1, 0, "1g.10gb", 1), MakeMig(g1, 1, "1g.10gb", 2)};
  ResourceOptions o;
  o.mig_strategy = MigStrategy::kSingle;
  auto set = BuildResources(Node({g0, g1}), o);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  ASSERT_THAT((*set)->resources, SizeIs(1));
  EXPECT_EQ((*set)->resources[0].name, "nvidia.com/gpu");
  EXPECT_THAT(Ids((*set)->resources[0]), ElementsAre("MIG-0-0", "MIG-1-0", "MIG-1-1"));
}

TEST(ResourceTest, MigSingleRejectsMixedGeometryClearly) {
  auto g0 = MakeGpu(0, gpu::MigMode::kEnabled);
  g0.mig_devices = {MakeMig(g0, 0, "1g.10gb", 1), MakeMig(g0, 1, "3g.40gb", 2)};
  ResourceOptions o;
  o.mig_strategy = MigStrategy::kSingle;
  auto set = BuildResources(Node({g0}), o);
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(set.status().message(), HasSubstr("1g.10gb, 3g.40gb"));

  auto partial = BuildResources(Node({MakeGpu(0, gpu::MigMode::kEnabled), MakeGpu(1)}), o);
  ASSERT_FALSE(partial.ok());
  EXPECT_THAT(partial.status().message(), HasSubstr("1 of 2"));
}

TEST(ResourceTest, MigNoneHidesMigDevicesWithWarning) {
  auto g0 = MakeGpu(0, gpu::MigMode::kEnabled);
  g0.mig_devices = {MakeMig(g0, 0, "1g.10gb", 1)};
  auto set = BuildResources(Node({g0}), {});
  ASSERT_TRUE(set.ok());
  EXPECT_THAT(Ids((*set)->resources[0]), ElementsAre("GPU-0"));
  ASSERT_THAT((*set)->warnings, SizeIs(1));
  EXPECT_THAT((*set)->warnings[0], HasSubstr("MIG enabled"));
}

TEST(ResourceTest, TimeSlicingAllGpusKeepsTheName) {
  ResourceOptions o;
  o.time_slicing.push_back({"nvidia.com/gpu", "", 3, {}});
  o.fail_requests_greater_than_one = true;
  auto set = BuildResources(Node({MakeGpu(0), MakeGpu(1)}), o);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  ASSERT_THAT((*set)->resources, SizeIs(1));
  const Resource& r = (*set)->resources[0];
  EXPECT_EQ(r.name, "nvidia.com/gpu");
  EXPECT_EQ(r.replicas, 3);
  EXPECT_TRUE(r.fail_requests_greater_than_one);
  EXPECT_THAT(Ids(r), ElementsAre("GPU-0::0", "GPU-0::1", "GPU-0::2", "GPU-1::0", "GPU-1::1", "GPU-1::2"));
}

TEST(ResourceTest, TimeSlicingRenameByDefault) {
  ResourceOptions o;
  o.rename_by_default = true;
  o.time_slicing.push_back({"nvidia.com/gpu", "", 2, {}});
  auto set = BuildResources(Node({MakeGpu(0)}), o);
  ASSERT_TRUE(set.ok());
  ASSERT_THAT((*set)->resources, SizeIs(1));
  EXPECT_EQ((*set)->resources[0].name, "nvidia.com/gpu.shared");
}

TEST(ResourceTest, TimeSlicingSomeGpusSplitsResources) {
  ResourceOptions o;
  o.time_slicing.push_back({"nvidia.com/gpu", "", 2, {"GPU-1"}});
  auto set = BuildResources(Node({MakeGpu(0), MakeGpu(1), MakeGpu(2)}), o);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  const Resource* whole = (*set)->Find("nvidia.com/gpu");
  const Resource* shared = (*set)->Find("nvidia.com/gpu.shared");
  ASSERT_TRUE(whole && shared);
  EXPECT_THAT(Ids(*whole), ElementsAre("GPU-0", "GPU-2"));
  EXPECT_THAT(Ids(*shared), ElementsAre("GPU-1::0", "GPU-1::1"));
  EXPECT_FALSE((*set)->warnings.empty());

  ResourceOptions named;
  named.time_slicing.push_back({"nvidia.com/gpu", "nvidia.com/render", 4, {"0"}});
  auto set2 = BuildResources(Node({MakeGpu(0), MakeGpu(1)}), named);
  ASSERT_TRUE(set2.ok());
  ASSERT_TRUE((*set2)->Find("nvidia.com/render"));
  EXPECT_THAT((*set2)->Find("nvidia.com/render")->devices, SizeIs(4));
}

TEST(ResourceTest, TimeSlicingSelectorNamingNoDeviceIsAnError) {
  ResourceOptions o;
  o.time_slicing.push_back({"nvidia.com/gpu", "", 2, {"7"}});
  auto set = BuildResources(Node({MakeGpu(0)}), o);
  ASSERT_FALSE(set.ok());
  EXPECT_THAT(set.status().message(), HasSubstr("'7'"));
}

// A count is the resource's first N devices, whatever their indices: MIG
// devices ("0:1"), GPUs with a gap (one left out of discovery).
TEST(ResourceTest, TimeSlicingACountTakesTheFirstDevicesOfTheResource) {
  auto g0 = MakeGpu(0, gpu::MigMode::kEnabled);
  g0.mig_devices = {MakeMig(g0, 0, "1g.10gb", 7), MakeMig(g0, 1, "1g.10gb", 8),
                    MakeMig(g0, 2, "1g.10gb", 9)};
  ResourceOptions mixed;
  mixed.mig_strategy = MigStrategy::kMixed;
  mixed.time_slicing.push_back({"nvidia.com/mig-1g.10gb", "", 2, {}, 2});
  auto set = BuildResources(Node({g0, MakeGpu(1)}), mixed);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  const Resource* shared = (*set)->Find("nvidia.com/mig-1g.10gb.shared");
  const Resource* kept = (*set)->Find("nvidia.com/mig-1g.10gb");
  ASSERT_TRUE(shared && kept);
  EXPECT_THAT(Ids(*shared), ElementsAre("MIG-0-0::0", "MIG-0-0::1", "MIG-0-1::0", "MIG-0-1::1"));
  EXPECT_THAT(Ids(*kept), ElementsAre("MIG-0-2"));

  ResourceOptions gap;  // GPU indices 0 and 2
  gap.time_slicing.push_back({"nvidia.com/gpu", "", 2, {}, 2});
  set = BuildResources(Node({MakeGpu(0), MakeGpu(2)}), gap);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_THAT(Ids(*(*set)->Find("nvidia.com/gpu")),
              ElementsAre("GPU-0::0", "GPU-0::1", "GPU-2::0", "GPU-2::1"));

  // More than there are (a GPU lost at discovery): all, with a warning; the
  // agent keeps serving the others.
  gap.time_slicing[0].count = 3;
  set = BuildResources(Node({MakeGpu(0), MakeGpu(2)}), gap);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_THAT(Ids(*(*set)->Find("nvidia.com/gpu")),
              ElementsAre("GPU-0::0", "GPU-0::1", "GPU-2::0", "GPU-2::1"));
  ASSERT_THAT((*set)->warnings, SizeIs(1));
  EXPECT_THAT((*set)->warnings[0], HasSubstr("devices: 3, but this node has 2 device(s)"));
}

// Replicas renamed onto a resource the node already advertises would mix
// devices of two kinds under one name: refused.
TEST(ResourceTest, TimeSlicingRenameOntoAnAdvertisedResourceIsAnError) {
  auto g0 = MakeGpu(0, gpu::MigMode::kEnabled);
  g0.mig_devices = {MakeMig(g0, 0, "1g.10gb", 7)};
  ResourceOptions o;
  o.mig_strategy = MigStrategy::kMixed;
  o.time_slicing.push_back({"nvidia.com/mig-1g.10gb", "nvidia.com/gpu", 2, {}});
  auto set = BuildResources(Node({g0, MakeGpu(1)}), o);
  ASSERT_FALSE(set.ok());
  EXPECT_THAT(set.status().message(),
              HasSubstr("as nvidia.com/gpu, which this node already advertises"));
  o.time_slicing[0].rename = "nvidia.com/gpu-slice";
  EXPECT_TRUE(BuildResources(Node({g0, MakeGpu(1)}), o).ok());
  // Nor may two entries put their replicas under one name.
  o.time_slicing.push_back({"nvidia.com/gpu", "nvidia.com/gpu-slice", 2, {}});
  set = BuildResources(Node({g0, MakeGpu(1)}), o);
  ASSERT_FALSE(set.ok());
  EXPECT_THAT(set.status().message(), HasSubstr("another time-slicing entry"));
}

// Issue 31 (3): the kubelet reads each ListAndWatch message under gRPC's
// 4 MiB limit. At the bound, a list of devices at their largest encoding
// stays within the budget, half of that limit.
TEST(ResourceTest, TheLargestListOfTheLargestDevicesFitsTheListAndWatchBudget) {
  const size_t n = MaxDevicesPerResource();
  EXPECT_GT(n, 10'000u);  // room for 8 GPUs x 1000 replicas
  EXPECT_GE(MaxEncodedDeviceBytes(), kMaxDeviceIdBytes + 9 + 10);  // ID, health, NUMA node
  v1beta1::ListAndWatchResponse list;
  for (size_t i = 0; i < n; ++i) {
    auto* d = list.add_devices();
    d->set_id(std::string(kMaxDeviceIdBytes, 'x'));
    d->set_health(std::string(kUnhealthy));
    d->mutable_topology()->add_nodes()->set_id(std::numeric_limits<int64_t>::min());
  }
  EXPECT_LE(list.ByteSizeLong(), kListAndWatchBudgetBytes);
  EXPECT_LE(kListAndWatchBudgetBytes, kGrpcDefaultMaxMessageBytes / 2);
}

// More replicas than one ListAndWatch message can carry: refused, naming the
// limit, before the replicas are made.
TEST(ResourceTest, TimeSlicingPastTheListAndWatchLimitIsRefusedNamingIt) {
  std::vector<gpu::Gpu> gpus;
  for (int i = 0; i < 8; ++i) gpus.push_back(MakeGpu(i));
  const int max = static_cast<int>(MaxDevicesPerResource());
  ResourceOptions o;
  o.time_slicing.push_back({"nvidia.com/gpu", "", max / 8, {}});
  auto fits = BuildResources(Node(gpus), o);
  ASSERT_TRUE(fits.ok()) << fits.status().ToString();
  EXPECT_EQ((*fits)->resources[0].devices.size(), static_cast<size_t>(max / 8 * 8));

  o.time_slicing[0].replicas = max / 8 + 1;
  auto over = BuildResources(Node(gpus), o);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(over.status().message(),
              HasSubstr("8 device(s) x " + std::to_string(max / 8 + 1) + " replicas"));
  EXPECT_THAT(over.status().message(), HasSubstr("more than the " + std::to_string(max)));
  EXPECT_THAT(over.status().message(), HasSubstr("4 MiB"));

  // Renamed, or on some GPUs only: the count of the resource it makes.
  o.time_slicing[0] = {"nvidia.com/gpu", "nvidia.com/gpu.shared", max / 2 + 1, {"0", "1"}};
  over = BuildResources(Node(gpus), o);
  ASSERT_FALSE(over.ok());
  EXPECT_THAT(over.status().message(), HasSubstr("as nvidia.com/gpu.shared"));
}

// A count far past the limit is refused at once, whatever the node: it
// must not cost its memory first (the agent's RSS went past 1 GB).
TEST(ResourceTest, AHugeReplicaCountIsRefusedBeforeAnyReplicaIsMade) {
  ResourceOptions o;
  o.time_slicing.push_back({"nvidia.com/gpu", "", std::numeric_limits<int>::max(), {}});
  auto over = BuildResources(Node({MakeGpu(0), MakeGpu(1)}), o);
  ASSERT_FALSE(over.ok());
  EXPECT_THAT(over.status().message(), HasSubstr("2147483647 replicas per device"));
  o.time_slicing[0].name = "nvidia.com/not-on-this-node";
  EXPECT_FALSE(BuildResources(Node({MakeGpu(0)}), o).ok());
}

TEST(ResourceTest, HealthPropagatesToEveryReplicaAndMigDevice) {
  auto g0 = MakeGpu(0, gpu::MigMode::kEnabled);
  g0.mig_devices = {MakeMig(g0, 0, "1g.10gb", 1), MakeMig(g0, 1, "1g.10gb", 2)};
  ResourceOptions o;
  o.mig_strategy = MigStrategy::kMixed;
  o.time_slicing.push_back({"nvidia.com/gpu", "", 4, {}});
  auto set = BuildResources(Node({g0, MakeGpu(1)}), o);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  auto sick = WithHealth(**set, {{"GPU-0", "XID 48"}, {"GPU-1", "thermal"}});
  for (const auto& r : sick->resources) {
    for (const auto& d : r.devices) {
      EXPECT_FALSE(d.healthy) << d.id;
      EXPECT_FALSE(d.unhealthy_reason.empty());
    }
  }
  auto healed = WithHealth(*sick, {});
  for (const auto& r : healed->resources) {
    for (const auto& d : r.devices) EXPECT_TRUE(d.healthy) << d.id;
  }
}

// ---------------------------------------------------------------------------

Resource GpuResource(int n, int replicas = 1) {
  ResourceOptions o;
  if (replicas > 1) o.time_slicing.push_back({"nvidia.com/gpu", "", replicas, {}});
  std::vector<gpu::Gpu> gpus;
  for (int i = 0; i < n; ++i) gpus.push_back(MakeGpu(i));
  auto set = BuildResources(Node(gpus), o);
  return (*set)->resources[0];
}

// Issue 31 (1): no request field may size an allocation or a loop unchecked.
TEST(AllocateTest, RequestsPastTheBoundsAreRefusedBeforeAnythingIsSized) {
  const auto max = static_cast<int>(MaxDevicesPerResource());
  v1beta1::PreferredAllocationRequest pref;
  auto* c = pref.add_container_requests();
  c->add_available_deviceids("GPU-0");
  c->set_allocation_size(max);
  EXPECT_TRUE(CheckPreferredAllocationRequest(pref).ok());
  for (int size : {-1, max + 1, std::numeric_limits<int>::max()}) {
    c->set_allocation_size(size);
    Status st = CheckPreferredAllocationRequest(pref);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << size;
    EXPECT_THAT(st.message(), HasSubstr("allocation_size " + std::to_string(size)));
  }
  c->set_allocation_size(1);
  for (int i = 0; i <= max; ++i) c->add_must_include_deviceids("GPU-0");
  EXPECT_THAT(CheckPreferredAllocationRequest(pref).message(),
              HasSubstr("names " + std::to_string(max + 1)));
  c->clear_must_include_deviceids();
  c->add_must_include_deviceids(std::string(kMaxDeviceIdBytes + 1, 'G') + "\n");
  EXPECT_THAT(CheckPreferredAllocationRequest(pref).message(), HasSubstr("longer than any"));
  EXPECT_EQ(CheckPreferredAllocationRequest(pref).message().find('\n'), std::string::npos);
  c->clear_must_include_deviceids();
  for (int i = 0; i < kMaxContainerRequests; ++i) *pref.add_container_requests() = *c;
  EXPECT_THAT(CheckPreferredAllocationRequest(pref).message(), HasSubstr("container requests"));
  // Every list at its bound, but too many in all.
  pref.clear_container_requests();
  for (int k = 0; k < 3; ++k) {
    auto* full = pref.add_container_requests();
    for (int i = 0; i < max; ++i) full->add_available_deviceids("GPU-0");
  }
  EXPECT_THAT(CheckPreferredAllocationRequest(pref).message(), HasSubstr("in all"));

  v1beta1::AllocateRequest alloc;
  alloc.add_container_requests()->add_devices_ids("GPU-0");
  EXPECT_TRUE(CheckAllocateRequest(alloc).ok());
  for (int i = 0; i < max; ++i) alloc.mutable_container_requests(0)->add_devices_ids("GPU-0");
  EXPECT_EQ(CheckAllocateRequest(alloc).code(), StatusCode::kInvalidArgument);
  alloc.clear_container_requests();
  alloc.add_container_requests()->add_devices_ids(std::string(size_t{1} << 20, 'x'));
  Status st = CheckAllocateRequest(alloc);
  EXPECT_THAT(st.message(), HasSubstr("1048576 bytes"));
  EXPECT_LT(st.message().size(), 512u);
}

TEST(AllocateTest, VolumeMountsStrategy) {
  AllocateOptions o;
  o.device_list_strategies = {DeviceListStrategy::kVolumeMounts};
  auto r = BuildContainerResponse(GpuResource(2), {"GPU-1"}, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->envs().at("NVIDIA_VISIBLE_DEVICES"), "/var/run/nvidia-container-devices");
  ASSERT_EQ(r->mounts_size(), 1);
  EXPECT_EQ(r->mounts(0).container_path(), "/var/run/nvidia-container-devices/GPU-1");
  EXPECT_EQ(r->mounts(0).host_path(), "/dev/null");
}

TEST(AllocateTest, ReplicasOfOneGpuNameItOnce) {
  auto r = BuildContainerResponse(GpuResource(2, 4), {"GPU-1::0", "GPU-1::3", "GPU-0::2"}, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->envs().at("NVIDIA_VISIBLE_DEVICES"), "GPU-1,GPU-0");
}

TEST(AllocateTest, FailRequestsGreaterThanOne) {
  Resource res = GpuResource(2, 2);
  res.fail_requests_greater_than_one = true;
  auto r = BuildContainerResponse(res, {"GPU-0::0", "GPU-1::0"}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("failRequestsGreaterThanOne"));
  EXPECT_TRUE(BuildContainerResponse(res, {"GPU-1::1"}, {}).ok());
}

TEST(AllocateTest, EmptyRequestIsRejected) {
  auto r = BuildContainerResponse(GpuResource(1), {}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("nvidia.com/gpu"));
}

TEST(AllocateTest, DevRootPrefixesHostPaths) {
  AllocateOptions o;
  o.pass_device_specs = true;
  o.dev_root = "/run/nvidia/driver";
  auto r = BuildContainerResponse(GpuResource(1), {"GPU-0"}, o);
  ASSERT_TRUE(r.ok());
  bool found = false;
  for (const auto& d : r->devices()) {
    if (d.container_path() == "/dev/nvidia0") {
      found = true;
      EXPECT_EQ(d.host_path(), "/run/nvidia/driver/dev/nvidia0");
    }
  }
  EXPECT_TRUE(found);
}

// As NVIDIA's plugin: with CDI strategies alone the runtime takes the device
// nodes from the CDI spec, and passDeviceSpecs adds none beside them.
TEST(AllocateTest, DeviceSpecsOnlyWithAStrategyThatIsNotCdi) {
  AllocateOptions o;
  o.pass_device_specs = true;
  for (const auto& strategies : std::vector<std::vector<DeviceListStrategy>>{
           {DeviceListStrategy::kCdiCri},
           {DeviceListStrategy::kCdiAnnotations},
           {DeviceListStrategy::kCdiCri, DeviceListStrategy::kCdiAnnotations}}) {
    o.device_list_strategies = strategies;
    auto r = BuildContainerResponse(GpuResource(1), {"GPU-0"}, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->devices_size(), 0) << strategies.size() << " CDI strategies";
    EXPECT_FALSE(r->cdi_devices().empty() && r->annotations().empty());
  }
  o.device_list_strategies = {DeviceListStrategy::kCdiCri, DeviceListStrategy::kEnvvar};
  auto r = BuildContainerResponse(GpuResource(1), {"GPU-0"}, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GE(r->devices_size(), 1);
  EXPECT_EQ(r->cdi_devices_size(), 1);
}

TEST(AllocateTest, MigDeviceNodesFromCapMinors) {
  auto caps = ParseMigCapMinors("config 1\nmonitor 2\ngpu0/gi2/access 21\ngpu0/gi2/ci0/access 22\n");
  ASSERT_TRUE(caps.ok()) << caps.status().ToString();
  auto g0 = MakeGpu(0, gpu::MigMode::kEnabled);
  g0.mig_devices = {MakeMig(g0, 0, "1g.10gb", 2)};
  ResourceOptions ro;
  ro.mig_strategy = MigStrategy::kMixed;
  auto set = BuildResources(Node({g0}), ro);
  ASSERT_TRUE(set.ok());
  AllocateOptions o;
  o.pass_device_specs = true;
  o.mig_cap_minors = *caps;
  auto r = BuildContainerResponse((*set)->resources[0], {"MIG-0-0"}, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::vector<std::string> paths;
  for (const auto& d : r->devices()) paths.push_back(d.container_path());
  EXPECT_THAT(paths, ::testing::IsSupersetOf({"/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap21",
                                              "/dev/nvidia-caps/nvidia-cap22"}));
  EXPECT_EQ(r->envs().at("NVIDIA_VISIBLE_DEVICES"), "MIG-0-0");
}

TEST(AllocateTest, MalformedMigMinorsIsAnError) {
  auto caps = ParseMigCapMinors("gpu0/gi2/access twenty-one\n");
  ASSERT_FALSE(caps.ok());
  EXPECT_THAT(caps.status().message(), HasSubstr("line 1"));
}

TEST(AllocateTest, CdiKindMustBeVendorSlashClass) {
  auto set = BuildResources(Node({MakeGpu(0)}), {});
  ASSERT_TRUE(set.ok());
  AllocateOptions o;
  o.cdi_kind = "nokind";
  Status st = WriteCdiSpec(**set, ::testing::TempDir() + "/cdi-bad", o);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace danqing::deviceplugin
