// Checker: runs a health Monitor against a GpuBackend on two threads.
//
//   events thread  waits on the backend's event stream (XID, ECC, MIG
//                  changes) and publishes a health change as soon as the
//                  event is classified; the device list reaches ListAndWatch
//                  in the same breath (measured in bench/health_bench).
//   poll thread    every poll interval reads each GPU's sensors (lost GPU,
//                  NVML errors, thermal slowdown, retired pages, row
//                  remapping, ECC growth) and expires conditions whose quiet
//                  period is over.
//
// `publish` receives the full unhealthy map (UUID → reason) after every
// change, serialised: never two calls at once, never out of order.
//
// Thread-safety: Start/SetInventory/Stop from one thread; Snapshot,
// Unhealthy and transitions from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpu/backend.h"
#include "health/monitor.h"

namespace danqing::health {

struct CheckerOptions {
  MonitorOptions monitor;
  Clock::duration poll_interval = std::chrono::seconds(1);
  // How often GPUs that could not be subscribed to events (lost at the
  // time) are tried again.
  Clock::duration event_retry_interval = std::chrono::seconds(2);
  // Called on the events thread after an NVML event changed health, with the
  // time from the event leaving NVML to `publish` returning (the agent's own
  // share of event-to-ListAndWatch latency). May be empty.
  std::function<void(std::chrono::steady_clock::duration)> on_event_published;
};

class Checker {
 public:
  using Publish = std::function<void(const std::map<std::string, std::string>& unhealthy)>;

  // `backend` must outlive the checker. `on_mig_change` (may be empty) is
  // called from the events thread when a GPU's MIG layout changed.
  Checker(gpu::GpuBackend& backend, CheckerOptions options, Publish publish,
          std::function<void()> on_mig_change = {});
  ~Checker();

  Checker(const Checker&) = delete;
  Checker& operator=(const Checker&) = delete;

  // Tracks `inventory`, subscribes to the backend's events and starts both
  // threads: an event raised after Start returns is seen. Without an event
  // stream (events unsupported, library too old) it logs why, keeps polling
  // and tries to subscribe again every 10 s. A stream that fails (a GPU fell
  // off the bus) is replaced at once, then with a pause that doubles up to
  // 30 s while it keeps failing; GPUs left out because they were lost are
  // subscribed again every event_retry_interval once they answer. Events
  // raised while a GPU was not subscribed are lost (NVML keeps none for a
  // later set); once it is again, its sensors are read at once for what the
  // gap left behind (CatchUpHealth).
  //
  // `previous` (may be null): a stopped checker this one replaces; its
  // devices' conditions are carried over and published at once.
  void Start(const gpu::NodeInventory& inventory, const Checker* previous = nullptr);

  // After a rediscovery: tracks the new devices (conditions of devices that
  // are still there are kept) and publishes.
  void SetInventory(const gpu::NodeInventory& inventory);

  void Stop();

  std::map<std::string, std::string> Unhealthy() const;
  std::vector<DeviceHealth> Snapshot() const;
  std::map<std::string, uint64_t> transitions() const;

 private:
  // Subscribes to the backend's events; nullptr (logged) when it cannot.
  std::unique_ptr<gpu::EventStream> Subscribe();
  // `stream`: Start's subscription; when null, subscribes again after a pause.
  void EventsLoop(std::unique_ptr<gpu::EventStream> stream);
  // After each subscription to the event stream: NVML queues events only for
  // a subscribed set, so a re-partition made between the inventory's
  // discovery and the subscription (or while resubscribing) raised none.
  // Rediscovers once and calls on_mig_change when a GPU present in both has
  // another MIG mode or other MIG devices than the tracked inventory.
  void CatchUpMigChanges();
  // After each subscription attempt (`stream` null when it failed): GPUs the
  // stream does not cover are marked unwatched in the monitor; those it
  // covers again after a gap (a failed stream, a failed subscription, a GPU
  // left out while lost) have their sensors read once, now that a new event
  // would be seen, so that a fault from the gap is raised from the trace it
  // left (see Monitor::SetEventsWatched), then are marked watched.
  void CatchUpHealth(const gpu::EventStream* stream);
  // The stream failed: from now until the next subscription, events are lost.
  void MarkEventsUnwatched();
  void PollLoop();
  void PublishLocked();  // mu_ held
  void FlushLog();       // writes the monitor's deferred log lines; mu_ not held

  gpu::GpuBackend& backend_;
  CheckerOptions options_;
  Publish publish_;
  std::function<void()> on_mig_change_;

  mutable std::mutex mu_;
  Monitor monitor_;
  // The tracked inventory's MIG layout by GPU UUID (mu_).
  std::map<std::string, std::string> mig_layout_;

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  std::atomic<bool> stop_{true};
  std::thread events_;
  std::thread poll_;
};

}  // namespace danqing::health
