#include "dra/claim_preparer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "common/printable.h"
#include "dra/node_metrics.h"

namespace danqing::dra {

std::string ClaimLabel(const ClaimRef& c) {
  return Printable(c.ns) + "/" + Printable(c.name) + " (" + Printable(c.uid) + ")";
}

namespace {

ClaimRef RefOf(const PreparedClaim& c) {
  return {c.ns, c.name, c.uid};
}

PreparerOptions Defaulted(PreparerOptions o) {
  if (o.cdi.kind.empty()) o.cdi.kind = o.driver_name + "/claim";
  return o;
}

}  // namespace

ClaimPreparer::ClaimPreparer(PreparerOptions options, ClaimSource* source, TimeSlicer* slicer)
    : options_(Defaulted(std::move(options))),
      source_(source),
      slicer_(slicer),
      checkpoint_(options_.checkpoint_dir, options_.writer),
      devices_(std::make_shared<DeviceTable>()) {}

void ClaimPreparer::Changed() {
  size_t n = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    n = prepared_.size();
  }
  NodeMetrics().prepared_claims.WithLabels({}).Set(static_cast<double>(n));
  if (on_change_) on_change_();
}

Status ClaimPreparer::Restore() {
  Status result;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto loaded = checkpoint_.Load();
    std::vector<std::string> skipped;
    std::map<std::string, PreparedClaim> on_disk = ReadClaimSpecs(options_.cdi, &skipped);
    for (const auto& s : skipped) spdlog::warn("dra: ignoring CDI spec {}", s);
    bool rebuilt = false;
    if (loaded.ok()) {
      prepared_ = std::move(*loaded);
      // A spec without its checkpoint entry: a prepare interrupted between
      // its two writes, never answered. The kubelet prepares it again.
      for (const auto& [uid, c] : on_disk) {
        if (prepared_.count(uid)) continue;
        if (RemoveClaimSpec(options_.cdi, uid).ok()) {
          ++stats_.orphan_specs_removed;
          spdlog::info("dra: removed the CDI spec of claim {}, whose prepare never completed",
                       ClaimLabel(RefOf(c)));
        }
      }
    } else {
      if (loaded.status().code() != StatusCode::kNotFound) {
        ++stats_.corrupt_checkpoints;
        NodeMetrics().checkpoint_corrupt.WithLabels({}).Inc();
        spdlog::error("dra: {}; rebuilding it from the {} claim CDI spec(s) under {}",
                      loaded.status().message(), on_disk.size(), options_.cdi.cdi_root);
      } else if (!on_disk.empty()) {
        spdlog::warn("dra: {}; rebuilding it from the {} claim CDI spec(s) under {}",
                     loaded.status().message(), on_disk.size(), options_.cdi.cdi_root);
      }
      prepared_ = std::move(on_disk);
      rebuilt = true;
    }
    slices_.clear();
    for (const auto& [uid, c] : prepared_) {
      if (Status s = ApplySliceLocked(c, /*restoring=*/true); !s.ok()) {
        spdlog::warn("dra: claim {}: {}", ClaimLabel(RefOf(c)), s.message());
      }
    }
    stats_.restored_claims = prepared_.size();
    if (rebuilt) {
      result = checkpoint_.Save(prepared_);
      if (!result.ok())
        spdlog::error("dra: cannot write the rebuilt checkpoint: {}", result.message());
    }
    spdlog::info("dra: {} prepared claim(s) restored", prepared_.size());
  }
  Changed();
  return result;
}

void ClaimPreparer::SetDevices(std::shared_ptr<const DeviceTable> devices) {
  {
    std::lock_guard<std::mutex> l(mu_);
    devices_ = devices ? std::move(devices) : std::make_shared<DeviceTable>();
  }
  Changed();
}

std::shared_ptr<const DeviceTable> ClaimPreparer::devices() const {
  std::lock_guard<std::mutex> l(mu_);
  return devices_;
}

std::map<std::string, PreparedClaim> ClaimPreparer::Prepared() const {
  std::lock_guard<std::mutex> l(mu_);
  return prepared_;
}

PreparerStats ClaimPreparer::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

