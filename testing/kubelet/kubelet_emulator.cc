#include "testing/kubelet/kubelet_emulator.h"

#include <spdlog/spdlog.h>
#include <sys/un.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>
#include <utility>

namespace danqing::testing {
namespace {

namespace fs = std::filesystem;
using Clock = KubeletEmulator::Clock;

// sun_path holds 108 bytes including the terminating NUL.
constexpr size_t kMaxSocketPath = sizeof(sockaddr_un{}.sun_path) - 1;

// gRPC deadlines take system_clock time points only.
std::chrono::system_clock::time_point Deadline(std::chrono::milliseconds timeout) {
  return std::chrono::system_clock::now() + timeout;
}

std::string UnixTarget(const std::string& path) {
  return path.starts_with('/') ? "unix://" + path : "unix:" + path;
}

grpc::Status CheckSocketPath(const std::string& path) {
  if (path.size() > kMaxSocketPath) {
    return {grpc::StatusCode::INVALID_ARGUMENT,
            "socket path " + path + " is " + std::to_string(path.size()) +
                " bytes; unix sockets allow at most " + std::to_string(kMaxSocketPath)};
  }
  return grpc::Status::OK;
}

// A channel of its own (no subchannel shared with other channels), so that a
// restart really closes the connection, as the kubelet's does.
std::shared_ptr<grpc::Channel> DialUnix(const std::string& path) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(UnixTarget(path), grpc::InsecureChannelCredentials(), args);
}

// Starts a server for `service` on the unix socket `path`.
grpc::Status Serve(const std::string& path, grpc::Service* service,
                   std::unique_ptr<grpc::Server>* server) {
  if (grpc::Status s = CheckSocketPath(path); !s.ok()) return s;
  std::error_code ec;
  fs::remove(path, ec);  // a stale socket from an earlier run
  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort(UnixTarget(path), grpc::InsecureServerCredentials(), &bound);
  builder.RegisterService(service);
  *server = builder.BuildAndStart();
  if (*server == nullptr || bound == 0) {
    server->reset();
    return {grpc::StatusCode::UNAVAILABLE, "cannot serve gRPC on " + path};
  }
  return grpc::Status::OK;
}

// A DNS-1123 subdomain, as the domain part of an extended resource name.
bool IsDnsSubdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  while (start <= s.size()) {
    size_t dot = s.find('.', start);
    std::string_view label = s.substr(start, dot == std::string_view::npos ? s.npos : dot - start);
    if (label.empty() || label.size() > 63) return false;
    for (char c : label) {
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
    }
    if (label.front() == '-' || label.back() == '-') return false;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return true;
}

// The name part of a qualified name: [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?, <= 63.
bool IsQualifiedNamePart(std::string_view s) {
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  if (s.empty() || s.size() > 63) return false;
  if (!alnum(s.front()) || !alnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(),
                     [&](char c) { return alnum(c) || c == '-' || c == '_' || c == '.'; });
}

// What the kubelet's v1helper.IsExtendedResourceName accepts: "domain/name",
// outside the kubernetes.io namespace and not a "requests." quota name.
bool IsExtendedResourceName(const std::string& name) {
  size_t slash = name.find('/');
  if (slash == std::string::npos || name.find('/', slash + 1) != std::string::npos) return false;
  std::string_view domain = std::string_view(name).substr(0, slash);
  std::string_view part = std::string_view(name).substr(slash + 1);
  if (domain == "kubernetes.io" || domain.ends_with(".kubernetes.io")) return false;
  if (name.starts_with("requests.")) return false;
  return IsDnsSubdomain(domain) && IsQualifiedNamePart(part);
}

grpc::Status ValidateRegisterRequest(const v1beta1::RegisterRequest& r) {
  if (r.version() != KubeletEmulator::kVersion) {
    return {grpc::StatusCode::INVALID_ARGUMENT,
            "requested device plugin API version \"" + r.version() +
                "\" is not supported by kubelet; supported versions: [v1beta1]"};
  }
  if (r.endpoint().empty() || r.endpoint().find('/') != std::string::npos || r.endpoint() == "." ||
      r.endpoint() == "..") {
    return {grpc::StatusCode::INVALID_ARGUMENT,
            "endpoint \"" + r.endpoint() +
                "\" must be a socket file name in the device-plugin directory"};
  }
  if (!IsExtendedResourceName(r.resource_name())) {
    return {grpc::StatusCode::INVALID_ARGUMENT,
            "resource name \"" + r.resource_name() + "\" is not an extended resource name"};
  }
  return grpc::Status::OK;
}

std::string StatusText(const grpc::Status& s) {
  static constexpr const char* kNames[] = {"OK",
                                           "CANCELLED",
                                           "UNKNOWN",
                                           "INVALID_ARGUMENT",
                                           "DEADLINE_EXCEEDED",
                                           "NOT_FOUND",
                                           "ALREADY_EXISTS",
                                           "PERMISSION_DENIED",
                                           "RESOURCE_EXHAUSTED",
                                           "FAILED_PRECONDITION",
                                           "ABORTED",
                                           "OUT_OF_RANGE",
                                           "UNIMPLEMENTED",
                                           "INTERNAL",
                                           "UNAVAILABLE",
                                           "DATA_LOSS",
                                           "UNAUTHENTICATED"};
  const auto code = static_cast<size_t>(s.error_code());
  std::string text = code < std::size(kNames) ? kNames[code] : std::to_string(code);
  if (!s.error_message().empty()) text += ": " + s.error_message();
  return text;
}

grpc::Status WithContext(const grpc::Status& s, const std::string& context) {
  return {s.error_code(), context + ": " + s.error_message()};
}

}  // namespace

