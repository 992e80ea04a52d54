#include "dra/node_plugin.h"

#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "dra-health/v1alpha1/api.grpc.pb.h"
#include "dra/node_metrics.h"
#include "dra/v1/api.grpc.pb.h"
#include "dra/v1beta1/api.grpc.pb.h"
#include "pluginregistration/v1/api.grpc.pb.h"

namespace danqing::dra {
namespace fs = std::filesystem;

std::string CutUtf8(std::string_view s, size_t max) {
  if (s.size() <= max) return std::string(s);
  size_t n = max;
  // Back off continuation bytes (10xxxxxx) so no sequence is split.
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return std::string(s.substr(0, n));
}

namespace {

namespace drav1 = k8s::io::kubelet::pkg::apis::dra::v1;
namespace drav1beta1 = k8s::io::kubelet::pkg::apis::dra::v1beta1;

constexpr size_t kMaxHealthMessage = 1024;

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// The three services of dra.sock and the registration service; one object
// for the plugin's life, so servers can be made again over it.
class NodePlugin::Services {
 public:
  Services(NodePlugin* plugin)
      : plugin_(plugin), v1_(this), v1beta1_(this), health_(this), registration_(this) {}

  template <typename Req, typename Resp>
  grpc::Status Prepare(const Req& req, Resp* resp) {
    for (const auto& claim : req.claims()) {
      auto& out = (*resp->mutable_claims())[claim.uid()];
      auto r = plugin_->preparer_->Prepare({claim.namespace_(), claim.name(), claim.uid()});
      if (!r.ok()) {
        out.set_error(r.status().message());
        continue;
      }
      for (const auto& d : r->devices) {
        auto* dev = out.add_devices();
        for (const auto& rn : d.requests) dev->add_request_names(rn);
        dev->set_pool_name(d.pool);
        dev->set_device_name(d.device);
        for (const auto& id : d.cdi_ids) dev->add_cdi_device_ids(id);
        if (d.share_id) dev->set_share_id(*d.share_id);
      }
    }
    return grpc::Status::OK;
  }

  template <typename Req, typename Resp>
  grpc::Status Unprepare(const Req& req, Resp* resp) {
    for (const auto& claim : req.claims()) {
      auto& out = (*resp->mutable_claims())[claim.uid()];
      Status s = plugin_->preparer_->Unprepare({claim.namespace_(), claim.name(), claim.uid()});
      if (!s.ok()) out.set_error(s.message());
    }
    return grpc::Status::OK;
  }

  template <typename Base>
  class Node final : public Base::Service {
   public:
    explicit Node(Services* s) : s_(s) {}
    grpc::Status NodePrepareResources(grpc::ServerContext* ctx,
                                      const typename Base::NodePrepareResourcesRequest* req,
                                      typename Base::NodePrepareResourcesResponse* resp) override {
      (void)ctx;
      return s_->Prepare(*req, resp);
    }
    grpc::Status NodeUnprepareResources(
        grpc::ServerContext* ctx, const typename Base::NodeUnprepareResourcesRequest* req,
        typename Base::NodeUnprepareResourcesResponse* resp) override {
      (void)ctx;
      return s_->Unprepare(*req, resp);
    }

   private:
    Services* s_;
  };

  struct V1 {
    using Service = drav1::DRAPlugin::Service;
    using NodePrepareResourcesRequest = drav1::NodePrepareResourcesRequest;
    using NodePrepareResourcesResponse = drav1::NodePrepareResourcesResponse;
    using NodeUnprepareResourcesRequest = drav1::NodeUnprepareResourcesRequest;
    using NodeUnprepareResourcesResponse = drav1::NodeUnprepareResourcesResponse;
  };
  struct V1beta1 {
    using Service = drav1beta1::DRAPlugin::Service;
    using NodePrepareResourcesRequest = drav1beta1::NodePrepareResourcesRequest;
    using NodePrepareResourcesResponse = drav1beta1::NodePrepareResourcesResponse;
    using NodeUnprepareResourcesRequest = drav1beta1::NodeUnprepareResourcesRequest;
    using NodeUnprepareResourcesResponse = drav1beta1::NodeUnprepareResourcesResponse;
  };

