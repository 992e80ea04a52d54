#include "deviceplugin/plugin_server.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
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

// State shared by the server object and its calls; outlives both through
// shared_ptr so a late completion never touches a dead server.
class PluginServer::Hub {
 public:
  struct Counters {
    explicit Counters(std::function<void()> stream_ended) : on_stream_end(std::move(stream_ended)) {}
    std::atomic<uint64_t> allocate_calls{0}, allocate_errors{0}, preferred_calls{0}, sends{0};
    // Streams, numbered 1, 2, ... in the order they opened; read together.
    std::mutex streams_mu;
    uint64_t streams = 0;                                    // guarded by streams_mu
    std::set<uint64_t> open_ids;                             // guarded by streams_mu
    std::optional<std::chrono::steady_clock::time_point> last_end;  // guarded by streams_mu
    const std::function<void()> on_stream_end;  // may be empty
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

// The server's completion queue and the one thread that drains it. Every
// call's new-call, write, finish and done notifications come back here.
//
// Why not gRPC's callback API: on distribution builds (the iomgr engine),
// gRPC runs callback reactions on a process-wide queue polled by two
// "nexting" threads that, after each idle second, sleep 100 ms before
// polling again. A write's completion that arrived then waited for them, and
// a stream with a write still in flight holds the next list back: a health
// change on an idle node reached the kubelet 100 ms late about once per
// 100-300 events. This thread blocks in Next() with no deadline, so a
// completion is handled as soon as it is posted.
class PluginServer::Engine {
 public:
  using Service = v1beta1::DevicePlugin::AsyncService;

  // Registers the service and the queue with `builder` (before BuildAndStart).
  Engine(std::shared_ptr<Hub> hub, grpc::ServerBuilder& builder) : hub_(std::move(hub)) {
    builder.RegisterService(&service_);
    cq_ = builder.AddCompletionQueue();
  }
  ~Engine() { Drain(); }

  // Asks for the first call of every method and starts the thread.
  void Start();
  // After the server has shut down: no new requests; then, once every call
  // object has handled its last notification and freed itself, the queue is
  // shut down and the thread ends.
  //
  // The queue must outlive the calls: gRPC aborts the process on an
  // operation started on a queue that is shut down with nothing pending, and
  // a call still alive may start one. A stream whose write completed after
  // the server shut down (its kubelet had just restarted) starts its Finish
  // then: "assertion failed: grpc_cq_begin_op(cq_, notify_tag)" in a TSan
  // run of PluginTest.HundredKubeletRestartsReRegisterEachTime, about 1 run
  // in 80 with three running at once.
  void Drain() {
    {
      std::unique_lock<std::mutex> l(issue_mu_);
      if (drained_) return;
      drained_ = true;
      accepting_ = false;
      // The server is shut down, so every call ends soon: cancelled, its
      // pending operations come back failed. Bounded all the same: a hang
      // here would stall the agent for good, so say so and go on.
      if (thread_.joinable() && !idle_.wait_for(l, kDrainLimit, [this] { return live_ == 0; })) {
        spdlog::error("plugin: {} gRPC call(s) still alive {} s after the server shut down; shutting "
                      "their queue down anyway",
                      live_, std::chrono::duration_cast<std::chrono::seconds>(kDrainLimit).count());
      }
    }
    cq_->Shutdown();
    if (thread_.joinable()) {
      thread_.join();
    } else {
      Run();  // never started: drain here
    }
  }

  // A call object's first member: counts it alive from construction until
  // the rest of it (its ServerContext above all) is destroyed.
  class Alive {
   public:
    explicit Alive(Engine* engine) : engine_(engine) {
      std::lock_guard<std::mutex> l(engine_->issue_mu_);
      ++engine_->live_;
    }
    ~Alive() {
      std::lock_guard<std::mutex> l(engine_->issue_mu_);
      if (--engine_->live_ == 0) engine_->idle_.notify_all();
    }
    Alive(const Alive&) = delete;
    Alive& operator=(const Alive&) = delete;

   private:
    Engine* engine_;
  };

