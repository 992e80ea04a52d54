// The device plugin's calls recorded in the agent's metrics: registrations,
// Allocate and GetPreferredAllocation counts and latency, refused Allocates,
// through the real PluginManager and the kubelet emulator.
#include <gtest/gtest.h>

#include <chrono>

#include "deviceplugin/plugin_manager.h"
#include "metrics/agent_metrics.h"
#include "testing/kubelet/kubelet_emulator.h"
#include "tests/metrics/exposition.h"
#include "tests/metrics/metrics_test_util.h"

namespace danqing::metrics {
namespace {

using namespace std::chrono_literals;

double Value(const std::string& name, const std::map<std::string, std::string>& labels) {
  std::string text;
  Render(DefaultRegistry().Collect(), Format::kText004, text);
  return test::Parse(text).Value(name, labels).value_or(0);
}

TEST(PluginMetricsTest, RegistrationsAndAllocateCallsAreRecorded) {
  test::Node node("t4-1x");
  ASSERT_TRUE(node.inventory);
  auto set = deviceplugin::BuildResources(*node.inventory, {});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  test::TempDir dir;
  const std::map<std::string, std::string> gpu{{"resource", "nvidia.com/gpu"}};
  const double regs = Value("danqing_plugin_registrations_total", gpu);
  const double allocs = Value("danqing_plugin_allocate_duration_seconds_count", gpu);
  const double errors = Value("danqing_plugin_allocate_errors_total", gpu);
  const double preferred = Value("danqing_plugin_preferred_allocation_duration_seconds_count", gpu);

  danqing::testing::KubeletEmulator kubelet(dir.path());
  ASSERT_TRUE(kubelet.Start().ok());
  deviceplugin::ManagerOptions opts;
  opts.plugin_dir = dir.path();
  deviceplugin::PluginManager manager(opts);
  ASSERT_TRUE(manager.Start(*set).ok());
  ASSERT_TRUE(kubelet.WaitForRegistration("nvidia.com/gpu", 5s));
  const std::string uuid = node.inventory->gpus[0].uuid;
  EXPECT_TRUE(kubelet.GetPreferredAllocation("nvidia.com/gpu", {uuid}, {}, 1).status.ok());
  EXPECT_TRUE(kubelet.Allocate("nvidia.com/gpu", {uuid}).status.ok());
  EXPECT_FALSE(kubelet.Allocate("nvidia.com/gpu", {"GPU-no-such-device"}).status.ok());
  manager.Stop();

  EXPECT_EQ(Value("danqing_plugin_registrations_total", gpu), regs + 1);
  EXPECT_EQ(Value("danqing_plugin_allocate_duration_seconds_count", gpu), allocs + 2);
  EXPECT_EQ(Value("danqing_plugin_allocate_errors_total", gpu), errors + 1);
  EXPECT_EQ(Value("danqing_plugin_preferred_allocation_duration_seconds_count", gpu),
            preferred + 1);
  EXPECT_GT(Value("danqing_plugin_allocate_duration_seconds_sum", gpu), 0);
}

}  // namespace
}  // namespace danqing::metrics
