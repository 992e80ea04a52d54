// `gpus` output: the table and the JSON document built from a snapshot.
#include "gpu/report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpu/nvml_backend.h"
#include "testing/support/fake_node.h"

namespace danqing::gpu {
namespace {

using ::testing::HasSubstr;

Snapshot Take(const std::string& profile) {
  danqing::testing::FakeNode node(profile);
  auto b = NvmlBackend::Create(danqing::testing::FakeNvmlLibrary());
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  if (!b.ok()) return {};
  auto snap = TakeSnapshot(**b, /*with_sensors=*/true);
  EXPECT_TRUE(snap.ok()) << snap.status().ToString();
  return snap.ok() ? std::move(snap).value() : Snapshot{};
}

TEST(ReportTest, JsonHasInventoryTopologyAndSensors) {
  Snapshot snap = Take("a100-mig-mixed");
  nlohmann::json j = ToJson(snap);
  ASSERT_EQ(j["gpus"].size(), 4u);
  EXPECT_EQ(j["gpus"][0]["mig_mode"], "enabled");
  EXPECT_EQ(j["gpus"][0]["mig_devices"].size(), 4u);
  EXPECT_EQ(j["topology"].size(), 6u) << "one entry per unordered pair";
  // 4 GPUs + 4 + 7 + 2 MIG devices.
  EXPECT_EQ(j["sensors"].size(), 17u);
  EXPECT_TRUE(j["errors"].empty());
  EXPECT_EQ(j["driver_version"], "550.54.15");
}

TEST(ReportTest, TableShowsMatrixAndMigSection) {
  Snapshot snap = Take("a100-mig-mixed");
  std::string t = RenderTable(snap);
  EXPECT_THAT(t, HasSubstr("NVIDIA A100-SXM4-80GB"));
  EXPECT_THAT(t, HasSubstr("MIG devices"));
  EXPECT_THAT(t, HasSubstr("3g.40gb"));
  EXPECT_THAT(t, HasSubstr("NV12"));
  EXPECT_THAT(t, HasSubstr("Sensors"));
}

}  // namespace
}  // namespace danqing::gpu