  // The health of every device of a prepared claim, with the time each one's
  // health last changed (kept across calls).
  v1alpha1::NodeWatchResourcesResponse HealthSnapshot() {
    const auto prepared = plugin_->preparer_->Prepared();
    const auto devices = plugin_->preparer_->devices();
    v1alpha1::NodeWatchResourcesResponse resp;
    std::lock_guard<std::mutex> l(health_mu_);
    const int64_t now = UnixNow();
    std::map<std::string, bool> seen;
    for (const auto& [uid, c] : prepared) {
      for (const auto& d : c.devices) {
        const std::string key = d.pool + "/" + d.device;
        if (seen.count(key)) continue;
        seen[key] = true;
        const NodeDevice* nd = d.pool == devices->pool ? devices->Find(d.device) : nullptr;
        if (nd == nullptr && d.pool != devices->pool && !d.gpu_uuid.empty()) {
          // A device made at prepare (dynamic MIG's pool): its parent GPU's
          // health, as the devices of that GPU in the table carry it.
          for (const auto& [name, other] : devices->devices) {
            if (other.device.gpu_uuid != d.gpu_uuid) continue;
            nd = &other;
            if (!other.device.healthy) break;
          }
        }
        Known k;
        if (nd == nullptr) {
          k.health = v1alpha1::UNKNOWN;
          k.message = "device " + d.device + " is no longer on this node";
        } else if (nd->device.healthy) {
          k.health = v1alpha1::HEALTHY;
        } else {
          k.health = v1alpha1::UNHEALTHY;
          k.message = CutUtf8(nd->device.unhealthy_reason, kMaxHealthMessage);
        }
        auto it = known_.find(key);
        if (it == known_.end() || it->second.health != k.health ||
            it->second.message != k.message) {
          k.since = now;
          known_[key] = k;
        } else {
          k.since = it->second.since;
        }
        auto* h = resp.add_devices();
        h->mutable_device()->set_pool_name(d.pool);
        h->mutable_device()->set_device_name(d.device);
        h->set_health(k.health);
        h->set_last_updated_time(k.since);
        h->set_health_check_timeout_seconds(plugin_->options_.health_check_timeout.count());
        h->set_message(k.message);
      }
    }
    for (auto it = known_.begin(); it != known_.end();)
      it = seen.count(it->first) ? std::next(it) : known_.erase(it);
    return resp;
  }

  void Notify() {
    std::lock_guard<std::mutex> l(stream_mu_);
    ++version_;
    stream_cv_.notify_all();
  }
  void StopStreams() {
    std::lock_guard<std::mutex> l(stream_mu_);
    stopping_ = true;
    stream_cv_.notify_all();
  }
  void AllowStreams() {
    std::lock_guard<std::mutex> l(stream_mu_);
    stopping_ = false;
  }

  class Health final : public v1alpha1::DRAResourceHealth::Service {
   public:
    explicit Health(Services* s) : s_(s) {}
    grpc::Status NodeWatchResources(
        grpc::ServerContext* ctx, const v1alpha1::NodeWatchResourcesRequest*,
        grpc::ServerWriter<v1alpha1::NodeWatchResourcesResponse>* writer) override {
      s_->Bump([](NodePluginStatus& st) { ++st.health_streams_open; });
      const grpc::Status result = Run(ctx, writer);
      s_->Bump([](NodePluginStatus& st) { --st.health_streams_open; });
      return result;
    }

