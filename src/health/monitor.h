// Monitor: the health state machine of a node's GPUs and MIG devices.
//
// It is fed NVML events (OnEvent) and sensor polls (OnPoll), and asked to
// expire conditions (Tick). Time is passed in, so tests drive it with their
// own clock. It owns no threads and does no I/O except logging transitions
// (which a caller may defer, see DeferLog);
// Checker (checker.h) runs it against a GpuBackend.
//
// A device is unhealthy while it has at least one condition. Conditions:
//   from events (latched, need no further evidence):
//     xid-<N>          XID of the unhealthy class: clears after the quiet
//                      period with no new XID of that number on the device
//     xid-<N>          XID of the reset class: never clears (needs a reset)
//     double-bit-ecc   NVML double-bit ECC event: never clears
//   from polls (present while the poll shows them):
//     gpu-lost         NVML says GPU_IS_LOST; clears when it answers again
//     nvml-error       the device's sensors cannot be read, or a call every
//                      working GPU answers (memory, temperature, utilisation)
//                      fails with an error other than "not supported"
//     thermal-slowdown thermal clock slowdown (SW or HW thermal); clears
//                      when those reasons are gone and the temperature is
//                      `thermal_hysteresis_c` below the temperature seen
//                      when it started
//     hw-slowdown      HW slowdown or power brake (not a temperature: an
//                      external power brake, power protection) seen on two
//                      polls in a row (a clock or P-state change can show it
//                      for a moment); clears when a poll no longer shows it
//     retired-pages-pending, row-remap-pending, row-remap-failure
//                      need a reset; clear only when the GPU reports them
//                      gone (after the reset)
//     ecc-uncorrectable volatile uncorrectable ECC count grew: latched like
//                      an unhealthy-class XID (quiet period)
//   from polls standing in for events (see SetEventsWatched):
//     double-bit-ecc   the volatile uncorrectable ECC count grew while the
//                      GPU's events were not watched: the double-bit ECC
//                      event that went unseen would have raised it
//
// An event naming a MIG device (GPU and compute instance) affects that MIG
// device only; one naming the GPU affects the GPU and, through the advertised
// resources, every replica and MIG device on it. An XID event whose device is
// unknown affects every GPU, as NVIDIA's plugin does.
//
// Thread-safety: not thread-safe; Checker serialises calls.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "common/status.h"
#include "gpu/types.h"
#include "health/xid_policy.h"

namespace danqing::health {

using Clock = std::chrono::steady_clock;

struct MonitorOptions {
  XidPolicy policy;
  Clock::duration quiet_period = std::chrono::minutes(5);
  uint32_t thermal_hysteresis_c = 5;
};

// One device's health, for the advertised resources and the metrics.
struct DeviceHealth {
  std::string uuid;       // GPU-... or MIG-...
  std::string gpu_uuid;   // the physical GPU (== uuid for a GPU)
  bool healthy = true;
  std::string reason;     // conditions joined by ',' ("xid-79,gpu-lost"), "" when healthy
  bool needs_reset = false;
  std::map<uint64_t, uint64_t> xid_counts;  // every XID seen (ignored ones too), by number
  uint64_t last_xid = 0;                    // the most recent XID, 0 when none
};

class Monitor {
 public:
  explicit Monitor(MonitorOptions options);

  const MonitorOptions& options() const { return options_; }

  // The devices to track. Conditions of devices that are no longer present
  // are dropped; those of devices still present are kept (a reload does not
  // make a broken GPU healthy).
  void SetInventory(const gpu::NodeInventory& inventory);

  // Takes over `previous`'s state (conditions, XID counts, poll memory,
  // transition counts) for the devices tracked here: a monitor that replaces
  // another (new options, a new NVML library) does not make a GPU that needs
  // a reset healthy. Conditions this monitor's policy would not raise (checks
  // switched off, an XID now ignored) are not carried. Call after SetInventory.
  void CarryFrom(const Monitor& previous);

