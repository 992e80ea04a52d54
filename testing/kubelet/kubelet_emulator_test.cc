#include "testing/kubelet/kubelet_emulator.h"
#include "testing/support/temp_dir.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace danqing::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr auto kWait = 10s;
constexpr const char* kResource = "example.com/gpu";
constexpr const char* kEndpoint = "test.sock";

v1beta1::Device MakeDevice(const std::string& id, const std::string& health) {
  v1beta1::Device d;
  d.set_id(id);
  d.set_health(health);
  d.mutable_topology()->add_nodes()->set_id(0);
  return d;
}

std::vector<v1beta1::Device> TwoHealthyDevices() {
  return {MakeDevice("GPU-0", KubeletEmulator::kHealthy),
          MakeDevice("GPU-1", KubeletEmulator::kHealthy)};
}

bool AllHealth(const std::vector<v1beta1::Device>& devices, const std::string& health) {
  return std::all_of(devices.begin(), devices.end(),
                     [&](const v1beta1::Device& d) { return d.health() == health; });
}

// A minimal device plugin: serves a fixed device list on <dir>/<endpoint>
// with the callback API and registers itself with the kubelet emulator.
class FakePlugin final : public v1beta1::DevicePlugin::CallbackService {
 public:
  FakePlugin(std::string dir, std::string endpoint)
      : dir_(std::move(dir)), endpoint_(std::move(endpoint)), devices_(TwoHealthyDevices()) {
    options_.set_pre_start_required(true);
    options_.set_get_preferred_allocation_available(true);
  }
  ~FakePlugin() override { Stop(); }
  FakePlugin(const FakePlugin&) = delete;
  FakePlugin& operator=(const FakePlugin&) = delete;

  std::string socket_path() const { return (fs::path(dir_) / endpoint_).string(); }

  bool Serve() {
    grpc::ServerBuilder builder;
    int bound = 0;
    builder.AddListeningPort("unix://" + socket_path(), grpc::InsecureServerCredentials(), &bound);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    return server_ != nullptr && bound != 0;
  }