  // Runs `request` (one of the service's Request* calls) unless the queue is
  // shutting down; false if it did not run. Serialised with Drain, since a
  // request must never reach a queue that was shut down.
  template <typename F>
  bool Issue(F&& request) {
    std::lock_guard<std::mutex> l(issue_mu_);
    if (!accepting_) return false;
    request();
    return true;
  }

  Service& service() { return service_; }
  grpc::ServerCompletionQueue* cq() { return cq_.get(); }
  const std::shared_ptr<Hub>& hub() const { return hub_; }

 private:
  // Handles notifications until the queue is shut down and empty.
  void Run();

  std::shared_ptr<Hub> hub_;
  Service service_;
  std::unique_ptr<grpc::ServerCompletionQueue> cq_;
  static constexpr std::chrono::seconds kDrainLimit{10};

  std::thread thread_;
  std::mutex issue_mu_;
  std::condition_variable idle_;  // live_ reached 0
  bool accepting_ = true;  // guarded by issue_mu_
  bool drained_ = false;   // guarded by issue_mu_
  uint64_t live_ = 0;      // call objects not yet freed; guarded by issue_mu_
};

namespace {

using Engine = PluginServer::Engine;

// A completion-queue tag: one pending notification of a call. Only the
// engine's thread runs Done.
class Tag {
 public:
  virtual void Done(bool ok) = 0;

 protected:
  ~Tag() = default;
};

// One unary method: the handler fills the response and returns the status.
template <typename Req, typename Resp>
struct Unary {
  using RequestFn = void (Engine::Service::*)(grpc::ServerContext*, Req*, grpc::ServerAsyncResponseWriter<Resp>*,
                                              grpc::CompletionQueue*, grpc::ServerCompletionQueue*, void*);
  using Handler = grpc::Status (*)(PluginServer::Hub& hub, const Req& req, Resp* resp);
  RequestFn request;
  Handler handler;
};

// One call of a unary method: asked for, answered, freed. When a call
// arrives, the next one of the same method is asked for before answering.
template <typename Req, typename Resp>
class UnaryCall final : public Tag {
 public:
  static void Await(Engine* engine, Unary<Req, Resp> method) {
    auto* call = new UnaryCall(engine, method);
    const bool issued = engine->Issue([&] {
      (engine->service().*method.request)(&call->ctx_, &call->req_, &call->responder_, engine->cq(), engine->cq(),
                                          call);
    });
    if (!issued) delete call;
  }

  void Done(bool ok) override {
    if (answered_ || !ok) {  // the answer went out, or the server is shutting down
      delete this;
      return;
    }
    Await(engine_, method_);
    answered_ = true;
    const grpc::Status status = method_.handler(*engine_->hub(), req_, &resp_);
    if (status.ok()) {
      responder_.Finish(resp_, status, this);
    } else {
      responder_.FinishWithError(status, this);
    }
  }

 private:
  UnaryCall(Engine* engine, Unary<Req, Resp> method) : alive_(engine), engine_(engine), method_(method) {}
  ~UnaryCall() = default;

  Engine::Alive alive_;  // first: counted alive until every other member is gone
  Engine* engine_;
  Unary<Req, Resp> method_;
  grpc::ServerContext ctx_;
  Req req_;
  Resp resp_;
  grpc::ServerAsyncResponseWriter<Resp> responder_{&ctx_};
  bool answered_ = false;
};

// One ListAndWatch stream. Writes the newest list whenever it differs from
// the last one sent; at most one write in flight, as gRPC requires. Notify()
// and Close() come from any thread (the hub's callers); the stream's own
// notifications (started, write or finish done, call done) from the engine's
// thread, which also frees it once no notification is pending.
class Watcher {
 public:
  static void Await(Engine* engine) {
    auto* w = new Watcher(engine);
    w->ctx_.AsyncNotifyWhenDone(&w->done_);
    const bool issued = engine->Issue([&] {
      engine->service().RequestListAndWatch(&w->ctx_, &w->req_, &w->writer_, engine->cq(), engine->cq(),
                                            &w->started_);
    });
    if (!issued) delete w;
  }

