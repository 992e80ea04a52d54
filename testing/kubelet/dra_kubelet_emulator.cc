#include "testing/kubelet/dra_kubelet_emulator.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "dra/v1beta1/api.grpc.pb.h"
#include "pluginregistration/v1/api.grpc.pb.h"

namespace danqing::testing {
namespace fs = std::filesystem;
namespace drav1 = k8s::io::kubelet::pkg::apis::dra::v1;
namespace drav1beta1 = k8s::io::kubelet::pkg::apis::dra::v1beta1;

namespace {

std::chrono::system_clock::time_point After(std::chrono::milliseconds d) {
  return std::chrono::system_clock::now() + d;
}

std::shared_ptr<grpc::Channel> Dial(const std::string& path) {
  return grpc::CreateChannel("unix:" + path, grpc::InsecureChannelCredentials());
}

bool IsSocket(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

// Converts between wire-identical messages of two versions.
template <typename To, typename From>
To Convert(const From& from) {
  To to;
  to.ParseFromString(from.SerializeAsString());
  return to;
}

// One claims call (NodePrepareResources or NodeUnprepareResources) to the
// plugin `p` in the version it registered: the v1 request for `claims`, sent
// as is to a v1 plugin (`call_v1`) or converted to v1beta1 (`call_v1beta1`,
// the answer converted back); every claim must be answered.
template <typename Request, typename BetaRequest, typename BetaResponse, typename Response,
          typename CallV1, typename CallV1beta1>
grpc::Status CallClaims(const std::optional<DraPluginInfo>& p, const std::string& driver,
                        const char* method, std::chrono::milliseconds timeout,
                        const std::vector<DraClaimRef>& claims, Response* out, CallV1 call_v1,
                        CallV1beta1 call_v1beta1) {
  if (!p)
    return {grpc::StatusCode::FAILED_PRECONDITION, "DRA driver " + driver + " is not registered"};
  Request req;
  for (const auto& c : claims) {
    auto* rc = req.add_claims();
    rc->set_namespace_(c.ns);
    rc->set_name(c.name);
    rc->set_uid(c.uid);
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(After(timeout));
  grpc::Status s;
  if (p->version == "v1.DRAPlugin") {
    s = call_v1(p->endpoint, &ctx, req, out);
  } else {
    BetaResponse beta;
    s = call_v1beta1(p->endpoint, &ctx, Convert<BetaRequest>(req), &beta);
    *out = Convert<Response>(beta);
  }
  if (!s.ok()) return s;
  for (const auto& c : claims) {
    if (!out->claims().count(c.uid)) {
      return {grpc::StatusCode::INTERNAL,
              std::string(method) + " left claim " + c.uid + " unanswered"};
    }
  }
  return s;
}

}  // namespace

DraKubeletEmulator::DraKubeletEmulator(DraKubeletOptions options) : options_(std::move(options)) {}

DraKubeletEmulator::~DraKubeletEmulator() {
  StopHealth();
  Stop();
}

bool DraKubeletEmulator::Start() {
  std::error_code ec;
  fs::create_directories(options_.registry_dir, ec);
  inotify_fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (inotify_fd_ < 0 || wake_fd_ < 0) return false;
  if (inotify_add_watch(inotify_fd_, options_.registry_dir.c_str(),
                        IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM) < 0) {
    return false;
  }
  thread_ = std::thread([this] { Run(); });
  return true;
}

void DraKubeletEmulator::Stop() {
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
  }
  if (thread_.joinable()) thread_.join();
  if (inotify_fd_ >= 0) ::close(inotify_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  inotify_fd_ = wake_fd_ = -1;
  std::lock_guard<std::mutex> l(mu_);
  plugins_.clear();
  cv_.notify_all();
}

void DraKubeletEmulator::Restart() {
  StopHealth();
  Stop();
  Start();
}

void DraKubeletEmulator::Run() {
  Scan();
  alignas(inotify_event) char buf[8192];
  while (true) {
    pollfd fds[2] = {{inotify_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) continue;
    if (fds[1].revents & POLLIN) return;
    const ssize_t n = ::read(inotify_fd_, buf, sizeof buf);
    for (ssize_t off = 0; off < n;) {
      const auto* ev = reinterpret_cast<const inotify_event*>(buf + off);
      off += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
      if (ev->mask & IN_Q_OVERFLOW) {
        Scan();
        continue;
      }
      if (!ev->len) continue;
      const std::string path = options_.registry_dir + "/" + ev->name;
      if (ev->mask & (IN_CREATE | IN_MOVED_TO)) {
        Consider(path);
      } else if (ev->mask & (IN_DELETE | IN_MOVED_FROM)) {
        Forget(path);
      }
    }
  }
}

void DraKubeletEmulator::Scan() {
  std::error_code ec;
  for (fs::directory_iterator it(options_.registry_dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    Consider(it->path().string());
  }
}

void DraKubeletEmulator::Consider(const std::string& socket) {
  // The plugin watcher takes sockets only (not dot-files).
  if (fs::path(socket).filename().string().rfind('.', 0) == 0 || !IsSocket(socket)) return;
  auto stub = pluginregistration::Registration::NewStub(Dial(socket));
  pluginregistration::PluginInfo info;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(After(std::chrono::milliseconds(10'000)));
    ctx.set_wait_for_ready(true);
    if (!stub->GetInfo(&ctx, pluginregistration::InfoRequest(), &info).ok()) return;
  }
  std::string error;
  std::string version;
  if (info.type() != "DRAPlugin") {
    return;  // another watcher's (CSI); not ours to answer
  } else if (info.name().empty()) {
    error = "plugin name is empty";
  } else if (info.endpoint().empty() || info.endpoint()[0] != '/') {
    error = "endpoint '" + info.endpoint() + "' is not an absolute path";
  } else {
    for (const auto& v : options_.versions) {
      if (std::find(info.supported_versions().begin(), info.supported_versions().end(), v) !=
          info.supported_versions().end()) {
        version = v;
        break;
      }
    }
    if (version.empty()) error = "none of the supported versions is known to this kubelet";
  }
  pluginregistration::RegistrationStatus st;
  st.set_plugin_registered(error.empty());
  st.set_error(error);
  grpc::ClientContext ctx;
  ctx.set_deadline(After(options_.call_timeout));
  pluginregistration::RegistrationStatusResponse ignored;
  (void)stub->NotifyRegistrationStatus(&ctx, st, &ignored);
  std::lock_guard<std::mutex> l(mu_);
  if (!error.empty()) {
    refusals_.push_back(info.name() + ": " + error);
  } else {
    plugins_[info.name()] =
        DraPluginInfo{info.name(),
                      info.endpoint(),
                      version,
                      {info.supported_versions().begin(), info.supported_versions().end()},
                      socket};
    ++registrations_[info.name()];
  }
  cv_.notify_all();
}

void DraKubeletEmulator::Forget(const std::string& socket) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto it = plugins_.begin(); it != plugins_.end();) {
    it = it->second.socket == socket ? plugins_.erase(it) : std::next(it);
  }
  cv_.notify_all();
}

std::optional<DraPluginInfo> DraKubeletEmulator::Plugin(const std::string& driver) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = plugins_.find(driver);
  if (it == plugins_.end()) return std::nullopt;
  return it->second;
}

uint64_t DraKubeletEmulator::Registrations(const std::string& driver) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = registrations_.find(driver);
  return it == registrations_.end() ? 0 : it->second;
}

std::vector<std::string> DraKubeletEmulator::Refusals() const {
  std::lock_guard<std::mutex> l(mu_);
  return refusals_;
}

bool DraKubeletEmulator::WaitForRegistrations(const std::string& driver, uint64_t n,
                                              std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> l(mu_);
  return cv_.wait_for(l, timeout, [&] {
    auto it = registrations_.find(driver);
    return it != registrations_.end() && it->second >= n && plugins_.count(driver);
  });
}

bool DraKubeletEmulator::WaitForRefusals(size_t n, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> l(mu_);
  return cv_.wait_for(l, timeout, [&] { return refusals_.size() >= n; });
}

bool DraKubeletEmulator::WaitForDeregistration(const std::string& driver,
                                               std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> l(mu_);
  return cv_.wait_for(l, timeout, [&] { return plugins_.count(driver) == 0; });
}

grpc::Status DraKubeletEmulator::Prepare(const std::string& driver,
                                         const std::vector<DraClaimRef>& claims,
                                         drav1::NodePrepareResourcesResponse* out) const {
  return CallClaims<drav1::NodePrepareResourcesRequest, drav1beta1::NodePrepareResourcesRequest,
                    drav1beta1::NodePrepareResourcesResponse>(
      Plugin(driver), driver, "NodePrepareResources", options_.call_timeout, claims, out,
      [](const std::string& endpoint, grpc::ClientContext* ctx, const auto& req, auto* resp) {
        return drav1::DRAPlugin::NewStub(Dial(endpoint))->NodePrepareResources(ctx, req, resp);
      },
      [](const std::string& endpoint, grpc::ClientContext* ctx, const auto& req, auto* resp) {
        return drav1beta1::DRAPlugin::NewStub(Dial(endpoint))->NodePrepareResources(ctx, req, resp);
      });
}

grpc::Status DraKubeletEmulator::Unprepare(const std::string& driver,
                                           const std::vector<DraClaimRef>& claims,
                                           drav1::NodeUnprepareResourcesResponse* out) const {
  return CallClaims<drav1::NodeUnprepareResourcesRequest, drav1beta1::NodeUnprepareResourcesRequest,
                    drav1beta1::NodeUnprepareResourcesResponse>(
      Plugin(driver), driver, "NodeUnprepareResources", options_.call_timeout, claims, out,
      [](const std::string& endpoint, grpc::ClientContext* ctx, const auto& req, auto* resp) {
        return drav1::DRAPlugin::NewStub(Dial(endpoint))->NodeUnprepareResources(ctx, req, resp);
      },
      [](const std::string& endpoint, grpc::ClientContext* ctx, const auto& req, auto* resp) {
        return drav1beta1::DRAPlugin::NewStub(Dial(endpoint))
            ->NodeUnprepareResources(ctx, req, resp);
      });
}

bool DraKubeletEmulator::WatchHealth(const std::string& driver) {
  StopHealth();
  auto p = Plugin(driver);
  if (!p) return false;
  auto ctx = std::make_unique<grpc::ClientContext>();
  grpc::ClientContext* raw = ctx.get();
  {
    std::lock_guard<std::mutex> l(health_mu_);
    health_.clear();
    health_ctx_ = std::move(ctx);
  }
  const std::string endpoint = p->endpoint;
  health_thread_ = std::thread([this, raw, endpoint] {
    auto stub = v1alpha1::DRAResourceHealth::NewStub(Dial(endpoint));
    auto reader = stub->NodeWatchResources(raw, v1alpha1::NodeWatchResourcesRequest());
    v1alpha1::NodeWatchResourcesResponse msg;
    while (reader->Read(&msg)) {
      std::lock_guard<std::mutex> l(health_mu_);
      health_.push_back(msg);
      health_cv_.notify_all();
    }
    (void)reader->Finish();
  });
  return true;
}

void DraKubeletEmulator::StopHealth() {
  {
    std::lock_guard<std::mutex> l(health_mu_);
    if (health_ctx_) health_ctx_->TryCancel();
  }
  if (health_thread_.joinable()) health_thread_.join();
  std::lock_guard<std::mutex> l(health_mu_);
  health_ctx_.reset();
}

std::optional<v1alpha1::NodeWatchResourcesResponse> DraKubeletEmulator::WaitForHealth(
    const std::function<bool(const v1alpha1::NodeWatchResourcesResponse&)>& pred,
    std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> l(health_mu_);
  std::optional<v1alpha1::NodeWatchResourcesResponse> found;
  health_cv_.wait_for(l, timeout, [&] {
    if (health_.empty() || !pred(health_.back())) return false;
    found = health_.back();
    return true;
  });
  return found;
}

size_t DraKubeletEmulator::HealthMessages() const {
  std::lock_guard<std::mutex> l(health_mu_);
  return health_.size();
}

}  // namespace danqing::testing
