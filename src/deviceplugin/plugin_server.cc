#include "deviceplugin/plugin_server.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_set>

#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "metrics/agent_metrics.h"

namespace danqing::deviceplugin {

std::string SocketNameFor(std::string_view resource) {
  std::string name = "danqing-";
  for (char c : resource) name += (c == '/' ? '-' : c);
  return name + ".sock";
}

namespace {

v1beta1::ListAndWatchResponse ToListAndWatch(const Resource* r) {
  v1beta1::ListAndWatchResponse resp;
  if (r == nullptr) return resp;
  for (const auto& d : r->devices) {
    auto* dev = resp.add_devices();
    dev->set_id(d.id);
    dev->set_health(std::string(d.healthy ? kHealthy : kUnhealthy));
    if (d.numa_node) dev->mutable_topology()->add_nodes()->set_id(*d.numa_node);
  }
  return resp;
}

class Watcher;

// Observes the time from construction to destruction into a histogram.
class CallTimer {
 public:
  explicit CallTimer(metrics::Histogram& h) : h_(h), start_(std::chrono::steady_clock::now()) {}
  ~CallTimer() {
    h_.Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
  CallTimer(const CallTimer&) = delete;
  CallTimer& operator=(const CallTimer&) = delete;

 private:
  metrics::Histogram& h_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

// State shared by the server object and its reactors; outlives both through
// shared_ptr so a late reactor callback never touches a dead server.
class PluginServer::Hub {
 public:
  struct Counters {
    std::atomic<uint64_t> allocate_calls{0}, allocate_errors{0}, preferred_calls{0}, streams{0},
        sends{0};
  };

  Hub(std::string resource, AllocateOptions options, std::shared_ptr<Counters> shared_counters)
      : counters(std::move(shared_counters)), resource_(std::move(resource)), options_(std::move(options)) {}

  const std::string& resource() const { return resource_; }
  const AllocateOptions& options() const { return options_; }

  void Publish(std::shared_ptr<const ResourceSet> set);
  // Swaps the snapshot without a new stream message (same device list).
  void Swap(std::shared_ptr<const ResourceSet> set) {
    std::lock_guard<std::mutex> l(mu_);
    set_ = std::move(set);
  }
  std::shared_ptr<const ResourceSet> set() const {
    std::lock_guard<std::mutex> l(mu_);
    return set_;
  }
  // The newest list and its version.
  std::pair<uint64_t, std::shared_ptr<const v1beta1::ListAndWatchResponse>> Latest() const {
    std::lock_guard<std::mutex> l(mu_);
    return {version_, list_};
  }

  void AddWatcher(Watcher* w);
  void RemoveWatcher(Watcher* w);
  void CloseAll();

  const std::shared_ptr<Counters> counters;  // shared by every hub of one PluginServer

 private:
  const std::string resource_;
  const AllocateOptions options_;
  mutable std::mutex mu_;
  std::shared_ptr<const ResourceSet> set_;                    // guarded by mu_
  uint64_t version_ = 0;                                      // guarded by mu_
  std::shared_ptr<const v1beta1::ListAndWatchResponse> list_;  // guarded by mu_
  std::mutex watchers_mu_;                                    // ordered before a watcher's mu_
  std::unordered_set<Watcher*> watchers_;                     // guarded by watchers_mu_
  bool closed_ = false;                                       // guarded by watchers_mu_
};

namespace {

// One ListAndWatch stream. Writes the newest list whenever it differs from
// the last one sent; at most one write in flight, as gRPC requires. Decisions
// are made under mu_, but StartWrite/Finish are called after releasing it, in
// case gRPC runs a reaction inline.
class Watcher final : public grpc::ServerWriteReactor<v1beta1::ListAndWatchResponse> {
 public:
  explicit Watcher(std::shared_ptr<PluginServer::Hub> hub) : hub_(std::move(hub)) {
    hub_->counters->streams++;
    hub_->AddWatcher(this);
    Notify();
  }

  // A newer list may exist: send it unless a write is in flight (OnWriteDone will).
  void Notify() { Act(Decide([this] { return !writing_; })); }

  // Ends the stream (server shutdown).
  void Close() {
    Act(Decide([this] {
      closing_ = true;
      return !writing_;
    }));
  }

  void OnWriteDone(bool ok) override {
    Act(Decide([this, ok] {
      writing_ = false;
      if (!ok) {
        closing_ = true;
        // Once finished_ is set, Act() reads finish_status_ without mu_.
        if (!finished_) {
          finish_status_ =
              grpc::Status(grpc::StatusCode::UNAVAILABLE, "ListAndWatch stream broken");
        }
      }
      return true;
    }));
  }

  void OnCancel() override {
    Act(Decide([this] {
      closing_ = true;
      // Once finished_ is set (e.g. by Close() on another thread), Act() reads
      // finish_status_ without mu_: writing it then was a data race (TSan).
      if (!finished_) finish_status_ = grpc::Status::CANCELLED;
      return !writing_;
    }));
  }

  void OnDone() override {
    // gRPC calls OnDone on one of its threads; the constructor ran on another
    // and the hand-off between them happens inside (uninstrumented) libgrpc.
    // Taking mu_, which the constructor released last, makes that order
    // explicit to ThreadSanitizer.
    std::shared_ptr<PluginServer::Hub> hub;
    {
      std::lock_guard<std::mutex> l(mu_);
      hub = hub_;
    }
    hub->RemoveWatcher(this);
    delete this;
  }

 private:
  enum class Action { kNone, kWrite, kFinish };

  // Under mu_: applies `update` (which returns whether the stream is idle and
  // may act), then picks the next action and marks it taken.
  template <typename F>
  Action Decide(F update) {
    std::lock_guard<std::mutex> l(mu_);
    if (!update() || finished_) return Action::kNone;
    if (closing_) {
      finished_ = true;
      return Action::kFinish;
    }
    auto [version, list] = hub_->Latest();
    if (list == nullptr || version == sent_version_) return Action::kNone;
    sent_version_ = version;
    inflight_ = std::move(list);
    writing_ = true;
    return Action::kWrite;
  }

  void Act(Action a) {
    if (a == Action::kWrite) {
      hub_->counters->sends++;
      StartWrite(inflight_.get());  // inflight_ is only replaced after this write completes
    } else if (a == Action::kFinish) {
      Finish(finish_status_);
    }
  }

  std::shared_ptr<PluginServer::Hub> hub_;
  std::mutex mu_;
  bool writing_ = false;   // guarded by mu_
  bool closing_ = false;   // guarded by mu_
  bool finished_ = false;  // guarded by mu_
  grpc::Status finish_status_ = grpc::Status::OK;  // guarded by mu_ until finished_ is set, then read-only
  uint64_t sent_version_ = 0;                      // guarded by mu_
  std::shared_ptr<const v1beta1::ListAndWatchResponse> inflight_;  // guarded by mu_ / the write
};

grpc::Status ToGrpc(const Status& st) {
  switch (st.code()) {
    case StatusCode::kOk: return grpc::Status::OK;
    case StatusCode::kInvalidArgument: return {grpc::StatusCode::INVALID_ARGUMENT, st.message()};
    case StatusCode::kNotFound: return {grpc::StatusCode::NOT_FOUND, st.message()};
    case StatusCode::kFailedPrecondition: return {grpc::StatusCode::FAILED_PRECONDITION, st.message()};
    case StatusCode::kUnavailable: return {grpc::StatusCode::UNAVAILABLE, st.message()};
    default: return {grpc::StatusCode::INTERNAL, st.message()};
  }
}

class DevicePluginService final : public v1beta1::DevicePlugin::CallbackService {
 public:
  explicit DevicePluginService(std::shared_ptr<PluginServer::Hub> hub) : hub_(std::move(hub)) {}

  grpc::ServerUnaryReactor* GetDevicePluginOptions(grpc::CallbackServerContext* ctx,
                                                   const v1beta1::Empty* /*req*/,
                                                   v1beta1::DevicePluginOptions* resp) override {
    resp->set_pre_start_required(false);
    resp->set_get_preferred_allocation_available(true);
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }

  grpc::ServerWriteReactor<v1beta1::ListAndWatchResponse>* ListAndWatch(
      grpc::CallbackServerContext* /*ctx*/, const v1beta1::Empty* /*req*/) override {
    return new Watcher(hub_);
  }

  grpc::ServerUnaryReactor* GetPreferredAllocation(grpc::CallbackServerContext* ctx,
                                                   const v1beta1::PreferredAllocationRequest* req,
                                                   v1beta1::PreferredAllocationResponse* resp) override {
    hub_->counters->preferred_calls++;
    CallTimer timer(metrics::AgentMetrics().preferred_seconds.WithLabels({hub_->resource()}));
    auto set = hub_->set();
    const Resource* resource = set ? set->Find(hub_->resource()) : nullptr;
    std::shared_ptr<const PreferredAllocator> alloc;
    if (set) {
      if (auto it = set->allocators.find(hub_->resource()); it != set->allocators.end()) alloc = it->second;
    }
    for (const auto& creq : req->container_requests()) {
      auto* cresp = resp->add_container_responses();
      if (resource == nullptr || alloc == nullptr) continue;  // never fail: the kubelet fills in
      // Unhealthy devices are never preferred.
      std::vector<std::string> available;
      available.reserve(static_cast<size_t>(creq.available_deviceids_size()));
      for (const auto& id : creq.available_deviceids()) {
        const Device* d = resource->Find(id);
        if (d != nullptr && d->healthy) available.push_back(id);
      }
      std::vector<std::string> must(creq.must_include_deviceids().begin(),
                                    creq.must_include_deviceids().end());
      for (auto& id : alloc->Choose(available, must, creq.allocation_size())) {
        cresp->add_deviceids(std::move(id));
      }
    }
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }

  grpc::ServerUnaryReactor* Allocate(grpc::CallbackServerContext* ctx,
                                     const v1beta1::AllocateRequest* req,
                                     v1beta1::AllocateResponse* resp) override {
    hub_->counters->allocate_calls++;
    auto* r = ctx->DefaultReactor();
    std::optional<CallTimer> timer;
    timer.emplace(metrics::AgentMetrics().allocate_seconds.WithLabels({hub_->resource()}));
    auto set = hub_->set();
    const Resource* resource = set ? set->Find(hub_->resource()) : nullptr;
    if (resource == nullptr) {
      hub_->counters->allocate_errors++;
      metrics::AgentMetrics().allocate_errors.WithLabels({hub_->resource()}).Inc();
      timer.reset();
      r->Finish({grpc::StatusCode::FAILED_PRECONDITION,
                 "resource " + hub_->resource() + " is no longer advertised by this node"});
      return r;
    }
    for (const auto& creq : req->container_requests()) {
      std::vector<std::string> ids(creq.devices_ids().begin(), creq.devices_ids().end());
      auto cresp = BuildContainerResponse(*resource, ids, hub_->options());
      if (!cresp.ok()) {
        hub_->counters->allocate_errors++;
        metrics::AgentMetrics().allocate_errors.WithLabels({hub_->resource()}).Inc();
        timer.reset();
        spdlog::warn("allocate: resource={} refused: {}", hub_->resource(), cresp.status().message());
        r->Finish(ToGrpc(cresp.status()));
        return r;
      }
      *resp->add_container_responses() = std::move(cresp).value();
    }
    timer.reset();
    r->Finish(grpc::Status::OK);
    return r;
  }

  grpc::ServerUnaryReactor* PreStartContainer(grpc::CallbackServerContext* ctx,
                                              const v1beta1::PreStartContainerRequest* /*req*/,
                                              v1beta1::PreStartContainerResponse* /*resp*/) override {
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }

 private:
  std::shared_ptr<PluginServer::Hub> hub_;
};

}  // namespace

void PluginServer::Hub::Publish(std::shared_ptr<const ResourceSet> set) {
  auto list = std::make_shared<const v1beta1::ListAndWatchResponse>(
      ToListAndWatch(set ? set->Find(resource_) : nullptr));
  {
    std::lock_guard<std::mutex> l(mu_);
    set_ = std::move(set);
    list_ = std::move(list);
    ++version_;
  }
  std::lock_guard<std::mutex> l(watchers_mu_);
  for (Watcher* w : watchers_) w->Notify();
}

void PluginServer::Hub::AddWatcher(Watcher* w) {
  std::lock_guard<std::mutex> l(watchers_mu_);
  watchers_.insert(w);
  if (closed_) w->Close();
}

void PluginServer::Hub::RemoveWatcher(Watcher* w) {
  std::lock_guard<std::mutex> l(watchers_mu_);
  watchers_.erase(w);
}

void PluginServer::Hub::CloseAll() {
  std::lock_guard<std::mutex> l(watchers_mu_);
  closed_ = true;
  for (Watcher* w : watchers_) w->Close();
}

PluginServer::PluginServer(std::string resource, std::string socket_path, AllocateOptions options)
    : resource_(std::move(resource)), socket_path_(std::move(socket_path)) {
  hub_ = std::make_shared<Hub>(resource_, std::move(options), std::make_shared<Hub::Counters>());
}

PluginServer::~PluginServer() { Shutdown(); }

Status PluginServer::Start(std::shared_ptr<const ResourceSet> set) {
  if (server_) return FailedPrecondition("plugin server for " + resource_ + " already serving");
  std::shared_ptr<Hub> hub;
  {
    std::lock_guard<std::mutex> l(hub_mu_);
    hub_->Publish(std::move(set));
    hub = hub_;
  }
  ::unlink(socket_path_.c_str());  // a stale socket from an earlier run
  service_ = std::make_unique<DevicePluginService>(std::move(hub));
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket_path_, grpc::InsecureServerCredentials());
  // Only the local kubelet talks to this socket: skip the optional filters
  // (census, deadline, message-size) on every call.
  builder.AddChannelArgument(GRPC_ARG_MINIMAL_STACK, 1);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (!server_) {
    service_.reset();
    return Unavailable("cannot serve " + resource_ + " on " + socket_path_);
  }
  // Check the socket answers before anyone is told to dial it.
  auto channel = grpc::CreateChannel("unix:" + socket_path_, grpc::InsecureChannelCredentials());
  auto stub = v1beta1::DevicePlugin::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  ctx.set_wait_for_ready(true);
  v1beta1::Empty req;
  v1beta1::DevicePluginOptions opts;
  grpc::Status st = stub->GetDevicePluginOptions(&ctx, req, &opts);
  if (!st.ok()) {
    Shutdown();
    return Unavailable("plugin socket " + socket_path_ + " does not answer: " + st.error_message());
  }
  return Status::Ok();
}

void PluginServer::Shutdown() {
  if (!server_) return;
  hub()->CloseAll();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
  server_->Wait();
  server_.reset();
  service_.reset();
  ::unlink(socket_path_.c_str());
  // A restarted server gets a fresh hub: watchers of the old one are done.
  std::lock_guard<std::mutex> l(hub_mu_);
  auto fresh = std::make_shared<Hub>(resource_, hub_->options(), hub_->counters);
  fresh->Publish(hub_->set());
  hub_ = std::move(fresh);
}

void PluginServer::Update(std::shared_ptr<const ResourceSet> set) {
  std::lock_guard<std::mutex> l(hub_mu_);
  hub_->Publish(std::move(set));
}

void PluginServer::Replace(std::shared_ptr<const ResourceSet> set) {
  std::lock_guard<std::mutex> l(hub_mu_);
  hub_->Swap(std::move(set));
}

std::shared_ptr<PluginServer::Hub> PluginServer::hub() const {
  std::lock_guard<std::mutex> l(hub_mu_);
  return hub_;
}

bool PluginServer::serving() const { return server_ != nullptr; }

ServerStats PluginServer::stats() const {
  const auto& c = *hub()->counters;
  return {c.allocate_calls.load(), c.allocate_errors.load(), c.preferred_calls.load(), c.streams.load(),
          c.sends.load()};
}

}  // namespace danqing::deviceplugin
