// danqing-device-plugin as the DaemonSet runs it: a separate process with
// NVIDIA-style flags, registering with the (emulated) kubelet, reloading on
// SIGHUP and cleaning up on SIGTERM.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "testing/kubelet/kubelet_emulator.h"
#include "testing/support/fake_node.h"

namespace {

using ::testing::HasSubstr;
using danqing::testing::ChildProcess;
using danqing::testing::FakeNode;
using danqing::testing::KubeletEmulator;
using namespace std::chrono_literals;

bool Exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = "/tmp/dqd-" + std::to_string(getpid());
    std::filesystem::create_directories(dir_);
    config_ = dir_ + "/config.yaml";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::vector<std::string> Args() const {
    return {DANQING_DEVICE_PLUGIN_BIN,       "--device-plugin-path", dir_,
            "--nvml-lib",                    danqing::testing::FakeNvmlLibrary(),
            "--config-file",                 config_,
            "--cdi-root",                    dir_ + "/cdi"};
  }

  std::string dir_;
  std::string config_;
};

TEST_F(DaemonTest, ServesReloadsAndStopsCleanly) {
  FakeNode node("a100-8x-nvswitch");
  std::ofstream(config_) << "version: v1\nflags:\n  migStrategy: none\n";
  KubeletEmulator kubelet(dir_);
  ASSERT_TRUE(kubelet.Start().ok());

  ChildProcess daemon(Args());
  ASSERT_GT(daemon.pid(), 0);
  ASSERT_TRUE(kubelet.WaitForRegistration("nvidia.com/gpu", 10s)) << daemon.Output();
  ASSERT_TRUE(kubelet.WaitForDevices(
      "nvidia.com/gpu", [](const auto& devs) { return devs.size() == 8; }, 5s));

  // Reload with time-slicing: the shared resource appears without a restart of the process.
  std::ofstream(config_) << R"(version: v1
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
    - name: nvidia.com/gpu
      replicas: 2
)";
  ASSERT_TRUE(daemon.Signal(SIGHUP));
  ASSERT_TRUE(kubelet.WaitForRegistration("nvidia.com/gpu.shared", 10s)) << daemon.Output();
  ASSERT_TRUE(kubelet.WaitForDevices(
      "nvidia.com/gpu.shared", [](const auto& devs) { return devs.size() == 16; }, 5s));

  // A broken config on reload keeps the running one.
  std::ofstream(config_) << "version: v1\nflags:\n  migStrategy: sometimes\n";
  ASSERT_TRUE(daemon.Signal(SIGHUP));
  auto r = kubelet.Allocate("nvidia.com/gpu.shared", {kubelet.Devices("nvidia.com/gpu.shared")[0].id()});
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();

  ASSERT_TRUE(daemon.Signal(SIGTERM));
  EXPECT_EQ(daemon.Wait(10'000), 0) << daemon.Output();
  EXPECT_FALSE(Exists(dir_ + "/danqing-nvidia.com-gpu.shared.sock"));
  EXPECT_THAT(daemon.Output(), HasSubstr("migStrategy"));
}

TEST_F(DaemonTest, MissingDriverFailsWithExitThree) {
  std::ofstream(config_) << "version: v1\n";
  auto args = Args();
  args[4] = "/nonexistent/libnvidia-ml.so.1";
  ChildProcess daemon(args);
  EXPECT_EQ(daemon.Wait(10'000), 3);
  EXPECT_THAT(daemon.Output(), HasSubstr("cannot load NVML library"));
}

TEST_F(DaemonTest, MissingDriverWithoutFailOnInitAdvertisesZero) {
  std::ofstream(config_) << "version: v1\nflags:\n  failOnInitError: false\n";
  KubeletEmulator kubelet(dir_);
  ASSERT_TRUE(kubelet.Start().ok());
  auto args = Args();
  args[4] = "/nonexistent/libnvidia-ml.so.1";
  ChildProcess daemon(args);
  ASSERT_TRUE(kubelet.WaitForRegistration("nvidia.com/gpu", 10s)) << daemon.Output();
  EXPECT_TRUE(kubelet.Devices("nvidia.com/gpu").empty());
  daemon.Signal(SIGTERM);
  EXPECT_EQ(daemon.Wait(10'000), 0);
}

TEST_F(DaemonTest, MalformedConfigIsAUsageErrorNamingTheLine) {
  std::ofstream(config_) << "version: v1\nflags:\n  migStrategy: none\n  bogusField: 1\n";
  ChildProcess daemon(Args());
  EXPECT_EQ(daemon.Wait(10'000), 2);
  EXPECT_THAT(daemon.Output(), HasSubstr("bogusField"));
  EXPECT_THAT(daemon.Output(), HasSubstr("config.yaml:4:3"));
}

}  // namespace
