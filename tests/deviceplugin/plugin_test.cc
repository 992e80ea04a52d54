// The node agent's kubelet side end to end: the fake NVML node, the resource
// builder and the PluginManager, driven by the kubelet emulator over real
// unix sockets.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "deviceplugin/plugin_manager.h"
#include "deviceplugin/resource.h"
#include "gpu/nvml_backend.h"
#include "testing/kubelet/kubelet_emulator.h"
#include "testing/support/fake_node.h"
#include "testing/support/temp_dir.h"
#include "testing/support/unix_socket.h"

namespace danqing::deviceplugin {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;
using danqing::testing::FakeNode;
using danqing::testing::KubeletEmulator;
using namespace std::chrono_literals;

constexpr char kGpu[] = "nvidia.com/gpu";

bool Exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

class PluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = std::make_unique<danqing::testing::TempDir>();
    dir_ = tmp_->path();
    ASSERT_FALSE(dir_.empty()) << "cannot make a directory under /tmp";
  }
  void TearDown() override {
    manager_.reset();
    kubelet_.reset();
    tmp_.reset();
  }

  // Loads a node profile through the fake NVML and builds its resources.
  void LoadNode(const std::string& profile, const ResourceOptions& ropts = {}) {
    node_ = std::make_unique<FakeNode>(profile);
    auto b = gpu::NvmlBackend::Create(danqing::testing::FakeNvmlLibrary(), node_->sysfs_root());
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    auto inv = (*b)->Discover();
    ASSERT_TRUE(inv.ok()) << inv.status().ToString();
    inventory_ = std::move(inv).value();
    auto set = BuildResources(inventory_, ropts);
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    set_ = std::move(set).value();
  }

  void StartKubelet(danqing::testing::KubeletEmulatorOptions options = {}) {
    kubelet_ = std::make_unique<KubeletEmulator>(dir_, options);
    ASSERT_TRUE(kubelet_->Start().ok());
  }

  void StartPlugin(ManagerOptions opts = {}) {
    opts.plugin_dir = dir_;
    manager_ = std::make_unique<PluginManager>(opts);
    Status st = manager_->Start(set_);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  bool WaitAllHealthy(const std::string& resource, size_t n) {
    return kubelet_->WaitForDevices(
        resource,
        [n](const std::vector<v1beta1::Device>& devs) {
          if (devs.size() != n) return false;
          for (const auto& d : devs) {
            if (d.health() != "Healthy") return false;
          }
          return true;
        },
        5s);
  }

  // Waits until `holds` is true of the manager's statuses (the manager has
  // no wait of its own: polled every 5 ms).
  bool WaitForStatuses(const std::function<bool(const std::vector<ResourceStatus>&)>& holds,
                       std::chrono::milliseconds timeout = 5s) {
    for (auto deadline = std::chrono::steady_clock::now() + timeout;;) {
      if (holds(manager_->Statuses())) return true;
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(5ms);
    }
  }

  // Waits until the plugin's servers have `n` ListAndWatch streams open in all.
  bool WaitForPluginStreams(uint64_t n) {
    return WaitForStatuses([n](const std::vector<ResourceStatus>& statuses) {
      uint64_t open = 0;
      for (const auto& st : statuses) open += st.stats.open_streams;
      return open == n;
    });
  }

  std::unique_ptr<danqing::testing::TempDir> tmp_;
  std::string dir_;
  std::unique_ptr<FakeNode> node_;
  gpu::NodeInventory inventory_;
  std::shared_ptr<const ResourceSet> set_;
  std::unique_ptr<KubeletEmulator> kubelet_;
  std::unique_ptr<PluginManager> manager_;
};

TEST_F(PluginTest, RegistersAndAdvertisesEveryGpu) {
  LoadNode("a100-8x-nvswitch");
  StartKubelet();
  StartPlugin();
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 5s));
  auto req = kubelet_->LastRegisterRequest(kGpu);
  ASSERT_TRUE(req.has_value());
  EXPECT_EQ(req->version(), "v1beta1");
  EXPECT_EQ(req->endpoint(), "danqing-nvidia.com-gpu.sock");
  EXPECT_TRUE(Exists(dir_ + "/danqing-nvidia.com-gpu.sock"));
  auto opts = kubelet_->Options(kGpu);
  ASSERT_TRUE(opts.has_value());
  EXPECT_TRUE(opts->get_preferred_allocation_available());
  EXPECT_FALSE(opts->pre_start_required());

  ASSERT_TRUE(WaitAllHealthy(kGpu, 8));
  auto devs = kubelet_->Devices(kGpu);
  for (size_t i = 0; i < devs.size(); ++i) {
    EXPECT_EQ(devs[i].id(), inventory_.gpus[i].uuid);
    ASSERT_EQ(devs[i].topology().nodes_size(), 1);
    EXPECT_EQ(devs[i].topology().nodes(0).id(), i < 4 ? 0 : 1);
  }
}

// The GPUs' nodes always; the control nodes only where they exist (here:
// under the dev root, a directory of plain files): the UVM nodes appear when
// the module loads, and a runtime refuses a spec naming a missing node.
TEST_F(PluginTest, AllocateSetsVisibleDevicesAndDeviceNodes) {
  LoadNode("a100-8x-nvswitch");
  StartKubelet();
  const std::string dev_root = dir_ + "/devroot";
  std::filesystem::create_directories(dev_root + "/dev");
  for (const char* n : {"/dev/nvidiactl", "/dev/nvidia-uvm"}) std::ofstream(dev_root + n) << "";
  ManagerOptions opts;
  opts.allocate.pass_device_specs = true;
  opts.allocate.dev_root = dev_root;
  StartPlugin(opts);
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 5s));

  const std::string a = inventory_.gpus[2].uuid, b = inventory_.gpus[5].uuid;
  auto nodes_of = [&](const v1beta1::ContainerAllocateResponse& resp) {
    std::set<std::string> nodes;
    for (const auto& d : resp.devices()) {
      nodes.insert(d.container_path());
      EXPECT_EQ(d.host_path(), dev_root + d.container_path());
      EXPECT_EQ(d.permissions(), "rw");
    }
    return nodes;
  };
  auto r = kubelet_->Allocate(kGpu, {a, b});
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.response.envs().at("NVIDIA_VISIBLE_DEVICES"), a + "," + b);
  if (!std::filesystem::exists("/dev/nvidia-uvm-tools") &&
      !std::filesystem::exists(
          "/dev/nvidia-modeset")) {  // a machine with a driver lists them anyway
    EXPECT_EQ(nodes_of(r.response),
              (std::set<std::string>{"/dev/nvidia2", "/dev/nvidia5", "/dev/nvidiactl", "/dev/nvidia-uvm"}));
  }
  // The modules made their nodes: the next Allocate lists them.
  std::ofstream(dev_root + "/dev/nvidia-uvm-tools") << "";
  std::ofstream(dev_root + "/dev/nvidia-modeset") << "";
  r = kubelet_->Allocate(kGpu, {a, b});
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(
      nodes_of(r.response),
      (std::set<std::string>{"/dev/nvidia2", "/dev/nvidia5", "/dev/nvidiactl", "/dev/nvidia-uvm",
                             "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"}));
}