// ============================================================================
// KubeletEmulator::Impl
// ============================================================================

class KubeletEmulator::Impl {
 public:
  Impl(std::string dir, KubeletEmulatorOptions options)
      : dir_(std::move(dir)), options_(options), register_reply_delay_(options.register_reply_delay) {}

  ~Impl() { Stop(); }

  grpc::Status Start();
  void Stop();
  grpc::Status Restart();

  std::string KubeletSocket() const { return (fs::path(dir_) / kKubeletSocketName).string(); }

  // Called by the Registration service; `done` finishes the RPC.
  void HandleRegister(const v1beta1::RegisterRequest& request,
                      std::function<void(grpc::Status)> done);

  // One ListAndWatch stream of one accepted registration.
  struct Stream {
    std::string resource;
    std::string endpoint;
    std::shared_ptr<grpc::Channel> channel;
    grpc::ClientContext context;
    std::thread thread;
  };

  // A Register whose GetDevicePluginOptions call is in flight.
  struct PendingDial {
    uint64_t epoch = 0;
    v1beta1::RegisterRequest request;
    std::shared_ptr<grpc::Channel> channel;
    grpc::ClientContext context;
    v1beta1::DevicePluginOptions options;
  };

  struct Resource {
    bool registered = false;  // with the current kubelet instance
    int registration_count = 0;
    v1beta1::RegisterRequest last_request;
    v1beta1::DevicePluginOptions options;
    std::optional<Clock::time_point> last_registration;
    std::shared_ptr<Stream> stream;  // the current registration's
    int open_streams = 0;            // this registration's and earlier ones' still open
    int stale_stream_ends = 0;       // ends of earlier registrations' streams
    std::optional<Clock::time_point> stopped_at;  // the current endpoint's stop time
    bool has_devices = false;
    std::vector<v1beta1::Device> devices;
    int64_t stream_updates = 0;
    std::chrono::steady_clock::time_point last_update{};  // when the current list arrived
    bool stream_ended = false;
    grpc::Status stream_status;
  };

  // Requires mu_. nullptr when unknown.
  const Resource* Find(const std::string& resource) const {
    auto it = resources_.find(resource);
    return it == resources_.end() ? nullptr : &it->second;
  }