  // Each returns true when some device's conditions changed (its health or
  // the reason it is unhealthy).
  bool OnEvent(const gpu::GpuEvent& event, Clock::time_point now);
  bool OnPoll(const std::string& gpu_uuid, const Result<gpu::Sensors>& reading,
              Clock::time_point now);
  bool Tick(Clock::time_point now);

  // Unhealthy devices: UUID (GPU or MIG) → reason. The input of
  // deviceplugin::WithHealth.
  std::map<std::string, std::string> Unhealthy() const;

  std::vector<DeviceHealth> Snapshot() const;

  // Transitions so far: "unhealthy:<condition>" and "healthy:<condition>"
  // (condition without its XID number for XIDs: "xid") → count.
  const std::map<std::string, uint64_t>& transitions() const { return transitions_; }

  // The GPUs to poll (UUIDs, in inventory order).
  std::vector<std::string> GpuUuids() const;

  // Whether NVML events of the GPU reach this monitor (the default). NVML
  // delivers an event only to an event set registered when it happened and
  // has no call to read past XIDs: while the stream is broken, being
  // replaced, or the GPU could not be subscribed, events are lost for good.
  // Meanwhile a poll stands in for the one event whose trace NVML keeps: a
  // grown volatile uncorrectable ECC count raises double-bit-ecc (needs a
  // reset), as the event would have. Other faults leave their own polled
  // traces (lost GPU, pending page retirement or row remapping), raised
  // either way; an XID with no such trace cannot be recovered. Checker reads
  // the sensors once more after each new subscription, before it sets a GPU
  // watched again.
  void SetEventsWatched(const std::string& gpu_uuid, bool watched);
  bool events_watched(const std::string& gpu_uuid) const;

  // Log lines (transitions, ignored XIDs) are written as they happen, or,
  // after DeferLog(true), kept until FlushLog(). Checker defers them so that a
  // change is published before it is logged: writing to the log pipe wakes its
  // reader (the container runtime), which can take this CPU for a scheduler
  // tick while the kubelet still waits for the list.
  struct LogLine {
    bool warning = false;  // else info
    std::string text;
  };
  void DeferLog(bool defer) { defer_log_ = defer; }
  std::vector<LogLine> TakeLog() { return std::exchange(pending_log_, {}); }
  static void WriteLog(const std::vector<LogLine>& lines);

 private:
  struct Condition {
    bool latched = false;       // from an event: clears by quiet period (or never)
    bool needs_reset = false;   // latched conditions that never clear
    Clock::time_point last_seen{};
    std::string detail;         // for the log: "XID 62 (internal micro-controller halt)"
  };
  struct DeviceState {
    std::string gpu_uuid;
    bool is_gpu = true;
    uint32_t gpu_instance_id = 0;
    uint32_t compute_instance_id = 0;
    std::map<std::string, Condition> conditions;  // by name
    std::map<uint64_t, uint64_t> xid_counts;
    uint64_t last_xid = 0;
    // Poll memory (GPUs only).
    std::optional<uint64_t> last_ecc_uncorrected;
    uint32_t thermal_start_c = 0;
    int hw_slowdown_polls = 0;  // polls in a row showing HW slowdown or power brake
    bool events_watched = true;  // see SetEventsWatched
  };

  // Sets or refreshes a condition; returns true if it is new.
  bool Raise(const std::string& uuid, DeviceState& d, const std::string& name, Condition c);
  // Removes a condition; returns true if it was there.
  bool Clear(const std::string& uuid, DeviceState& d, const std::string& name, std::string_view why);
  void LogTransition(const std::string& uuid, const DeviceState& d, bool now_healthy,
                     const std::string& condition, std::string_view detail);
  bool OnXid(const gpu::GpuEvent& event, Clock::time_point now);
  void Log(bool warning, std::string text);
  std::vector<std::string> Targets(const gpu::GpuEvent& event) const;

  MonitorOptions options_;
  std::map<std::string, DeviceState> devices_;  // by UUID
  std::vector<std::string> gpus_;               // GPU UUIDs in inventory order
  std::map<std::string, uint64_t> transitions_;
  bool defer_log_ = false;
  std::vector<LogLine> pending_log_;
};

}  // namespace danqing::health