   private:
    grpc::Status Run(grpc::ServerContext* ctx,
                     grpc::ServerWriter<v1alpha1::NodeWatchResourcesResponse>* writer) {
      uint64_t sent_version = 0;
      std::string last;
      auto last_sent = std::chrono::steady_clock::now();
      bool first = true;
      const auto resend = s_->plugin_->options_.health_check_timeout / 2;
      while (true) {
        {
          std::unique_lock<std::mutex> l(s_->stream_mu_);
          if (s_->stopping_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "plugin stopping");
          sent_version = s_->version_;
        }
        auto resp = s_->HealthSnapshot();
        std::string bytes = resp.SerializeAsString();
        const bool due = std::chrono::steady_clock::now() - last_sent >= resend;
        if (first || bytes != last || due) {
          if (!writer->Write(resp)) return grpc::Status::OK;  // the kubelet went away
          s_->Bump([](NodePluginStatus& st) { ++st.health_messages; });
          last = std::move(bytes);
          last_sent = std::chrono::steady_clock::now();
          first = false;
        }
        std::unique_lock<std::mutex> l(s_->stream_mu_);
        // Woken by a change or a stop; the short wait bounds how late a
        // cancelled call (the kubelet closed it) is noticed, which gRPC's
        // synchronous API does not signal otherwise.
        s_->stream_cv_.wait_for(l, std::chrono::milliseconds(250),
                                [&] { return s_->stopping_ || s_->version_ != sent_version; });
        if (ctx->IsCancelled()) return grpc::Status::CANCELLED;
      }
    }
    Services* s_;
  };

  class Registration final : public pluginregistration::Registration::Service {
   public:
    explicit Registration(Services* s) : s_(s) {}
    grpc::Status GetInfo(grpc::ServerContext*, const pluginregistration::InfoRequest*,
                         pluginregistration::PluginInfo* info) override {
      info->set_type("DRAPlugin");
      info->set_name(s_->plugin_->options_.driver_name);
      info->set_endpoint(s_->plugin_->dra_socket());
      info->add_supported_versions("v1.DRAPlugin");
      info->add_supported_versions("v1beta1.DRAPlugin");
      info->add_supported_versions("v1alpha1.DRAResourceHealth");
      return grpc::Status::OK;
    }
    grpc::Status NotifyRegistrationStatus(
        grpc::ServerContext*, const pluginregistration::RegistrationStatus* st,
        pluginregistration::RegistrationStatusResponse*) override {
      if (st->plugin_registered()) {
        spdlog::info("dra: the kubelet registered driver {}", s_->plugin_->options_.driver_name);
        s_->Bump([](NodePluginStatus& x) { ++x.registered_notices; });
        NodeMetrics().registration_notices.WithLabels({"registered"}).Inc();
      } else {
        spdlog::error("dra: the kubelet refused driver {}: {}", s_->plugin_->options_.driver_name,
                      st->error());
        NodeMetrics().registration_notices.WithLabels({"refused"}).Inc();
        const std::string why = st->error();
        s_->Bump([&why](NodePluginStatus& x) {
          ++x.rejected_notices;
          x.last_rejection = why;
        });
      }
      return grpc::Status::OK;
    }

   private:
    Services* s_;
  };

  template <typename F>
  void Bump(F&& f) {
    std::lock_guard<std::mutex> l(plugin_->status_mu_);
    f(plugin_->status_);
  }

  NodePlugin* plugin_;
  Node<V1> v1_;
  Node<V1beta1> v1beta1_;
  Health health_;
  Registration registration_;

