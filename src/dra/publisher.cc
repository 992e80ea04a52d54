#include "dra/publisher.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <ctime>
#include <set>

#include "metrics/registry.h"

namespace danqing::dra {
namespace {

constexpr char kSlicesPath[] = "/apis/resource.k8s.io/v1/resourceslices";

struct PublishMetrics {
  metrics::Family<metrics::Counter>& publish;
  metrics::Family<metrics::Histogram>& seconds;
  metrics::Family<metrics::Counter>& repairs;
  metrics::Family<metrics::Gauge>& generation;
};

PublishMetrics& Metrics() {
  static PublishMetrics* m = [] {
    auto& r = metrics::DefaultRegistry();
    return new PublishMetrics{
        r.AddCounter("danqing_dra_slice_publish",
                     "ResourceSlice publication passes and writes, by result (ok: the API server "
                     "holds the desired slices; error: the pass failed and is retried; conflict: "
                     "a 409 met and retried).",
                     {"result"}),
        r.AddHistogram("danqing_dra_slice_publish_duration_seconds",
                       "Time from a change of this node's devices (inventory or health) to the "
                       "API server holding the new slices.",
                       {}, metrics::LatencyBuckets(), "seconds"),
        r.AddCounter("danqing_dra_slice_repairs",
                     "ResourceSlices restored after they were changed or deleted by someone else."),
        r.AddGauge("danqing_dra_slice_generation", "The pool generation this node last published."),
    };
  }();
  return *m;
}

std::string NowRfc3339() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string RvOf(const kube::Json& obj) {
  if (!obj.is_object() || !obj.contains("metadata")) return "";
  const auto& m = obj["metadata"];
  return m.contains("resourceVersion") && m["resourceVersion"].is_string()
             ? m["resourceVersion"].get<std::string>()
             : "";
}

std::string NameOf(const kube::Json& obj) {
  if (!obj.is_object() || !obj.contains("metadata")) return "";
  const auto& m = obj["metadata"];
  return m.contains("name") && m["name"].is_string() ? m["name"].get<std::string>() : "";
}

// Whether `newer` is a later version than `older`. resourceVersions are
// opaque; in practice decimal integers, compared as such when both are.
bool Newer(const std::string& newer, const std::string& older) {
  auto digits = [](const std::string& s) {
    return !s.empty() &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (older.empty()) return true;
  if (digits(newer) && digits(older)) {
    return newer.size() != older.size() ? newer.size() > older.size() : newer > older;
  }
  return newer != older;
}

int64_t GenerationOf(const kube::Json& slice) {
  if (!slice.contains("spec") || !slice["spec"].contains("pool")) return 0;
  const auto& p = slice["spec"]["pool"];
  return p.contains("generation") && p["generation"].is_number_integer()
             ? p["generation"].get<int64_t>()
             : 0;
}

bool Matches(const kube::Json& desired, const kube::Json& existing) {
  if (!existing.contains("spec") || existing["spec"] != desired["spec"]) return false;
  if (desired["metadata"].contains("ownerReferences")) {
    const auto& em = existing["metadata"];
    if (!em.contains("ownerReferences") ||
        em["ownerReferences"] != desired["metadata"]["ownerReferences"]) {
      return false;
    }
  }
  return true;
}

std::string TaintKey(const std::string& device, const Taint& t) {
  return device + "|" + t.key + "|" + t.value + "|" + t.effect;
}

// The dynamic-MIG pool's options for this node's slice options.
DynamicSliceOptions MigOptions(const SliceOptions& o) {
  DynamicSliceOptions m;
  m.driver = o.driver;
  m.node_name = o.node_name;
  return m;
}

bool ValidDriver(const std::string& d) {
  if (d.empty() || d.size() > 63) return false;
  for (const char c : d) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.')) return false;
  }
  return d.front() != '-' && d.front() != '.' && d.back() != '-' && d.back() != '.';
}

}  // namespace

Publisher::Publisher(kube::Client& client, PublisherOptions options)
    : client_(client), options_(std::move(options)) {
  Metrics();
}

Publisher::~Publisher() {
  Stop();
}

std::string Publisher::SlicesPath() const {
  return kSlicesPath;
}

kube::Query Publisher::Selector() const {
  return {{"fieldSelector", "spec.nodeName=" + options_.slices.node_name +
                                ",spec.driver=" + options_.slices.driver}};
}

Status Publisher::Start() {
  if (options_.slices.node_name.empty()) {
    return InvalidArgument("DRA publisher: no node name (set NODE_NAME from spec.nodeName)");
  }
  if (!ValidDriver(options_.slices.driver)) {
    return InvalidArgument("DRA publisher: driver name \"" + options_.slices.driver +
                           "\" is not a lower-case DNS subdomain of at most 63 characters");
  }
  {
    std::lock_guard lock(mu_);
    stop_ = false;
  }
  cancel_watch_ = false;
  reconcile_ = std::thread([this] { ReconcileLoop(); });
  watch_ = std::thread([this] { WatchLoop(); });
  return Status::Ok();
}

void Publisher::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cancel_watch_ = true;
  cv_.notify_all();
  if (reconcile_.joinable()) reconcile_.join();
  if (watch_.joinable()) watch_.join();
}