  grpc::Status Register(const std::string& version = KubeletEmulator::kVersion,
                        const std::string& resource = kResource, const std::string& endpoint = "",
                        std::chrono::milliseconds deadline = kWait) {
    auto stub = v1beta1::Registration::NewStub(
        grpc::CreateChannel("unix://" + (fs::path(dir_) / "kubelet.sock").string(),
                            grpc::InsecureChannelCredentials()));
    v1beta1::RegisterRequest request;
    request.set_version(version);
    request.set_endpoint(endpoint.empty() ? endpoint_ : endpoint);
    request.set_resource_name(resource);
    {
      std::lock_guard lock(mu_);
      *request.mutable_options() = options_;
    }
    v1beta1::Empty response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + deadline);
    return stub->Register(&context, request, &response);
  }

  // Ends the open streams and stops serving.
  void Stop() {
    if (server_ == nullptr) return;
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      for (Writer* w : writers_) w->End(grpc::Status::OK);
    }
    server_->Shutdown(std::chrono::system_clock::now() + 1s);
    server_->Wait();
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return writers_.empty(); });
    server_.reset();
  }

  // Ends the stream opened first of those still open (false if none is).
  bool EndOldestStream() {
    std::lock_guard lock(mu_);
    if (by_age_.empty()) return false;
    by_age_.front()->End(grpc::Status::OK);
    return true;
  }

  void SetPreStartRequired(bool required) {
    std::lock_guard lock(mu_);
    options_.set_pre_start_required(required);
  }

  // Sends the new full list on every open stream.
  void SetDevices(std::vector<v1beta1::Device> devices) {
    std::lock_guard lock(mu_);
    devices_ = std::move(devices);
    for (Writer* w : writers_) w->Send(ListLocked());
  }

  bool WaitForStreams(size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return writers_.size() == n; });
  }

  std::vector<std::vector<std::string>> pre_start_calls() const {
    std::lock_guard lock(mu_);
    return pre_start_calls_;
  }

  // --- DevicePlugin ----------------------------------------------------------

  grpc::ServerUnaryReactor* GetDevicePluginOptions(
      grpc::CallbackServerContext* context, const v1beta1::Empty* /*request*/,
      v1beta1::DevicePluginOptions* response) override {
    {
      // Every handler takes mu_, which Stop() takes too: that orders the
      // handlers before the destructor for ThreadSanitizer as well.
      std::lock_guard lock(mu_);
      *response = options_;
    }
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerWriteReactor<v1beta1::ListAndWatchResponse>* ListAndWatch(
      grpc::CallbackServerContext* /*context*/, const v1beta1::Empty* /*request*/) override {
    auto* writer = new Writer(this);
    std::lock_guard lock(mu_);
    writers_.insert(writer);
    by_age_.push_back(writer);
    if (stopping_) {
      writer->End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "stopping"));
    } else {
      writer->Send(ListLocked());
    }
    cv_.notify_all();
    return writer;
  }

  // must_include first, then the available ones in order, up to the size.
  grpc::ServerUnaryReactor* GetPreferredAllocation(
      grpc::CallbackServerContext* context, const v1beta1::PreferredAllocationRequest* request,
      v1beta1::PreferredAllocationResponse* response) override {
    std::lock_guard lock(mu_);
    for (const auto& c : request->container_requests()) {
      std::vector<std::string> chosen(c.must_include_deviceids().begin(),
                                      c.must_include_deviceids().end());
      for (const std::string& id : c.available_deviceids()) {
        if (static_cast<int32_t>(chosen.size()) >= c.allocation_size()) break;
        if (std::find(chosen.begin(), chosen.end(), id) == chosen.end()) chosen.push_back(id);
      }
      auto* out = response->add_container_responses();
      for (const std::string& id : chosen) out->add_deviceids(id);
    }
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* Allocate(grpc::CallbackServerContext* context,
                                     const v1beta1::AllocateRequest* request,
                                     v1beta1::AllocateResponse* response) override {
    auto* reactor = context->DefaultReactor();
    std::lock_guard lock(mu_);
    for (const auto& c : request->container_requests()) {
      auto* out = response->add_container_responses();
      std::string visible;
      for (const std::string& id : c.devices_ids()) {
        bool known = std::any_of(devices_.begin(), devices_.end(),
                                 [&](const v1beta1::Device& d) { return d.id() == id; });
        if (!known) {
          reactor->Finish({grpc::StatusCode::INVALID_ARGUMENT, "unknown device " + id});
          return reactor;
        }
        visible += (visible.empty() ? "" : ",") + id;
        out->add_cdi_devices()->set_name("example.com/gpu=" + id);
        auto* spec = out->add_devices();
        spec->set_container_path("/dev/" + id);
        spec->set_host_path("/dev/" + id);
        spec->set_permissions("rw");
      }
      (*out->mutable_envs())["VISIBLE_DEVICES"] = visible;
    }
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* PreStartContainer(
      grpc::CallbackServerContext* context, const v1beta1::PreStartContainerRequest* request,
      v1beta1::PreStartContainerResponse* /*response*/) override {
    {
      std::lock_guard lock(mu_);
      pre_start_calls_.emplace_back(request->devices_ids().begin(), request->devices_ids().end());
    }
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  // One ListAndWatch stream: queues full lists and writes them one at a time.
  class Writer final : public grpc::ServerWriteReactor<v1beta1::ListAndWatchResponse> {
   public:
    explicit Writer(FakePlugin* plugin) : plugin_(plugin) {}

    void Send(v1beta1::ListAndWatchResponse message) {
      const v1beta1::ListAndWatchResponse* next = nullptr;
      {
        std::lock_guard lock(mu_);
        if (ending_) return;
        queue_.push_back(std::move(message));
        if (!writing_) {
          writing_ = true;
          next = &queue_.front();
        }
      }
      if (next != nullptr) StartWrite(next);
    }

    // Finishes the stream once the write in flight (if any) is done.
    void End(grpc::Status status) {
      bool finish_now = false;
      {
        std::lock_guard lock(mu_);
        if (ending_) return;
        ending_ = true;
        status_ = status;
        finish_now = !writing_;
      }
      if (finish_now) Finish(status);
    }

    void OnWriteDone(bool ok) override {
      const v1beta1::ListAndWatchResponse* next = nullptr;
      bool finish = false;
      grpc::Status status;
      {
        std::lock_guard lock(mu_);
        queue_.pop_front();
        writing_ = false;
        if (!ok && !ending_) {
          ending_ = true;
          status_ = grpc::Status(grpc::StatusCode::CANCELLED, "write failed");
        }
        if (ending_) {
          finish = true;
          status = status_;
        } else if (!queue_.empty()) {
          writing_ = true;
          next = &queue_.front();
        }
      }
      if (next != nullptr) StartWrite(next);
      if (finish) Finish(status);
    }

    void OnCancel() override { End(grpc::Status::CANCELLED); }

    void OnDone() override {
      // gRPC orders OnDone after the other reactions; the lock makes that
      // ordering visible to ThreadSanitizer too (gRPC is not instrumented).
      { std::lock_guard lock(mu_); }
      plugin_->RemoveWriter(this);
      delete this;
    }

   private:
    FakePlugin* const plugin_;
    std::mutex mu_;
    std::deque<v1beta1::ListAndWatchResponse> queue_;  // front: being written
    bool writing_ = false;
    bool ending_ = false;
    grpc::Status status_;
  };

  v1beta1::ListAndWatchResponse ListLocked() const {
    v1beta1::ListAndWatchResponse r;
    for (const auto& d : devices_) *r.add_devices() = d;
    return r;
  }

  void RemoveWriter(Writer* w) {
    std::lock_guard lock(mu_);
    writers_.erase(w);
    by_age_.erase(std::find(by_age_.begin(), by_age_.end(), w));
    cv_.notify_all();
  }

  const std::string dir_;
  const std::string endpoint_;
  v1beta1::DevicePluginOptions options_;
  std::unique_ptr<grpc::Server> server_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<v1beta1::Device> devices_;
  std::set<Writer*> writers_;
  std::deque<Writer*> by_age_;  // writers_, oldest first
  bool stopping_ = false;
  std::vector<std::vector<std::string>> pre_start_calls_;
};

class KubeletEmulatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    grpc::Status s = kubelet_.Start();
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  // Serves the fake plugin and registers it; waits for the first list.
  void ServeAndRegister(FakePlugin& plugin) {
    ASSERT_TRUE(plugin.Serve());
    grpc::Status s = plugin.Register();
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_TRUE(kubelet_.WaitForDevices(
        kResource, [](const auto& devices) { return devices.size() == 2; }, kWait));
  }

  TempDir dir_;
  KubeletEmulator kubelet_{dir_.path()};
};

TEST_F(KubeletEmulatorTest, RegistrationFetchesOptions) {
  EXPECT_TRUE(fs::is_socket(kubelet_.kubelet_socket()));
  EXPECT_FALSE(kubelet_.IsRegistered(kResource));
  EXPECT_FALSE(kubelet_.Options(kResource).has_value());

  FakePlugin plugin(dir_.path(), kEndpoint);
  ASSERT_TRUE(plugin.Serve());
  const auto before = KubeletEmulator::Clock::now();
  grpc::Status s = plugin.Register();
  ASSERT_TRUE(s.ok()) << s.error_message();

  // Register has returned: the registration is already recorded.
  EXPECT_TRUE(kubelet_.IsRegistered(kResource));
  EXPECT_TRUE(kubelet_.WaitForRegistration(kResource, kWait));
  EXPECT_EQ(kubelet_.RegistrationCount(kResource), 1);
  EXPECT_EQ(kubelet_.RegisterCalls(), 1);
  auto options = kubelet_.Options(kResource);
  ASSERT_TRUE(options.has_value());
  EXPECT_TRUE(options->pre_start_required());
  EXPECT_TRUE(options->get_preferred_allocation_available());
  auto request = kubelet_.LastRegisterRequest(kResource);
  ASSERT_TRUE(request.has_value());
  EXPECT_EQ(request->endpoint(), kEndpoint);
  EXPECT_EQ(request->version(), "v1beta1");
  auto when = kubelet_.LastRegistrationTime(kResource);
  ASSERT_TRUE(when.has_value());
  EXPECT_GE(*when, before);
  EXPECT_EQ(kubelet_.RegistrationCount("example.com/other"), 0);
}

TEST_F(KubeletEmulatorTest, ListAndWatchReplacesTheWholeList) {
  FakePlugin plugin(dir_.path(), kEndpoint);
  ServeAndRegister(plugin);
  EXPECT_TRUE(AllHealth(kubelet_.Devices(kResource), KubeletEmulator::kHealthy));
  EXPECT_EQ(kubelet_.StreamUpdates(kResource), 1);
  EXPECT_TRUE(plugin.WaitForStreams(1, kWait));

  plugin.SetDevices({MakeDevice("GPU-1", KubeletEmulator::kUnhealthy)});
  ASSERT_TRUE(kubelet_.WaitForDevices(
      kResource,
      [](const std::vector<v1beta1::Device>& devices) {
        return devices.size() == 1 && devices[0].id() == "GPU-1" &&
               devices[0].health() == KubeletEmulator::kUnhealthy;
      },
      kWait));
  EXPECT_EQ(kubelet_.StreamUpdates(kResource), 2);
  EXPECT_FALSE(kubelet_.StreamEnded(kResource));

  plugin.SetDevices(TwoHealthyDevices());
  ASSERT_TRUE(kubelet_.WaitForDevices(
      kResource,
      [](const auto& devices) {
        return devices.size() == 2 && AllHealth(devices, KubeletEmulator::kHealthy);
      },
      kWait));
  EXPECT_EQ(kubelet_.StreamUpdates(kResource), 3);
}

TEST_F(KubeletEmulatorTest, AllocationCallsRoundTrip) {
  FakePlugin plugin(dir_.path(), kEndpoint);
  ServeAndRegister(plugin);

  PreferredAllocationResult preferred =
      kubelet_.GetPreferredAllocation(kResource, {"GPU-0", "GPU-1"}, {"GPU-1"}, 1);
  ASSERT_TRUE(preferred.status.ok()) << preferred.status.error_message();
  EXPECT_EQ(preferred.device_ids, std::vector<std::string>{"GPU-1"});

  preferred = kubelet_.GetPreferredAllocation(kResource, {"GPU-0", "GPU-1"}, {}, 2);
  ASSERT_TRUE(preferred.status.ok()) << preferred.status.error_message();
  EXPECT_EQ(preferred.device_ids, (std::vector<std::string>{"GPU-0", "GPU-1"}));

  AllocateResult allocated = kubelet_.Allocate(kResource, {"GPU-0", "GPU-1"});
  ASSERT_TRUE(allocated.status.ok()) << allocated.status.error_message();
  EXPECT_EQ(allocated.response.envs().at("VISIBLE_DEVICES"), "GPU-0,GPU-1");
  ASSERT_EQ(allocated.response.cdi_devices_size(), 2);
  EXPECT_EQ(allocated.response.cdi_devices(0).name(), "example.com/gpu=GPU-0");
  ASSERT_EQ(allocated.response.devices_size(), 2);
  EXPECT_EQ(allocated.response.devices(1).permissions(), "rw");

  // The plugin's error reaches the caller, as it fails the pod's admission.
  allocated = kubelet_.Allocate(kResource, {"GPU-9"});
  EXPECT_EQ(allocated.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(allocated.status.error_message().find("GPU-9"), std::string::npos);

  grpc::Status s = kubelet_.PreStartContainer(kResource, {"GPU-0"});
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(plugin.pre_start_calls(), std::vector<std::vector<std::string>>{{"GPU-0"}});

  // Not registered: refused without a call.
  EXPECT_EQ(kubelet_.Allocate("example.com/other", {"GPU-0"}).status.error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(kubelet_.GetPreferredAllocation("example.com/other", {}, {}, 1).status.error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(kubelet_.PreStartContainer("example.com/other", {}).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(KubeletEmulatorTest, RejectsWrongVersion) {
  FakePlugin plugin(dir_.path(), kEndpoint);
  ASSERT_TRUE(plugin.Serve());
  grpc::Status s = plugin.Register("v1alpha");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("v1alpha"), std::string::npos);
  EXPECT_FALSE(kubelet_.IsRegistered(kResource));
  EXPECT_EQ(kubelet_.RegistrationCount(kResource), 0);
  EXPECT_EQ(kubelet_.RegisterCalls(), 1);
}

TEST_F(KubeletEmulatorTest, RejectsMalformedRequests) {
  FakePlugin plugin(dir_.path(), kEndpoint);
  ASSERT_TRUE(plugin.Serve());
  struct Case {
    std::string resource;
    std::string endpoint;
  };
  const std::vector<Case> cases = {
      {"", kEndpoint},
      {"gpu", kEndpoint},
      {"kubernetes.io/gpu", kEndpoint},
      {"Example.com/gpu", kEndpoint},
      {"example.com/", kEndpoint},
      {"example.com/a/b", kEndpoint},
      {kResource, "sub/test.sock"},
      {kResource, dir_.path() + "/test.sock"},
  };
  for (const Case& c : cases) {
    grpc::Status s = plugin.Register(KubeletEmulator::kVersion, c.resource, c.endpoint);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << c.resource << " at " << c.endpoint;
  }
  EXPECT_EQ(kubelet_.RegistrationCount(kResource), 0);
}

TEST(KubeletEmulatorDialTest, RegisterFailsWhenThePluginDoesNotServe) {
  TempDir dir;
  KubeletEmulatorOptions options;
  options.dial_timeout = 300ms;
  KubeletEmulator kubelet(dir.path(), options);
  ASSERT_TRUE(kubelet.Start().ok());
  FakePlugin plugin(dir.path(), kEndpoint);  // not serving
  grpc::Status s = plugin.Register();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.error_message().find(kEndpoint), std::string::npos) << s.error_message();
  EXPECT_FALSE(kubelet.IsRegistered(kResource));
  EXPECT_EQ(kubelet.RegisterCalls(), 1);
}

TEST_F(KubeletEmulatorTest, RestartDeletesSocketsAndEndsStreams) {
  const fs::path checkpoint = fs::path(dir_.path()) / "kubelet_internal_checkpoint";
  std::ofstream(checkpoint) << "{}";
  FakePlugin plugin(dir_.path(), kEndpoint);
  ServeAndRegister(plugin);
  ASSERT_TRUE(plugin.WaitForStreams(1, kWait));
  ASSERT_TRUE(fs::is_socket(plugin.socket_path()));

  grpc::Status s = kubelet_.Restart();
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(kubelet_.RestartCount(), 1);
  ASSERT_TRUE(kubelet_.LastRestartTime().has_value());
  EXPECT_FALSE(fs::exists(plugin.socket_path()));
  EXPECT_TRUE(fs::is_socket(kubelet_.kubelet_socket()));
  EXPECT_TRUE(fs::is_regular_file(checkpoint));

  // The kubelet saw its stream end and forgot the plugin; the plugin saw it too.
  EXPECT_TRUE(kubelet_.WaitForStreamEnd(kResource, kWait));
  EXPECT_TRUE(AllHealth(kubelet_.Devices(kResource), KubeletEmulator::kUnhealthy));
  EXPECT_EQ(kubelet_.Devices(kResource).size(), 2u);
  EXPECT_FALSE(kubelet_.IsRegistered(kResource));
  EXPECT_TRUE(plugin.WaitForStreams(0, kWait));
  EXPECT_EQ(kubelet_.Allocate(kResource, {"GPU-0"}).status.error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);

  // A plugin that recreates its socket and registers again is back.
  plugin.Stop();
  FakePlugin again(dir_.path(), kEndpoint);
  ASSERT_TRUE(again.Serve());
  s = again.Register();
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_TRUE(kubelet_.WaitForRegistration(kResource, kWait));
  EXPECT_EQ(kubelet_.RegistrationCount(kResource), 2);
  EXPECT_FALSE(kubelet_.StreamEnded(kResource));
  ASSERT_TRUE(kubelet_.WaitForDevices(
      kResource, [](const auto& d) { return AllHealth(d, KubeletEmulator::kHealthy); }, kWait));
  auto latency = *kubelet_.LastRegistrationTime(kResource) - *kubelet_.LastRestartTime();
  EXPECT_GE(latency.count(), 0);
  EXPECT_TRUE(kubelet_.Allocate(kResource, {"GPU-0"}).status.ok());
}

TEST_F(KubeletEmulatorTest, PluginExitMarksDevicesUnhealthy) {
  FakePlugin plugin(dir_.path(), kEndpoint);
  ServeAndRegister(plugin);
  plugin.Stop();
  EXPECT_TRUE(kubelet_.WaitForStreamEnd(kResource, kWait));
  EXPECT_TRUE(kubelet_.WaitForDevices(
      kResource, [](const auto& d) { return AllHealth(d, KubeletEmulator::kUnhealthy); }, kWait));
  EXPECT_EQ(kubelet_.Devices(kResource).size(), 2u);
}

TEST_F(KubeletEmulatorTest, ReRegistrationLeavesTheOldStreamOpenAndItsEndStopsTheNewEndpoint) {
  FakePlugin plugin(dir_.path(), kEndpoint);
  ServeAndRegister(plugin);
  ASSERT_TRUE(plugin.WaitForStreams(1, kWait));
  grpc::Status s = plugin.Register();
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(kubelet_.WaitForRegistrationCount(kResource, 2, kWait));
  EXPECT_FALSE(kubelet_.WaitForRegistrationCount(kResource, 3, 1ms));
  // As the kubelet: the first registration's stream is not ended.
  EXPECT_TRUE(plugin.WaitForStreams(2, kWait));
  EXPECT_EQ(kubelet_.OpenStreams(kResource), 2);
  EXPECT_FALSE(kubelet_.EndpointStopTime(kResource).has_value());
  EXPECT_TRUE(kubelet_.Allocate(kResource, {"GPU-0"}).status.ok());
  // The new stream's first list has reached the kubelet; arriving after the
  // old stream's end, it would make the devices healthy again.
  ASSERT_TRUE(kubelet_.WaitForStreamUpdates(kResource, 1, kWait));

  // The old stream ends: the kubelet handles that by resource name, so the
  // new endpoint is stopped and every device is unhealthy.
  ASSERT_TRUE(plugin.EndOldestStream());
  ASSERT_TRUE(kubelet_.WaitForDevices(
      kResource, [](const auto& d) { return AllHealth(d, KubeletEmulator::kUnhealthy); }, kWait));
  EXPECT_EQ(kubelet_.StaleStreamEnds(kResource), 1);
  EXPECT_EQ(kubelet_.OpenStreams(kResource), 1);
  EXPECT_FALSE(kubelet_.StreamEnded(kResource)) << "the current stream is still open";
  EXPECT_TRUE(kubelet_.EndpointStopTime(kResource).has_value());
  AllocateResult refused = kubelet_.Allocate(kResource, {"GPU-0"});
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(refused.status.error_message().find("stopped"), std::string::npos)
      << refused.status.error_message();

  // The open stream's next list brings the health back, not the endpoint.
  plugin.SetDevices(TwoHealthyDevices());
  ASSERT_TRUE(kubelet_.WaitForDevices(
      kResource, [](const auto& d) { return AllHealth(d, KubeletEmulator::kHealthy); }, kWait));
  EXPECT_TRUE(kubelet_.EndpointStopTime(kResource).has_value());

  // Registering again makes a new endpoint.
  s = plugin.Register();
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_FALSE(kubelet_.EndpointStopTime(kResource).has_value());
  EXPECT_TRUE(kubelet_.Allocate(kResource, {"GPU-0"}).status.ok());
}

TEST_F(KubeletEmulatorTest, BreakStreamEndsTheCurrentStreamFromTheKubeletsSide) {
  FakePlugin plugin(dir_.path(), kEndpoint);
  EXPECT_EQ(kubelet_.BreakStream(kResource).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  ServeAndRegister(plugin);
  ASSERT_TRUE(plugin.WaitForStreams(1, kWait));
  ASSERT_TRUE(kubelet_.BreakStream(kResource).ok());
  EXPECT_TRUE(kubelet_.WaitForStreamEnd(kResource, kWait));
  EXPECT_EQ(kubelet_.StreamStatus(kResource).error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(plugin.WaitForStreams(0, kWait)) << "the plugin sees its stream end";
  EXPECT_TRUE(kubelet_.EndpointStopTime(kResource).has_value());
  EXPECT_TRUE(AllHealth(kubelet_.Devices(kResource), KubeletEmulator::kUnhealthy));
  EXPECT_EQ(kubelet_.StaleStreamEnds(kResource), 0);
  EXPECT_EQ(kubelet_.BreakStream(kResource).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(KubeletEmulatorTest, PreStartContainerOnlyWhenThePluginAskedForIt) {
  FakePlugin plugin(dir_.path(), kEndpoint);
  plugin.SetPreStartRequired(false);
  ServeAndRegister(plugin);
  grpc::Status s = kubelet_.PreStartContainer(kResource, {"GPU-0"});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("PreStartContainer"), std::string::npos) << s.error_message();
  EXPECT_TRUE(plugin.pre_start_calls().empty());
  v1beta1::DevicePluginOptions options;
  s = kubelet_.GetDevicePluginOptions(kResource, &options);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_FALSE(options.pre_start_required());
  EXPECT_TRUE(options.get_preferred_allocation_available());
}

TEST(KubeletEmulatorSlowKubeletTest, ARegisterAnsweredLateStillRegistersAndStreams) {
  TempDir dir;
  KubeletEmulatorOptions options;
  options.register_reply_delay = 2s;
  KubeletEmulator kubelet(dir.path(), options);
  ASSERT_TRUE(kubelet.Start().ok());
  FakePlugin plugin(dir.path(), kEndpoint);
  ASSERT_TRUE(plugin.Serve());
  grpc::Status s = plugin.Register(KubeletEmulator::kVersion, kResource, "", 200ms);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  // The plugin gave up; the kubelet did not.
  EXPECT_TRUE(kubelet.WaitForRegistration(kResource, kWait));
  EXPECT_TRUE(plugin.WaitForStreams(1, kWait));
  EXPECT_TRUE(kubelet.WaitForDevices(
      kResource, [](const auto& d) { return d.size() == 2; }, kWait));
}

TEST(KubeletEmulatorSlowKubeletTest, AStreamsEndIsHandledAfterTheDelay) {
  TempDir dir;
  KubeletEmulatorOptions options;
  options.stream_end_delay = 1s;
  KubeletEmulator kubelet(dir.path(), options);
  ASSERT_TRUE(kubelet.Start().ok());
  FakePlugin plugin(dir.path(), kEndpoint);
  ASSERT_TRUE(plugin.Serve());
  ASSERT_TRUE(plugin.Register().ok());
  ASSERT_TRUE(plugin.WaitForStreams(1, kWait));
  // The stream cannot end before Stop() starts, so the kubelet handles its
  // end a whole delay after that. (Stop() itself may take most of the delay
  // on a loaded machine: no check here may depend on its length.)
  const auto before_stop = KubeletEmulator::Clock::now();
  plugin.Stop();
  ASSERT_TRUE(kubelet.WaitForStreamEnd(kResource, kWait));
  const auto stopped = kubelet.EndpointStopTime(kResource);
  ASSERT_TRUE(stopped.has_value());
  EXPECT_GE(*stopped - before_stop, options.stream_end_delay);
}

TEST(KubeletEmulatorLifecycleTest, StartStop) {
  TempDir dir;
  KubeletEmulator kubelet(dir.path());
  ASSERT_TRUE(kubelet.Start().ok());
  EXPECT_EQ(kubelet.Start().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(fs::is_socket(kubelet.kubelet_socket()));
  kubelet.Stop();
  EXPECT_FALSE(fs::exists(kubelet.kubelet_socket()));
  kubelet.Stop();  // idempotent
  EXPECT_EQ(kubelet.Restart().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  ASSERT_TRUE(kubelet.Start().ok());  // serves again after a stop

  KubeletEmulator too_long(dir.path() + "/" + std::string(120, 'x'));
  EXPECT_EQ(too_long.Start().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// --- Pod resources -------------------------------------------------------------

v1::PodResources MakePod(const std::string& ns, const std::string& name,
                         const std::vector<std::string>& ids) {
  v1::PodResources pod;
  pod.set_name(name);
  pod.set_namespace_(ns);
  auto* container = pod.add_containers();
  container->set_name("main");
  auto* devices = container->add_devices();
  devices->set_resource_name(kResource);
  for (const auto& id : ids) devices->add_device_ids(id);
  devices->mutable_topology()->add_nodes()->set_id(1);
  return pod;
}

// A container's DRA claims travel in dynamic_resources (field 5), each
// device named by driver, pool and device, with its CDI IDs and shareID.
TEST(PodResourcesEmulatorTest, DynamicResourcesOnTheWire) {
  TempDir dir;
  PodResourcesEmulator server(dir.path() + "/kubelet.sock");
  grpc::Status s = server.Start();
  ASSERT_TRUE(s.ok()) << s.error_message();
  v1::PodResources pod;
  pod.set_namespace_("ml");
  pod.set_name("train");
  auto* c = pod.add_containers();
  c->set_name("main");
  AddDynamicResource(*c, "ml", "train-gpu",
                     {{"gpu.danqing.io", "node-a", "gpu-1", {"gpu.danqing.io/claim=u-gpu-1"}, {}},
                      {"gpu.danqing.io", "node-a", "gpu-2", {}, std::string("s1")}});
  server.SetPods({pod});
  auto stub = v1::PodResourcesLister::NewStub(
      grpc::CreateChannel("unix://" + server.socket_path(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  v1::GetPodResourcesRequest request;
  request.set_pod_name("train");
  request.set_pod_namespace("ml");
  v1::GetPodResourcesResponse response;
  s = stub->Get(&context, request, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(response.pod_resources().containers(0).dynamic_resources_size(), 1);
  const auto& claim = response.pod_resources().containers(0).dynamic_resources(0);
  EXPECT_EQ(claim.claim_namespace(), "ml");
  EXPECT_EQ(claim.claim_name(), "train-gpu");
  ASSERT_EQ(claim.claim_resources_size(), 2);
  EXPECT_EQ(claim.claim_resources(0).driver_name(), "gpu.danqing.io");
  EXPECT_EQ(claim.claim_resources(0).pool_name(), "node-a");
  EXPECT_EQ(claim.claim_resources(0).device_name(), "gpu-1");
  EXPECT_EQ(claim.claim_resources(0).cdi_devices(0).name(), "gpu.danqing.io/claim=u-gpu-1");
  EXPECT_FALSE(claim.claim_resources(0).has_share_id());
  EXPECT_EQ(claim.claim_resources(1).share_id(), "s1");
}

TEST(PodResourcesEmulatorTest, ListGetAndAllocatable) {
  TempDir dir;
  PodResourcesEmulator server(dir.path() + "/kubelet.sock");
  grpc::Status s = server.Start();
  ASSERT_TRUE(s.ok()) << s.error_message();
  server.SetPods({MakePod("default", "a", {"GPU-0"}), MakePod("ml", "b", {"GPU-1"})});
  v1::AllocatableResourcesResponse allocatable;
  auto* devices = allocatable.add_devices();
  devices->set_resource_name(kResource);
  devices->add_device_ids("GPU-0");
  devices->add_device_ids("GPU-1");
  server.SetAllocatable(allocatable);

  auto stub = v1::PodResourcesLister::NewStub(
      grpc::CreateChannel("unix://" + server.socket_path(), grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext context;
    v1::ListPodResourcesResponse response;
    s = stub->List(&context, v1::ListPodResourcesRequest(), &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(response.pod_resources_size(), 2);
    EXPECT_EQ(response.pod_resources(1).namespace_(), "ml");
    EXPECT_EQ(response.pod_resources(1).containers(0).devices(0).device_ids(0), "GPU-1");
  }
  {
    grpc::ClientContext context;
    v1::GetPodResourcesRequest request;
    request.set_pod_name("b");
    request.set_pod_namespace("ml");
    v1::GetPodResourcesResponse response;
    s = stub->Get(&context, request, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(response.pod_resources().name(), "b");
    EXPECT_EQ(response.pod_resources().containers(0).devices(0).topology().nodes(0).id(), 1);
  }
  {
    grpc::ClientContext context;
    v1::GetPodResourcesRequest request;
    request.set_pod_name("b");
    request.set_pod_namespace("default");  // right name, wrong namespace
    v1::GetPodResourcesResponse response;
    EXPECT_EQ(stub->Get(&context, request, &response).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext context;
    v1::AllocatableResourcesResponse response;
    s = stub->GetAllocatableResources(&context, v1::AllocatableResourcesRequest(), &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(response.devices_size(), 1);
    EXPECT_EQ(response.devices(0).device_ids_size(), 2);
  }
  EXPECT_EQ(server.CallCount(), 4);
  server.Stop();
  EXPECT_FALSE(fs::exists(server.socket_path()));
}

}  // namespace
}  // namespace danqing::testing