Status ClaimPreparer::ApplySliceLocked(const PreparedClaim& c, bool restoring) {
  if (!c.time_slice) return Status::Ok();
  std::set<std::string> gpus;
  for (const auto& d : c.devices) gpus.insert(d.gpu_uuid);
  // All or nothing: check every GPU before touching one.
  for (const auto& g : gpus) {
    auto it = slices_.find(g);
    if (it != slices_.end() && !it->second.claims.empty() && it->second.slice != *c.time_slice &&
        !restoring) {
      const auto& d = *std::find_if(c.devices.begin(), c.devices.end(),
                                    [&g](const PreparedDevice& pd) { return pd.gpu_uuid == g; });
      return FailedPrecondition(
          "device " + d.device + " (GPU " + g + "): claim asks for time-slice " +
          std::string(TimeSliceName(*c.time_slice)) + " but claim " + *it->second.claims.begin() +
          " holds the GPU at " + std::string(TimeSliceName(it->second.slice)));
    }
  }
  std::vector<std::string> set_now;
  for (const auto& g : gpus) {
    GpuSlice& gs = slices_[g];
    if (gs.claims.empty() || gs.slice != *c.time_slice) {
      Status s = slicer_ ? slicer_->Set(g, *c.time_slice)
                         : Status(StatusCode::kNotSupported, "no time-slicer");
      if (s.code() == StatusCode::kNotSupported) {
        spdlog::warn(
            "dra: GPU {}: time-slice {} not applied ({}); the GPU keeps the driver's default", g,
            TimeSliceName(*c.time_slice), s.message());
      } else if (!s.ok()) {
        for (const auto& done : set_now) {
          PreparedClaim partial;
          partial.uid = c.uid;
          partial.time_slice = c.time_slice;
          partial.devices.push_back(PreparedDevice{.requests = {},
                                                   .pool = {},
                                                   .device = {},
                                                   .cdi_ids = {},
                                                   .share_id = std::nullopt,
                                                   .gpu_uuid = done});
          ReleaseSliceLocked(partial);
        }
        if (gs.claims.empty()) slices_.erase(g);
        return s.WithContext("GPU " + g + ": setting time-slice " +
                             std::string(TimeSliceName(*c.time_slice)));
      }
      gs.slice = *c.time_slice;
    }
    gs.claims.insert(c.uid);
    set_now.push_back(g);
  }
  return Status::Ok();
}

void ClaimPreparer::ReleaseSliceLocked(const PreparedClaim& c) {
  if (!c.time_slice) return;
  for (const auto& d : c.devices) {
    auto it = slices_.find(d.gpu_uuid);
    if (it == slices_.end()) continue;
    it->second.claims.erase(c.uid);
    if (!it->second.claims.empty()) continue;
    if (it->second.slice != TimeSlice::kDefault && slicer_) {
      Status s = slicer_->Set(d.gpu_uuid, TimeSlice::kDefault);
      if (!s.ok() && s.code() != StatusCode::kNotSupported) {
        spdlog::warn("dra: GPU {}: cannot set the time-slice back to Default: {}", d.gpu_uuid,
                     s.message());
      }
    }
    slices_.erase(it);
  }
}

void ClaimPreparer::UnmakeLocked(const std::string& uid, const std::vector<std::string>& names) {
  if (maker_ == nullptr) return;
  for (auto it = names.rbegin(); it != names.rend(); ++it) {
    if (Status s = maker_->Unmake(uid, *it); !s.ok())
      spdlog::error("dra: claim {}: undoing device {}: {}", uid, *it, s.message());
  }
}

const NodeDevice* ClaimPreparer::NodeOfPrepared(const std::string& uid, const PreparedDevice& d,
                                                std::deque<NodeDevice>* made) {
  if (maker_ != nullptr && d.pool == maker_->pool() && maker_->Makes(d.device)) {
    auto nd = maker_->Make(uid, d.device);
    if (!nd.ok()) return nullptr;
    made->push_back(std::move(*nd));
    return &made->back();
  }
  return devices_->Find(d.device);
}