TEST_F(PluginTest, AllocateByIndexStrategy) {
  LoadNode("a100-8x-nvswitch");
  StartKubelet();
  ManagerOptions opts;
  opts.allocate.device_id_strategy = DeviceIdStrategy::kIndex;
  StartPlugin(opts);
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 5s));
  auto r = kubelet_->Allocate(kGpu, {inventory_.gpus[7].uuid, inventory_.gpus[0].uuid});
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.response.envs().at("NVIDIA_VISIBLE_DEVICES"), "7,0");
  EXPECT_EQ(r.response.devices_size(), 0) << "no device specs unless passDeviceSpecs";
}

TEST_F(PluginTest, BadAllocateRequestsNameTheIdAndResource) {
  LoadNode("a100-8x-nvswitch");
  StartKubelet();
  StartPlugin();
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 5s));
  auto unknown = kubelet_->Allocate(kGpu, {"GPU-not-on-this-node"});
  EXPECT_EQ(unknown.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(unknown.status.error_message(), HasSubstr("GPU-not-on-this-node"));
  EXPECT_THAT(unknown.status.error_message(), HasSubstr(kGpu));

  manager_->Update(WithHealth(*set_, {{inventory_.gpus[3].uuid, "XID 79: GPU fell off the bus"}}));
  ASSERT_TRUE(kubelet_->WaitForDevices(
      kGpu,
      [&](const std::vector<v1beta1::Device>& devs) {
        return devs.size() == 8 && devs[3].health() == "Unhealthy" && devs[2].health() == "Healthy";
      },
      5s));
  auto sick = kubelet_->Allocate(kGpu, {inventory_.gpus[3].uuid});
  EXPECT_EQ(sick.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(sick.status.error_message(), HasSubstr("unhealthy"));
  EXPECT_THAT(sick.status.error_message(), HasSubstr("XID 79"));

  // Preferred allocation never offers the unhealthy GPU and never fails.
  std::vector<std::string> all;
  for (const auto& g : inventory_.gpus) all.push_back(g.uuid);
  auto pref = kubelet_->GetPreferredAllocation(kGpu, all, {}, 8);
  ASSERT_TRUE(pref.status.ok()) << pref.status.error_message();
  EXPECT_THAT(pref.device_ids, SizeIs(7));
  for (const auto& id : pref.device_ids) EXPECT_NE(id, inventory_.gpus[3].uuid);
  auto missing = kubelet_->GetPreferredAllocation(kGpu, {"GPU-gone", all[0]}, {}, 2);
  ASSERT_TRUE(missing.status.ok()) << "a vanished device must not fail admission";
  EXPECT_EQ(missing.device_ids, (std::vector<std::string>{all[0]}));
}

// For a test that sends requests of megabytes: gRPC (1.51) may then leave an
// executor thread in a poll of up to 10 s, which the shutdown of the gRPC
// library (when the test's last channel and server are gone) waits out. A
// reference held until the process exits keeps the library up, as in the
// agent, so the test does not wait on it.
void KeepGrpcUpUntilExit() {
  static const bool once = [] {
    grpc_init();
    return true;
  }();
  (void)once;
}

// Keeps every log line written while it is installed.
class CapturingSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::vector<std::string> lines() {
    std::lock_guard<std::mutex> l(mutex_);
    return lines_;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    lines_.emplace_back(msg.payload.data(), msg.payload.size());
  }
  void flush_() override {}

 private:
  std::vector<std::string> lines_;
};

// Issue 31 (6): device IDs come from the client. A multi-megabyte one must not
// reach the log or the status whole (a status that large breaks the caller's
// connection), and one with a newline must not forge a log line.
TEST_F(PluginTest, ClientDeviceIdsReachErrorsAndLogsBoundedAndEscaped) {
  KeepGrpcUpUntilExit();
  LoadNode("a100-8x-nvswitch");
  auto sink = std::make_shared<CapturingSink>();
  spdlog::default_logger()->sinks().push_back(sink);  // before any thread of the test logs
  StartKubelet();
  StartPlugin();
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 5s));
  const std::string forged = "GPU-x\n[2026-12-05 10:00:00.000] [info] plugin: forged line";
  const std::string huge = "GPU-" + std::string(size_t{200} << 10, 'A');
  for (const auto& ids : std::vector<std::vector<std::string>>{
           {forged}, {huge}, {inventory_.gpus[0].uuid, huge + "\n"}}) {
    auto r = kubelet_->Allocate(kGpu, ids);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << r.status.error_message().size();
    EXPECT_LT(r.status.error_message().size(), 1024u);
    EXPECT_EQ(r.status.error_message().find('\n'), std::string::npos);
  }
  EXPECT_THAT(kubelet_->Allocate(kGpu, {forged}).status.error_message(),
              HasSubstr("unknown device ID 'GPU-x\\n[2026"));
  manager_.reset();
  kubelet_.reset();  // no thread logs any more
  spdlog::default_logger()->sinks().pop_back();
  int refusals = 0;
  for (const auto& line : sink->lines()) {
    EXPECT_LT(line.size(), 2048u);
    EXPECT_EQ(line.find('\n'), std::string::npos) << line;
    if (line.find("refused") != std::string::npos) ++refusals;
  }
  EXPECT_EQ(refusals, 4);
}