  // Waits until `holds` is true of `resource` (nullptr while it is unknown).
  template <typename Holds>
  bool WaitFor(const std::string& resource, std::chrono::milliseconds timeout, Holds holds) const {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return holds(Find(resource)); });
  }

  // The channel of the registered plugin for `resource`, or an error.
  // `advertised`, when given, is the option GetDevicePluginOptions must have
  // set for the call: the kubelet calls GetPreferredAllocation and
  // PreStartContainer only on plugins that asked for them.
  grpc::Status ChannelFor(const std::string& resource, std::shared_ptr<grpc::Channel>* channel,
                          bool (v1beta1::DevicePluginOptions::*advertised)() const = nullptr,
                          const char* call = "") const {
    std::lock_guard lock(mu_);
    const Resource* r = Find(resource);
    if (r == nullptr || !r->registered || r->stream == nullptr) {
      return {grpc::StatusCode::FAILED_PRECONDITION,
              "resource " + resource + " is not registered with the kubelet"};
    }
    if (r->stopped_at) {
      return {grpc::StatusCode::FAILED_PRECONDITION,
              "endpoint of " + resource + " is stopped (a ListAndWatch stream of it ended)"};
    }
    if (advertised != nullptr && !(r->options.*advertised)()) {
      return {grpc::StatusCode::FAILED_PRECONDITION,
              std::string(call) + " for " + resource +
                  ": the plugin did not advertise it in GetDevicePluginOptions, so the kubelet never calls it"};
    }
    *channel = r->stream->channel;
    return grpc::Status::OK;
  }

  // Runs on a dial thread: GetDevicePluginOptions, then accept or refuse.
  void Dial(const std::shared_ptr<PendingDial>& pending,
            const std::function<void(grpc::Status)>& done);
  void RunStream(const std::shared_ptr<Stream>& stream);
  // Stops accepting registrations, cancels pending ones and the streams, stops
  // the server and joins the stream threads. Leaves sockets alone.
  void StopServing();
  void RemoveAllSockets();

  class RegistrationService;

  const std::string dir_;
  const KubeletEmulatorOptions options_;

  // Lifecycle members: touched only by Start/Stop/Restart (one thread).
  std::unique_ptr<v1beta1::Registration::CallbackService> service_;
  std::unique_ptr<grpc::Server> server_;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;  // notified on every state change below
  bool accepting_ = false;              // GUARDED_BY(mu_)
  uint64_t epoch_ = 0;                  // GUARDED_BY(mu_); bumped when a kubelet instance ends
  int register_calls_ = 0;              // GUARDED_BY(mu_)
  std::map<std::string, Resource> resources_;       // GUARDED_BY(mu_)
  std::set<std::shared_ptr<PendingDial>> pending_;  // GUARDED_BY(mu_)
  std::vector<std::thread> dial_threads_;           // GUARDED_BY(mu_); joined by StopServing
  std::vector<std::shared_ptr<Stream>> streams_;    // GUARDED_BY(mu_); joined by StopServing
  std::optional<Clock::time_point> last_restart_;   // GUARDED_BY(mu_)
  int restart_count_ = 0;                           // GUARDED_BY(mu_)
  std::chrono::milliseconds register_reply_delay_;  // GUARDED_BY(mu_)
};

class KubeletEmulator::Impl::RegistrationService final
    : public v1beta1::Registration::CallbackService {
 public:
  explicit RegistrationService(Impl* kubelet) : kubelet_(kubelet) {}

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* context,
                                     const v1beta1::RegisterRequest* request,
                                     v1beta1::Empty* /*response*/) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    kubelet_->HandleRegister(*request, [reactor](grpc::Status s) { reactor->Finish(s); });
    return reactor;
  }

 private:
  Impl* kubelet_;
};

grpc::Status KubeletEmulator::Impl::Start() {
  if (server_ != nullptr) {
    return {grpc::StatusCode::FAILED_PRECONDITION, "kubelet emulator already started"};
  }
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) {
    return {grpc::StatusCode::UNAVAILABLE, "cannot create " + dir_ + ": " + ec.message()};
  }
  auto service = std::make_unique<RegistrationService>(this);
  grpc::Status s = Serve(KubeletSocket(), service.get(), &server_);
  if (!s.ok()) return s;
  service_ = std::move(service);
  {
    std::lock_guard lock(mu_);
    accepting_ = true;
  }
  spdlog::debug("kubelet emulator: serving Registration on {}", KubeletSocket());
  return grpc::Status::OK;
}

void KubeletEmulator::Impl::HandleRegister(const v1beta1::RegisterRequest& request,
                                           std::function<void(grpc::Status)> done) {
  {
    std::lock_guard lock(mu_);
    ++register_calls_;
    cv_.notify_all();
  }
  if (grpc::Status s = ValidateRegisterRequest(request); !s.ok()) {
    spdlog::info("kubelet emulator: rejected registration of {}: {}", request.resource_name(),
                 s.error_message());
    done(s);
    return;
  }
  const std::string endpoint_path = (fs::path(dir_) / request.endpoint()).string();
  if (grpc::Status s = CheckSocketPath(endpoint_path); !s.ok()) {
    done(s);
    return;
  }

  auto pending = std::make_shared<PendingDial>();
  pending->request = request;
  pending->channel = DialUnix(endpoint_path);
  // As the kubelet's blocking dial: wait for the socket to accept, up to the timeout.
  pending->context.set_wait_for_ready(true);
  pending->context.set_deadline(Deadline(options_.dial_timeout));
  bool accepting = false;
  {
    std::lock_guard lock(mu_);
    accepting = accepting_;
    if (accepting) {
      pending->epoch = epoch_;
      pending_.insert(pending);
      // The dial runs on a thread of ours with the blocking stub, not with the
      // async() client API: that one would drop the channel's last reference on
      // a gRPC callback thread, and gRPC 1.51 can tear its callback thread
      // pool down from inside itself then (grpc/grpc#32584) and crash.
      dial_threads_.emplace_back(
          [this, pending = std::move(pending), done = std::move(done)] { Dial(pending, done); });
    }
  }
  if (!accepting) done({grpc::StatusCode::UNAVAILABLE, "kubelet is shutting down"});
}

