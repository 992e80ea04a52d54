#include "dra/opaque_config.h"

#include <gtest/gtest.h>

#include "dra/checkpoint.h"
#include "dra/node_devices.h"

namespace danqing::dra {
namespace {

using nlohmann::json;

TEST(OpaqueConfig, EmptyObjectIsNoSharing) {
  auto c = ParseGpuConfig(json::object());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->time_slice);
}

TEST(OpaqueConfig, TimeSlicingWithEachInterval) {
  for (const char* name : {"Default", "Short", "Medium", "Long"}) {
    auto c = ParseGpuConfig(json{{"apiVersion", "gpu.danqing.io/v1"},
                                 {"kind", "GpuConfig"},
                                 {"sharing", {{"strategy", "TimeSlicing"}, {"interval", name}}}});
    ASSERT_TRUE(c.ok()) << name << ": " << c.status().ToString();
    ASSERT_TRUE(c->time_slice);
    EXPECT_EQ(TimeSliceName(*c->time_slice), name);
  }
  auto c = ParseGpuConfig(json{{"sharing", {{"strategy", "TimeSlicing"}}}});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->time_slice, TimeSlice::kDefault);
}

TEST(OpaqueConfig, BadInputNamesTheField) {
  struct Case {
    json in;
    std::string field;
  };
  const Case cases[] = {
      {json::array(), "parameters: want an object"},
      {json{{"colour", "red"}}, "parameters.colour: unknown field"},
      {json{{"apiVersion", "gpu.danqing.io/v2"}}, "parameters.apiVersion"},
      {json{{"kind", "Other"}}, "parameters.kind"},
      {json{{"sharing", "TimeSlicing"}}, "parameters.sharing: want an object"},
      {json{{"sharing", {{"interval", "Short"}}}}, "parameters.sharing.strategy: missing"},
      {json{{"sharing", {{"strategy", "MPS"}}}},
       "parameters.sharing.strategy: want \"TimeSlicing\""},
      {json{{"sharing", {{"strategy", "TimeSlicing"}, {"interval", "Fast"}}}},
       "parameters.sharing.interval"},
      {json{{"sharing", {{"strategy", "TimeSlicing"}, {"interval", 3}}}},
       "parameters.sharing.interval"},
      {json{{"sharing", {{"strategy", "TimeSlicing"}, {"replicas", 4}}}},
       "parameters.sharing.replicas: unknown"},
  };
  for (const auto& c : cases) {
    auto r = ParseGpuConfig(c.in);
    ASSERT_FALSE(r.ok()) << c.in.dump();
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.field), std::string::npos) << r.status().message();
  }
}

TEST(DeviceTable, NamesWholeGpusAndMigDevices) {
  gpu::NodeInventory inv;
  gpu::Gpu a;
  a.index = 0;
  a.uuid = "GPU-a";
  a.minor_number = 0;
  gpu::Gpu b;
  b.index = 1;
  b.uuid = "GPU-b";
  b.minor_number = 1;
  b.mig_mode = gpu::MigMode::kEnabled;
  gpu::MigDevice m;
  m.uuid = "MIG-b1";
  m.parent_uuid = "GPU-b";
  m.profile = "1g.10gb";
  m.gpu_instance_id = 7;
  m.compute_instance_id = 0;
  b.mig_devices.push_back(m);
  inv.gpus = {a, b};
  auto t = BuildDeviceTable(inv, "node-a");
  ASSERT_EQ(t.devices.size(), 2u);
  ASSERT_NE(t.Find("gpu-0"), nullptr);
  const NodeDevice* mig = t.Find("gpu-1-mig-1g10gb-7-0");
  ASSERT_NE(mig, nullptr);
  EXPECT_EQ(mig->device.gpu_uuid, "GPU-b");
  EXPECT_EQ(mig->device.gpu_instance_id, 7u);
  EXPECT_EQ(BuildDeviceTable(inv, "node-a", {"GPU-b"}).devices.size(), 1u);
  auto sick = WithHealth(t, {{"GPU-b", "xid 79"}});
  EXPECT_FALSE(sick->Find("gpu-1-mig-1g10gb-7-0")->device.healthy);
  EXPECT_EQ(sick->Find("gpu-1-mig-1g10gb-7-0")->device.unhealthy_reason, "xid 79");
  EXPECT_TRUE(sick->Find("gpu-0")->device.healthy);
}

}  // namespace
}  // namespace danqing::dra