// Issue 31 (1): one GetPreferredAllocation with a huge allocation_size made
// the allocator reserve that many entries: std::bad_alloc, the agent gone.
// Every request field that sizes work is bounded at the edge, and the server
// answers the next call.
TEST_F(PluginTest, RequestFieldsThatSizeWorkAreBoundedAtTheEdge) {
  KeepGrpcUpUntilExit();
  LoadNode("a100-8x-nvswitch");
  StartKubelet();
  StartPlugin();
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 5s));
  std::vector<std::string> all;
  for (const auto& g : inventory_.gpus) all.push_back(g.uuid);

  auto huge = kubelet_->GetPreferredAllocation(kGpu, all, {}, std::numeric_limits<int32_t>::max());
  EXPECT_EQ(huge.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(huge.status.error_message(), HasSubstr("allocation_size 2147483647"));
  auto negative = kubelet_->GetPreferredAllocation(kGpu, all, {}, -5);
  EXPECT_EQ(negative.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // More IDs than any resource may have, and IDs longer than any advertised.
  const std::vector<std::string> many(MaxDevicesPerResource() + 1, "x");
  auto long_list = kubelet_->GetPreferredAllocation(kGpu, all, many, 2);
  EXPECT_EQ(long_list.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  auto too_many = kubelet_->Allocate(kGpu, many);
  EXPECT_EQ(too_many.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(too_many.status.error_message(), HasSubstr("device IDs, more than"));
  auto long_id = kubelet_->GetPreferredAllocation(kGpu, {std::string(100'000, 'G')}, {}, 1);
  EXPECT_EQ(long_id.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_LT(long_id.status.error_message().size(), 512u);

  // Many container requests in one call (the kubelet sends one).
  auto channel = grpc::CreateChannel("unix:" + dir_ + "/" + SocketNameFor(kGpu),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1beta1::DevicePlugin::NewStub(channel);
  v1beta1::AllocateRequest req;
  for (int i = 0; i <= kMaxContainerRequests; ++i)
    req.add_container_requests()->add_devices_ids(all[0]);
  v1beta1::AllocateResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  EXPECT_EQ(stub->Allocate(&ctx, req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // The request as a whole: gRPC refuses one over 4 MiB before it is
  // buffered whole for a handler.
  auto over = kubelet_->Allocate(kGpu, {std::string(kGrpcDefaultMaxMessageBytes + 1, 'Z')});
  EXPECT_EQ(over.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << over.status.error_message();

  // Still serving, and a request within the bounds is answered as before.
  auto pref = kubelet_->GetPreferredAllocation(kGpu, all, {}, 8);
  ASSERT_TRUE(pref.status.ok()) << pref.status.error_message();
  EXPECT_THAT(pref.device_ids, SizeIs(8));
  EXPECT_TRUE(kubelet_->Allocate(kGpu, {all[1], all[2]}).status.ok());
}

TEST_F(PluginTest, PreferredAllocationIsTopologyAware) {
  LoadNode("a100-8x-nvswitch");
  StartKubelet();
  StartPlugin();
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 5s));
  std::vector<std::string> all;
  for (const auto& g : inventory_.gpus) all.push_back(g.uuid);
  auto pref = kubelet_->GetPreferredAllocation(kGpu, all, {inventory_.gpus[5].uuid}, 2);
  ASSERT_TRUE(pref.status.ok()) << pref.status.error_message();
  ASSERT_THAT(pref.device_ids, SizeIs(2));
  // GPU5's PCIe switch partner is GPU4 (pairs share a switch).
  EXPECT_EQ(std::set<std::string>(pref.device_ids.begin(), pref.device_ids.end()),
            (std::set<std::string>{inventory_.gpus[4].uuid, inventory_.gpus[5].uuid}));
}

TEST_F(PluginTest, HundredKubeletRestartsReRegisterEachTime) {
  LoadNode("a100-8x-nvswitch");
  StartKubelet();
  StartPlugin();
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 5s));
  const int before = kubelet_->RegistrationCount(kGpu);
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(kubelet_->Restart().ok()) << "restart " << i;
    ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 5s)) << "no re-registration after restart " << i;
    ASSERT_TRUE(WaitAllHealthy(kGpu, 8)) << "device list not re-sent after restart " << i;
  }
  EXPECT_EQ(kubelet_->RegistrationCount(kGpu), before + 100);
  // Allocation still works on the last instance.
  auto r = kubelet_->Allocate(kGpu, {inventory_.gpus[1].uuid});
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
}

TEST_F(PluginTest, PluginRestartWhileKubeletRuns) {
  LoadNode("t4-1x");
  StartKubelet();
  StartPlugin();
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 5s));
  const std::string sock = dir_ + "/danqing-nvidia.com-gpu.sock";
  manager_->Stop();
  EXPECT_TRUE(kubelet_->WaitForStreamEnd(kGpu, 5s));
  EXPECT_FALSE(Exists(sock)) << "Stop removes the socket";
  manager_.reset();
  StartPlugin();
  EXPECT_TRUE(kubelet_->WaitForRegistrationCount(kGpu, 2, 5s));
  ASSERT_TRUE(WaitAllHealthy(kGpu, 1));
}

TEST_F(PluginTest, WaitsForAnAbsentKubelet) {
  LoadNode("t4-1x");
  StartPlugin();  // no kubelet.sock yet
  auto st = manager_->Statuses();
  ASSERT_THAT(st, SizeIs(1));
  EXPECT_TRUE(st[0].serving);
  EXPECT_FALSE(st[0].registered);
  StartKubelet();  // inotify sees kubelet.sock appear
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 5s));
}

// The plugin's socket is deleted while the kubelet runs. The kubelet here is
// slow to handle the old stream's end (300 ms): had the plugin registered
// again before that, the old stream's end would have stopped the new
// endpoint and marked its devices unhealthy (as a real kubelet does).
TEST_F(PluginTest, OwnSocketDeletedIsServedAgainAndRegistersOnceTheKubeletHandledTheOldStream) {
  LoadNode("t4-1x");
  danqing::testing::KubeletEmulatorOptions kopts;
  kopts.stream_end_delay = 300ms;
  StartKubelet(kopts);
  ManagerOptions opts;
  opts.stream_settle = 1500ms;  // leaves room for a slow (sanitizer) build
  StartPlugin(opts);
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 5s));
  ASSERT_TRUE(WaitAllHealthy(kGpu, 1));
  const std::string sock = dir_ + "/danqing-nvidia.com-gpu.sock";
  ASSERT_EQ(::unlink(sock.c_str()), 0);
  EXPECT_TRUE(kubelet_->WaitForRegistrationCount(kGpu, 2, 5s));
  // Every earlier stream has been handled: only the new one is open.
  ASSERT_TRUE(kubelet_->WaitForOpenStreams(kGpu, 1, 5s));
  EXPECT_EQ(kubelet_->StaleStreamEnds(kGpu), 0);
  EXPECT_FALSE(kubelet_->EndpointStopTime(kGpu).has_value()) << "the new endpoint was stopped";
  EXPECT_TRUE(WaitAllHealthy(kGpu, 1)) << "the new stream carries the device list";
  EXPECT_TRUE(Exists(sock));
  auto r = kubelet_->Allocate(kGpu, {inventory_.gpus[0].uuid});
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
}

// A resource stops being advertised (its server and stream end) and comes
// back soon after, as a quick reload or re-partition does: its new
// registration waits until the kubelet has handled the old stream's end.
TEST_F(PluginTest, AResourceAdvertisedAgainWaitsForTheKubeletToHandleItsOldStream) {
  ResourceOptions ropts;
  ropts.time_slicing.push_back({"nvidia.com/gpu", "", 4, {"0", "1"}});
  LoadNode("a100-8x-nvswitch", ropts);
  const std::string shared = "nvidia.com/gpu.shared";
  auto plain = BuildResources(inventory_, {});
  ASSERT_TRUE(plain.ok());
  danqing::testing::KubeletEmulatorOptions kopts;
  kopts.stream_end_delay = 300ms;
  StartKubelet(kopts);
  ManagerOptions opts;
  opts.stream_settle = 1500ms;
  StartPlugin(opts);
  ASSERT_TRUE(kubelet_->WaitForRegistration(shared, 5s));
  ASSERT_TRUE(WaitAllHealthy(shared, 8));
  ASSERT_TRUE(WaitForPluginStreams(2));
  manager_->Update(*plain);  // the shared resource goes away...
  ASSERT_TRUE(WaitForPluginStreams(1));
  manager_->Update(set_);  // ...and comes back
  ASSERT_TRUE(kubelet_->WaitForRegistrationCount(shared, 2, 5s));
  ASSERT_TRUE(kubelet_->WaitForOpenStreams(shared, 1, 5s));
  EXPECT_EQ(kubelet_->StaleStreamEnds(shared), 0);
  EXPECT_FALSE(kubelet_->EndpointStopTime(shared).has_value()) << "the new endpoint was stopped";
  EXPECT_TRUE(WaitAllHealthy(shared, 8));
}

