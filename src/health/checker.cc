#include "health/checker.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>
#include <string>

namespace danqing::health {
namespace {

// GPU UUID → its MIG mode and MIG devices (UUID and profile), in one string.
std::map<std::string, std::string> MigLayout(const gpu::NodeInventory& inventory) {
  std::map<std::string, std::string> out;
  for (const auto& g : inventory.gpus) {
    std::vector<std::string> devices;
    for (const auto& d : g.mig_devices) devices.push_back(d.uuid + "=" + d.profile);
    std::sort(devices.begin(), devices.end());
    std::string layout(gpu::MigModeName(g.mig_mode));
    for (const auto& d : devices) layout += " " + d;
    out.emplace(g.uuid, std::move(layout));
  }
  return out;
}

}  // namespace

Checker::Checker(gpu::GpuBackend& backend, CheckerOptions options, Publish publish,
                 std::function<void()> on_mig_change)
    : backend_(backend),
      options_(std::move(options)),
      publish_(std::move(publish)),
      on_mig_change_(std::move(on_mig_change)),
      monitor_(options_.monitor) {
  monitor_.DeferLog(true);  // published first, logged after (see Monitor::DeferLog)
}

Checker::~Checker() { Stop(); }

void Checker::Start(const gpu::NodeInventory& inventory, const Checker* previous) {
  {
    std::lock_guard lock(mu_);
    monitor_.SetInventory(inventory);
    mig_layout_ = MigLayout(inventory);
    if (previous != nullptr) {
      std::lock_guard old(previous->mu_);
      monitor_.CarryFrom(previous->monitor_);
      PublishLocked();
    }
  }
  spdlog::info("health: {}; polling every {} ms; XID quiet period {} s",
               options_.monitor.policy.Describe(),
               std::chrono::duration_cast<std::chrono::milliseconds>(options_.poll_interval).count(),
               std::chrono::duration_cast<std::chrono::seconds>(options_.monitor.quiet_period).count());
  stop_ = false;
  // Subscribed before Start returns: an event from here on is not lost.
  events_ = std::thread([this, first = Subscribe()]() mutable { EventsLoop(std::move(first)); });
  poll_ = std::thread([this] { PollLoop(); });
}

void Checker::SetInventory(const gpu::NodeInventory& inventory) {
  {
    std::lock_guard lock(mu_);
    monitor_.SetInventory(inventory);
    mig_layout_ = MigLayout(inventory);
    PublishLocked();
  }
  FlushLog();
}

void Checker::FlushLog() {
  std::vector<Monitor::LogLine> lines;
  {
    std::lock_guard lock(mu_);
    lines = monitor_.TakeLog();
  }
  Monitor::WriteLog(lines);
}

void Checker::Stop() {
  {
    std::lock_guard lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (events_.joinable()) events_.join();
  if (poll_.joinable()) poll_.join();
  FlushLog();
}

void Checker::PublishLocked() {
  if (publish_) publish_(monitor_.Unhealthy());
}

std::unique_ptr<gpu::EventStream> Checker::Subscribe() {
  // The GPUs the monitor tracks, not those the backend's last discovery saw:
  // a GPU lost at that discovery (each subscription makes one) is listed in
  // the stream's errors and watched again once it answers.
  std::vector<std::string> gpus;
  {
    std::lock_guard lock(mu_);
    gpus = monitor_.GpuUuids();
  }
  auto s = backend_.WatchEvents(gpus);
  if (!s.ok()) {
    spdlog::warn("health: no device events ({}); relying on polling, retrying in 10 s", s.status().ToString());
    CatchUpHealth(nullptr);
    return nullptr;
  }
  for (const auto& e : (*s)->errors()) {
    spdlog::warn("health: no events from GPU {}: {}", e.uuid.empty() ? std::to_string(e.index) : e.uuid,
                 e.status.ToString());
  }
  CatchUpMigChanges();
  CatchUpHealth(s->get());
  return std::move(s).value();
}

void Checker::EventsLoop(std::unique_ptr<gpu::EventStream> stream) {
  using std::chrono::seconds;
  // Before subscribing again when there is no stream (a failed subscription).
  Clock::duration pause = seconds(10);
  int broken = 0;  // streams in a row that failed before a Wait succeeded
  auto next_retry = Clock::now() + options_.event_retry_interval;
  while (!stop_) {
    if (!stream) {
      {
        std::unique_lock lock(stop_mu_);
        if (stop_cv_.wait_for(lock, pause, [this] { return stop_.load(); })) return;
      }
      stream = Subscribe();
      pause = seconds(10);
      continue;
    }
    auto ev = stream->Wait(std::chrono::milliseconds(200));
    if (!ev.ok()) {
      // A GPU on the set fell off the bus (NVML then fails every wait on
      // it), or the library failed. The first time, subscribe again at once,
      // the new set before the old one is freed, so the other GPUs' events
      // keep coming; a stream that breaks again and again is given a pause
      // that doubles up to 30 s, each subscription being a discovery too.
      ++broken;
      MarkEventsUnwatched();
      if (broken == 1) {
        spdlog::warn("health: device event stream failed ({}); subscribing again", ev.status().ToString());
        stream = Subscribe();
        pause = seconds(1);
      } else {
        pause = std::min<Clock::duration>(seconds(1) * (1 << std::min(broken - 2, 5)), seconds(30));
        spdlog::warn("health: device event stream failed again ({}); subscribing again in {} s",
                     ev.status().ToString(), std::chrono::duration_cast<seconds>(pause).count());
        stream.reset();
      }
      continue;
    }
    broken = 0;
    // GPUs left out of the subscription because they were lost: subscribe
    // each once it answers again, so its XIDs are seen after it healed.
    if (const auto now = Clock::now(); now >= next_retry) {
      next_retry = now + options_.event_retry_interval;
      if (!stream->errors().empty()) {
        if (const size_t n = stream->RetryErrors(); n > 0) {
          spdlog::info("health: events from {} more GPU(s) watched again ({} still not)", n,
                       stream->errors().size());
          CatchUpHealth(stream.get());
        }
      }
    }
    if (!ev->has_value()) continue;
    const gpu::GpuEvent& event = **ev;
    if (event.kind == gpu::EventKind::kMigConfigChange) {
      spdlog::info("health: MIG layout changed on {}", event.uuid);
      if (on_mig_change_) on_mig_change_();
      continue;
    }
    {
      std::lock_guard lock(mu_);
      if (monitor_.OnEvent(event, Clock::now())) {
        PublishLocked();
        if (options_.on_event_published) {
          options_.on_event_published(std::chrono::steady_clock::now() - event.received);
        }
      }
    }
    FlushLog();
  }
}

void Checker::CatchUpMigChanges() {
  if (!on_mig_change_) return;
  auto now = backend_.Discover();
  if (!now.ok()) return;  // the poll thread reports a backend that fails
  const auto current = MigLayout(*now);
  std::string changed;
  {
    std::lock_guard lock(mu_);
    for (const auto& [uuid, layout] : current) {
      // A GPU missing from either side is the poll thread's business (lost,
      // or new until the next reload), not a re-partition.
      if (auto it = mig_layout_.find(uuid); it != mig_layout_.end() && it->second != layout) {
        changed = uuid;
        break;
      }
    }
  }
  if (changed.empty()) return;
  spdlog::info("health: MIG layout of {} changed before events were watched", changed);
  on_mig_change_();
}

void Checker::MarkEventsUnwatched() {
  std::lock_guard lock(mu_);
  for (const auto& uuid : monitor_.GpuUuids()) monitor_.SetEventsWatched(uuid, false);
}

void Checker::CatchUpHealth(const gpu::EventStream* stream) {
  std::set<std::string> left_out;
  if (stream != nullptr) {
    for (const auto& e : stream->errors()) left_out.insert(e.uuid);
  }
  const auto covered = [&](const std::string& uuid) {
    return stream != nullptr && !left_out.contains(uuid);
  };
  std::vector<std::string> gap;  // GPUs whose events were not watched until now
  {
    std::lock_guard lock(mu_);
    for (const auto& uuid : monitor_.GpuUuids()) {
      if (!monitor_.events_watched(uuid)) {
        gap.push_back(uuid);
      } else if (!covered(uuid)) {
        monitor_.SetEventsWatched(uuid, false);
      }
    }
  }
  if (gap.empty()) return;
  // Read after the subscription: a fault from here on raises an event, one
  // from before left its trace in what this reads. Still marked unwatched
  // while the reading is applied, so a grown ECC count counts as the missed
  // double-bit event. GPUs still left out (lost) are read too: the poll
  // thread would see them only at its next round.
  bool changed = false;
  size_t back = 0;
  for (const auto& uuid : gap) {
    auto reading = backend_.ReadSensors(uuid);  // NVML calls outside the lock
    std::lock_guard lock(mu_);
    changed |= monitor_.OnPoll(uuid, reading, Clock::now());
    if (covered(uuid)) {
      monitor_.SetEventsWatched(uuid, true);
      ++back;
    }
  }
  if (back > 0) {
    spdlog::info(
        "health: events of {} GPU(s) watched again; their sensors read for faults raised meanwhile",
        back);
  }
  if (changed) {
    std::lock_guard lock(mu_);
    PublishLocked();
  }
  FlushLog();
}

void Checker::PollLoop() {
  while (!stop_) {
    std::vector<std::string> gpus;
    {
      std::lock_guard lock(mu_);
      gpus = monitor_.GpuUuids();
    }
    bool changed = false;
    for (const auto& uuid : gpus) {
      if (stop_) return;
      auto reading = backend_.ReadSensors(uuid);  // NVML calls outside the lock
      std::lock_guard lock(mu_);
      changed |= monitor_.OnPoll(uuid, reading, Clock::now());
    }
    {
      std::lock_guard lock(mu_);
      changed |= monitor_.Tick(Clock::now());
      if (changed) PublishLocked();
    }
    FlushLog();
    std::unique_lock lock(stop_mu_);
    stop_cv_.wait_for(lock, options_.poll_interval, [this] { return stop_.load(); });
  }
}

std::map<std::string, std::string> Checker::Unhealthy() const {
  std::lock_guard lock(mu_);
  return monitor_.Unhealthy();
}

std::vector<DeviceHealth> Checker::Snapshot() const {
  std::lock_guard lock(mu_);
  return monitor_.Snapshot();
}

std::map<std::string, uint64_t> Checker::transitions() const {
  std::lock_guard lock(mu_);
  return monitor_.transitions();
}

}  // namespace danqing::health
