#include "deviceplugin/plugin_manager.h"

#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/printable.h"
#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "metrics/agent_metrics.h"

namespace danqing::deviceplugin {

using Clock = std::chrono::steady_clock;

// The retry backoff of a CDI spec write that failed.
constexpr std::chrono::milliseconds kCdiRetryFirst{1'000};
constexpr std::chrono::milliseconds kCdiRetryMax{30'000};

struct PluginManager::Entry {
  std::string resource;
  std::string socket_name;
  std::string socket_path;
  std::unique_ptr<PluginServer> server;
  bool registered = false;
  uint64_t registrations = 0;
  std::optional<Clock::time_point> last_registered;
  std::string last_error;
  std::chrono::milliseconds backoff{0};
  // Not registered: the next attempt. Registered: when to check that the
  // kubelet's stream came (CheckStreams). None: nothing due.
  std::optional<Clock::time_point> retry_at;
  // Streams the server had opened when the last Register began: a stream
  // opened after it belongs to that registration.
  uint64_t streams_at_attempt = 0;
  std::optional<FileId> kubelet;   // kubelet.sock when this resource last registered
};

namespace {

std::optional<FileId> IdOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec};
}

// Whether two snapshots advertise the same devices, whatever their health.
bool SameDevicesIgnoringHealth(const ResourceSet& a, const ResourceSet& b) {
  if (a.resources.size() != b.resources.size()) return false;
  for (size_t i = 0; i < a.resources.size(); ++i) {
    const Resource& ra = a.resources[i];
    const Resource& rb = b.resources[i];
    if (ra.name != rb.name || ra.devices.size() != rb.devices.size()) return false;
    for (size_t j = 0; j < ra.devices.size(); ++j) {
      Device da = ra.devices[j];
      Device db = rb.devices[j];
      da.healthy = db.healthy = true;
      da.unhealthy_reason.clear();
      db.unhealthy_reason.clear();
      if (!(da == db)) return false;
    }
  }
  return true;
}

bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

PluginManager::PluginManager(ManagerOptions options) : options_(std::move(options)) {}

PluginManager::~PluginManager() { Stop(); }

Status PluginManager::Start(std::shared_ptr<const ResourceSet> set) {
  std::error_code ec;
  std::filesystem::create_directories(options_.plugin_dir, ec);
  if (ec) return Unavailable("cannot create plugin directory " + options_.plugin_dir + ": " + ec.message());
  inotify_fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (inotify_fd_ < 0 || wake_fd_ < 0) return Unavailable(std::string("inotify/eventfd: ") + std::strerror(errno));
  if (::inotify_add_watch(inotify_fd_, options_.plugin_dir.c_str(),
                          IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM) < 0) {
    return Unavailable("cannot watch " + options_.plugin_dir + ": " + std::strerror(errno));
  }
  Apply(set);
  // The thread starts whatever happened: it registers the resources that are
  // serving, and serves again, with backoff, those that could not be (a
  // socket self-check that timed out on a loaded node, say).
  thread_ = std::thread([this] { Run(); });
  std::lock_guard<std::mutex> l(mu_);
  started_ = true;
  for (const auto& [name, e] : entries_) {
    if (!e->server) return Unavailable("cannot serve " + name + " yet (retrying): " + e->last_error);
  }
  return Status::Ok();
}

void PluginManager::Update(std::shared_ptr<const ResourceSet> set) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return;
    // Same resources as now (a health change, a reload that kept the layout)
    // and nothing queued before it: publish on the caller's thread. Each
    // hand-off to another thread is a wake-up the scheduler may delay, and an
    // unhealthy GPU should reach ListAndWatch as fast as the event came.
    // Not while the manager thread applies an earlier one (this one would be
    // overwritten by it), nor when the CDI spec must be written first.
    if (!pending_ && !applying_ && started_ && SameResources(*set) && !CdiNeededLocked(*set)) {
      PublishLocked(set);
      return;
    }
    pending_ = std::move(set);
  }
  Wake();
}

// Caller holds mu_.
bool PluginManager::SameResources(const ResourceSet& set) const {
  if (set.resources.size() != entries_.size()) return false;
  for (const auto& r : set.resources) {
    if (entries_.find(r.name) == entries_.end()) return false;
  }
  return true;
}

void PluginManager::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  Wake();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> l(mu_);
  for (auto& [name, e] : entries_) {
    if (e->server) e->server->Shutdown();
  }
  entries_.clear();
  if (inotify_fd_ >= 0) ::close(inotify_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  inotify_fd_ = wake_fd_ = -1;
}