void KubeletEmulator::Impl::Dial(const std::shared_ptr<PendingDial>& pending,
                                 const std::function<void(grpc::Status)>& done) {
  grpc::Status status;
  {
    auto stub = v1beta1::DevicePlugin::NewStub(pending->channel);
    status = stub->GetDevicePluginOptions(&pending->context, v1beta1::Empty(), &pending->options);
  }
  const v1beta1::RegisterRequest& request = pending->request;
  const std::string& resource = request.resource_name();
  grpc::Status result = grpc::Status::OK;
  if (!status.ok()) {
    result = WithContext(
        status, "failed to dial device plugin " + request.endpoint() + " or get its options");
  } else {
    std::lock_guard lock(mu_);
    if (!accepting_ || pending->epoch != epoch_) {
      result = {grpc::StatusCode::UNAVAILABLE, "kubelet restarted during registration"};
    } else {
      Resource& r = resources_[resource];
      // The earlier registration's stream, if any, stays open: the kubelet
      // does not end it (see the header).
      auto stream = std::make_shared<Stream>();
      stream->resource = resource;
      stream->endpoint = request.endpoint();
      stream->channel = pending->channel;
      r.registered = true;
      ++r.registration_count;
      r.last_request = request;
      r.options = pending->options;
      r.last_registration = Clock::now();
      r.stream = stream;
      r.stream_updates = 0;
      r.stream_ended = false;
      r.stream_status = grpc::Status::OK;
      r.stopped_at.reset();  // a new endpoint
      ++r.open_streams;
      streams_.push_back(stream);
      // As the kubelet: the stream is opened right away, asynchronously.
      stream->thread = std::thread([this, stream] { RunStream(stream); });
      cv_.notify_all();
    }
  }
  if (result.ok()) {
    std::unique_lock lock(mu_);
    if (register_reply_delay_.count() > 0) {
      cv_.wait_for(lock, register_reply_delay_, [this] { return !accepting_; });
    }
  }
  if (result.ok()) {
    spdlog::info("kubelet emulator: registered {} at {}", resource, request.endpoint());
  } else {
    spdlog::info("kubelet emulator: registration of {} failed: {}", resource,
                 result.error_message());
  }
  done(result);
  std::lock_guard lock(mu_);
  pending_.erase(pending);
  cv_.notify_all();
}

void KubeletEmulator::Impl::RunStream(const std::shared_ptr<Stream>& stream) {
  v1beta1::DevicePlugin::Stub stub(stream->channel);
  std::unique_ptr<grpc::ClientReader<v1beta1::ListAndWatchResponse>> reader =
      stub.ListAndWatch(&stream->context, v1beta1::Empty());
  v1beta1::ListAndWatchResponse message;
  while (reader->Read(&message)) {
    const auto received = std::chrono::steady_clock::now();
    std::lock_guard lock(mu_);
    Resource& r = resources_[stream->resource];
    // As the kubelet, which keys its device lists by resource name: a
    // message on an earlier registration's stream replaces the list too.
    r.devices.assign(message.devices().begin(), message.devices().end());
    r.has_devices = true;
    if (r.stream == stream) {
      r.last_update = received;
      ++r.stream_updates;
    }
    cv_.notify_all();
  }
  grpc::Status status = reader->Finish();
  spdlog::info("kubelet emulator: ListAndWatch of {} ended: {}", stream->resource,
               StatusText(status));
  if (options_.stream_end_delay.count() > 0) std::this_thread::sleep_for(options_.stream_end_delay);
  std::lock_guard lock(mu_);
  Resource& r = resources_[stream->resource];
  --r.open_streams;
  // As the kubelet: the plugin is gone, so are its devices' health, and the
  // resource's endpoint stops. The kubelet does this by resource name, so
  // the end of an earlier registration's stream stops the current endpoint.
  for (v1beta1::Device& d : r.devices) d.set_health(kUnhealthy);
  r.stopped_at = Clock::now();
  if (r.stream == stream) {
    r.stream_ended = true;
    r.stream_status = status;
  } else {
    ++r.stale_stream_ends;
    spdlog::warn("kubelet emulator: a stream of an earlier registration of {} ended: the current "
                 "endpoint is stopped and its devices unhealthy",
                 stream->resource);
  }
  cv_.notify_all();
}