 private:
  struct Known {
    v1alpha1::HealthStatus health = v1alpha1::UNKNOWN;
    std::string message;
    int64_t since = 0;
  };
  std::mutex health_mu_;
  std::map<std::string, Known> known_;  // guarded by health_mu_, by "pool/device"
  std::mutex stream_mu_;
  std::condition_variable stream_cv_;
  uint64_t version_ = 0;   // guarded by stream_mu_
  bool stopping_ = false;  // guarded by stream_mu_
};

NodePlugin::NodePlugin(NodePluginOptions options, ClaimPreparer* preparer)
    : options_([&] {
        if (options.plugin_dir.empty())
          options.plugin_dir = "/var/lib/kubelet/plugins/" + options.driver_name;
        return options;
      }()),
      preparer_(preparer),
      services_(std::make_unique<Services>(this)) {
  preparer_->OnChange([this] { Notify(); });
}

NodePlugin::~NodePlugin() {
  Stop();
  preparer_->OnChange({});
}

std::string NodePlugin::dra_socket() const {
  return options_.plugin_dir + "/dra.sock";
}
std::string NodePlugin::registration_socket() const {
  return options_.registry_dir + "/" + options_.driver_name + "-reg.sock";
}

NodePluginStatus NodePlugin::status() const {
  std::lock_guard<std::mutex> l(status_mu_);
  return status_;
}

void NodePlugin::Notify() {
  services_->Notify();
}

namespace {

std::unique_ptr<grpc::Server> ServeOn(const std::string& path, std::vector<grpc::Service*> services,
                                      std::string* error) {
  std::error_code ec;
  fs::remove(path, ec);  // a stale socket from an earlier run
  grpc::ServerBuilder b;
  b.AddListeningPort("unix:" + path, grpc::InsecureServerCredentials());
  for (auto* s : services) b.RegisterService(s);
  auto server = b.BuildAndStart();
  if (!server) *error = "cannot serve on " + path;
  return server;
}

// Whether the socket at `path` accepts a connection now.
bool Answers(const std::string& path) {
  auto channel = grpc::CreateChannel("unix:" + path, grpc::InsecureChannelCredentials());
  return channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(5));
}

}  // namespace

Status NodePlugin::ServeNode() {
  std::error_code ec;
  fs::create_directories(options_.plugin_dir, ec);
  if (ec) return Unavailable("cannot create " + options_.plugin_dir + ": " + ec.message());
  services_->AllowStreams();
  std::string error;
  auto server =
      ServeOn(dra_socket(), {&services_->v1_, &services_->v1beta1_, &services_->health_}, &error);
  if (!server) return Unavailable(error);
  if (!Answers(dra_socket())) {
    server->Shutdown();
    return Unavailable(dra_socket() + " does not answer after being served");
  }
  {
    std::lock_guard<std::mutex> l(servers_mu_);
    node_server_ = std::move(server);
  }
  std::lock_guard<std::mutex> l(status_mu_);
  status_.serving = true;
  ++status_.node_serves;
  spdlog::info("dra: serving {} (v1, v1beta1 DRAPlugin; v1alpha1 DRAResourceHealth)", dra_socket());
  return Status::Ok();
}

Status NodePlugin::ServeRegistration() {
  std::error_code ec;
  fs::create_directories(options_.registry_dir, ec);
  if (ec) return Unavailable("cannot create " + options_.registry_dir + ": " + ec.message());
  std::string error;
  auto server = ServeOn(registration_socket(), {&services_->registration_}, &error);
  if (!server) return Unavailable(error);
  {
    std::lock_guard<std::mutex> l(servers_mu_);
    registration_server_ = std::move(server);
  }
  std::lock_guard<std::mutex> l(status_mu_);
  status_.registration_serving = true;
  ++status_.registration_serves;
  spdlog::info("dra: registration socket {} for driver {}", registration_socket(),
               options_.driver_name);
  return Status::Ok();
}

void NodePlugin::StopNode() {
  services_->StopStreams();
  std::unique_ptr<grpc::Server> s;
  {
    std::lock_guard<std::mutex> l(servers_mu_);
    s = std::move(node_server_);
  }
  if (s) s->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  std::lock_guard<std::mutex> l(status_mu_);
  status_.serving = false;
}

void NodePlugin::StopRegistration() {
  std::unique_ptr<grpc::Server> s;
  {
    std::lock_guard<std::mutex> l(servers_mu_);
    s = std::move(registration_server_);
  }
  if (s) s->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  std::lock_guard<std::mutex> l(status_mu_);
  status_.registration_serving = false;
}

int NodePlugin::AddWatches() {
  constexpr uint32_t kMask = IN_DELETE | IN_MOVED_FROM | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR;
  registry_wd_ = inotify_add_watch(inotify_fd_, options_.registry_dir.c_str(), kMask);
  plugin_wd_ = inotify_add_watch(inotify_fd_, options_.plugin_dir.c_str(), kMask);
  return (registry_wd_ < 0 || plugin_wd_ < 0) ? -1 : 0;
}

Status NodePlugin::Start() {
  if (started_) return Status::Ok();
  if (Status s = preparer_->Restore(); !s.ok()) {
    spdlog::error("dra: {} (prepared claims are kept in memory; the next change writes it again)",
                  s.message());
  }
  if (Status s = ServeNode(); !s.ok()) return s;
  if (Status s = ServeRegistration(); !s.ok()) {
    StopNode();
    return s;
  }
  inotify_fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (inotify_fd_ < 0 || wake_fd_ < 0 || AddWatches() != 0) {
    const std::string why = std::strerror(errno);
    Stop();
    return Unavailable("cannot watch " + options_.registry_dir + " and " + options_.plugin_dir +
                       ": " + why);
  }
  stopping_ = false;
  started_ = true;
  watcher_ = std::thread([this] { Watch(); });
  return Status::Ok();
}

void NodePlugin::Stop() {
  stopping_ = true;
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
  }
  if (watcher_.joinable()) watcher_.join();
  StopRegistration();
  StopNode();
  if (started_) {
    std::error_code ec;
    fs::remove(registration_socket(), ec);
    fs::remove(dra_socket(), ec);
  }
  started_ = false;
  if (inotify_fd_ >= 0) ::close(inotify_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  inotify_fd_ = wake_fd_ = -1;
}

void NodePlugin::HandleEvents(bool* node_gone, bool* reg_gone, bool* dirs_changed) {
  alignas(inotify_event) char buf[8192];
  const std::string reg_name = fs::path(registration_socket()).filename().string();
  while (true) {
    const ssize_t n = ::read(inotify_fd_, buf, sizeof buf);
    if (n <= 0) return;
    for (ssize_t off = 0; off < n;) {
      const auto* ev = reinterpret_cast<const inotify_event*>(buf + off);
      off += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
      const std::string name = ev->len ? std::string(ev->name) : std::string();
      if (ev->mask & IN_Q_OVERFLOW) {
        *node_gone = *node_gone || !fs::exists(dra_socket());
        *reg_gone = *reg_gone || !fs::exists(registration_socket());
      } else if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
        // A directory went: both are served again once it is back.
        *node_gone = true;
        *reg_gone = true;
        *dirs_changed = true;
      } else if (ev->wd == registry_wd_ && name == reg_name) {
        *reg_gone = true;
      } else if (ev->wd == plugin_wd_ && name == "dra.sock") {
        *node_gone = true;
      }
    }
  }
}