void PluginManager::Wake() {
  if (wake_fd_ < 0) return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

std::vector<ResourceStatus> PluginManager::Statuses() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<ResourceStatus> out;
  for (const auto& [name, e] : entries_) {
    ResourceStatus s;
    s.resource = name;
    s.socket_path = e->socket_path;
    s.serving = e->server && e->server->serving();
    s.registered = e->registered;
    s.registrations = e->registrations;
    s.last_registered = e->last_registered;
    s.last_error = e->last_error;
    if (e->server) s.stats = e->server->stats();
    out.push_back(std::move(s));
  }
  return out;
}

// Caller holds no lock: the manager thread, or Start before it runs.
void PluginManager::Apply(const std::shared_ptr<const ResourceSet>& set) {
  // The CDI spec first: a device the kubelet hears of may be allocated at
  // once, and a runtime refuses a container whose CDI name no spec defines.
  WriteCdiIfNeeded(set);
  std::lock_guard<std::mutex> l(mu_);
  PublishLocked(set);
}

bool PluginManager::CdiOn() const {
  return !options_.cdi_root.empty() && UsesCdi(options_.allocate.device_list_strategies);
}

// Caller holds mu_.
bool PluginManager::CdiNeededLocked(const ResourceSet& set) const {
  if (!CdiOn()) return false;
  // The spec names devices, not their health: a health change leaves it as
  // it is, and the hot path writes no file.
  return cdi_done_ != cdi_wanted_ || cdi_set_ == nullptr ||
         cdi_set_->driver_version != set.driver_version ||
         !SameDevicesIgnoringHealth(*cdi_set_, set);
}

// Caller holds no lock; only one thread calls it at a time (the manager
// thread, or Start before it runs). Looking through the driver root and
// writing the file happen without mu_: they may take a while (a slow disk, a
// driver root of many links), and health changes and the readiness probe's
// statuses must not wait for them. Snapshots that need the spec rewritten are
// never published meanwhile: Update hands them to this thread.
void PluginManager::WriteCdiIfNeeded(const std::shared_ptr<const ResourceSet>& set) {
  uint64_t wanted = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!CdiNeededLocked(*set)) return;
    wanted = cdi_wanted_;
  }
  // The nodes as the spec will list them; looked at again every
  // options_.cdi_node_check (a node made just after this is seen then).
  std::vector<std::string> nodes = ControlNodes(options_.allocate.dev_root);
  std::vector<std::string> warnings;
  const Status st = WriteCdiSpecFile(*set, &warnings);
  std::lock_guard<std::mutex> l(mu_);
  if (!st.ok()) {
    // Tried again with the next snapshot, or after the backoff.
    cdi_backoff_ = std::clamp(cdi_backoff_ * 2, kCdiRetryFirst, kCdiRetryMax);
    cdi_check_at_ = Clock::now() + cdi_backoff_;
    spdlog::error("plugin: writing the CDI spec failed (trying again in {} s): {}",
                  std::chrono::duration<double>(cdi_backoff_).count(), st.ToString());
    return;
  }
  for (const auto& w : warnings) spdlog::warn("plugin: CDI spec {}", w);
  cdi_done_ = wanted;
  cdi_set_ = set;
  cdi_nodes_ = std::move(nodes);
  cdi_backoff_ = std::chrono::milliseconds{0};
  cdi_check_at_ = Clock::now() + options_.cdi_node_check;
}

// Manager thread, no lock held: the spec of the current snapshot, when a
// RewriteCdiSpec asked for it, the control nodes changed, or a write that
// failed is due again.
void PluginManager::MaintainCdi(const std::shared_ptr<const ResourceSet>& current) {
  bool check_nodes = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!CdiOn()) return;
    const bool due = Clock::now() >= cdi_check_at_;
    if (cdi_backoff_.count() > 0 && !due) return;  // a failed write waits out its backoff
    check_nodes = due && cdi_done_ == cdi_wanted_;
  }
  if (check_nodes) {
    std::vector<std::string> nodes = ControlNodes(options_.allocate.dev_root);
    std::lock_guard<std::mutex> l(mu_);
    if (nodes != cdi_nodes_) {
      std::string now;
      for (const auto& n : nodes) now += (now.empty() ? "" : " ") + n;
      spdlog::info("plugin: the driver's control nodes are now {}; rewriting the CDI spec",
                   now.empty() ? "none" : now);
      ++cdi_wanted_;
    } else {
      cdi_check_at_ = Clock::now() + options_.cdi_node_check;
    }
  }
  {
    // Like a snapshot being applied: one that arrives meanwhile waits for
    // this write, so the spec never names devices older than those published.
    std::lock_guard<std::mutex> l(mu_);
    applying_ = true;
  }
  WriteCdiIfNeeded(current);
  std::lock_guard<std::mutex> l(mu_);
  applying_ = false;
}