  // A newer list may exist: send it unless a write is in flight (its
  // completion will).
  void Notify() {
    std::lock_guard<std::mutex> l(mu_);
    Next();
  }

  // Ends the stream (server shutdown).
  void Close() {
    std::lock_guard<std::mutex> l(mu_);
    closing_ = true;
    Next();
  }

 private:
  // Routes one kind of notification to its member function.
  class Op final : public Tag {
   public:
    Op(Watcher* w, void (Watcher::*fn)(bool)) : w_(w), fn_(fn) {}
    void Done(bool ok) override { (w_->*fn_)(ok); }

   private:
    Watcher* w_;
    void (Watcher::*fn_)(bool);
  };

  explicit Watcher(Engine* engine) : alive_(engine), engine_(engine), hub_(engine->hub()) {}
  ~Watcher() = default;

  void OnStarted(bool ok) {
    if (!ok) {  // never matched a call (shutdown): no other notification will come
      delete this;
      return;
    }
    Await(engine_);  // the kubelet opens a new stream on each registration
    {
      auto& c = *hub_->counters;
      std::lock_guard<std::mutex> l(c.streams_mu);
      id_ = ++c.streams;
      c.open_ids.insert(id_);
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      started_ok_ = true;
    }
    hub_->AddWatcher(this);  // closes it if the hub is closed
    Notify();
  }

  void OnIoDone(bool ok) {
    {
      std::lock_guard<std::mutex> l(mu_);
      io_pending_ = false;
      if (!ok) {
        closing_ = true;  // the stream broke; the done notification follows
        status_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, "ListAndWatch stream broken");
      }
      Next();
      if (!Finished()) return;
    }
    Free();
  }

  void OnCallDone(bool /*ok*/) {
    // The stream is over for the kubelet (it cancelled, the connection
    // broke, or our Finish went out): whoever watches the registration hears.
    auto& counters = *hub_->counters;
    bool counted = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      call_done_ = true;
      counted = started_ok_;
    }
    if (counted) {
      {
        std::lock_guard<std::mutex> l(counters.streams_mu);
        counters.open_ids.erase(id_);
        counters.last_end = std::chrono::steady_clock::now();
      }
      if (counters.on_stream_end) counters.on_stream_end();
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!Finished()) return;
    }
    Free();
  }

  // Under mu_: starts the next write or the finish, if the stream is idle.
  void Next() {
    if (!started_ok_ || io_pending_ || finish_sent_ || call_done_) return;
    if (closing_) {
      finish_sent_ = true;
      io_pending_ = true;
      writer_.Finish(status_, &io_);
      return;
    }
    auto [version, list] = hub_->Latest();
    if (list == nullptr || version == sent_version_) return;
    sent_version_ = version;
    io_pending_ = true;
    hub_->counters->sends++;
    writer_.Write(*list, &io_);  // serialised here: the list need not outlive the call
  }

  // Under mu_: nothing pending any more.
  bool Finished() const { return call_done_ && !io_pending_; }

  void Free() {
    hub_->RemoveWatcher(this);  // waits out a Notify/Close running on another thread
    delete this;
  }

  Engine::Alive alive_;  // first: counted alive until every other member is gone
  Engine* engine_;
  std::shared_ptr<PluginServer::Hub> hub_;
  Op started_{this, &Watcher::OnStarted};
  Op io_{this, &Watcher::OnIoDone};
  Op done_{this, &Watcher::OnCallDone};
  grpc::ServerContext ctx_;
  v1beta1::Empty req_;
  grpc::ServerAsyncWriter<v1beta1::ListAndWatchResponse> writer_{&ctx_};

