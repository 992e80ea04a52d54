// danqing-device-plugin doctor: each check finds what is wrong on a node
// (fake NVML, emulated kubelet, temporary directories) and says how to fix it.
#include "agent/doctor.h"

#include "agent/agent.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "testing/kubelet/kubelet_emulator.h"
#include "testing/support/fake_node.h"

namespace danqing::agent {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

class DoctorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = "/tmp/dqdoc-" + std::to_string(getpid());
    std::filesystem::create_directories(dir_ + "/plugins");
    std::filesystem::create_directories(dir_ + "/cdi");
    std::filesystem::create_directories(dir_ + "/dev");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  config::Config Config() {
    config::Config cfg;
    cfg.danqing.device_plugin_path = dir_ + "/plugins";
    cfg.danqing.pod_resources_socket = dir_ + "/pod-resources.sock";
    cfg.danqing.cdi_root = dir_ + "/cdi";
    cfg.danqing.nvml_lib = testing::FakeNvmlLibrary();
    cfg.flags.nvidia_driver_root = dir_;
    cfg.flags.nvidia_dev_root = dir_;
    cfg.danqing.metrics_addr = "";  // no running agent unless a test starts one
    return cfg;
  }

  const Finding* Find(const std::vector<Finding>& fs, std::string_view check) {
    for (const auto& f : fs) {
      if (f.check == check) return &f;
    }
    return nullptr;
  }

  std::string dir_;
};

// The GPU Operator's layout: the driver lives in a container, its root is
// mounted into the plugin at containerDriverRoot, and NVML is loaded from
// there (as NVIDIA's plugin does), not from the dynamic linker's path.
TEST_F(DoctorTest, NvmlIsFoundUnderTheContainerDriverRoot) {
  testing::FakeNode node("a100-8x-nvswitch");
  config::Config cfg = Config();
  cfg.danqing.nvml_lib = "";
  cfg.flags.plugin.container_driver_root = dir_ + "/driver-root";
  EXPECT_EQ(agent::NvmlLibraryFor(cfg), "") << "nothing mounted there: the dynamic linker's search";
  std::filesystem::create_directories(dir_ + "/driver-root/usr/lib/x86_64-linux-gnu");
  const std::string lib = dir_ + "/driver-root/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1";
  std::filesystem::create_symlink(testing::FakeNvmlLibrary(), lib);
  EXPECT_EQ(agent::NvmlLibraryFor(cfg), lib);
  auto backend = agent::NvmlBackendFactory()(cfg);
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  EXPECT_THAT((*backend)->Describe(), HasSubstr(lib));
  // An explicit nvmlLib wins; a root of "/" is the dynamic linker's business.
  cfg.danqing.nvml_lib = testing::FakeNvmlLibrary();
  EXPECT_EQ(agent::NvmlLibraryFor(cfg), testing::FakeNvmlLibrary());
  cfg.danqing.nvml_lib = "";
  cfg.flags.plugin.container_driver_root = "/";
  EXPECT_EQ(agent::NvmlLibraryFor(cfg), "");
}

TEST_F(DoctorTest, AHealthyNodeWithAKubeletPassesButForMissingDeviceNodes) {
  testing::FakeNode node("a100-8x-nvswitch");
  testing::KubeletEmulator kubelet(dir_ + "/plugins");
  ASSERT_TRUE(kubelet.Start().ok());
  auto findings = RunDoctor(Config(), NvmlBackendFactory());
  const std::string text = RenderFindings(findings);
  EXPECT_THAT(text, HasSubstr("[ ok ] configuration"));
  EXPECT_THAT(text, HasSubstr("[ ok ] NVIDIA driver (NVML)"));
  EXPECT_THAT(text, HasSubstr("[ ok ] GPUs: 8 GPU(s), driver"));
  EXPECT_THAT(text, HasSubstr("[ ok ] kubelet socket"));
  EXPECT_THAT(text, HasSubstr("[ ok ] GPU 7 health"));
  EXPECT_THAT(text, HasSubstr("[ ok ] device events"));
  // The temporary dev root has no /dev/nvidia* character devices.
  const Finding* dev = Find(findings, "device nodes");
  ASSERT_NE(dev, nullptr);
  EXPECT_EQ(dev->level, Finding::Level::kFail);
  EXPECT_THAT(dev->detail, HasSubstr(dir_ + "/dev/nvidiactl"));
  EXPECT_THAT(dev->fix, HasSubstr("nvidia-modprobe"));
  const Finding* pr = Find(findings, "pod-resources socket");
  ASSERT_NE(pr, nullptr);
  EXPECT_EQ(pr->level, Finding::Level::kWarn);
}