Status PluginManager::WriteCdiSpecFile(const ResourceSet& set, std::vector<std::string>* warnings) {
  return WriteCdiSpec(set, options_.cdi_root, options_.allocate, warnings);
}

// Caller holds mu_.
void PluginManager::PublishLocked(const std::shared_ptr<const ResourceSet>& set) {
  const std::shared_ptr<const ResourceSet> previous = current_;
  current_ = set;
  for (const auto& r : set->resources) {
    auto it = entries_.find(r.name);
    if (it == entries_.end()) {
      auto e = std::make_unique<Entry>();
      e->resource = r.name;
      e->socket_name = SocketNameFor(r.name);
      e->socket_path = options_.plugin_dir + "/" + e->socket_name;
      e->backoff = options_.initial_backoff;
      if (auto old = retired_.find(r.name); old != retired_.end()) {
        e->kubelet = old->second;
        retired_.erase(old);
      }
      Serve(*e);
      entries_[r.name] = std::move(e);
    } else if (it->second->server) {
      // Unchanged resources keep their streams quiet; the server still takes
      // the new snapshot (its allocator) without sending anything.
      const Resource* before = previous ? previous->Find(r.name) : nullptr;
      if (before != nullptr && *before == r) {
        it->second->server->Replace(set);
      } else {
        it->second->server->Update(set);
      }
    }
  }
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (set->Find(it->first) == nullptr) {
      spdlog::info("plugin: resource={} no longer advertised; stopping its server", it->first);
      if (it->second->server) it->second->server->Shutdown();
      retired_[it->first] = it->second->kubelet;
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
}

// Caller holds mu_.
void PluginManager::Serve(Entry& e) {
  if (e.server) e.server->Shutdown();
  e.registered = false;
  auto server =
      std::make_unique<PluginServer>(e.resource, e.socket_path, options_.allocate, [this] { Wake(); });
  if (Status st = server->Start(current_); !st.ok()) {
    e.last_error = st.message();
    spdlog::error("plugin: resource={} cannot serve: {}", e.resource, st.message());
    e.server.reset();
    e.retry_at = Clock::now() + e.backoff;
    e.backoff = std::min(e.backoff * 2, options_.max_backoff);
    return;
  }
  e.server = std::move(server);
  // The old server's streams are over now; a kubelet that held one may not
  // have handled that yet.
  e.retry_at = Clock::now() + SettleFor(e);
}

std::string PluginManager::KubeletSocket() const { return options_.plugin_dir + "/" + options_.kubelet_socket_name; }

std::optional<FileId> PluginManager::KubeletId() const { return IdOf(KubeletSocket()); }

// Caller holds mu_.
std::chrono::milliseconds PluginManager::SettleFor(const Entry& e) const {
  if (!e.kubelet) return std::chrono::milliseconds(0);
  return KubeletId() == e.kubelet ? options_.stream_settle : std::chrono::milliseconds(0);
}

// Caller holds mu_. The bookkeeping of a registration the kubelet accepted.
void PluginManager::MarkRegistered(Entry& e, const std::optional<FileId>& kubelet) {
  e.registered = true;
  e.kubelet = kubelet;
  e.registrations++;
  metrics::AgentMetrics().registrations.WithLabels({e.resource}).Inc();
  e.last_registered = Clock::now();
  e.last_error.clear();
  e.backoff = options_.initial_backoff;
}

// Caller holds mu_. A registered resource whose stream the kubelet opened
// and that has ended since, while this manager kept serving it, or whose
// stream never came (the kubelet lost it at once): the kubelet has marked its
// devices unhealthy and will drop the resource, so register again once it
// has handled the end. A registration still waiting for its stream is looked
// at again when the wait is over (retry_at).
void PluginManager::CheckStreams() {
  const auto now = Clock::now();
  for (auto& [name, e] : entries_) {
    if (!e->server || !e->registered) continue;
    const ServerStats st = e->server->stats();
    const char* what = nullptr;
    if (st.list_and_watch_streams > e->streams_at_attempt) {
      // The kubelet's stream is the first one opened after the Register
      // began; streams of other clients (someone debugging) do not count.
      const uint64_t kubelets = e->streams_at_attempt + 1;
      if (std::binary_search(st.open_stream_ids.begin(), st.open_stream_ids.end(), kubelets)) {
        e->retry_at.reset();
        continue;
      }
      what = "the kubelet's ListAndWatch stream ended";
    } else {
      const auto deadline = e->last_registered.value_or(now) + options_.register_timeout;
      if (now < deadline) {
        e->retry_at = deadline;
        continue;
      }
      what = "no ListAndWatch stream came from the kubelet after registering";
    }
    const auto wait = SettleFor(*e);
    spdlog::warn("plugin: resource={} {}; registering again in {} ms", name, what, wait.count());
    e->registered = false;
    e->backoff = options_.initial_backoff;
    e->retry_at = now + wait;
  }
}

// Caller holds no lock.
void PluginManager::TryRegister(Entry& e) {
  const std::string kubelet = KubeletSocket();
  v1beta1::RegisterRequest req;
  std::optional<FileId> kubelet_id;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!e.server) {
      Serve(e);
      // Not served, or served but with a settle to wait out first.
      if (!e.server || (e.retry_at && *e.retry_at > Clock::now())) return;
    }
    kubelet_id = IdOf(kubelet);
    if (!kubelet_id) {
      // inotify wakes us when the kubelet creates its socket; retry slowly meanwhile.
      e.last_error = "kubelet socket " + kubelet + " does not exist";
      e.retry_at = Clock::now() + options_.max_backoff;
      return;
    }
    const ServerStats stats = e.server->stats();
    if (std::binary_search(stats.open_stream_ids.begin(), stats.open_stream_ids.end(),
                           e.streams_at_attempt + 1)) {
      // The first stream opened since the last Register began is open: the
      // kubelet streams from this server already (a Register that timed out
      // but went through, or a stream that came after we gave up on it).
      // Registering again would leave it a second stream, and the first
      // one's end would stop the new endpoint. That stream is the
      // registration's.
      MarkRegistered(e, kubelet_id);
      e.retry_at.reset();
      spdlog::info("plugin: resource={} the kubelet streams already; taking that as the registration",
                   e.resource);
      return;
    }
    if (stats.last_stream_end && SettleFor(e).count() > 0) {
      // A stream of this server ended lately: give the kubelet time to handle that.
      const auto ready = *stats.last_stream_end + options_.stream_settle;
      if (ready > Clock::now()) {
        e.retry_at = ready;
        return;
      }
    }
    e.streams_at_attempt = stats.list_and_watch_streams;
    req.set_version("v1beta1");
    req.set_endpoint(e.socket_name);
    req.set_resource_name(e.resource);
    req.mutable_options()->set_get_preferred_allocation_available(true);
  }
  auto channel = grpc::CreateChannel("unix://" + kubelet, grpc::InsecureChannelCredentials());
  auto stub = v1beta1::Registration::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + options_.register_timeout);
  v1beta1::Empty resp;
  grpc::Status st = stub->Register(&ctx, req, &resp);

  std::lock_guard<std::mutex> l(mu_);
  if (st.ok()) {
    MarkRegistered(e, kubelet_id);
    e.retry_at = *e.last_registered + options_.register_timeout;  // CheckStreams: has the stream come?
    spdlog::info("plugin: resource={} registered with the kubelet (endpoint {})", e.resource, e.socket_name);
  } else {
    e.last_error = "Register: " + Printable(st.error_message());  // the kubelet's words
    metrics::AgentMetrics().registration_failures.WithLabels({e.resource}).Inc();
    auto wait = e.backoff;
    if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      // The kubelet may still accept it and open the stream (it does so
      // after answering, and may take as long again): look for that stream
      // before asking again.
      e.kubelet = kubelet_id;
      wait = std::max({wait, options_.stream_settle, options_.register_timeout});
    }
    e.retry_at = Clock::now() + wait;
    spdlog::warn("plugin: resource={} Register failed ({}), retry in {} ms", e.resource,
                 Printable(st.error_message()), wait.count());
    e.backoff = std::min(e.backoff * 2, options_.max_backoff);
  }
}