Result<PreparedClaim> ClaimPreparer::PrepareLocked(const ClaimRef& ref,
                                                   const ClaimAllocation& alloc,
                                                   std::vector<const NodeDevice*>* nodes,
                                                   std::deque<NodeDevice>* made,
                                                   std::vector<std::string>* made_names) {
  if (alloc.uid != ref.uid) {
    return NotFound("the claim read has UID " + Printable(alloc.uid) + ", not " +
                    Printable(ref.uid));
  }
  PreparedClaim c{
      .uid = ref.uid, .ns = ref.ns, .name = ref.name, .devices = {}, .time_slice = std::nullopt};
  // Our opaque configs, each parsed once; a later one overrides an earlier
  // one for the requests they share (class configs come first).
  std::vector<std::pair<std::vector<std::string>, GpuConfig>> configs;
  for (size_t i = 0; i < alloc.config.size(); ++i) {
    const auto& oc = alloc.config[i];
    if (oc.driver != options_.driver_name) continue;
    auto parsed = ParseGpuConfig(oc.parameters);
    if (!parsed.ok()) {
      return InvalidArgument("config[" + std::to_string(i) + "].opaque." +
                             parsed.status().message());
    }
    configs.emplace_back(oc.requests, *parsed);
  }
  auto config_for = [&configs](const std::string& request) {
    GpuConfig out;
    // "req/sub" is matched by a config for "req" too.
    const std::string parent = request.substr(0, request.find('/'));
    for (const auto& [requests, cfg] : configs) {
      if (requests.empty() ||
          std::find(requests.begin(), requests.end(), request) != requests.end() ||
          std::find(requests.begin(), requests.end(), parent) != requests.end()) {
        out = cfg;
      }
    }
    return out;
  };
  std::optional<TimeSlice> slice;
  bool slice_set = false;
  for (const auto& ad : alloc.devices) {
    if (ad.driver != options_.driver_name) continue;
    const std::string what = "device " + Printable(ad.pool) + "/" + Printable(ad.device);
    const bool maker_pool = maker_ != nullptr && ad.pool == maker_->pool();
    if (ad.pool != devices_->pool && !maker_pool) {
      return FailedPrecondition(what + " is not this node's (this node's pool is " +
                                Printable(devices_->pool) + ")");
    }
    const NodeDevice* nd = nullptr;
    const bool make = maker_pool && maker_->Makes(ad.device);
    const bool again =
        make && std::find(made_names->begin(), made_names->end(), ad.device) != made_names->end();
    if (make && !again) {
      auto m = maker_->Make(ref.uid, ad.device);
      if (!m.ok()) return m.status();
      made->push_back(std::move(*m));
      made_names->push_back(ad.device);
      nd = &made->back();
      // The parent GPU's health, as the DeviceTable knows it.
      for (const auto& [name, other] : devices_->devices) {
        if (other.device.gpu_uuid == nd->device.gpu_uuid && !other.device.healthy) {
          return FailedPrecondition(what + " (GPU " + nd->device.gpu_uuid +
                                    ") is unhealthy: " + other.device.unhealthy_reason);
        }
      }
    } else if (again) {
      for (const auto& m : *made) {
        if (m.name == ad.device) nd = &m;
      }
    } else {
      nd = devices_->Find(ad.device);
    }
    if (nd == nullptr) return NotFound(what + " is unknown on this node");
    if (!nd->device.healthy) {
      return FailedPrecondition(what + " (" + nd->device.device_uuid +
                                ") is unhealthy: " + nd->device.unhealthy_reason);
    }
    const GpuConfig cfg = config_for(ad.request);
    if (slice_set && cfg.time_slice != slice) {
      return InvalidArgument(
          what + ": its config asks for another time-slice than the claim's other devices");
    }
    slice = cfg.time_slice;
    slice_set = true;
    // One request may be satisfied by the same device for several
    // subrequests: merge them.
    auto same = std::find_if(c.devices.begin(), c.devices.end(), [&](const PreparedDevice& d) {
      return d.device == ad.device && d.share_id == ad.share_id;
    });
    if (same != c.devices.end()) {
      same->requests.push_back(ad.request);
      continue;
    }
    PreparedDevice d;
    d.requests = {ad.request};
    d.pool = ad.pool;
    d.device = ad.device;
    d.share_id = ad.share_id;
    d.gpu_uuid = nd->device.gpu_uuid;
    const std::string dev_key = ad.share_id ? ad.device + "-" + *ad.share_id : ad.device;
    d.cdi_ids = {CdiId(options_.cdi.kind, ref.uid, dev_key)};
    c.devices.push_back(std::move(d));
    nodes->push_back(nd);
  }
  c.time_slice = slice;
  return c;
}

Result<PreparedClaim> ClaimPreparer::Prepare(const ClaimRef& ref) {
  const auto start = std::chrono::steady_clock::now();
  auto r = PrepareOne(ref);
  NodeMetrics().prepare_seconds.WithLabels({}).Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (!r.ok()) NodeMetrics().prepare_errors.WithLabels({}).Inc();
  return r;
}