TEST_F(DoctorTest, UnhealthyGpuAndAbsentKubeletAreFailuresWithFixes) {
  testing::FakeNode node("a100-8x-nvswitch");
  // The fake's state lives while some NVML user holds it initialised.
  auto holder = NvmlBackendFactory()(Config());
  ASSERT_TRUE(holder.ok());
  node.Control(R"({"cmd":"set","gpu":2,"sensors":{"temperature_c":95,"throttle_reasons":64}})");
  auto findings = RunDoctor(Config(), NvmlBackendFactory());
  const Finding* gpu2 = Find(findings, "GPU 2 health");
  ASSERT_NE(gpu2, nullptr);
  EXPECT_EQ(gpu2->level, Finding::Level::kFail);
  EXPECT_THAT(gpu2->detail, HasSubstr("thermal-slowdown"));
  const Finding* sock = Find(findings, "kubelet socket");
  ASSERT_NE(sock, nullptr);
  EXPECT_EQ(sock->level, Finding::Level::kFail);
  EXPECT_THAT(sock->fix, HasSubstr("kubelet running"));
  EXPECT_TRUE(AnyFailed(findings));
}

// With a CDI strategy the doctor says whether the spec will carry the
// driver's libraries, found where the agent looks for them.
TEST_F(DoctorTest, CdiDriverFilesAreLookedForUnderTheContainerDriverRoot) {
  testing::FakeNode node("a100-8x-nvswitch");  // driver 550.54.15
  config::Config cfg = Config();
  cfg.flags.plugin.device_list_strategy = {config::DeviceListStrategy::kCdiCri};
  cfg.flags.plugin.container_driver_root = dir_ + "/driver-root";
  auto findings = RunDoctor(cfg, NvmlBackendFactory(), {});
  const Finding* files = Find(findings, "CDI driver files");
  ASSERT_NE(files, nullptr);
  EXPECT_EQ(files->level, Finding::Level::kWarn);
  EXPECT_THAT(files->detail, HasSubstr("goes without the driver's files"));
  EXPECT_THAT(files->fix, HasSubstr("deploy/overlays/cdi"));

  std::filesystem::create_directories(dir_ + "/driver-root/usr/lib64");
  std::ofstream(dir_ + "/driver-root/usr/lib64/libcuda.so.550.54.15") << "ELF";
  findings = RunDoctor(cfg, NvmlBackendFactory(), {});
  files = Find(findings, "CDI driver files");
  ASSERT_NE(files, nullptr);
  EXPECT_EQ(files->level, Finding::Level::kOk);
  EXPECT_THAT(files->detail, HasSubstr("1 file of driver 550.54.15 (libraries in /usr/lib64)"));
  // The driver root is not the host's /: the hook cannot be seen from here.
  const Finding* hook = Find(findings, "CDI hook");
  ASSERT_NE(hook, nullptr);
  EXPECT_EQ(hook->level, Finding::Level::kOk);
  EXPECT_THAT(hook->detail, HasSubstr("/usr/bin/nvidia-ctk (on the host; not visible here to check)"));
  // The host's / as the driver root, without the toolkit: the hook is seen missing.
  cfg.flags.nvidia_driver_root = "/";
  hook = Find(findings = RunDoctor(cfg, NvmlBackendFactory(), {}), "CDI hook");
  ASSERT_NE(hook, nullptr);
  EXPECT_EQ(hook->level, Finding::Level::kWarn);
  EXPECT_THAT(hook->detail, HasSubstr("is not on this node"));
  EXPECT_THAT(hook->fix, HasSubstr("NVIDIA Container Toolkit"));

  cfg.flags.plugin.device_list_strategy = {config::DeviceListStrategy::kEnvvar};
  EXPECT_EQ(Find(RunDoctor(cfg, NvmlBackendFactory(), {}), "CDI driver files"), nullptr);
}

// The driver root and hook matter to a CDI spec only: under envvar a change
// to them leaves the plugin servers' options (and so the servers) as they are.
TEST(ManagerOptionsTest, CdiSettingsCountOnlyWithACdiStrategy) {
  config::Config a;
  config::Config b = a;
  b.flags.plugin.nvidia_ctk_path = "/usr/local/nvidia/toolkit/nvidia-cdi-hook";
  b.flags.plugin.container_driver_root = "/host";
  EXPECT_TRUE(ManagerOptionsFrom(a) == ManagerOptionsFrom(b));
  a.flags.plugin.device_list_strategy = b.flags.plugin.device_list_strategy = {config::DeviceListStrategy::kCdiCri};
  EXPECT_FALSE(ManagerOptionsFrom(a) == ManagerOptionsFrom(b));
  EXPECT_EQ(ManagerOptionsFrom(b).allocate.cdi_hook_path, "/usr/local/nvidia/toolkit/nvidia-cdi-hook");
  EXPECT_EQ(ManagerOptionsFrom(b).allocate.driver_root_local, "/host");
}