void Publisher::Rebuild() {
  std::vector<SliceDevice> devices = BuildDevices(inventory_, conditions_, options_.slices);
  kube::Json all = kube::Json::array();
  for (const auto& d : devices) all.push_back(DeviceJson(d));
  std::string key = all.dump();
  if (!mig_gpus_.empty()) {
    // The MIG pool's content (generation 0: it does not take part in the key).
    key += '\n';
    for (const auto& sl :
         BuildDynamicMigSlices(mig_gpus_, mig_owned_, 0, MigOptions(options_.slices)))
      key += sl.dump();
  }
  if (key == desired_key_ && desired_version_ > 0) return;
  if (published_version_ == desired_version_) desired_since_ = std::chrono::steady_clock::now();
  desired_ = std::move(devices);
  desired_key_ = std::move(key);
  ++desired_version_;
  dirty_ = true;
  cv_.notify_all();
}

void Publisher::Update(const gpu::NodeInventory& inventory, const DeviceConditions& conditions) {
  std::lock_guard lock(mu_);
  inventory_ = inventory;
  conditions_ = conditions;
  have_inventory_ = true;
  Rebuild();
}

void Publisher::SetDynamicMig(std::vector<MigGpuSpec> gpus,
                              std::map<std::string, std::set<uint32_t>> owned_by_gpu) {
  std::lock_guard lock(mu_);
  mig_gpus_ = std::move(gpus);
  mig_owned_ = std::move(owned_by_gpu);
  if (have_inventory_) Rebuild();
}

std::vector<kube::Json> Publisher::AllSlices(const std::vector<SliceDevice>& devices,
                                             int64_t gen) const {
  std::vector<kube::Json> out = BuildSlices(devices, gen, options_.slices);
  if (!mig_gpus_.empty()) {
    for (auto& sl : BuildDynamicMigSlices(mig_gpus_, mig_owned_, gen, MigOptions(options_.slices)))
      out.push_back(std::move(sl));
  }
  return out;
}

void Publisher::SetConditions(const DeviceConditions& conditions) {
  std::lock_guard lock(mu_);
  conditions_ = conditions;
  if (have_inventory_) Rebuild();
}

PublisherStatus Publisher::status() const {
  std::lock_guard lock(mu_);
  PublisherStatus s = stats_;
  s.generation = generation_;
  s.desired_version = desired_version_;
  s.published_version = published_version_;
  s.synced = desired_version_ > 0 && published_version_ == desired_version_ && !dirty_ && !in_pass_;
  return s;
}

bool Publisher::WaitSynced(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [this] {
    return desired_version_ > 0 && published_version_ == desired_version_ && !dirty_ && !in_pass_;
  });
}

void Publisher::StoreLocked(const std::string& name, kube::Json obj) {
  const std::string rv = RvOf(obj);
  std::string& seen = seen_rv_[name];
  if (!seen.empty() && !Newer(rv, seen)) {
    // The watch already reported this version or a later one (a later
    // change, or the slice's deletion): keep what it said, look again.
    if (rv != seen) dirty_ = true;
    return;
  }
  seen = rv;
  existing_[name] = std::move(obj);
}