// The kubelet's end of the stream breaks while both keep running: the
// kubelet has stopped the endpoint, so the plugin must register again.
TEST_F(PluginTest, AStreamTheKubeletEndsIsFollowedByANewRegistration) {
  LoadNode("t4-1x");
  StartKubelet();
  ManagerOptions opts;
  opts.stream_settle = 1s;
  StartPlugin(opts);
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 5s));
  ASSERT_TRUE(WaitAllHealthy(kGpu, 1));
  ASSERT_TRUE(kubelet_->WaitForOpenStreams(kGpu, 1, 5s));
  ASSERT_TRUE(WaitForPluginStreams(1));
  ASSERT_TRUE(kubelet_->BreakStream(kGpu).ok());
  ASSERT_TRUE(kubelet_->WaitForStreamEnd(kGpu, 5s));
  EXPECT_TRUE(kubelet_->WaitForRegistrationCount(kGpu, 2, 5s)) << "the plugin did not register again";
  ASSERT_TRUE(WaitAllHealthy(kGpu, 1));
  EXPECT_FALSE(kubelet_->EndpointStopTime(kGpu).has_value());
  EXPECT_EQ(kubelet_->StaleStreamEnds(kGpu), 0);
  auto r = kubelet_->Allocate(kGpu, {inventory_.gpus[0].uuid});
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
}

// Another client (an operator debugging) holds a ListAndWatch stream on the
// plugin's socket when the kubelet's stream breaks: the plugin still sees
// that the kubelet's own stream is gone and registers again.
TEST_F(PluginTest, AnotherClientsStreamDoesNotHideTheKubeletsLostStream) {
  LoadNode("t4-1x");
  StartKubelet();
  ManagerOptions opts;
  opts.stream_settle = 500ms;
  StartPlugin(opts);
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 5s));
  ASSERT_TRUE(WaitForPluginStreams(1));
  auto channel = grpc::CreateChannel("unix://" + manager_->Statuses().at(0).socket_path,
                                     grpc::InsecureChannelCredentials());
  auto stub = v1beta1::DevicePlugin::NewStub(channel);
  grpc::ClientContext debug;
  auto reader = stub->ListAndWatch(&debug, v1beta1::Empty());
  v1beta1::ListAndWatchResponse first;
  ASSERT_TRUE(reader->Read(&first));
  ASSERT_TRUE(WaitForPluginStreams(2));

  ASSERT_TRUE(kubelet_->BreakStream(kGpu).ok());
  EXPECT_TRUE(kubelet_->WaitForRegistrationCount(kGpu, 2, 5s)) << "the other client's stream hid the loss";
  ASSERT_TRUE(kubelet_->WaitForOpenStreams(kGpu, 1, 5s));
  EXPECT_FALSE(kubelet_->EndpointStopTime(kGpu).has_value());
  ASSERT_TRUE(WaitAllHealthy(kGpu, 1));
  debug.TryCancel();
  v1beta1::ListAndWatchResponse rest;
  while (reader->Read(&rest)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

// The kubelet drops the stream as soon as it has accepted the registration,
// often before the plugin's server has even seen the call: whether the
// plugin sees a stream end or no stream at all, it registers again.
TEST_F(PluginTest, AStreamLostRightAfterRegisteringIsFollowedByANewRegistration) {
  LoadNode("t4-1x");
  StartKubelet();
  ManagerOptions opts;
  opts.stream_settle = 500ms;
  opts.register_timeout = 500ms;
  StartPlugin(opts);
  for (int round = 1; round <= 5; ++round) {
    ASSERT_TRUE(kubelet_->WaitForRegistrationCount(kGpu, round, 5s)) << "round " << round;
    ASSERT_TRUE(kubelet_->BreakStream(kGpu).ok()) << "round " << round;
  }
  ASSERT_TRUE(kubelet_->WaitForRegistrationCount(kGpu, 6, 5s)) << "no registration after the last lost stream";
  ASSERT_TRUE(kubelet_->WaitForOpenStreams(kGpu, 1, 5s));
  ASSERT_TRUE(WaitAllHealthy(kGpu, 1));
  EXPECT_FALSE(kubelet_->EndpointStopTime(kGpu).has_value());
  EXPECT_TRUE(WaitForPluginStreams(1));
}

// The kubelet answers Register after the plugin's deadline but registers it
// and opens the stream all the same: the plugin sees that stream and does
// not register a second time (which would leave two streams open).
TEST_F(PluginTest, ARegisterThatTimedOutButStreamsIsNotRepeated) {
  LoadNode("t4-1x");
  danqing::testing::KubeletEmulatorOptions kopts;
  kopts.register_reply_delay = 5s;
  StartKubelet(kopts);
  ManagerOptions opts;
  opts.register_timeout = 300ms;
  // The plugin looks for the stream again at max(settle, timeout) after its
  // Register timed out: that leaves the kubelet 3 s to open it, which takes
  // well under a second even under TSan on a loaded machine.
  opts.stream_settle = 3s;
  StartPlugin(opts);
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 5s));
  ASSERT_TRUE(WaitAllHealthy(kGpu, 1));
  EXPECT_TRUE(WaitForStatuses([](const auto& statuses) { return statuses.at(0).registered; }, 10s))
      << manager_->Statuses().at(0).last_error;
  // Past the reply delay and a retry's backoff: still the one Register.
  EXPECT_FALSE(kubelet_->WaitForRegistrationCount(kGpu, 2, 3s));
  EXPECT_EQ(kubelet_->RegisterCalls(), 1);
  EXPECT_EQ(kubelet_->OpenStreams(kGpu), 1);
  EXPECT_FALSE(kubelet_->EndpointStopTime(kGpu).has_value());
}

