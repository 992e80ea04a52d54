// GPU node labels in GFD's names, written for node-feature-discovery.
#include "agent/labels.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gpu/nvml_backend.h"
#include "testing/support/fake_node.h"

namespace danqing::agent {
namespace {

using ::testing::HasSubstr;

TEST(LabelsTest, LabelValuesAreValid) {
  EXPECT_EQ(LabelValue("NVIDIA A100-SXM4-80GB"), "NVIDIA-A100-SXM4-80GB");
  EXPECT_EQ(LabelValue("  Tesla T4 "), "Tesla-T4");
  EXPECT_EQ(LabelValue(std::string(80, 'x')).size(), 63u);
  EXPECT_EQ(LabelValue("(weird)/name"), "weird--name");
}

TEST(LabelsTest, FromAMixedMigNode) {
  danqing::testing::FakeNode node("a100-mig-mixed");
  auto b = gpu::NvmlBackend::Create(danqing::testing::FakeNvmlLibrary());
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  auto inv = (*b)->Discover();
  ASSERT_TRUE(inv.ok());
  auto cfg = config::ParseConfig(
      "version: v1\nflags:\n  migStrategy: mixed\nsharing:\n  timeSlicing:\n    resources:\n"
      "    - name: nvidia.com/gpu\n      replicas: 4\n",
      "test.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  deviceplugin::ResourceOptions ro;
  ro.mig_strategy = config::MigStrategy::kMixed;
  ro.time_slicing.push_back({"nvidia.com/gpu", "", 4, {}});
  auto set = deviceplugin::BuildResources(*inv, ro);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  Labels l = NodeLabels(*inv, **set, *cfg);
  EXPECT_EQ(l["nvidia.com/gpu.count"], "4");
  EXPECT_EQ(l["nvidia.com/gpu.product"], "NVIDIA-A100-SXM4-80GB");
  EXPECT_EQ(l["nvidia.com/gpu.memory"], "81920");
  EXPECT_EQ(l["nvidia.com/gpu.family"], "ampere");
  EXPECT_EQ(l["nvidia.com/gpu.compute.major"], "8");
  EXPECT_EQ(l["nvidia.com/mig.capable"], "true");
  EXPECT_EQ(l["nvidia.com/mig.strategy"], "mixed");
  EXPECT_EQ(l["nvidia.com/gpu.replicas"], "4");
  EXPECT_EQ(l["nvidia.com/gpu.sharing-strategy"], "time-slicing");
  EXPECT_EQ(l["nvidia.com/cuda.driver-version.major"], "550");
  EXPECT_EQ(l["nvidia.com/cuda.driver-version.revision"], "15");
  EXPECT_EQ(l["nvidia.com/cuda.runtime-version.full"], "12.4");
}

TEST(LabelsTest, WritesTheFeatureFileAtomically) {
  const std::string dir = ::testing::TempDir() + "/nfd-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(WriteFeatureFile(dir + "/danqing", {{"nvidia.com/gpu.count", "2"}, {"a", "b"}}).ok());
  std::ifstream in(dir + "/danqing");
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), "a=b\nnvidia.com/gpu.count=2\n");
  Status missing = WriteFeatureFile(dir + "/nope/danqing", {});
  EXPECT_EQ(missing.code(), StatusCode::kUnavailable);
  EXPECT_THAT(missing.message(), HasSubstr("node-feature-discovery"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace danqing::agent