Status Publisher::List() {
  auto r = client_.Get(SlicesPath(), Selector());
  if (!r.ok()) return r.status();
  if (!r->contains("items") || !(*r)["items"].is_array()) {
    return Internal("DRA publisher: list of ResourceSlices has no items array");
  }
  std::lock_guard lock(mu_);
  existing_.clear();
  seen_rv_.clear();
  for (auto& item : (*r)["items"]) {
    const std::string name = NameOf(item);
    if (name.empty()) continue;
    seen_rv_[name] = RvOf(item);
    existing_[name] = std::move(item);
  }
  list_rv_ = (*r)["metadata"].value("resourceVersion", "");
  if (list_epoch_ > 0) ++stats_.relists;
  ++list_epoch_;
  need_list_ = false;
  cv_.notify_all();
  return Status::Ok();
}

Status Publisher::WriteSlice(const kube::Json& desired) {
  const std::string name = NameOf(desired);
  const std::string path = SlicesPath() + "/" + name;
  for (int attempt = 0; attempt <= options_.max_conflict_retries; ++attempt) {
    std::optional<kube::Json> current;
    {
      std::lock_guard lock(mu_);
      if (auto it = existing_.find(name); it != existing_.end()) current = it->second;
    }
    if (current && Matches(desired, *current)) return Status::Ok();
    if (current) {
      kube::Json obj = desired;
      // Keep what others may have added to metadata (labels, annotations).
      kube::Json meta = (*current)["metadata"];
      for (auto it = desired["metadata"].begin(); it != desired["metadata"].end(); ++it)
        meta[it.key()] = it.value();
      meta["resourceVersion"] = RvOf(*current);
      for (const char* k : {"managedFields", "creationTimestamp", "generation", "uid"})
        meta.erase(k);
      obj["metadata"] = meta;
      auto r = client_.Update(path, obj);
      if (r.ok()) {
        std::lock_guard lock(mu_);
        StoreLocked(name, std::move(r).value());
        return Status::Ok();
      }
      const auto& e = r.error();
      if (e.IsNotFound()) {
        std::lock_guard lock(mu_);
        existing_.erase(name);
        continue;
      }
      if (!e.IsConflict()) return e.ToStatus();
    } else {
      auto r = client_.Create(SlicesPath(), desired);
      if (r.ok()) {
        std::lock_guard lock(mu_);
        StoreLocked(name, std::move(r).value());
        return Status::Ok();
      }
      if (!r.error().IsAlreadyExists()) return r.error().ToStatus();
    }
    // 409: read it again and retry.
    {
      std::lock_guard lock(mu_);
      ++stats_.conflicts;
    }
    Metrics().publish.WithLabels({"conflict"}).Inc();
    auto fresh = client_.Get(path);
    std::lock_guard lock(mu_);
    if (fresh.ok()) {
      const std::string rv = RvOf(*fresh);
      existing_[name] = std::move(fresh).value();
      seen_rv_[name] = rv;
    } else if (fresh.error().IsNotFound()) {
      existing_.erase(name);
    } else {
      return fresh.error().ToStatus();
    }
  }
  return Status(StatusCode::kFailedPrecondition,
                "ResourceSlice " + name + " still conflicting after " +
                    std::to_string(options_.max_conflict_retries + 1) + " writes");
}

Status Publisher::DeleteSlice(const std::string& name) {
  const std::string path = SlicesPath() + "/" + name;
  for (int attempt = 0; attempt <= options_.max_conflict_retries; ++attempt) {
    std::string rv;
    {
      std::lock_guard lock(mu_);
      auto it = existing_.find(name);
      if (it == existing_.end()) return Status::Ok();
      rv = RvOf(it->second);
    }
    auto r = client_.Delete(path, rv);
    if (r.ok() || r.error().IsNotFound()) {
      std::lock_guard lock(mu_);
      existing_.erase(name);
      return Status::Ok();
    }
    if (!r.error().IsConflict()) return r.error().ToStatus();
    auto fresh = client_.Get(path);
    std::lock_guard lock(mu_);
    ++stats_.conflicts;
    if (fresh.ok()) {
      const std::string fresh_rv = RvOf(*fresh);
      existing_[name] = std::move(fresh).value();
      seen_rv_[name] = fresh_rv;
    } else if (fresh.error().IsNotFound()) {
      existing_.erase(name);
    } else {
      return fresh.error().ToStatus();
    }
  }
  return Status(StatusCode::kFailedPrecondition, "ResourceSlice " + name + " could not be deleted");
}