  std::mutex mu_;
  bool started_ok_ = false;   // guarded by mu_
  bool io_pending_ = false;   // a Write or the Finish is in flight; guarded by mu_
  bool closing_ = false;      // guarded by mu_
  bool finish_sent_ = false;  // guarded by mu_
  bool call_done_ = false;    // guarded by mu_
  grpc::Status status_ = grpc::Status::OK;  // the Finish status; guarded by mu_
  uint64_t sent_version_ = 0;                // guarded by mu_
  uint64_t id_ = 0;                          // the stream's number, set when it starts
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

grpc::Status GetDevicePluginOptions(PluginServer::Hub& /*hub*/, const v1beta1::Empty& /*req*/,
                                    v1beta1::DevicePluginOptions* resp) {
  resp->set_pre_start_required(false);
  resp->set_get_preferred_allocation_available(true);
  return grpc::Status::OK;
}

grpc::Status GetPreferredAllocation(PluginServer::Hub& hub, const v1beta1::PreferredAllocationRequest& req,
                                    v1beta1::PreferredAllocationResponse* resp) {
  hub.counters->preferred_calls++;
  CallTimer timer(metrics::AgentMetrics().preferred_seconds.WithLabels({hub.resource()}));
  // Nothing is sized by the request before its bounds are checked.
  if (Status st = CheckPreferredAllocationRequest(req); !st.ok()) {
    spdlog::warn("preferred allocation: resource={} refused: {}", hub.resource(), st.message());
    return ToGrpc(st);
  }
  auto set = hub.set();
  const Resource* resource = set ? set->Find(hub.resource()) : nullptr;
  std::shared_ptr<const PreferredAllocator> alloc;
  if (set) {
    if (auto it = set->allocators.find(hub.resource()); it != set->allocators.end()) alloc = it->second;
  }
  for (const auto& creq : req.container_requests()) {
    auto* cresp = resp->add_container_responses();
    if (resource == nullptr || alloc == nullptr) continue;  // never fail: the kubelet fills in
    // Unhealthy devices are never preferred.
    const std::vector<std::string> asked(creq.available_deviceids().begin(),
                                         creq.available_deviceids().end());
    const std::vector<const Device*> found = resource->FindEach(asked);
    std::vector<std::string> available;
    available.reserve(asked.size());
    for (size_t i = 0; i < asked.size(); ++i) {
      if (found[i] != nullptr && found[i]->healthy) available.push_back(asked[i]);
    }
    std::vector<std::string> must(creq.must_include_deviceids().begin(), creq.must_include_deviceids().end());
    for (auto& id : alloc->Choose(available, must, creq.allocation_size())) {
      cresp->add_deviceids(std::move(id));
    }
  }
  return grpc::Status::OK;
}

grpc::Status Allocate(PluginServer::Hub& hub, const v1beta1::AllocateRequest& req, v1beta1::AllocateResponse* resp) {
  hub.counters->allocate_calls++;
  std::optional<CallTimer> timer;
  timer.emplace(metrics::AgentMetrics().allocate_seconds.WithLabels({hub.resource()}));
  auto refuse = [&](grpc::Status status) {
    hub.counters->allocate_errors++;
    metrics::AgentMetrics().allocate_errors.WithLabels({hub.resource()}).Inc();
    return status;
  };
  if (Status st = CheckAllocateRequest(req); !st.ok()) {
    spdlog::warn("allocate: resource={} refused: {}", hub.resource(), st.message());
    return refuse(ToGrpc(st));
  }
  auto set = hub.set();
  const Resource* resource = set ? set->Find(hub.resource()) : nullptr;
  if (resource == nullptr) {
    return refuse({grpc::StatusCode::FAILED_PRECONDITION,
                   "resource " + hub.resource() + " is no longer advertised by this node"});
  }
  for (const auto& creq : req.container_requests()) {
    std::vector<std::string> ids(creq.devices_ids().begin(), creq.devices_ids().end());
    auto cresp = BuildContainerResponse(*resource, ids, hub.options());
    if (!cresp.ok()) {
      spdlog::warn("allocate: resource={} refused: {}", hub.resource(), cresp.status().message());
      return refuse(ToGrpc(cresp.status()));
    }
    *resp->add_container_responses() = std::move(cresp).value();
  }
  return grpc::Status::OK;
}

grpc::Status PreStartContainer(PluginServer::Hub& /*hub*/, const v1beta1::PreStartContainerRequest& /*req*/,
                               v1beta1::PreStartContainerResponse* /*resp*/) {
  return grpc::Status::OK;
}

}  // namespace

void PluginServer::Engine::Run() {
  void* tag = nullptr;
  bool ok = false;
  while (cq_->Next(&tag, &ok)) static_cast<Tag*>(tag)->Done(ok);
}