// inotify events are lost (the queue overflows while the manager thread sits
// in a slow Register of another resource): the registration that still
// stands, with its stream open, is left alone.
TEST_F(PluginTest, AnInotifyOverflowDoesNotRegisterAStandingRegistrationAgain) {
  ResourceOptions ropts;
  ropts.time_slicing.push_back({"nvidia.com/gpu", "", 4, {"0", "1"}});
  LoadNode("a100-8x-nvswitch", ropts);
  StartKubelet();
  ManagerOptions opts;
  opts.stream_settle = 500ms;
  opts.register_timeout = 20s;
  StartPlugin(opts);
  const std::string shared = "nvidia.com/gpu.shared";
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 5s));
  ASSERT_TRUE(kubelet_->WaitForRegistration(shared, 5s));
  ASSERT_TRUE(kubelet_->WaitForOpenStreams(kGpu, 1, 5s));
  ASSERT_TRUE(kubelet_->WaitForOpenStreams(shared, 1, 5s));
  ASSERT_TRUE(WaitForPluginStreams(2));
  // Both Registers answered: the emulator reads its reply delay after opening
  // the stream, so one still being answered would take the 8 s set below
  // (under load: the re-registration then came too late for the test).
  ASSERT_TRUE(WaitForStatuses([](const std::vector<ResourceStatus>& statuses) {
    return statuses.size() == 2 &&
           std::all_of(statuses.begin(), statuses.end(),
                       [](const ResourceStatus& st) { return st.registered; });
  }));
  const int calls = kubelet_->RegisterCalls();

  // More events than the queue holds; a host with a much larger queue is
  // not flooded.
  int queue = 16384;
  std::ifstream("/proc/sys/fs/inotify/max_queued_events") >> queue;
  if (queue > 65536) GTEST_SKIP() << "inotify queue of " << queue << " events: too many files to flood";

  // The shared resource registers again, into a kubelet that takes 8 s to
  // answer; once its Register has arrived, the manager thread is inside it
  // (a reply delay under way is not shortened by a later setting).
  kubelet_->SetRegisterReplyDelay(8s);
  ASSERT_TRUE(kubelet_->BreakStream(shared).ok());
  for (int i = 0; i < 500 && kubelet_->RegisterCalls() == calls; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(kubelet_->RegisterCalls(), calls + 1);
  const auto blocked_since = std::chrono::steady_clock::now();

  const std::string flood = dir_ + "/flood";
  for (int i = 0; i < queue + 100; ++i) std::ofstream(flood + std::to_string(i));
  if (std::chrono::steady_clock::now() - blocked_since > 6s) {
    GTEST_SKIP() << "the flood took longer than the blocked Register: no overflow for sure";
  }
  kubelet_->SetRegisterReplyDelay(0ms);
  // The kubelet counts the registration before it answers; the plugin, when
  // the answer comes. The overflow is handled right after that.
  ASSERT_TRUE(WaitForStatuses(
      [&](const std::vector<ResourceStatus>& statuses) {
        return std::any_of(statuses.begin(), statuses.end(), [&](const ResourceStatus& st) {
          return st.resource == shared && st.registered && st.registrations == 2;
        });
      },
      10s));
  EXPECT_FALSE(kubelet_->WaitForRegistrationCount(kGpu, 2, 1s))
      << "a registration whose kubelet, socket and stream were all still there was repeated";
  EXPECT_EQ(kubelet_->OpenStreams(kGpu), 1);
  EXPECT_FALSE(kubelet_->EndpointStopTime(kGpu).has_value());
  ASSERT_TRUE(WaitAllHealthy(shared, 8));
}

TEST_F(PluginTest, TwoResourcesServedAtOnce) {
  ResourceOptions ropts;
  ropts.time_slicing.push_back({"nvidia.com/gpu", "", 4, {"0", "1"}});
  LoadNode("a100-8x-nvswitch", ropts);
  StartKubelet();
  StartPlugin();
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 5s));
  ASSERT_TRUE(kubelet_->WaitForRegistration("nvidia.com/gpu.shared", 5s));
  ASSERT_TRUE(WaitAllHealthy(kGpu, 6));
  ASSERT_TRUE(WaitAllHealthy("nvidia.com/gpu.shared", 8));
  auto shared = kubelet_->Devices("nvidia.com/gpu.shared");
  EXPECT_EQ(shared[0].id(), inventory_.gpus[0].uuid + "::0");
  auto r = kubelet_->Allocate("nvidia.com/gpu.shared", {inventory_.gpus[1].uuid + "::3"});
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.response.envs().at("NVIDIA_VISIBLE_DEVICES"), inventory_.gpus[1].uuid);
}

// One resource cannot be served at start (a directory sits where its socket
// goes): Start says so, but the other resource registers anyway, and the
// manager serves the first once its path is free, without a new Start.
TEST_F(PluginTest, AResourceThatCannotBeServedYetDoesNotHoldBackTheOthers) {
  ResourceOptions ropts;
  ropts.time_slicing.push_back({"nvidia.com/gpu", "", 4, {"0", "1"}});
  LoadNode("a100-8x-nvswitch", ropts);
  StartKubelet();
  const std::string blocked = dir_ + "/danqing-nvidia.com-gpu.shared.sock";
  std::filesystem::create_directories(blocked + "/in-the-way");
  ManagerOptions opts;
  opts.plugin_dir = dir_;
  opts.max_backoff = 200ms;
  manager_ = std::make_unique<PluginManager>(opts);
  Status st = manager_->Start(set_);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_THAT(st.message(), HasSubstr("nvidia.com/gpu.shared"));
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 5s)) << "the servable resource registers";
  ASSERT_TRUE(WaitAllHealthy(kGpu, 6));
  EXPECT_FALSE(kubelet_->WaitForRegistration("nvidia.com/gpu.shared", 300ms));
  std::filesystem::remove_all(blocked);
  ASSERT_TRUE(kubelet_->WaitForRegistration("nvidia.com/gpu.shared", 5s)) << "served again once its path was free";
  ASSERT_TRUE(WaitAllHealthy("nvidia.com/gpu.shared", 8));
}

TEST_F(PluginTest, ReplicaPolicyPackedVersusDistributed) {
  for (auto policy : {ReplicaPolicy::kPacked, ReplicaPolicy::kDistributed}) {
    ResourceOptions ropts;
    ropts.time_slicing.push_back({"nvidia.com/gpu", "", 4, {}});
    ropts.replica_policy = policy;
    LoadNode("a100-8x-nvswitch", ropts);
    StartKubelet();
    StartPlugin();
    ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 5s));
    // GPU0 has one free replica left; every other GPU has all four.
    std::vector<std::string> available = {inventory_.gpus[0].uuid + "::3"};
    for (size_t g = 1; g < inventory_.gpus.size(); ++g) {
      for (int k = 0; k < 4; ++k) available.push_back(inventory_.gpus[g].uuid + "::" + std::to_string(k));
    }
    auto pref = kubelet_->GetPreferredAllocation(kGpu, available, {}, 1);
    ASSERT_TRUE(pref.status.ok()) << pref.status.error_message();
    ASSERT_THAT(pref.device_ids, SizeIs(1));
    if (policy == ReplicaPolicy::kPacked) {
      EXPECT_EQ(pref.device_ids[0], inventory_.gpus[0].uuid + "::3") << "packed fills the fullest GPU";
    } else {
      EXPECT_NE(pref.device_ids[0].rfind(inventory_.gpus[0].uuid, 0), 0u) << "distributed avoids it";
    }
    manager_.reset();
    kubelet_.reset();
  }
}

TEST_F(PluginTest, FailRequestsGreaterThanOneOverTheWire) {
  ResourceOptions ropts;
  ropts.time_slicing.push_back({"nvidia.com/gpu", "", 2, {}});
  ropts.fail_requests_greater_than_one = true;
  LoadNode("t4-1x", ropts);
  StartKubelet();
  StartPlugin();
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 5s));
  const std::string u = inventory_.gpus[0].uuid;
  auto two = kubelet_->Allocate(kGpu, {u + "::0", u + "::1"});
  EXPECT_EQ(two.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(two.status.error_message(), HasSubstr("failRequestsGreaterThanOne"));
  EXPECT_TRUE(kubelet_->Allocate(kGpu, {u + "::1"}).status.ok());
}