void NodePlugin::Watch() {
  bool node_gone = false, reg_gone = false, dirs_changed = false;
  while (!stopping_) {
    pollfd fds[2] = {{inotify_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    const bool retrying = node_gone || reg_gone || dirs_changed;
    const int timeout = retrying ? static_cast<int>(options_.retry_backoff.count()) : -1;
    const int r = ::poll(fds, 2, timeout);
    if (stopping_) break;
    if (r < 0 && errno != EINTR) {
      spdlog::error("dra: watching the plugin directories failed: {}", std::strerror(errno));
      break;
    }
    if (r > 0 && (fds[0].revents & POLLIN)) HandleEvents(&node_gone, &reg_gone, &dirs_changed);
    if (!node_gone && !reg_gone && !dirs_changed) continue;
    // Our own removals (a restart below) come back as events too: only a
    // socket that is really absent is served again.
    std::error_code ec;
    if (node_gone && fs::exists(dra_socket(), ec)) node_gone = false;
    if (reg_gone && fs::exists(registration_socket(), ec)) reg_gone = false;
    if (node_gone) {
      spdlog::warn("dra: {} was deleted; serving it again", dra_socket());
      StopNode();
      if (!ServeNode().ok()) continue;  // retried after the backoff
      node_gone = false;
      reg_gone = true;  // the kubelet must dial the new socket: register again
      StopRegistration();
    }
    if (reg_gone) {
      spdlog::warn("dra: registration socket {} is gone; serving it again", registration_socket());
      StopRegistration();
      if (!ServeRegistration().ok()) continue;
      reg_gone = false;
    }
    // Watch a directory that was made again (the same directory keeps its
    // watch: inotify_add_watch then returns the watch it has).
    if (dirs_changed) dirs_changed = AddWatches() != 0;
  }
}

}  // namespace danqing::dra