// Caller holds mu_. A kubelet started: register with it every resource not
// registered with it yet (one may have been, between its start and now).
void PluginManager::RegisterAllNow() {
  const auto kubelet = KubeletId();
  for (auto& [name, e] : entries_) {
    if (e->registered && kubelet && e->kubelet == kubelet) continue;
    e->registered = false;
    e->retry_at = Clock::now();
    e->backoff = options_.initial_backoff;
  }
}

void PluginManager::HandleInotify() {
  alignas(struct inotify_event) char buf[8192];
  for (;;) {
    ssize_t n = ::read(inotify_fd_, buf, sizeof buf);
    if (n <= 0) return;
    std::lock_guard<std::mutex> l(mu_);
    for (char* p = buf; p < buf + n;) {
      auto* ev = reinterpret_cast<struct inotify_event*>(p);
      p += sizeof(struct inotify_event) + ev->len;
      if (ev->mask & IN_Q_OVERFLOW) {
        // Events were lost: serve again what lost its socket, and register
        // at once with a kubelet other than the one last registered with. A
        // registration with the kubelet still there stands (CheckStreams
        // watches its stream), and one already scheduled keeps its time.
        spdlog::warn("plugin: inotify queue overflow; re-checking every socket");
        const auto kubelet = KubeletId();
        for (auto& [name, e] : entries_) {
          if (!Exists(e->socket_path)) {
            Serve(*e);
          } else if (e->kubelet != kubelet || (!e->registered && !e->retry_at)) {
            e->registered = false;
            e->retry_at = Clock::now();
            e->backoff = options_.initial_backoff;
          }
        }
        continue;
      }
      const std::string name = ev->len > 0 ? ev->name : "";
      if (name == options_.kubelet_socket_name) {
        if (ev->mask & (IN_CREATE | IN_MOVED_TO)) {
          spdlog::info("plugin: kubelet socket created; registering every resource");
          for (auto& [rname, e] : entries_) {
            if (!Exists(e->socket_path)) Serve(*e);
          }
          RegisterAllNow();
        } else {
          for (auto& [rname, e] : entries_) e->registered = false;
        }
        continue;
      }
      if (!(ev->mask & (IN_DELETE | IN_MOVED_FROM))) continue;
      for (auto& [rname, e] : entries_) {
        if (e->socket_name == name && !Exists(e->socket_path)) {
          spdlog::info("plugin: resource={} socket {} was removed; serving again", rname, e->socket_path);
          Serve(*e);
        }
      }
    }
  }
}