TEST_F(PluginTest, GpuFailingUnderReplicasAndMigMarksEveryChild) {
  ResourceOptions ropts;
  ropts.mig_strategy = MigStrategy::kMixed;
  ropts.time_slicing.push_back({"nvidia.com/mig-1g.10gb", "", 2, {}});
  LoadNode("a100-mig-mixed", ropts);
  StartKubelet();
  StartPlugin();
  ASSERT_TRUE(kubelet_->WaitForRegistration("nvidia.com/mig-1g.10gb", 5s));
  ASSERT_TRUE(WaitAllHealthy("nvidia.com/mig-1g.10gb", 18));
  const std::string sick = inventory_.gpus[1].uuid;  // 7 x 1g.10gb → 14 replicas
  manager_->Update(WithHealth(*set_, {{sick, "XID 79"}}));
  ASSERT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/mig-1g.10gb",
      [](const std::vector<v1beta1::Device>& devs) {
        int unhealthy = 0;
        for (const auto& d : devs) unhealthy += d.health() == "Unhealthy";
        return unhealthy == 14;
      },
      5s));
}

TEST_F(PluginTest, MixedMigAdvertisesOneResourcePerProfile) {
  ResourceOptions ropts;
  ropts.mig_strategy = MigStrategy::kMixed;
  LoadNode("a100-mig-mixed", ropts);
  StartKubelet();
  StartPlugin();
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 5s));
  ASSERT_TRUE(kubelet_->WaitForRegistration("nvidia.com/mig-1g.10gb", 5s));
  ASSERT_TRUE(kubelet_->WaitForRegistration("nvidia.com/mig-2g.20gb", 5s));
  ASSERT_TRUE(kubelet_->WaitForRegistration("nvidia.com/mig-3g.40gb", 5s));
  ASSERT_TRUE(WaitAllHealthy(kGpu, 1));
  ASSERT_TRUE(WaitAllHealthy("nvidia.com/mig-1g.10gb", 9));
  ASSERT_TRUE(WaitAllHealthy("nvidia.com/mig-3g.40gb", 3));
  const auto& mig = inventory_.gpus[2].mig_devices[0];
  auto r = kubelet_->Allocate("nvidia.com/mig-3g.40gb", {mig.uuid});
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.response.envs().at("NVIDIA_VISIBLE_DEVICES"), mig.uuid);
}

TEST_F(PluginTest, CdiStrategiesWriteTheSpecAndName) {
  LoadNode("a100-8x-nvswitch");
  StartKubelet();
  ManagerOptions opts;
  opts.cdi_root = dir_ + "/cdi";
  opts.allocate.device_list_strategies = {DeviceListStrategy::kCdiCri, DeviceListStrategy::kCdiAnnotations};
  StartPlugin(opts);
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 5s));
  const std::string spec_path = opts.cdi_root + "/k8s.device-plugin.danqing.io-gpu.json";
  ASSERT_TRUE(Exists(spec_path));
  std::ifstream in(spec_path);
  auto spec = nlohmann::json::parse(in);
  EXPECT_EQ(spec["kind"], "k8s.device-plugin.danqing.io/gpu");
  EXPECT_EQ(spec["devices"].size(), 8u);
  for (const auto& d : spec["devices"]) {
    // CDI applies each device's edits in turn: a per-device NVIDIA_VISIBLE_DEVICES
    // would leave a container with several GPUs naming only the last.
    EXPECT_FALSE(d["containerEdits"].contains("env")) << d.dump();
    EXPECT_GE(d["containerEdits"]["deviceNodes"].size(), 1u) << d.dump();
  }
  const std::string uuid = inventory_.gpus[6].uuid;
  auto r = kubelet_->Allocate(kGpu, {uuid});
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  ASSERT_EQ(r.response.cdi_devices_size(), 1);
  EXPECT_EQ(r.response.cdi_devices(0).name(), "k8s.device-plugin.danqing.io/gpu=" + uuid);
  ASSERT_EQ(r.response.annotations_size(), 1);
  EXPECT_THAT(r.response.annotations().begin()->first, HasSubstr("cdi.k8s.io/danqing-device-plugin_"));
  EXPECT_EQ(r.response.envs().count("NVIDIA_VISIBLE_DEVICES"), 0u);
}

ino_t Inode(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

TEST_F(PluginTest, HealthChangeIsAppliedWhileTheManagerThreadIsBusy) {
  // A "kubelet" that accepts the connection and never answers keeps the
  // manager thread inside Register. A health change must not wait for it:
  // it is applied on the caller's thread before Update returns.
  LoadNode("a100-8x-nvswitch");
  const int listener = danqing::testing::BindUnixSocket(dir_ + "/kubelet.sock");
  ASSERT_GE(listener, 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  ManagerOptions opts;
  opts.register_timeout = 2s;
  StartPlugin(opts);
  pollfd pfd{listener, POLLIN, 0};
  ASSERT_EQ(::poll(&pfd, 1, 5000), 1) << "the manager never dialled the kubelet";
  const int stuck = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);  // Register now waits
  ASSERT_GE(stuck, 0);

  const auto statuses = manager_->Statuses();
  ASSERT_EQ(statuses.size(), 1u);
  auto stub = v1beta1::DevicePlugin::NewStub(
      grpc::CreateChannel("unix://" + statuses[0].socket_path, grpc::InsecureChannelCredentials()));
  auto allocate = [&](const std::string& id) {
    v1beta1::AllocateRequest req;
    req.add_container_requests()->add_devices_ids(id);
    v1beta1::AllocateResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    return stub->Allocate(&ctx, req, &resp);
  };
  const std::string sick = inventory_.gpus[5].uuid;
  ASSERT_TRUE(allocate(sick).ok());
  manager_->Update(WithHealth(*set_, {{sick, "XID 79"}}));
  const grpc::Status refused = allocate(sick);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), HasSubstr("XID 79"));
  manager_->Update(WithHealth(*set_, {}));
  EXPECT_TRUE(allocate(sick).ok());
  manager_.reset();  // waits out the stuck Register
  ::close(stuck);
  ::close(listener);
}

