// danqing-device-plugin as the DaemonSet runs it: a separate process with
// NVIDIA-style flags, registering with the (emulated) kubelet, reloading on
// SIGHUP and cleaning up on SIGTERM.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "testing/kubelet/kubelet_emulator.h"
#include "testing/support/fake_node.h"
#include "testing/support/unix_socket.h"

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
    std::filesystem::create_directories(dir_ + "/nfd");
  }

  std::string Labels() const {
    std::ifstream in(dir_ + "/nfd/danqing");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::vector<std::string> Args() const {
    return {DANQING_DEVICE_PLUGIN_BIN,       "--device-plugin-path", dir_,
            "--nvml-lib",                    danqing::testing::FakeNvmlLibrary(),
            "--config-file",                 config_,
            "--cdi-root",                    dir_ + "/cdi",
            "--node-features-file",          dir_ + "/nfd/danqing",
            // Loopback and a free port: two daemons of tests that ctest runs
            // at once must not share :9400 (the log names the port).
            "--metrics-addr",                "127.0.0.1:0"};
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
  EXPECT_THAT(Labels(), HasSubstr("nvidia.com/gpu.count=8\n"));
  EXPECT_THAT(Labels(), HasSubstr("nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB\n"));
  EXPECT_THAT(Labels(), HasSubstr("nvidia.com/gpu.replicas=1\n"));

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
  EXPECT_THAT(Labels(), HasSubstr("nvidia.com/gpu.replicas=2\n"));
  EXPECT_THAT(Labels(), HasSubstr("nvidia.com/gpu.sharing-strategy=time-slicing\n"));

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

// The metrics endpoint's port, from the last "agent: metrics on ... (port N)" line.
int MetricsPort(const std::string& output) {
  const std::string key = "(port ";
  const size_t at = output.rfind(key);
  return at == std::string::npos ? 0 : std::atoi(output.c_str() + at + key.size());
}

// A reload that changes only where the pod-resources socket is: the exporter
// starts again with it (before, only a new metrics address restarted it, and
// the pods stayed unattributed until the process restarted).
TEST_F(DaemonTest, ReloadAppliesANewPodResourcesSocketToTheMetrics) {
  FakeNode node("a100-8x-nvswitch");
  auto write = [&](const std::string& socket) {
    std::ofstream(config_) << "version: v1\ndanqing:\n  metricsAddr: \"127.0.0.1:0\"\n  podResourcesSocket: " << socket
                           << "\n";
  };
  write(dir_ + "/absent.sock");
  KubeletEmulator kubelet(dir_);
  ASSERT_TRUE(kubelet.Start().ok());
  danqing::testing::PodResourcesEmulator pods(dir_ + "/pod-resources.sock");
  ASSERT_TRUE(pods.Start().ok());
  ChildProcess daemon(Args());
  ASSERT_TRUE(kubelet.WaitForRegistration("nvidia.com/gpu", 10s)) << daemon.Output();
  // The sample line itself (its HELP line also starts with the name).
  auto sample = [&](const std::string& line, std::chrono::seconds within) {
    const auto until = std::chrono::steady_clock::now() + within;
    while (std::chrono::steady_clock::now() < until) {
      if (const int port = MetricsPort(daemon.Output()); port > 0) {
        httplib::Client c("127.0.0.1", port);
        c.set_connection_timeout(1, 0);
        auto r = c.Get("/metrics");
        if (r && r->status == 200 && r->body.find("\n" + line + "\n") != std::string::npos) return true;
      }
      std::this_thread::sleep_for(100ms);
    }
    return false;
  };
  ASSERT_TRUE(sample("danqing_pod_resources_up 0", 10s)) << daemon.Output();
  write(pods.socket_path());
  ASSERT_TRUE(daemon.Signal(SIGHUP));
  EXPECT_TRUE(sample("danqing_pod_resources_up 1", 10s)) << daemon.Output();
  ASSERT_TRUE(daemon.Signal(SIGTERM));
  EXPECT_EQ(daemon.Wait(10'000), 0) << daemon.Output();
}

TEST_F(DaemonTest, ConfigFileChangeAppliesOnlyWhatDiffers) {
  FakeNode node("a100-8x-nvswitch");
  auto write = [&](int replicas) {
    // Write-then-rename, as editors and ConfigMap volumes replace files.
    std::ofstream(config_ + ".tmp") << "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                                       "    - name: nvidia.com/gpu\n      devices: [\"0\"]\n"
                                       "      replicas: "
                                    << replicas << "\n";
    std::filesystem::rename(config_ + ".tmp", config_);
  };
  write(2);
  KubeletEmulator kubelet(dir_);
  ASSERT_TRUE(kubelet.Start().ok());
  ChildProcess daemon(Args());
  ASSERT_TRUE(kubelet.WaitForRegistration("nvidia.com/gpu", 10s)) << daemon.Output();
  ASSERT_TRUE(kubelet.WaitForRegistration("nvidia.com/gpu.shared", 10s)) << daemon.Output();
  ASSERT_TRUE(kubelet.WaitForDevices("nvidia.com/gpu", [](const auto& d) { return d.size() == 7; }, 5s));
  ASSERT_TRUE(
      kubelet.WaitForDevices("nvidia.com/gpu.shared", [](const auto& d) { return d.size() == 2; }, 5s));
  const auto updates = kubelet.StreamUpdates("nvidia.com/gpu");

  write(4);  // no signal: the file watch picks it up
  ASSERT_TRUE(
      kubelet.WaitForDevices("nvidia.com/gpu.shared", [](const auto& d) { return d.size() == 4; }, 10s))
      << daemon.Output();
  // The unchanged resource kept its registration and its stream, and was sent nothing.
  EXPECT_EQ(kubelet.RegistrationCount("nvidia.com/gpu"), 1);
  EXPECT_FALSE(kubelet.StreamEnded("nvidia.com/gpu"));
  // A list sent with the shared one by mistake travels on another stream and
  // may land later: give it a second.
  EXPECT_FALSE(kubelet.WaitForStreamUpdates("nvidia.com/gpu", updates + 1, 1s));
  EXPECT_EQ(kubelet.StreamUpdates("nvidia.com/gpu"), updates);
  EXPECT_EQ(kubelet.RegistrationCount("nvidia.com/gpu.shared"), 1);

  daemon.Signal(SIGTERM);
  EXPECT_EQ(daemon.Wait(10'000), 0) << daemon.Output();
}

TEST_F(DaemonTest, MigRepartitionIsPickedUpWithoutRestart) {
  FakeNode node("a100-mig-mixed");
  std::ofstream(config_) << "version: v1\nflags:\n  migStrategy: mixed\n";
  KubeletEmulator kubelet(dir_);
  ASSERT_TRUE(kubelet.Start().ok());
  ChildProcess daemon(Args());
  ASSERT_TRUE(kubelet.WaitForRegistration("nvidia.com/mig-3g.40gb", 10s)) << daemon.Output();
  ASSERT_TRUE(kubelet.WaitForDevices("nvidia.com/mig-3g.40gb", [](const auto& d) { return d.size() == 3; }, 5s));
  // GPU 2 goes from 3g.40gb x2 to one 7g.80gb.
  node.Control(R"({"cmd":"mig","gpu":2,"mig":{"mode":1,"pending":1,"devices":[
      {"profile":"7g.80gb","gpu_instance_id":0,"uuid":"MIG-5d2b8f6e-0a7c-5e11-9d3f-7b1c2a9e4f01"}]}})");
  ASSERT_TRUE(kubelet.WaitForRegistration("nvidia.com/mig-7g.80gb", 10s)) << daemon.Output();
  EXPECT_TRUE(kubelet.WaitForDevices("nvidia.com/mig-3g.40gb", [](const auto& d) { return d.size() == 1; }, 5s));
  daemon.Signal(SIGTERM);
  EXPECT_EQ(daemon.Wait(10'000), 0) << daemon.Output();
}

TEST_F(DaemonTest, KubeletCallsAreServedWithoutGrpcCallbackThreads) {
  // gRPC's callback API runs reactions on process-wide "nexting" threads that
  // nap 100 ms after each idle second; a health change on a quiet node could
  // wait for them. The agent serves the kubelet from its own completion
  // queues, so after every kind of call none of those threads exists.
  FakeNode node("a100-8x-nvswitch");
  std::ofstream(config_) << "version: v1\n";
  KubeletEmulator kubelet(dir_);
  ASSERT_TRUE(kubelet.Start().ok());
  ChildProcess daemon(Args());
  ASSERT_TRUE(kubelet.WaitForDevices("nvidia.com/gpu", [](const auto& d) { return d.size() == 8; }, 10s))
      << daemon.Output();
  const auto devices = kubelet.Devices("nvidia.com/gpu");
  std::vector<std::string> ids;
  for (const auto& d : devices) ids.push_back(d.id());
  const auto preferred = kubelet.GetPreferredAllocation("nvidia.com/gpu", ids, {}, 2);
  ASSERT_TRUE(preferred.status.ok()) << preferred.status.error_message();
  EXPECT_EQ(preferred.device_ids.size(), 2u);
  const auto allocated = kubelet.Allocate("nvidia.com/gpu", {ids[0]});
  ASSERT_TRUE(allocated.status.ok()) << allocated.status.error_message();
  node.Control(R"({"cmd":"xid","gpu":1,"xid":79})");
  ASSERT_TRUE(kubelet.WaitForDevices(
      "nvidia.com/gpu",
      [&](const auto& d) {
        return std::any_of(d.begin(), d.end(), [&](const auto& x) { return x.id() == ids[1] && x.health() == "Unhealthy"; });
      },
      5s))
      << daemon.Output();

  std::vector<std::string> threads;
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(daemon.pid()) + "/task")) {
    std::ifstream in(task.path() / "comm");
    std::string name;
    std::getline(in, name);
    threads.push_back(name);
  }
  EXPECT_THAT(threads, ::testing::Not(::testing::Contains(HasSubstr("nexting"))));
  EXPECT_THAT(threads, ::testing::Contains("dq-plugin-cq"));  // the server's own queue thread
  daemon.Signal(SIGTERM);
  EXPECT_EQ(daemon.Wait(10'000), 0) << daemon.Output();
}

// Issue 31 (3): replicas whose list would not fit one ListAndWatch message
// (the kubelet's 4 MiB limit) are refused, naming the limit: at start (exit
// 2, a usage error) and on a reload (the running configuration stays, and
// the kubelet keeps its devices and its registration).
TEST_F(DaemonTest, ReplicasPastTheListAndWatchLimitAreRefusedAtStartAndOnReload) {
  FakeNode node("a100-8x-nvswitch");  // 8 GPUs
  auto write = [&](int replicas) {    // replaced whole, as a ConfigMap volume does
    std::ofstream(config_ + ".tmp") << "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                                       "    - name: nvidia.com/gpu\n      replicas: "
                                    << replicas << "\n";
    std::filesystem::rename(config_ + ".tmp", config_);
  };
  KubeletEmulator kubelet(dir_);
  ASSERT_TRUE(kubelet.Start().ok());
  write(10'000);  // 80 000 devices: 4.6 MB of device list
  {
    ChildProcess refused(Args());
    EXPECT_EQ(refused.Wait(10'000), 2) << refused.Output();
    EXPECT_THAT(refused.Output(), HasSubstr("4 MiB"));
  }

  write(2);
  ChildProcess daemon(Args());
  ASSERT_TRUE(kubelet.WaitForRegistration("nvidia.com/gpu", 10s)) << daemon.Output();
  ASSERT_TRUE(kubelet.WaitForDevices(
      "nvidia.com/gpu", [](const auto& d) { return d.size() == 16; }, 5s));
  write(10'000);
  ASSERT_TRUE(daemon.Signal(SIGHUP));
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (daemon.Output().find("4 MiB") == std::string::npos &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_THAT(daemon.Output(), HasSubstr("4 MiB")) << daemon.Output();
  EXPECT_THAT(daemon.Output(), HasSubstr("reload kept the running configuration"));
  EXPECT_EQ(kubelet.Devices("nvidia.com/gpu").size(), 16u);
  auto r = kubelet.Allocate("nvidia.com/gpu", {kubelet.Devices("nvidia.com/gpu")[0].id()});
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(kubelet.RegistrationCount("nvidia.com/gpu"), 1);
  ASSERT_TRUE(daemon.Signal(SIGTERM));
  EXPECT_EQ(daemon.Wait(10'000), 0) << daemon.Output();
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
  // The list the kubelet holds is one the plugin sent: empty.
  ASSERT_TRUE(kubelet.WaitForStreamUpdates("nvidia.com/gpu", 1, 10s)) << daemon.Output();
  EXPECT_TRUE(kubelet.Devices("nvidia.com/gpu").empty());
  daemon.Signal(SIGTERM);
  EXPECT_EQ(daemon.Wait(10'000), 0);
}

// With a CDI strategy the spec carries the running driver's files, found
// under containerDriverRoot and named by their path under nvidiaDriverRoot on
// the host, and the hooks of nvidiaCTKPath: a CDI-only runtime then gives the
// container a working CUDA driver, as with NVIDIA's plugin.
TEST_F(DaemonTest, CdiSpecCarriesTheDriverFromTheContainerDriverRoot) {
  FakeNode node("a100-8x-nvswitch");  // driver 550.54.15
  const std::string root = dir_ + "/driver-root";
  const std::string lib = "/usr/lib/x86_64-linux-gnu";
  std::filesystem::create_directories(root + lib);
  std::filesystem::create_directories(root + "/usr/bin");
  for (const char* f : {"/libcuda.so.550.54.15", "/libnvidia-ml.so.550.54.15", "/libnvidia-ml.so.470.256.02"}) {
    std::ofstream(root + lib + f) << "ELF";
  }
  std::ofstream(root + "/usr/bin/nvidia-smi") << "ELF";
  std::ofstream(config_) << "version: v1\nflags:\n  nvidiaDriverRoot: /run/nvidia/driver\n"
                            "  plugin:\n    deviceListStrategy: cdi-cri\n"
                            "    nvidiaCTKPath: /usr/local/nvidia/toolkit/nvidia-cdi-hook\n";
  KubeletEmulator kubelet(dir_);
  ASSERT_TRUE(kubelet.Start().ok());
  auto args = Args();
  args.insert(args.end(), {"--container-driver-root", root});
  ChildProcess daemon(args);
  ASSERT_TRUE(kubelet.WaitForRegistration("nvidia.com/gpu", 10s)) << daemon.Output();

  std::ifstream in(dir_ + "/cdi/k8s.device-plugin.danqing.io-gpu.json");
  ASSERT_TRUE(in) << daemon.Output();
  const auto spec = nlohmann::json::parse(in);
  std::vector<std::string> host_paths;
  for (const auto& m : spec["containerEdits"]["mounts"]) host_paths.push_back(m["hostPath"]);
  EXPECT_THAT(host_paths, ::testing::UnorderedElementsAre("/run/nvidia/driver" + lib + "/libcuda.so.550.54.15",
                                                          "/run/nvidia/driver" + lib + "/libnvidia-ml.so.550.54.15",
                                                          "/run/nvidia/driver/usr/bin/nvidia-smi"));
  ASSERT_EQ(spec["containerEdits"]["hooks"].size(), 2u);
  EXPECT_EQ(spec["containerEdits"]["hooks"][1]["args"],
            nlohmann::json({"nvidia-cdi-hook", "update-ldcache", "--folder", lib}));
  EXPECT_EQ(spec["containerEdits"]["env"], nlohmann::json({"NVIDIA_VISIBLE_DEVICES=void"}));
  EXPECT_EQ(spec["devices"].size(), 8u);
  EXPECT_THAT(daemon.Output(), ::testing::Not(HasSubstr("CDI spec without the driver")));

  // nvidia-persistenced starts on the node; a reload looks for the files afresh.
  const std::string sock = root + "/run/nvidia-persistenced/socket";
  std::filesystem::create_directories(root + "/run/nvidia-persistenced");
  const int fd = danqing::testing::BindUnixSocket(sock);
  ASSERT_GE(fd, 0) << sock;
  ::close(fd);
  ASSERT_TRUE(daemon.Signal(SIGHUP));
  bool seen = false;
  for (int i = 0; i < 100 && !seen; ++i) {
    std::this_thread::sleep_for(50ms);
    std::ifstream again(dir_ + "/cdi/k8s.device-plugin.danqing.io-gpu.json");
    const auto reread = nlohmann::json::parse(again, nullptr, /*allow_exceptions=*/false);
    if (reread.is_discarded()) continue;
    for (const auto& m : reread["containerEdits"]["mounts"]) {
      seen |= m["containerPath"] == "/run/nvidia-persistenced/socket";
    }
  }
  EXPECT_TRUE(seen) << "a reload left the CDI spec as it was\n" << daemon.Output();
  ASSERT_TRUE(daemon.Signal(SIGTERM));
  EXPECT_EQ(daemon.Wait(10'000), 0) << daemon.Output();
}

TEST_F(DaemonTest, CdiSpecWithoutADriverRootSaysSoInTheLog) {
  FakeNode node("a100-8x-nvswitch");
  std::ofstream(config_) << "version: v1\nflags:\n  plugin:\n    deviceListStrategy: cdi-cri\n";
  KubeletEmulator kubelet(dir_);
  ASSERT_TRUE(kubelet.Start().ok());
  auto args = Args();
  args.insert(args.end(), {"--container-driver-root", dir_ + "/not-mounted"});
  ChildProcess daemon(args);
  ASSERT_TRUE(kubelet.WaitForRegistration("nvidia.com/gpu", 10s)) << daemon.Output();
  std::ifstream in(dir_ + "/cdi/k8s.device-plugin.danqing.io-gpu.json");
  ASSERT_TRUE(in) << daemon.Output();
  const auto spec = nlohmann::json::parse(in);
  EXPECT_FALSE(spec["containerEdits"].contains("mounts"));
  EXPECT_EQ(spec["devices"].size(), 8u);
  EXPECT_THAT(daemon.Output(), HasSubstr("CDI spec without the driver's files: the driver root '" + dir_ +
                                         "/not-mounted' is not a directory"));
  ASSERT_TRUE(daemon.Signal(SIGTERM));
  EXPECT_EQ(daemon.Wait(10'000), 0) << daemon.Output();
}

// A FIFO as the config file blocked open() forever: at start the process
// hung; on a reload the thread that takes signals did, so later reloads and
// SIGTERM were ignored (issue 31). Refused at once, saying why; the running
// configuration stays and SIGTERM still stops the agent.
TEST_F(DaemonTest, AConfigFileThatIsAFifoIsRefusedAtStartAndOnReload) {
  ASSERT_EQ(::mkfifo(config_.c_str(), 0644), 0);
  {
    ChildProcess daemon(Args());
    EXPECT_EQ(daemon.Wait(10'000), 2) << daemon.Output();
    EXPECT_THAT(daemon.Output(), HasSubstr("not a regular file: a FIFO"));
  }
  std::filesystem::remove(config_);

  FakeNode node("a100-8x-nvswitch");
  std::ofstream(config_) << "version: v1\n";
  KubeletEmulator kubelet(dir_);
  ASSERT_TRUE(kubelet.Start().ok());
  ChildProcess daemon(Args());
  ASSERT_TRUE(kubelet.WaitForRegistration("nvidia.com/gpu", 10s)) << daemon.Output();
  std::filesystem::remove(config_);
  ASSERT_EQ(::mkfifo(config_.c_str(), 0644), 0);
  ASSERT_TRUE(daemon.Signal(SIGHUP));  // the file watcher may have sent one already
  bool refused = false;
  for (int i = 0; i < 200 && !refused; ++i) {
    refused = daemon.Output().find("not a regular file: a FIFO") != std::string::npos;
    if (!refused) std::this_thread::sleep_for(25ms);
  }
  EXPECT_TRUE(refused) << daemon.Output();
  ASSERT_TRUE(daemon.Signal(SIGTERM));
  EXPECT_EQ(daemon.Wait(10'000), 0) << daemon.Output();
  EXPECT_TRUE(kubelet.Devices("nvidia.com/gpu").size() == 8u);
}

TEST_F(DaemonTest, MalformedConfigIsAUsageErrorNamingTheLine) {
  std::ofstream(config_) << "version: v1\nflags:\n  migStrategy: none\n  bogusField: 1\n";
  ChildProcess daemon(Args());
  EXPECT_EQ(daemon.Wait(10'000), 2);
  EXPECT_THAT(daemon.Output(), HasSubstr("bogusField"));
  EXPECT_THAT(daemon.Output(), HasSubstr("config.yaml:4:3"));
}

}  // namespace
