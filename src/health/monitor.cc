#include "health/monitor.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <set>

namespace danqing::health {
namespace {

constexpr uint64_t kThermalReasons =
    gpu::throttle::kSwThermalSlowdown | gpu::throttle::kHwThermalSlowdown;
// Slowdowns NVML reports for more than heat (a power brake, power supply
// protection; also for a moment during a clock or P-state change).
constexpr uint64_t kHwSlowdownReasons =
    gpu::throttle::kHwSlowdown | gpu::throttle::kHwPowerBrakeSlowdown;

std::string XidDetail(uint64_t xid) {
  std::string d = "XID " + std::to_string(xid);
  if (auto text = XidDescription(xid); !text.empty()) d += " (" + std::string(text) + ")";
  return d;
}

// "xid-79" counts as "xid" in the transition counters (bounded label values).
std::string CounterName(const std::string& condition) {
  return condition.starts_with("xid-") ? std::string("xid") : condition;
}

template <typename T>
std::string JoinConditions(const std::map<std::string, T>& conditions) {
  std::string out;
  for (const auto& [name, c] : conditions) {
    if (!out.empty()) out += ',';
    out += name;
  }
  return out;
}

}  // namespace

Monitor::Monitor(MonitorOptions options) : options_(std::move(options)) {}

void Monitor::SetInventory(const gpu::NodeInventory& inventory) {
  std::map<std::string, DeviceState> next;
  gpus_.clear();
  auto carry = [&](const std::string& uuid, DeviceState fresh) {
    if (auto it = devices_.find(uuid); it != devices_.end()) {
      fresh.conditions = std::move(it->second.conditions);
      fresh.xid_counts = std::move(it->second.xid_counts);
      fresh.last_xid = it->second.last_xid;
      fresh.last_ecc_uncorrected = it->second.last_ecc_uncorrected;
      fresh.thermal_start_c = it->second.thermal_start_c;
      fresh.events_watched = it->second.events_watched;
    }
    next.emplace(uuid, std::move(fresh));
  };
  for (const auto& g : inventory.gpus) {
    gpus_.push_back(g.uuid);
    DeviceState d;
    d.gpu_uuid = g.uuid;
    carry(g.uuid, std::move(d));
    for (const auto& m : g.mig_devices) {
      DeviceState md;
      md.gpu_uuid = g.uuid;
      md.is_gpu = false;
      md.gpu_instance_id = m.gpu_instance_id;
      md.compute_instance_id = m.compute_instance_id;
      carry(m.uuid, std::move(md));
    }
  }
  devices_ = std::move(next);
}

void Monitor::CarryFrom(const Monitor& previous) {
  // A condition this monitor's policy would not raise is left behind: with
  // the checks switched off ("all"), or an XID now ignored, the operator
  // asked for those GPUs back.
  const auto still_raised = [this](const std::string& name) {
    if (name.rfind("xid-", 0) == 0) {
      const uint64_t xid = std::strtoull(name.c_str() + 4, nullptr, 10);
      return options_.policy.Classify(xid) != XidAction::kIgnore;
    }
    return options_.policy.polled_checks();  // polled conditions, and the ECC events gated with them
  };
  for (auto& [uuid, d] : devices_) {
    const auto it = previous.devices_.find(uuid);
    if (it == previous.devices_.end()) continue;
    d.conditions.clear();
    for (const auto& [name, c] : it->second.conditions) {
      if (still_raised(name)) d.conditions.emplace(name, c);
    }
    d.xid_counts = it->second.xid_counts;
    d.last_xid = it->second.last_xid;
    d.last_ecc_uncorrected = it->second.last_ecc_uncorrected;
    d.thermal_start_c = it->second.thermal_start_c;
  }
  for (const auto& [name, n] : previous.transitions_) transitions_[name] += n;
}

std::vector<std::string> Monitor::GpuUuids() const { return gpus_; }

void Monitor::SetEventsWatched(const std::string& gpu_uuid, bool watched) {
  if (auto it = devices_.find(gpu_uuid); it != devices_.end()) it->second.events_watched = watched;
}

bool Monitor::events_watched(const std::string& gpu_uuid) const {
  const auto it = devices_.find(gpu_uuid);
  return it == devices_.end() || it->second.events_watched;
}

void Monitor::Log(bool warning, std::string text) {
  if (defer_log_) {
    pending_log_.push_back({warning, std::move(text)});
  } else {
    WriteLog({{warning, std::move(text)}});
  }
}

void Monitor::WriteLog(const std::vector<LogLine>& lines) {
  for (const auto& line : lines) {
    if (line.warning) {
      spdlog::warn("{}", line.text);
    } else {
      spdlog::info("{}", line.text);
    }
  }
}

void Monitor::LogTransition(const std::string& uuid, const DeviceState& d, bool now_healthy,
                            const std::string& condition, std::string_view detail) {
  transitions_[(now_healthy ? "healthy:" : "unhealthy:") + CounterName(condition)]++;
  if (now_healthy) {
    Log(false, fmt::format("health: {} is healthy again ({} cleared: {})", uuid, condition, detail));
  } else {
    Log(true, fmt::format("health: {} marked unhealthy: {} ({}){}", uuid, condition, detail,
                          d.conditions.size() > 1 ? "; conditions " + JoinConditions(d.conditions) : ""));
  }
}

bool Monitor::Raise(const std::string& uuid, DeviceState& d, const std::string& name, Condition c) {
  const bool was_healthy = d.conditions.empty();
  auto [it, inserted] = d.conditions.try_emplace(name, c);
  if (!inserted) {
    it->second.last_seen = c.last_seen;
    it->second.needs_reset = it->second.needs_reset || c.needs_reset;
    return false;
  }
  if (was_healthy) {
    LogTransition(uuid, d, false, name, c.detail);
  } else {
    transitions_["unhealthy:" + CounterName(name)]++;
    Log(true, fmt::format("health: {} still unhealthy; new condition {} ({})", uuid, name, c.detail));
  }
  return true;
}

bool Monitor::Clear(const std::string& uuid, DeviceState& d, const std::string& name, std::string_view why) {
  if (d.conditions.erase(name) == 0) return false;
  if (d.conditions.empty()) {
    LogTransition(uuid, d, true, name, why);
    return true;
  }
  transitions_["healthy:" + CounterName(name)]++;
  Log(false, fmt::format("health: {} condition {} cleared ({}); still unhealthy: {}", uuid, name, why,
                         JoinConditions(d.conditions)));
  return true;
}

std::vector<std::string> Monitor::Targets(const gpu::GpuEvent& event) const {
  std::vector<std::string> out;
  if (event.uuid.empty()) {
    return gpus_;  // the device could not be told: every GPU, like NVIDIA's plugin
  }
  if (!devices_.contains(event.uuid)) return out;
  if (event.gpu_instance_id) {
    for (const auto& [uuid, d] : devices_) {
      if (d.is_gpu || d.gpu_uuid != event.uuid || d.gpu_instance_id != *event.gpu_instance_id) continue;
      if (event.compute_instance_id && d.compute_instance_id != *event.compute_instance_id) continue;
      out.push_back(uuid);
    }
    if (!out.empty()) return out;
    // A MIG instance we do not advertise: the GPU it lives on.
  }
  out.push_back(event.uuid);
  return out;
}

bool Monitor::OnXid(const gpu::GpuEvent& event, Clock::time_point now) {
  const XidAction action = options_.policy.Classify(event.xid);
  bool changed = false;
  const auto targets = Targets(event);
  if (targets.empty()) {
    Log(false, fmt::format("health: XID {} for unknown device {} ignored", event.xid, event.uuid));
  }
  // NVML reports an XID on the GPU's handle, whichever MIG instance it hit:
  // the GPU counts every XID it had, an instance its own as well.
  std::set<std::string> counted;
  const auto count = [&](const std::string& uuid) {
    if (!counted.insert(uuid).second) return;
    DeviceState& d = devices_.at(uuid);
    d.xid_counts[event.xid]++;
    d.last_xid = event.xid;
  };
  for (const auto& uuid : targets) {
    DeviceState& d = devices_.at(uuid);
    count(uuid);
    if (!d.is_gpu && devices_.contains(d.gpu_uuid)) count(d.gpu_uuid);
    if (action == XidAction::kIgnore) {
      Log(false, fmt::format("health: {} reported {}; ignored (application error or disabled by "
                             "DP_DISABLE_HEALTHCHECKS)",
                             uuid, XidDetail(event.xid)));
      continue;
    }
    Condition c;
    c.latched = true;
    c.needs_reset = action == XidAction::kReset;
    c.last_seen = now;
    c.detail = XidDetail(event.xid) + (c.needs_reset ? ", needs a GPU reset" : "");
    changed |= Raise(uuid, d, "xid-" + std::to_string(event.xid), c);
  }
  return changed;
}

bool Monitor::OnEvent(const gpu::GpuEvent& event, Clock::time_point now) {
  switch (event.kind) {
    case gpu::EventKind::kXid:
      return OnXid(event, now);
    case gpu::EventKind::kDoubleBitEcc: {
      if (!options_.policy.polled_checks()) return false;
      bool changed = false;
      for (const auto& uuid : Targets(event)) {
        Condition c;
        c.latched = true;
        c.needs_reset = true;
        c.last_seen = now;
        c.detail = "double-bit ECC error event, needs a GPU reset";
        changed |= Raise(uuid, devices_.at(uuid), "double-bit-ecc", c);
      }
      return changed;
    }
    default:
      return false;
  }
}

bool Monitor::OnPoll(const std::string& gpu_uuid, const Result<gpu::Sensors>& reading,
                     Clock::time_point now) {
  auto it = devices_.find(gpu_uuid);
  if (it == devices_.end() || !options_.policy.polled_checks()) return false;
  DeviceState& d = it->second;
  bool changed = false;
  // New conditions are raised before cleared ones are removed, so a GPU whose
  // one problem turns into another does not flap through Healthy.
  std::vector<std::pair<std::string, Condition>> raise;
  std::vector<std::pair<std::string, std::string>> clear;
  auto set = [&](const std::string& name, bool present, std::string detail, bool needs_reset = false) {
    if (present) {
      Condition c;
      c.needs_reset = needs_reset;
      c.last_seen = now;
      c.detail = std::move(detail);
      raise.emplace_back(name, std::move(c));
    } else {
      clear.emplace_back(name, std::move(detail));
    }
  };
  auto apply = [&] {
    for (auto& [name, c] : raise) changed |= Raise(gpu_uuid, d, name, c);
    for (auto& [name, why] : clear) changed |= Clear(gpu_uuid, d, name, why);
    return changed;
  };

  if (!reading.ok()) {
    const bool lost = reading.status().code() == StatusCode::kDeviceLost;
    set("gpu-lost", lost, lost ? reading.status().message() : "NVML answers again");
    set("nvml-error", !lost, lost ? "NVML answers again" : reading.status().ToString());
    return apply();
  }
  set("gpu-lost", false, "NVML answers again");
  const gpu::Sensors& s = *reading;
  // Calls that every working GPU answers failing (not "not supported"):
  // the device is in trouble. Other failed calls are only reported.
  std::string failed;
  for (const Status& f : s.failures) {
    for (std::string_view essential : {"nvmlDeviceGetMemoryInfo", "nvmlDeviceGetTemperature",
                                       "nvmlDeviceGetUtilizationRates"}) {
      if (f.message().find(essential) != std::string::npos) {
        if (!failed.empty()) failed += "; ";
        failed += f.ToString();
        break;
      }
    }
  }
  set("nvml-error", !failed.empty(), failed.empty() ? "NVML answers again" : failed);

  // Thermal slowdown, with hysteresis on the way out.
  const uint64_t thermal = s.throttle_reasons.value_or(0) & kThermalReasons;
  if (thermal != 0) {
    if (!d.conditions.contains("thermal-slowdown")) d.thermal_start_c = s.temperature_c.value_or(0);
    set("thermal-slowdown", true,
        "clock slowdown " + gpu::throttle::Describe(thermal) +
            (s.temperature_c ? " at " + std::to_string(*s.temperature_c) + " C" : ""));
  } else if (d.conditions.contains("thermal-slowdown")) {
    const uint32_t limit =
        d.thermal_start_c > options_.thermal_hysteresis_c ? d.thermal_start_c - options_.thermal_hysteresis_c : 0;
    if (!s.temperature_c || *s.temperature_c <= limit) {
      set("thermal-slowdown", false,
          "no slowdown" + (s.temperature_c ? ", " + std::to_string(*s.temperature_c) + " C" : std::string()));
    }
  }

  // HW slowdown without a temperature to wait for: present while polls show
  // it, once two in a row have.
  const uint64_t hw = s.throttle_reasons.value_or(0) & kHwSlowdownReasons;
  d.hw_slowdown_polls = hw != 0 ? d.hw_slowdown_polls + 1 : 0;
  if (hw == 0 || d.hw_slowdown_polls >= 2) {
    set("hw-slowdown", hw != 0,
        hw != 0 ? "clock slowdown " + gpu::throttle::Describe(hw) : "no HW slowdown");
  }

  // An absent reading says nothing, so a condition stays as it was: NVML
  // does not report remapped rows while MIG instances exist, and a GPU with
  // failed row remapping must not come back when it is partitioned.
  if (s.retired_pages_pending) {
    set("retired-pages-pending", *s.retired_pages_pending,
        *s.retired_pages_pending ? "retired pages pending, needs a GPU reset" : "no retired pages pending", true);
  }
  if (s.remapped_rows_pending) {
    set("row-remap-pending", *s.remapped_rows_pending,
        *s.remapped_rows_pending ? "row remapping pending, needs a GPU reset" : "no row remapping pending", true);
  }
  if (s.remapped_rows_failure) {
    set("row-remap-failure", *s.remapped_rows_failure,
        *s.remapped_rows_failure ? "row remapping failed, needs a GPU reset" : "row remapping ok", true);
  }

  // Uncorrectable ECC errors growing (volatile counter; it restarts at zero
  // when the driver reloads, which only moves the baseline).
  if (s.ecc_volatile_uncorrected) {
    const uint64_t now_count = *s.ecc_volatile_uncorrected;
    if (d.last_ecc_uncorrected && now_count > *d.last_ecc_uncorrected) {
      Condition c;
      c.latched = true;
      c.last_seen = now;
      c.detail = "uncorrectable ECC errors grew from " + std::to_string(*d.last_ecc_uncorrected) + " to " +
                 std::to_string(now_count);
      raise.emplace_back("ecc-uncorrectable", c);
      if (!d.events_watched) {
        c.needs_reset = true;
        c.detail +=
            " while device events were not watched (the double-bit ECC event went unseen), "
            "needs a GPU reset";
        raise.emplace_back("double-bit-ecc", std::move(c));
      }
    }
    d.last_ecc_uncorrected = now_count;
  }
  return apply();
}

bool Monitor::Tick(Clock::time_point now) {
  bool changed = false;
  for (auto& [uuid, d] : devices_) {
    std::vector<std::string> expired;
    for (const auto& [name, c] : d.conditions) {
      if (c.latched && !c.needs_reset && now - c.last_seen >= options_.quiet_period) expired.push_back(name);
    }
    for (const auto& name : expired) {
      changed |= Clear(uuid, d, name, "quiet period over with no new error");
    }
  }
  return changed;
}

std::map<std::string, std::string> Monitor::Unhealthy() const {
  std::map<std::string, std::string> out;
  for (const auto& [uuid, d] : devices_) {
    if (!d.conditions.empty()) out.emplace(uuid, JoinConditions(d.conditions));
  }
  return out;
}

std::vector<DeviceHealth> Monitor::Snapshot() const {
  std::vector<DeviceHealth> out;
  out.reserve(devices_.size());
  for (const auto& [uuid, d] : devices_) {
    DeviceHealth h;
    h.uuid = uuid;
    h.gpu_uuid = d.gpu_uuid;
    h.healthy = d.conditions.empty();
    h.reason = JoinConditions(d.conditions);
    for (const auto& [name, c] : d.conditions) h.needs_reset = h.needs_reset || c.needs_reset;
    h.xid_counts = d.xid_counts;
    h.last_xid = d.last_xid;
    out.push_back(std::move(h));
  }
  return out;
}

}  // namespace danqing::health