TEST_F(PluginTest, EveryOpenStreamEndsOnTheNewestListAndShutdownEndsThemAll) {
  // Several ListAndWatch streams besides the kubelet's, some cancelled by
  // their client while updates keep coming: each open one ends up with the
  // newest list, and stopping the plugin ends every stream.
  LoadNode("a100-8x-nvswitch");
  StartKubelet();
  StartPlugin();
  ASSERT_TRUE(WaitAllHealthy(kGpu, 8));
  const auto statuses = manager_->Statuses();
  ASSERT_EQ(statuses.size(), 1u);
  auto channel = grpc::CreateChannel("unix://" + statuses[0].socket_path, grpc::InsecureChannelCredentials());
  auto stub = v1beta1::DevicePlugin::NewStub(channel);

  struct Client {
    grpc::ClientContext ctx;
    std::mutex mu;
    std::vector<v1beta1::Device> last;  // guarded by mu
    grpc::Status status;
    std::thread reader;
  };
  constexpr int kClients = 6;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kClients; ++i) {
    auto c = std::make_unique<Client>();
    Client* raw = c.get();
    raw->reader = std::thread([raw, &stub] {
      auto reader = stub->ListAndWatch(&raw->ctx, v1beta1::Empty());
      v1beta1::ListAndWatchResponse msg;
      while (reader->Read(&msg)) {
        std::lock_guard l(raw->mu);
        raw->last.assign(msg.devices().begin(), msg.devices().end());
      }
      raw->status = reader->Finish();
    });
    clients.push_back(std::move(c));
  }
  const std::string sick = inventory_.gpus[3].uuid;
  for (int round = 0; round < 60; ++round) {
    const std::string& gpu = inventory_.gpus[static_cast<size_t>(round) % 8].uuid;
    manager_->Update(WithHealth(*set_, {{gpu, "XID 48"}}));
    if (round == 20) clients[0]->ctx.TryCancel();
    if (round == 40) clients[1]->ctx.TryCancel();
  }
  manager_->Update(WithHealth(*set_, {{sick, "XID 79"}}));
  auto newest = [&](const std::vector<v1beta1::Device>& devs) {
    if (devs.size() != 8) return false;
    return std::all_of(devs.begin(), devs.end(), [&](const v1beta1::Device& d) {
      return d.health() == (d.id() == sick ? "Unhealthy" : "Healthy");
    });
  };
  EXPECT_TRUE(kubelet_->WaitForDevices(kGpu, newest, 5s));
  for (int i = 2; i < kClients; ++i) {
    bool seen = false;
    for (auto deadline = std::chrono::steady_clock::now() + 5s; !seen && std::chrono::steady_clock::now() < deadline;) {
      {
        std::lock_guard l(clients[static_cast<size_t>(i)]->mu);
        seen = newest(clients[static_cast<size_t>(i)]->last);
      }
      if (!seen) std::this_thread::sleep_for(2ms);
    }
    EXPECT_TRUE(seen) << "stream " << i << " never saw the newest list";
  }
  manager_.reset();  // ends the streams that are still open
  for (auto& c : clients) c->reader.join();
  EXPECT_EQ(clients[0]->status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(clients[1]->status.error_code(), grpc::StatusCode::CANCELLED);
  for (int i = 2; i < kClients; ++i) {
    EXPECT_TRUE(clients[static_cast<size_t>(i)]->status.ok())
        << "stream " << i << ": " << clients[static_cast<size_t>(i)]->status.error_message();
  }
}

TEST_F(PluginTest, CdiSpecIsRewrittenForNewDevicesNotForHealth) {
  LoadNode("a100-8x-nvswitch");
  StartKubelet();
  ManagerOptions opts;
  opts.cdi_root = dir_ + "/cdi";
  opts.allocate.device_list_strategies = {DeviceListStrategy::kCdiCri};
  StartPlugin(opts);
  ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 5s));
  const std::string spec_path = opts.cdi_root + "/k8s.device-plugin.danqing.io-gpu.json";
  const ino_t first = Inode(spec_path);
  ASSERT_NE(first, 0u);
  // The spec is replaced by rename, so a rewrite shows as a new inode.
  manager_->Update(WithHealth(*set_, {{inventory_.gpus[2].uuid, "XID 48"}}));
  EXPECT_EQ(Inode(spec_path), first) << "a health change rewrote the CDI spec";
  ResourceOptions ropts;
  ropts.time_slicing.push_back({"nvidia.com/gpu", "", 2, {}});
  auto shared = BuildResources(inventory_, ropts);
  ASSERT_TRUE(shared.ok());
  manager_->Update(*shared);  // same resource name, new device list
  ASSERT_TRUE(WaitAllHealthy(kGpu, 16));
  EXPECT_NE(Inode(spec_path), first) << "new devices left the CDI spec as it was";
}

// A manager whose CDI spec writes wait, once gated, until released: a write
// that takes long (a slow disk, a driver root of many links).
class GatedCdiManager : public PluginManager {
 public:
  using PluginManager::PluginManager;
  ~GatedCdiManager() override {
    Release();
    Stop();  // before this class goes: the manager thread calls WriteCdiSpecFile
  }
  void Gate() {
    std::lock_guard l(gate_mu_);
    gated_ = true;
  }
  void Release() {
    std::lock_guard l(gate_mu_);
    gated_ = false;
    gate_cv_.notify_all();
  }
  // The next `n` writes fail (a full or read-only CDI directory).
  void FailNext(int n) {
    std::lock_guard l(gate_mu_);
    failing_ = n;
  }
  // Waits until `n` writes have begun (held at the gate while it is closed).
  bool WaitForWritesBegun(int n, std::chrono::milliseconds timeout) {
    std::unique_lock l(gate_mu_);
    return gate_cv_.wait_for(l, timeout, [&] { return begun_ >= n; });
  }
  // Waits until `n` writes have written the file.
  bool WaitForWritesDone(int n, std::chrono::milliseconds timeout) {
    std::unique_lock l(gate_mu_);
    return gate_cv_.wait_for(l, timeout, [&] { return done_ >= n; });
  }

 protected:
  Status WriteCdiSpecFile(const ResourceSet& set, std::vector<std::string>* warnings) override {
    {
      std::unique_lock l(gate_mu_);
      ++begun_;
      gate_cv_.notify_all();
      gate_cv_.wait(l, [&] { return !gated_; });
      if (failing_ > 0) {
        --failing_;
        return Unavailable("cannot write the spec (test)");
      }
    }
    Status st = PluginManager::WriteCdiSpecFile(set, warnings);
    std::lock_guard l(gate_mu_);
    if (st.ok()) ++done_;
    gate_cv_.notify_all();
    return st;
  }

 private:
  std::mutex gate_mu_;
  std::condition_variable gate_cv_;
  bool gated_ = false;
  int failing_ = 0;
  int begun_ = 0;
  int done_ = 0;
};

// The 8-GPU node served by a GatedCdiManager with the cdi-cri strategy,
// registered with the kubelet.
class GatedCdiTest : public PluginTest {
 protected:
  void StartGated(GatedCdiManager** gated, ManagerOptions opts = {}) {
    LoadNode("a100-8x-nvswitch");
    StartKubelet();
    opts.plugin_dir = dir_;
    opts.cdi_root = dir_ + "/cdi";
    opts.allocate.device_list_strategies = {DeviceListStrategy::kCdiCri};
    auto owned = std::make_unique<GatedCdiManager>(opts);
    *gated = owned.get();
    manager_ = std::move(owned);
    ASSERT_TRUE(manager_->Start(set_).ok());
    ASSERT_TRUE(kubelet_->WaitForRegistration(kGpu, 5s));
  }
  std::string GatedSpecPath() const { return dir_ + "/cdi/k8s.device-plugin.danqing.io-gpu.json"; }
};