void KubeletEmulator::Impl::StopServing() {
  std::vector<std::shared_ptr<PendingDial>> pending;
  {
    std::lock_guard lock(mu_);
    accepting_ = false;
    ++epoch_;
    for (auto& [name, r] : resources_) r.registered = false;
    pending.assign(pending_.begin(), pending_.end());
    cv_.notify_all();
  }
  // Outside mu_: the dial threads need it to finish.
  for (const auto& p : pending) p->context.TryCancel();
  std::vector<std::shared_ptr<Stream>> streams;
  std::vector<std::thread> dials;
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return pending_.empty(); });
    streams.swap(streams_);
    dials.swap(dial_threads_);
    cv_.notify_all();
  }
  for (std::thread& t : dials) t.join();
  if (server_ != nullptr) {
    server_->Shutdown(Deadline(options_.shutdown_grace));
    server_->Wait();
    server_.reset();
  }
  service_.reset();
  for (auto& s : streams) s->context.TryCancel();
  for (auto& s : streams) {
    if (s->thread.joinable()) s->thread.join();
  }
}

void KubeletEmulator::Impl::RemoveAllSockets() {
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (!it->is_socket(type_ec) || type_ec) continue;
    std::error_code rm_ec;
    if (fs::remove(it->path(), rm_ec)) {
      spdlog::debug("kubelet emulator: removed socket {}", it->path().string());
    } else if (rm_ec) {
      spdlog::warn("kubelet emulator: cannot remove {}: {}", it->path().string(), rm_ec.message());
    }
  }
  if (ec) spdlog::warn("kubelet emulator: cannot list {}: {}", dir_, ec.message());
}

void KubeletEmulator::Impl::Stop() {
  const bool was_serving = server_ != nullptr;
  StopServing();
  if (was_serving) {
    std::error_code ec;
    fs::remove(KubeletSocket(), ec);
  }
}

grpc::Status KubeletEmulator::Impl::Restart() {
  if (server_ == nullptr) {
    return {grpc::StatusCode::FAILED_PRECONDITION, "kubelet emulator not started"};
  }
  spdlog::info("kubelet emulator: restarting");
  StopServing();
  RemoveAllSockets();
  grpc::Status s = Start();
  if (!s.ok()) return s;
  std::lock_guard lock(mu_);
  last_restart_ = Clock::now();
  ++restart_count_;
  cv_.notify_all();
  return grpc::Status::OK;
}

// ============================================================================
// KubeletEmulator
// ============================================================================

KubeletEmulator::KubeletEmulator(std::string dir, KubeletEmulatorOptions options)
    : impl_(std::make_unique<Impl>(std::move(dir), options)) {}

KubeletEmulator::~KubeletEmulator() = default;

grpc::Status KubeletEmulator::Start() {
  return impl_->Start();
}
void KubeletEmulator::Stop() {
  impl_->Stop();
}
grpc::Status KubeletEmulator::Restart() {
  return impl_->Restart();
}

const std::string& KubeletEmulator::dir() const {
  return impl_->dir_;
}
std::string KubeletEmulator::kubelet_socket() const {
  return impl_->KubeletSocket();
}

bool KubeletEmulator::WaitForRegistration(const std::string& resource,
                                          std::chrono::milliseconds timeout) const {
  return impl_->WaitFor(resource, timeout,
                        [&](const Impl::Resource* r) { return r != nullptr && r->registered; });
}

bool KubeletEmulator::IsRegistered(const std::string& resource) const {
  std::lock_guard lock(impl_->mu_);
  const Impl::Resource* r = impl_->Find(resource);
  return r != nullptr && r->registered;
}

int KubeletEmulator::RegistrationCount(const std::string& resource) const {
  std::lock_guard lock(impl_->mu_);
  const Impl::Resource* r = impl_->Find(resource);
  return r == nullptr ? 0 : r->registration_count;
}

bool KubeletEmulator::WaitForRegistrationCount(const std::string& resource, int count,
                                               std::chrono::milliseconds timeout) const {
  return impl_->WaitFor(resource, timeout, [&](const Impl::Resource* r) {
    return (r == nullptr ? 0 : r->registration_count) >= count;
  });
}

int KubeletEmulator::RegisterCalls() const {
  std::lock_guard lock(impl_->mu_);
  return impl_->register_calls_;
}

std::optional<v1beta1::DevicePluginOptions> KubeletEmulator::Options(
    const std::string& resource) const {
  std::lock_guard lock(impl_->mu_);
  const Impl::Resource* r = impl_->Find(resource);
  if (r == nullptr || r->registration_count == 0) return std::nullopt;
  return r->options;
}

std::optional<v1beta1::RegisterRequest> KubeletEmulator::LastRegisterRequest(
    const std::string& resource) const {
  std::lock_guard lock(impl_->mu_);
  const Impl::Resource* r = impl_->Find(resource);
  if (r == nullptr || r->registration_count == 0) return std::nullopt;
  return r->last_request;
}

std::optional<KubeletEmulator::Clock::time_point> KubeletEmulator::LastRegistrationTime(
    const std::string& resource) const {
  std::lock_guard lock(impl_->mu_);
  const Impl::Resource* r = impl_->Find(resource);
  return r == nullptr ? std::nullopt : r->last_registration;
}