TEST_F(DoctorTest, NoDriverBadConfigAndCdiOffInTheRuntime) {
  config::Config cfg = Config();
  cfg.danqing.nvml_lib = dir_ + "/no-such/libnvidia-ml.so.1";
  cfg.flags.plugin.device_list_strategy = {config::DeviceListStrategy::kCdiCri};
  const std::string containerd = dir_ + "/config.toml";
  std::ofstream(containerd) << "[plugins.\"io.containerd.grpc.v1.cri\"]\n  enable_cdi = false\n";
  DoctorOptions opts;
  opts.containerd_config = containerd;
  auto findings = RunDoctor(cfg, NvmlBackendFactory(), opts);
  const Finding* nvml = Find(findings, "NVIDIA driver (NVML)");
  ASSERT_NE(nvml, nullptr);
  EXPECT_EQ(nvml->level, Finding::Level::kFail);
  EXPECT_THAT(nvml->fix, HasSubstr("libnvidia-ml.so.1"));
  const Finding* cdi = Find(findings, "containerd CDI");
  ASSERT_NE(cdi, nullptr);
  EXPECT_EQ(cdi->level, Finding::Level::kFail);
  EXPECT_THAT(cdi->fix, HasSubstr("enable_cdi = true"));

  auto bad = config::ParseConfig("version: v1\nflags:\n  migStrategy: sometimes\n", "bad.yaml");
  ASSERT_FALSE(bad.ok());
  auto with_bad = RunDoctor(bad, NvmlBackendFactory(), opts);
  ASSERT_FALSE(with_bad.empty());
  EXPECT_EQ(with_bad[0].check, "configuration");
  EXPECT_EQ(with_bad[0].level, Finding::Level::kFail);
  EXPECT_THAT(with_bad[0].detail, HasSubstr("migStrategy"));
}

TEST_F(DoctorTest, TheCommandPrintsFindingsAndExitsNonZeroOnFailure) {
  testing::FakeNode node("t4-1x");
  auto r = testing::RunCommand({DANQING_DEVICE_PLUGIN_BIN, "doctor", "--nvml-lib", testing::FakeNvmlLibrary(),
                                "--device-plugin-path", dir_ + "/plugins", "--cdi-root", dir_ + "/cdi"});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("[ ok ] GPUs: 1 GPU(s)"));
  EXPECT_THAT(r.out, HasSubstr("[FAIL] kubelet socket"));
  EXPECT_THAT(r.out, HasSubstr("checks: "));
  auto v = testing::RunCommand({DANQING_DEVICE_PLUGIN_BIN, "--version"});
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_THAT(v.out, HasSubstr("danqing-device-plugin 0."));
}

TEST_F(DoctorTest, AGpuTheRunningAgentTookOutForAnXidIsReportedWithItsReason) {
  // An XID reaches only a process subscribed to events when it happens; the
  // doctor's own reading of the sensors finds the GPU fine, so it asks the
  // agent running on the node (its /metrics).
  testing::FakeNode node("a100-8x-nvswitch");
  testing::KubeletEmulator kubelet(dir_ + "/plugins");
  ASSERT_TRUE(kubelet.Start().ok());
  config::Config cfg = Config();
  cfg.danqing.metrics_addr = "127.0.0.1:0";
  cfg.danqing.node_features_file = "";
  Agent agent;
  ASSERT_TRUE(agent.Start(cfg).ok());
  node.Control(R"({"cmd":"xid","gpu":2,"xid":79})");
  cfg.danqing.metrics_addr = "127.0.0.1:" + std::to_string(agent.metrics_port());
  const Finding* gpu2 = nullptr;
  std::vector<Finding> findings;
  for (int i = 0; i < 50; ++i) {  // the exporter collects every second
    findings = RunDoctor(cfg, NvmlBackendFactory());
    gpu2 = Find(findings, "GPU 2 health");
    if (gpu2 != nullptr && gpu2->level == Finding::Level::kFail) break;
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_NE(gpu2, nullptr);
  EXPECT_EQ(gpu2->level, Finding::Level::kFail) << RenderFindings(findings);
  EXPECT_THAT(gpu2->detail, HasSubstr("unhealthy (running agent): xid-79"));
  const Finding* running = Find(findings, "running agent");
  ASSERT_NE(running, nullptr);
  EXPECT_EQ(running->level, Finding::Level::kOk);
  EXPECT_EQ(Find(findings, "GPU 3 health")->level, Finding::Level::kOk);
  agent.Stop();

  // With the agent gone the doctor says so and judges by the sensors alone.
  findings = RunDoctor(cfg, NvmlBackendFactory());
  running = Find(findings, "running agent");
  ASSERT_NE(running, nullptr);
  EXPECT_EQ(running->level, Finding::Level::kInfo);
  EXPECT_THAT(running->detail, HasSubstr("nothing answers on 127.0.0.1:"));
  EXPECT_EQ(Find(findings, "GPU 2 health")->level, Finding::Level::kOk);
}

}  // namespace
}  // namespace danqing::agent