TEST_F(GatedCdiTest, ASlowCdiWriteHoldsUpNeitherHealthChangesNorStatuses) {
  GatedCdiManager* gated = nullptr;
  ASSERT_NO_FATAL_FAILURE(StartGated(&gated));
  ASSERT_TRUE(WaitAllHealthy(kGpu, 8));
  const ino_t first = Inode(GatedSpecPath());
  ASSERT_NE(first, 0u);

  // New devices (two replicas of each GPU): the spec must be written before
  // the kubelet hears of them, and that write is held.
  gated->Gate();
  ResourceOptions ropts;
  ropts.time_slicing.push_back({"nvidia.com/gpu", "", 2, {}});
  auto shared = BuildResources(inventory_, ropts);
  ASSERT_TRUE(shared.ok());
  manager_->Update(*shared);
  ASSERT_TRUE(gated->WaitForWritesBegun(2, 5s));

  // Meanwhile the readiness probe's statuses and a health change's caller
  // go on (before, both waited on the manager's lock for the whole write).
  // A call still stuck when the wait ends is freed by opening the gate.
  auto statuses = std::async(std::launch::async, [this] { return manager_->Statuses(); });
  const bool statuses_answered = statuses.wait_for(5s) == std::future_status::ready;
  const std::string sick = inventory_.gpus[2].uuid;
  auto health = std::async(std::launch::async, [&] {
    manager_->Update(WithHealth(**shared, {{sick, "XID 79"}}));
  });
  const bool health_returned = health.wait_for(5s) == std::future_status::ready;
  // Not published before its spec: the kubelet still has the 8 GPUs (a check
  // that can only pass wrongly, if the stream were slower than this wait).
  const bool published_early = kubelet_->WaitForDevices(
      kGpu, [](const std::vector<v1beta1::Device>& devs) { return devs.size() != 8; }, 300ms);
  gated->Release();
  EXPECT_TRUE(statuses_answered) << "Statuses() waited for the CDI spec write";
  EXPECT_TRUE(health_returned) << "Update() of a health change waited for the CDI spec write";
  EXPECT_FALSE(published_early) << "the kubelet heard of devices the CDI spec did not yet name";
  if (statuses_answered) {
    EXPECT_THAT(statuses.get(), SizeIs(1));
  }

  // Once written: the newest snapshot, the replicas with GPU 2's unhealthy.
  EXPECT_TRUE(kubelet_->WaitForDevices(
      kGpu,
      [&](const std::vector<v1beta1::Device>& devs) {
        if (devs.size() != 16) return false;
        int unhealthy = 0;
        for (const auto& d : devs) unhealthy += d.health() == "Unhealthy" ? 1 : 0;
        return unhealthy == 2;
      },
      5s));
  EXPECT_NE(Inode(GatedSpecPath()), first);
}

TEST_F(GatedCdiTest, RewriteCdiSpecWritesOnTheManagerThreadAndReturnsAtOnce) {
  GatedCdiManager* gated = nullptr;
  ASSERT_NO_FATAL_FAILURE(StartGated(&gated));
  const std::string spec_path = GatedSpecPath();
  const ino_t first = Inode(spec_path);
  ASSERT_NE(first, 0u);
  gated->Gate();
  manager_->RewriteCdiSpec();  // returns with the write held
  ASSERT_TRUE(gated->WaitForWritesBegun(2, 5s));
  // Asked again during the write: written once more after it (the driver's
  // files may have changed after the first write looked).
  manager_->RewriteCdiSpec();
  gated->Release();
  EXPECT_TRUE(gated->WaitForWritesDone(3, 5s));
}

// A snapshot that arrives while the manager thread applies an earlier one
// (its spec being written) waits for it: applied on the caller's thread, it
// would be overwritten by the older one a moment later.
TEST_F(GatedCdiTest, AnEarlierSnapshotNeverOverwritesALaterOne) {
  GatedCdiManager* gated = nullptr;
  ASSERT_NO_FATAL_FAILURE(StartGated(&gated));
  ASSERT_TRUE(WaitAllHealthy(kGpu, 8));
  gated->Gate();
  ResourceOptions ropts;
  ropts.time_slicing.push_back({"nvidia.com/gpu", "", 2, {}});
  auto shared = BuildResources(inventory_, ropts);
  ASSERT_TRUE(shared.ok());
  manager_->Update(*shared);  // new devices: its spec write is held
  ASSERT_TRUE(gated->WaitForWritesBegun(2, 5s));
  // Then a health change of the devices the spec names now, the newest.
  const std::string sick = inventory_.gpus[2].uuid;
  manager_->Update(WithHealth(*set_, {{sick, "XID 79"}}));
  gated->Release();
  // The later one is applied after the earlier, its spec written again
  // (a third write; applied at once, it would need none and be overwritten).
  ASSERT_TRUE(gated->WaitForWritesDone(3, 5s))
      << "the later snapshot was not applied after the earlier one";
  // The kubelet ends with it (the servers coalesce lists: only the end counts).
  EXPECT_TRUE(kubelet_->WaitForDevices(
      kGpu,
      [&](const std::vector<v1beta1::Device>& devs) {
        if (devs.size() != 8) return false;
        for (const auto& d : devs) {
          if ((d.health() == "Unhealthy") != (d.id() == sick)) return false;
        }
        return true;
      },
      5s))
      << "the kubelet was left with " << kubelet_->Devices(kGpu).size() << " devices";
}

// A write that failed is tried again after a backoff, with nothing else
// happening on the node.
TEST_F(GatedCdiTest, AFailedWriteIsRetriedOnItsOwn) {
  GatedCdiManager* gated = nullptr;
  ASSERT_NO_FATAL_FAILURE(StartGated(&gated));
  gated->FailNext(2);
  manager_->RewriteCdiSpec();
  ASSERT_TRUE(gated->WaitForWritesBegun(3, 5s));  // the request, then the first retry (1 s)
  EXPECT_TRUE(gated->WaitForWritesDone(2, 10s));  // the second retry (2 s later) writes
}

// The spec lists the control nodes that exist when it is written: one made
// later (/dev/nvidia-uvm, by the first CUDA program) gets the spec rewritten.
TEST_F(GatedCdiTest, AControlNodeThatAppearsGetsTheSpecRewritten) {
  if (std::filesystem::exists("/dev/nvidia-uvm")) {
    GTEST_SKIP() << "this machine has /dev/nvidia-uvm: the spec lists it from the start";
  }
  const std::string dev_root = dir_ + "/driver";
  std::filesystem::create_directories(dev_root + "/dev");
  std::ofstream(dev_root + "/dev/nvidiactl") << "";
  ManagerOptions opts;
  opts.allocate.dev_root = dev_root;
  opts.cdi_node_check = 100ms;
  GatedCdiManager* gated = nullptr;
  ASSERT_NO_FATAL_FAILURE(StartGated(&gated, opts));
  auto listed = [&] {
    std::ifstream in(GatedSpecPath());
    const auto spec = nlohmann::json::parse(in, nullptr, false);
    std::set<std::string> nodes;
    if (spec.is_discarded()) return nodes;
    for (const auto& n : spec["containerEdits"]["deviceNodes"])
      nodes.insert(n["path"].get<std::string>());
    return nodes;
  };
  EXPECT_EQ(listed().count("/dev/nvidia-uvm"), 0u);
  std::ofstream(dev_root + "/dev/nvidia-uvm") << "";
  ASSERT_TRUE(gated->WaitForWritesDone(2, 5s)) << "the spec was not rewritten for /dev/nvidia-uvm";
  EXPECT_EQ(listed().count("/dev/nvidia-uvm"), 1u);
  EXPECT_EQ(listed().count("/dev/nvidiactl"), 1u);
}

}  // namespace
}  // namespace danqing::deviceplugin