Status Publisher::Reconcile() {
  bool need_list;
  {
    std::lock_guard lock(mu_);
    need_list = need_list_;
  }
  if (need_list) {
    if (Status st = List(); !st.ok()) return st;
  }
  std::vector<kube::Json> slices;
  std::map<std::string, kube::Json> existing;
  std::string key;
  uint64_t version;
  int64_t gen;
  bool content_changed;
  {
    std::lock_guard lock(mu_);
    if (desired_version_ == 0) return Status::Ok();  // nothing to publish yet
    existing = existing_;
    key = desired_key_;
    version = desired_version_;
    int64_t max_existing = 0;
    for (const auto& [n, o] : existing) max_existing = std::max(max_existing, GenerationOf(o));

    // Taint times: kept while the condition lasts; taken over from the
    // server's slices after a restart.
    std::vector<SliceDevice> devices = desired_;
    for (const auto& [n, o] : existing) {
      if (!o.contains("spec") || !o["spec"].contains("devices")) continue;
      for (const auto& d : o["spec"]["devices"]) {
        if (!d.contains("taints")) continue;
        for (const auto& t : d["taints"]) {
          Taint tt{t.value("key", ""), t.value("value", ""), t.value("effect", ""), ""};
          const std::string tk = TaintKey(d.value("name", ""), tt);
          if (!taint_times_.contains(tk) && t.contains("timeAdded") && t["timeAdded"].is_string()) {
            taint_times_[tk] = t["timeAdded"].get<std::string>();
          }
        }
      }
    }
    std::set<std::string> live;
    for (auto& d : devices) {
      for (auto& t : d.taints) {
        const std::string tk = TaintKey(d.name, t);
        auto [it, fresh] = taint_times_.emplace(tk, NowRfc3339());
        t.time_added = it->second;
        live.insert(tk);
      }
    }
    std::erase_if(taint_times_, [&](const auto& kv) { return !live.contains(kv.first); });

    // Adopt what the server holds when it already says this (a restart).
    if (published_key_.empty() && max_existing > 0) {
      auto candidate = AllSlices(devices, max_existing);
      bool same = candidate.size() == existing.size();
      for (const auto& s : candidate) {
        auto it = existing.find(NameOf(s));
        same = same && it != existing.end() && Matches(s, it->second);
      }
      if (same) {
        generation_ = max_existing;
        published_key_ = key;
      }
    }
    content_changed = key != published_key_;
    gen = content_changed ? std::max(generation_, max_existing) + 1 : generation_;
    slices = AllSlices(devices, gen);
  }

  std::set<std::string> wanted;
  int repaired = 0;
  for (const auto& s : slices) {
    const std::string name = NameOf(s);
    wanted.insert(name);
    auto it = existing.find(name);
    if (it != existing.end() && Matches(s, it->second)) continue;
    if (Status st = WriteSlice(s); !st.ok()) return st;
    if (!content_changed) ++repaired;
  }
  for (const auto& [name, obj] : existing) {
    if (wanted.contains(name)) continue;
    if (Status st = DeleteSlice(name); !st.ok()) return st;
    if (!content_changed) ++repaired;
  }

  std::lock_guard lock(mu_);
  if (content_changed) {
    spdlog::info("dra: published {} ResourceSlice(s) of pool {} generation {} ({} devices)",
                 slices.size(), options_.slices.node_name, gen, desired_.size());
  }
  if (repaired > 0) {
    spdlog::warn("dra: restored {} ResourceSlice(s) changed or deleted behind the agent's back",
                 repaired);
    stats_.repairs += static_cast<uint64_t>(repaired);
    Metrics().repairs.Get().Inc(repaired);
  }
  generation_ = gen;
  published_key_ = key;
  ++stats_.passes_ok;
  if (!stats_.last_error.empty())
    spdlog::info("dra: ResourceSlices published again after: {}", stats_.last_error);
  stats_.last_error.clear();
  Metrics().publish.WithLabels({"ok"}).Inc();
  Metrics().generation.Get().Set(static_cast<double>(gen));
  if (version == desired_version_ && published_version_ != version) {
    published_version_ = version;
    Metrics().seconds.Get().Observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - desired_since_).count());
  }
  cv_.notify_all();
  return Status::Ok();
}