bool KubeletEmulator::WaitForDevices(const std::string& resource, const DevicePredicate& predicate,
                                     std::chrono::milliseconds timeout) const {
  return impl_->WaitFor(resource, timeout, [&](const Impl::Resource* r) {
    return r != nullptr && r->has_devices && predicate(r->devices);
  });
}

std::vector<v1beta1::Device> KubeletEmulator::Devices(const std::string& resource) const {
  std::lock_guard lock(impl_->mu_);
  const Impl::Resource* r = impl_->Find(resource);
  return r == nullptr ? std::vector<v1beta1::Device>{} : r->devices;
}

int64_t KubeletEmulator::StreamUpdates(const std::string& resource) const {
  std::lock_guard lock(impl_->mu_);
  const Impl::Resource* r = impl_->Find(resource);
  return r == nullptr ? 0 : r->stream_updates;
}

std::chrono::steady_clock::time_point KubeletEmulator::LastUpdateTime(const std::string& resource) const {
  std::lock_guard lock(impl_->mu_);
  const Impl::Resource* r = impl_->Find(resource);
  return r == nullptr ? std::chrono::steady_clock::time_point{} : r->last_update;
}

bool KubeletEmulator::StreamEnded(const std::string& resource) const {
  std::lock_guard lock(impl_->mu_);
  const Impl::Resource* r = impl_->Find(resource);
  return r != nullptr && r->stream_ended;
}

bool KubeletEmulator::WaitForStreamEnd(const std::string& resource,
                                       std::chrono::milliseconds timeout) const {
  return impl_->WaitFor(resource, timeout,
                        [&](const Impl::Resource* r) { return r != nullptr && r->stream_ended; });
}

grpc::Status KubeletEmulator::StreamStatus(const std::string& resource) const {
  std::lock_guard lock(impl_->mu_);
  const Impl::Resource* r = impl_->Find(resource);
  return r == nullptr ? grpc::Status::OK : r->stream_status;
}

int KubeletEmulator::OpenStreams(const std::string& resource) const {
  std::lock_guard lock(impl_->mu_);
  const Impl::Resource* r = impl_->Find(resource);
  return r == nullptr ? 0 : r->open_streams;
}

bool KubeletEmulator::WaitForStreamUpdates(const std::string& resource, int64_t count,
                                           std::chrono::milliseconds timeout) const {
  return impl_->WaitFor(resource, timeout, [&](const Impl::Resource* r) {
    return (r == nullptr ? 0 : r->stream_updates) >= count;
  });
}

bool KubeletEmulator::WaitForOpenStreams(const std::string& resource, int count,
                                         std::chrono::milliseconds timeout) const {
  return impl_->WaitFor(resource, timeout, [&](const Impl::Resource* r) {
    return (r == nullptr ? 0 : r->open_streams) == count;
  });
}

int KubeletEmulator::StaleStreamEnds(const std::string& resource) const {
  std::lock_guard lock(impl_->mu_);
  const Impl::Resource* r = impl_->Find(resource);
  return r == nullptr ? 0 : r->stale_stream_ends;
}

std::optional<KubeletEmulator::Clock::time_point> KubeletEmulator::EndpointStopTime(
    const std::string& resource) const {
  std::lock_guard lock(impl_->mu_);
  const Impl::Resource* r = impl_->Find(resource);
  return r == nullptr ? std::nullopt : r->stopped_at;
}

grpc::Status KubeletEmulator::BreakStream(const std::string& resource) {
  std::shared_ptr<Impl::Stream> stream;
  {
    std::lock_guard lock(impl_->mu_);
    const Impl::Resource* r = impl_->Find(resource);
    if (r == nullptr || r->stream == nullptr || r->stream_ended) {
      return {grpc::StatusCode::FAILED_PRECONDITION, "no open ListAndWatch stream of " + resource};
    }
    stream = r->stream;
  }
  spdlog::info("kubelet emulator: breaking the ListAndWatch stream of {}", resource);
  stream->context.TryCancel();  // outside mu_, as every gRPC call here
  return grpc::Status::OK;
}

void KubeletEmulator::SetRegisterReplyDelay(std::chrono::milliseconds delay) {
  std::lock_guard lock(impl_->mu_);
  impl_->register_reply_delay_ = delay;
}

std::optional<KubeletEmulator::Clock::time_point> KubeletEmulator::LastRestartTime() const {
  std::lock_guard lock(impl_->mu_);
  return impl_->last_restart_;
}

int KubeletEmulator::RestartCount() const {
  std::lock_guard lock(impl_->mu_);
  return impl_->restart_count_;
}

