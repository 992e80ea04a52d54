// The operator's first command: `danqing-device-plugin gpus`, run as a process.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>

#include "testing/support/fake_node.h"

namespace {

using ::testing::HasSubstr;
using danqing::testing::FakeNode;
using danqing::testing::RunCommand;

TEST(CliTest, GpusJsonOnFakeNode) {
  FakeNode node("a100-8x-nvswitch");
  auto r = RunCommand({DANQING_DEVICE_PLUGIN_BIN, "--nvml-lib", danqing::testing::FakeNvmlLibrary(),
                       "gpus", "--json", "--log-level", "error"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["gpus"].size(), 8u);
  EXPECT_EQ(j["sensors"].size(), 8u);
  EXPECT_EQ(j["topology"].size(), 28u);
}

TEST(CliTest, GpusTableUsesLibraryFromEnvironment) {
  FakeNode node("v100-8x-dgx1");
  setenv("DANQING_NVML_LIB", danqing::testing::FakeNvmlLibrary().c_str(), 1);
  auto r = RunCommand({DANQING_DEVICE_PLUGIN_BIN, "gpus"});
  unsetenv("DANQING_NVML_LIB");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("Tesla V100-SXM2-32GB"));
  EXPECT_THAT(r.out, HasSubstr("Topology"));
}

TEST(CliTest, MissingLibraryExitsThreeWithReason) {
  auto r = RunCommand({DANQING_DEVICE_PLUGIN_BIN, "--nvml-lib", "/nonexistent/libnvidia-ml.so.1", "gpus"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_THAT(r.out, HasSubstr("cannot load NVML library '/nonexistent/libnvidia-ml.so.1'"));
}

TEST(CliTest, UnknownFlagIsUsageError) {
  auto r = RunCommand({DANQING_DEVICE_PLUGIN_BIN, "gpus", "--frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("frobnicate"));
}

TEST(CliTest, BadLogLevelIsUsageError) {
  auto r = RunCommand({DANQING_DEVICE_PLUGIN_BIN, "--log-level", "loud", "gpus"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("flag --log-level=\"loud\": invalid log level"));
}

TEST(CliTest, AConfigFileThatCannotBeReadIsAConfigurationError) {
  auto r = RunCommand({DANQING_DEVICE_PLUGIN_BIN, "--config-file", "/nonexistent/config.yaml", "gpus"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("/nonexistent/config.yaml"));
}

// "--name=" is an empty value, not "take the next argument", as on NVIDIA's
// command line: --node-features-file= turns the labels off.
TEST(CliTest, AnEmptyValueAfterTheEqualsSignIsEmpty) {
  FakeNode node("a100-8x-nvswitch");
  const std::string lib = "--nvml-lib=" + danqing::testing::FakeNvmlLibrary();
  auto r = RunCommand({DANQING_DEVICE_PLUGIN_BIN, "--config-file=", "--node-features-file=", lib, "gpus",
                       "--json", "--no-sensors", "--log-level=error"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["gpus"].size(), 8u);
  // Last on the line too.
  auto last = RunCommand({DANQING_DEVICE_PLUGIN_BIN, lib, "gpus", "--json", "--no-sensors", "--config-file="});
  EXPECT_EQ(last.exit_code, 0) << last.out;
  // An empty value where one is needed is still an error, naming the flag.
  auto bad = RunCommand({DANQING_DEVICE_PLUGIN_BIN, "--mig-strategy=", lib, "gpus"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.out, HasSubstr("flag --mig-strategy=\"\""));
}

}  // namespace