void Publisher::ReconcileLoop() {
  auto backoff = options_.min_backoff;
  auto retry_at = std::chrono::steady_clock::time_point::min();
  std::string last_logged;
  while (true) {
    {
      std::unique_lock lock(mu_);
      while (!stop_) {
        if (dirty_ && std::chrono::steady_clock::now() >= retry_at) break;
        if (dirty_) {
          cv_.wait_until(lock, retry_at);
        } else {
          cv_.wait(lock);
        }
      }
      if (stop_) return;
      dirty_ = false;
      in_pass_ = true;
    }
    Status st = Reconcile();
    std::lock_guard lock(mu_);
    in_pass_ = false;
    cv_.notify_all();
    if (st.ok()) {
      backoff = options_.min_backoff;
      retry_at = std::chrono::steady_clock::time_point::min();
      last_logged.clear();
      continue;
    }
    ++stats_.passes_failed;
    stats_.last_error = st.ToString();
    Metrics().publish.WithLabels({"error"}).Inc();
    if (st.ToString() != last_logged) {
      spdlog::warn("dra: publishing ResourceSlices failed (retrying, backoff up to {} ms): {}",
                   options_.max_backoff.count(), st.ToString());
      last_logged = st.ToString();
    }
    // A failed pass may have left the cache stale: list again next time
    // unless the server was simply unreachable.
    if (st.code() != StatusCode::kUnavailable && st.code() != StatusCode::kDeadlineExceeded)
      need_list_ = true;
    dirty_ = true;
    retry_at = std::chrono::steady_clock::now() + backoff;
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

void Publisher::WatchLoop() {
  auto backoff = options_.min_backoff;
  while (true) {
    std::string rv;
    uint64_t epoch;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stop_ || (!need_list_ && list_epoch_ > 0); });
      if (stop_) return;
      rv = list_rv_;
      epoch = list_epoch_;
    }
    kube::Query q = Selector();
    q.push_back({"allowWatchBookmarks", "true"});
    if (!rv.empty()) q.push_back({"resourceVersion", rv});
    q.push_back({"timeoutSeconds", std::to_string(options_.watch_timeout.count())});
    bool gone = false;
    auto on_event = [&](const kube::WatchEvent& ev) {
      std::lock_guard lock(mu_);
      if (stop_ || list_epoch_ != epoch) return false;
      if (ev.type == "ERROR") {
        const int code = ev.object.is_object() ? ev.object.value("code", 0) : 0;
        if (code == 410) gone = true;
        return false;
      }
      const std::string obj_rv = RvOf(ev.object);
      if (!obj_rv.empty()) list_rv_ = obj_rv;
      if (ev.type == "BOOKMARK") return true;
      const std::string name = NameOf(ev.object);
      if (name.empty()) return true;
      auto it = existing_.find(name);
      std::string& seen = seen_rv_[name];
      if (!seen.empty() && !Newer(obj_rv, seen)) return true;  // our own write, already stored
      seen = obj_rv;
      if (ev.type == "DELETED") {
        if (it != existing_.end()) {
          existing_.erase(it);
          dirty_ = true;
          cv_.notify_all();
        }
      } else {
        existing_[name] = ev.object;
        dirty_ = true;  // the next pass compares it with what is desired
        cv_.notify_all();
      }
      return true;
    };
    kube::WatchOptions wo;
    wo.cancel = &cancel_watch_;
    wo.idle_timeout =
        std::chrono::duration_cast<std::chrono::milliseconds>(options_.watch_timeout) +
        std::chrono::seconds(30);
    auto r = client_.Watch(SlicesPath(), q, on_event, wo);
    std::unique_lock lock(mu_);
    if (stop_) return;
    if (!r.ok() && r.error().IsGone()) gone = true;
    if (gone) {
      need_list_ = true;
      dirty_ = true;
      cv_.notify_all();
      backoff = options_.min_backoff;
      continue;
    }
    if (r.ok()) {
      backoff = options_.min_backoff;
      continue;
    }
    spdlog::debug("dra: ResourceSlice watch ended: {}", r.error().ToString());
    cv_.wait_for(lock, backoff, [this] { return stop_; });
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

}  // namespace danqing::dra