PreferredAllocationResult KubeletEmulator::GetPreferredAllocation(
    const std::string& resource, const std::vector<std::string>& available,
    const std::vector<std::string>& must_include, int32_t allocation_size) const {
  PreferredAllocationResult result;
  std::shared_ptr<grpc::Channel> channel;
  result.status = impl_->ChannelFor(resource, &channel,
                                    &v1beta1::DevicePluginOptions::get_preferred_allocation_available,
                                    "GetPreferredAllocation");
  if (!result.status.ok()) return result;

  v1beta1::PreferredAllocationRequest request;
  v1beta1::ContainerPreferredAllocationRequest* c = request.add_container_requests();
  for (const std::string& id : available) c->add_available_deviceids(id);
  for (const std::string& id : must_include) c->add_must_include_deviceids(id);
  c->set_allocation_size(allocation_size);

  v1beta1::PreferredAllocationResponse response;
  grpc::ClientContext context;
  context.set_deadline(Deadline(impl_->options_.call_timeout));
  auto stub = v1beta1::DevicePlugin::NewStub(channel);
  result.status = stub->GetPreferredAllocation(&context, request, &response);
  if (!result.status.ok()) {
    result.status = WithContext(result.status, "GetPreferredAllocation for " + resource);
    return result;
  }
  if (response.container_responses_size() == 0) {
    result.status = {grpc::StatusCode::INTERNAL,
                     "GetPreferredAllocation for " + resource + ": no container response"};
    return result;
  }
  const auto& ids = response.container_responses(0).deviceids();
  result.device_ids.assign(ids.begin(), ids.end());
  return result;
}

AllocateResult KubeletEmulator::Allocate(const std::string& resource,
                                         const std::vector<std::string>& ids) const {
  AllocateResult result;
  std::shared_ptr<grpc::Channel> channel;
  result.status = impl_->ChannelFor(resource, &channel);
  if (!result.status.ok()) return result;

  v1beta1::AllocateRequest request;
  v1beta1::ContainerAllocateRequest* c = request.add_container_requests();
  for (const std::string& id : ids) c->add_devices_ids(id);

  v1beta1::AllocateResponse response;
  grpc::ClientContext context;
  context.set_deadline(Deadline(impl_->options_.call_timeout));
  auto stub = v1beta1::DevicePlugin::NewStub(channel);
  result.status = stub->Allocate(&context, request, &response);
  if (!result.status.ok()) {
    result.status = WithContext(result.status, "Allocate for " + resource);
    return result;
  }
  if (response.container_responses_size() == 0) {
    result.status = {grpc::StatusCode::INTERNAL,
                     "Allocate for " + resource + ": no containers returned in the response"};
    return result;
  }
  result.response = response.container_responses(0);
  return result;
}

grpc::Status KubeletEmulator::GetDevicePluginOptions(const std::string& resource,
                                                     v1beta1::DevicePluginOptions* options) const {
  std::shared_ptr<grpc::Channel> channel;
  if (grpc::Status s = impl_->ChannelFor(resource, &channel); !s.ok()) return s;
  grpc::ClientContext context;
  context.set_deadline(Deadline(impl_->options_.call_timeout));
  auto stub = v1beta1::DevicePlugin::NewStub(channel);
  grpc::Status s = stub->GetDevicePluginOptions(&context, v1beta1::Empty(), options);
  return s.ok() ? s : WithContext(s, "GetDevicePluginOptions for " + resource);
}

grpc::Status KubeletEmulator::PreStartContainer(const std::string& resource,
                                                const std::vector<std::string>& ids) const {
  std::shared_ptr<grpc::Channel> channel;
  if (grpc::Status s = impl_->ChannelFor(resource, &channel,
                                         &v1beta1::DevicePluginOptions::pre_start_required,
                                         "PreStartContainer");
      !s.ok()) {
    return s;
  }
  v1beta1::PreStartContainerRequest request;
  for (const std::string& id : ids) request.add_devices_ids(id);
  v1beta1::PreStartContainerResponse response;
  grpc::ClientContext context;
  context.set_deadline(Deadline(impl_->options_.pre_start_timeout));
  auto stub = v1beta1::DevicePlugin::NewStub(channel);
  grpc::Status s = stub->PreStartContainer(&context, request, &response);
  return s.ok() ? s : WithContext(s, "PreStartContainer for " + resource);
}

// ============================================================================
// PodResourcesEmulator
// ============================================================================

class PodResourcesEmulator::Impl final : public v1::PodResourcesLister::CallbackService {
 public:
  explicit Impl(std::string socket_path) : socket_path_(std::move(socket_path)) {}