void PluginServer::Engine::Start() {
  using v1beta1::DevicePlugin;
  UnaryCall<v1beta1::Empty, v1beta1::DevicePluginOptions>::Await(
      this, {&Service::RequestGetDevicePluginOptions, &GetDevicePluginOptions});
  UnaryCall<v1beta1::PreferredAllocationRequest, v1beta1::PreferredAllocationResponse>::Await(
      this, {&Service::RequestGetPreferredAllocation, &GetPreferredAllocation});
  UnaryCall<v1beta1::AllocateRequest, v1beta1::AllocateResponse>::Await(this,
                                                                         {&Service::RequestAllocate, &Allocate});
  UnaryCall<v1beta1::PreStartContainerRequest, v1beta1::PreStartContainerResponse>::Await(
      this, {&Service::RequestPreStartContainer, &PreStartContainer});
  Watcher::Await(this);
  thread_ = std::thread([this] {
    ::pthread_setname_np(::pthread_self(), "dq-plugin-cq");  // for operators' thread lists and profiles
    Run();
  });
}

void PluginServer::Hub::Publish(std::shared_ptr<const ResourceSet> set) {
  auto list = std::make_shared<const v1beta1::ListAndWatchResponse>(
      ToListAndWatch(set ? set->Find(resource_) : nullptr));
  // BuildResources keeps every list within kListAndWatchBudgetBytes; should
  // one still outgrow what the kubelet reads, say so rather than leave the
  // kubelet's stream to fail without a word.
  if (const size_t bytes = list->ByteSizeLong(); bytes > kGrpcDefaultMaxMessageBytes) {
    spdlog::error(
        "plugin: resource={} ListAndWatch list of {} devices is {} bytes, over the {} bytes "
        "the kubelet reads: it will not see them",
        resource_, list->devices_size(), bytes, kGrpcDefaultMaxMessageBytes);
  }
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

PluginServer::PluginServer(std::string resource, std::string socket_path, AllocateOptions options,
                           std::function<void()> on_stream_end)
    : resource_(std::move(resource)), socket_path_(std::move(socket_path)) {
  hub_ = std::make_shared<Hub>(resource_, std::move(options),
                               std::make_shared<Hub::Counters>(std::move(on_stream_end)));
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
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket_path_, grpc::InsecureServerCredentials());
  // A request is read whole before any handler sees it: its size is the
  // first bound (issue 31). gRPC's minimal stack (GRPC_ARG_MINIMAL_STACK,
  // ~20 us less per call) leaves out the message-size filter, and with it
  // any limit: a client could make the agent buffer a request of any size.
  // So the full stack, with the kubelet's own limit stated.
  builder.SetMaxReceiveMessageSize(static_cast<int>(kGrpcDefaultMaxMessageBytes));
  auto engine = std::make_unique<Engine>(std::move(hub), builder);
  server_ = builder.BuildAndStart();
  if (!server_) {
    engine.reset();  // drains the unused queue
    return Unavailable("cannot serve " + resource_ + " on " + socket_path_);
  }
  engine_ = std::move(engine);
  engine_->Start();
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
  // Streams that do not finish by the deadline are cancelled; the engine's
  // thread keeps handling completions meanwhile.
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
  server_->Wait();
  engine_->Drain();  // the queue is shut down after the server, as gRPC requires
  server_.reset();   // then the server, before the service it was given
  engine_.reset();
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
  auto& c = *hub()->counters;
  ServerStats s;
  s.allocate_calls = c.allocate_calls.load();
  s.allocate_errors = c.allocate_errors.load();
  s.preferred_calls = c.preferred_calls.load();
  s.list_and_watch_sends = c.sends.load();
  std::lock_guard<std::mutex> l(c.streams_mu);
  s.list_and_watch_streams = c.streams;
  s.open_streams = c.open_ids.size();
  s.open_stream_ids.assign(c.open_ids.begin(), c.open_ids.end());
  s.last_stream_end = c.last_end;
  return s;
}

}  // namespace danqing::deviceplugin