Result<PreparedClaim> ClaimPreparer::PrepareOne(const ClaimRef& ref) {
  auto fail = [this, &ref](const Status& s) -> Result<PreparedClaim> {
    {
      std::lock_guard<std::mutex> l(mu_);
      ++stats_.prepare_errors;
    }
    Status named = s.WithContext("claim " + ClaimLabel(ref));
    spdlog::warn("dra: prepare: {}", named.message());
    return named;
  };
  if (ref.uid.empty()) return fail(InvalidArgument("empty UID"));
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = prepared_.find(ref.uid);
    if (it != prepared_.end()) {
      // A repeat. The spec is checked for, and rewritten when it is gone
      // (the CDI directory on tmpfs after a reboot).
      std::error_code ec;
      if (!std::filesystem::exists(ClaimSpecPath(options_.cdi, ref.uid), ec)) {
        std::vector<const NodeDevice*> nodes;
        std::deque<NodeDevice> made;
        for (const auto& d : it->second.devices) {
          if (const NodeDevice* nd = NodeOfPrepared(ref.uid, d, &made)) nodes.push_back(nd);
        }
        Status s = nodes.size() == it->second.devices.size()
                       ? WriteClaimSpec(options_.cdi, it->second, nodes, options_.writer)
                       : NotFound("a device of it is no longer on this node");
        if (!s.ok()) {
          ++stats_.prepare_errors;
          Status named =
              s.WithContext("claim " + ClaimLabel(ref) + ": rewriting its missing CDI spec");
          spdlog::error("dra: prepare: {}", named.message());
          return named;
        }
        spdlog::warn("dra: claim {}: its CDI spec was missing; written again", ClaimLabel(ref));
      }
      return it->second;
    }
  }
  auto alloc = source_->Get(ref.ns, ref.name, ref.uid);
  if (!alloc.ok()) return fail(alloc.status().WithContext("reading its allocation"));
  PreparedClaim c;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (auto it = prepared_.find(ref.uid); it != prepared_.end())
      return it->second;  // prepared meanwhile
    std::vector<const NodeDevice*> nodes;
    std::deque<NodeDevice> made;
    std::vector<std::string> made_names;
    auto built = PrepareLocked(ref, *alloc, &nodes, &made, &made_names);
    if (!built.ok()) {
      UnmakeLocked(ref.uid, made_names);
      ++stats_.prepare_errors;
      Status named = built.status().WithContext("claim " + ClaimLabel(ref));
      spdlog::warn("dra: prepare: {}", named.message());
      return named;
    }
    c = std::move(*built);
    Status s = ApplySliceLocked(c, false);
    if (s.ok()) {
      s = WriteClaimSpec(options_.cdi, c, nodes, options_.writer);
      if (s.ok()) {
        prepared_[c.uid] = c;
        s = checkpoint_.Save(prepared_);
        if (!s.ok()) {
          prepared_.erase(c.uid);
          (void)RemoveClaimSpec(options_.cdi, c.uid);
        }
      }
      if (!s.ok()) ReleaseSliceLocked(c);
    }
    if (!s.ok()) {
      UnmakeLocked(ref.uid, made_names);
      ++stats_.prepare_errors;
      Status named = s.WithContext("claim " + ClaimLabel(ref));
      spdlog::error("dra: prepare: {}", named.message());
      return named;
    }
    ++stats_.prepares;
  }
  spdlog::info("dra: prepared claim {}: {} device(s)", ClaimLabel(ref), c.devices.size());
  Changed();
  return c;
}

Status ClaimPreparer::Unprepare(const ClaimRef& ref) {
  const auto start = std::chrono::steady_clock::now();
  Status s = UnprepareOne(ref);
  NodeMetrics().unprepare_seconds.WithLabels({}).Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (!s.ok()) NodeMetrics().unprepare_errors.WithLabels({}).Inc();
  return s;
}

Status ClaimPreparer::UnprepareOne(const ClaimRef& ref) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = prepared_.find(ref.uid);
    if (it == prepared_.end()) {
      // Idempotent; a spec left by an interrupted prepare goes too.
      (void)RemoveClaimSpec(options_.cdi, ref.uid);
      return Status::Ok();
    }
    PreparedClaim c = it->second;
    // Made devices go first: one that cannot be unmade keeps the claim
    // prepared (the kubelet calls again).
    if (maker_ != nullptr) {
      for (const auto& d : c.devices) {
        if (d.pool != maker_->pool() || !maker_->Makes(d.device)) continue;
        if (Status s = maker_->Unmake(ref.uid, d.device); !s.ok()) {
          ++stats_.unprepare_errors;
          Status named = s.WithContext("claim " + ClaimLabel(ref) + ": device " + d.device);
          spdlog::error("dra: unprepare: {}", named.message());
          return named;
        }
      }
    }
    prepared_.erase(it);
    if (Status s = checkpoint_.Save(prepared_); !s.ok()) {
      prepared_[c.uid] = std::move(c);
      ++stats_.unprepare_errors;
      Status named = s.WithContext("claim " + ClaimLabel(ref));
      spdlog::error("dra: unprepare: {}", named.message());
      return named;
    }
    if (Status s = RemoveClaimSpec(options_.cdi, ref.uid); !s.ok()) {
      // The checkpoint no longer holds it: the next Restore removes the
      // spec as an orphan.
      spdlog::warn("dra: unprepare: claim {}: {}", ClaimLabel(ref), s.message());
    }
    ReleaseSliceLocked(c);
    ++stats_.unprepares;
  }
  spdlog::info("dra: unprepared claim {}", ClaimLabel(ref));
  Changed();
  return Status::Ok();
}

}  // namespace danqing::dra