  grpc::ServerUnaryReactor* List(grpc::CallbackServerContext* context,
                                 const v1::ListPodResourcesRequest* /*request*/,
                                 v1::ListPodResourcesResponse* response) override {
    {
      std::lock_guard lock(mu_);
      ++calls_;
      if (later_from_ > 0 && calls_ >= later_from_) {
        pods_ = std::move(later_pods_);
        later_from_ = 0;
      }
      for (const v1::PodResources& p : pods_) *response->add_pod_resources() = p;
    }
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* GetAllocatableResources(
      grpc::CallbackServerContext* context, const v1::AllocatableResourcesRequest* /*request*/,
      v1::AllocatableResourcesResponse* response) override {
    {
      std::lock_guard lock(mu_);
      ++calls_;
      *response = allocatable_;
    }
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* context,
                                const v1::GetPodResourcesRequest* request,
                                v1::GetPodResourcesResponse* response) override {
    grpc::Status status = grpc::Status::OK;
    {
      std::lock_guard lock(mu_);
      ++calls_;
      auto it = std::find_if(pods_.begin(), pods_.end(), [&](const v1::PodResources& p) {
        return p.name() == request->pod_name() && p.namespace_() == request->pod_namespace();
      });
      if (it == pods_.end()) {
        status = {grpc::StatusCode::NOT_FOUND,
                  "pod not found: " + request->pod_namespace() + "/" + request->pod_name()};
      } else {
        *response->mutable_pod_resources() = *it;
      }
    }
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(status);
    return reactor;
  }

  const std::string socket_path_;
  std::unique_ptr<grpc::Server> server_;  // Start/Stop only

  mutable std::mutex mu_;
  std::vector<v1::PodResources> pods_;            // GUARDED_BY(mu_)
  std::vector<v1::PodResources> later_pods_;      // GUARDED_BY(mu_): pods_ from call later_from_
  int64_t later_from_ = 0;                        // GUARDED_BY(mu_); 0: none pending
  v1::AllocatableResourcesResponse allocatable_;  // GUARDED_BY(mu_)
  int64_t calls_ = 0;                             // GUARDED_BY(mu_)
};

PodResourcesEmulator::PodResourcesEmulator(std::string socket_path)
    : impl_(std::make_unique<Impl>(std::move(socket_path))) {}

PodResourcesEmulator::~PodResourcesEmulator() {
  Stop();
  // Shutdown() waited for every handler, but inside gRPC, where TSan does not
  // see it: taking the lock each handler takes orders their reads of this
  // object's vtable before its destruction (a "data race on vptr" otherwise).
  std::lock_guard lock(impl_->mu_);
}

grpc::Status PodResourcesEmulator::Start() {
  if (impl_->server_ != nullptr) {
    return {grpc::StatusCode::FAILED_PRECONDITION, "pod resources emulator already started"};
  }
  return Serve(impl_->socket_path_, impl_.get(), &impl_->server_);
}

void PodResourcesEmulator::Stop() {
  if (impl_->server_ == nullptr) return;
  impl_->server_->Shutdown(Deadline(std::chrono::seconds(1)));
  impl_->server_->Wait();
  impl_->server_.reset();
  std::error_code ec;
  fs::remove(impl_->socket_path_, ec);
}

const std::string& PodResourcesEmulator::socket_path() const {
  return impl_->socket_path_;
}

void PodResourcesEmulator::SetPods(std::vector<v1::PodResources> pods) {
  std::lock_guard lock(impl_->mu_);
  impl_->pods_ = std::move(pods);
  impl_->later_from_ = 0;
}

void PodResourcesEmulator::SetPodsFromCall(int64_t call, std::vector<v1::PodResources> pods) {
  std::lock_guard lock(impl_->mu_);
  impl_->later_pods_ = std::move(pods);
  impl_->later_from_ = call;
}

void PodResourcesEmulator::SetAllocatable(v1::AllocatableResourcesResponse allocatable) {
  std::lock_guard lock(impl_->mu_);
  impl_->allocatable_ = std::move(allocatable);
}

int64_t PodResourcesEmulator::CallCount() const {
  std::lock_guard lock(impl_->mu_);
  return impl_->calls_;
}

void AddDynamicResource(v1::ContainerResources& container, const std::string& claim_namespace,
                        const std::string& claim_name, const std::vector<ClaimDevice>& devices) {
  auto* claim = container.add_dynamic_resources();
  claim->set_claim_namespace(claim_namespace);
  claim->set_claim_name(claim_name);
  for (const auto& d : devices) {
    auto* r = claim->add_claim_resources();
    r->set_driver_name(d.driver);
    r->set_pool_name(d.pool);
    r->set_device_name(d.device);
    for (const auto& id : d.cdi_ids) r->add_cdi_devices()->set_name(id);
    if (d.share_id) r->set_share_id(*d.share_id);
  }
}

}  // namespace danqing::testing