void PluginManager::RewriteCdiSpec() {
  {
    std::lock_guard<std::mutex> l(mu_);
    ++cdi_wanted_;  // written by the manager thread, from the snapshot it has then
  }
  Wake();
}

void PluginManager::Run() {
  for (;;) {
    std::shared_ptr<const ResourceSet> pending, current;
    int timeout_ms = -1;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stopping_) return;
      pending = std::move(pending_);
      pending_.reset();
      applying_ = pending != nullptr;
      current = current_;
    }
    if (pending) {
      Apply(pending);
      std::lock_guard<std::mutex> l(mu_);
      applying_ = false;
    } else if (current) {
      MaintainCdi(current);
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      const auto now = Clock::now();
      // Wakes by `at` at the latest. Rounded up: a wait rounded down to 0
      // would spin until the time came.
      const auto wake_by = [&](Clock::time_point at) {
        const auto ms = static_cast<int>(
            std::max<int64_t>(std::chrono::ceil<std::chrono::milliseconds>(at - now).count(), 0));
        timeout_ms = timeout_ms < 0 ? ms : std::min(timeout_ms, ms);
      };
      if (CdiOn()) wake_by(cdi_check_at_);
      for (const auto& [name, e] : entries_) {
        if (e->retry_at) wake_by(*e->retry_at);
      }
    }
    struct pollfd fds[2] = {{inotify_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    int rc = ::poll(fds, 2, timeout_ms);
    if (rc < 0 && errno != EINTR) {
      spdlog::error("plugin: poll failed: {}", std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (rc > 0 && (fds[1].revents & POLLIN)) {
      uint64_t v = 0;
      [[maybe_unused]] ssize_t n = ::read(wake_fd_, &v, sizeof v);
    }
    if (rc > 0 && (fds[0].revents & POLLIN)) HandleInotify();

    std::vector<Entry*> due;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stopping_) return;
      CheckStreams();
      const auto now = Clock::now();
      for (auto& [name, e] : entries_) {
        if (!e->registered && e->retry_at && *e->retry_at <= now) due.push_back(e.get());
      }
    }
    for (Entry* e : due) TryRegister(*e);
  }
}

}  // namespace danqing::deviceplugin
