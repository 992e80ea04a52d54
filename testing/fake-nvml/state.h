// Fake NVML: the library's one global state - the loaded node, the handle
// registry, event sets and the init reference count - and the lifecycle that
// nvmlInit/nvmlShutdown drive.
//
// Thread-safety: every member below is guarded by the single state mutex
// (State::lock()). The exported functions in fake_nvml.cc take it for the
// whole call; the control thread takes it per command; nvmlEventSetWait waits
// on a condition variable with it, so the mutex is released while blocked.
// Init and shutdown are additionally serialised by a lifecycle mutex (always
// taken before the state mutex) so that starting and stopping the control
// thread - which needs the state mutex itself - never races or deadlocks.
//
// Handles are pointers to objects the state owns and never reuses while
// initialised. A pointer is only dereferenced after it was found in the
// registry, so a stray pointer from a caller is reported as
// NVML_ERROR_INVALID_ARGUMENT instead of being read.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "gpu/nvml_abi.h"
#include "profile.h"

// The opaque NVML handle types, completed here (nvml_abi.h declares them in
// the global namespace). Callers only ever see pointers to these.
struct nvmlDevice_st {
  unsigned gpu = 0;      // index into Node::gpus
  std::string mig_uuid;  // empty: the full GPU; otherwise a MIG device
};

struct nvmlGpuInstance_st {
  unsigned gpu = 0;
  unsigned gpu_instance_id = 0;
};

struct nvmlComputeInstance_st {
  unsigned gpu = 0;
  unsigned gpu_instance_id = 0;
  unsigned compute_instance_id = 0;
};

namespace fake_nvml {

class ControlServer;

// An event waiting in a set's queue.
struct QueuedEvent {
  unsigned gpu = 0;
  unsigned long long type = 0;
  unsigned long long data = 0;
  unsigned gpu_instance_id = kNoInstanceId;
  unsigned compute_instance_id = kNoInstanceId;
};

// Events each set keeps before dropping the oldest.
inline constexpr std::size_t kEventQueueLimit = 1024;

}  // namespace fake_nvml

struct nvmlEventSet_st {
  std::condition_variable ready;                   // signalled on push and on close
  std::deque<fake_nvml::QueuedEvent> queue;        // FIFO, bounded
  std::map<unsigned, unsigned long long> masks;    // GPU index -> registered event types
  bool closed = false;                             // freed, or the library shut down
};

namespace fake_nvml {

// A device handle resolved for one call. Pointers stay valid while the state
// mutex is held.
struct DeviceRef {
  nvmlDevice_t handle = nullptr;
  unsigned index = 0;          // GPU index
  Gpu* gpu = nullptr;
  const MigDevice* mig = nullptr;  // set for MIG device handles
  unsigned mig_index = 0;          // position in gpu->mig.devices
};

class State {
 public:
  // The process-wide instance. It is never destroyed, so that a thread still
  // inside an NVML call at exit cannot touch a destroyed mutex.
  static State& instance();
  // The instance if instance() was ever called, else null; never creates it.
  static State* existing();

  State(const State&) = delete;
  State& operator=(const State&) = delete;

  // nvmlInit*: the first call loads the profile (FAKE_NVML_PROFILE or the
  // built-in default) and starts the control server when FAKE_NVML_CONTROL is
  // set; later calls only count. Takes the locks itself.
  nvmlReturn_t init();
  // nvmlShutdown: the last matching call stops the control server, wakes and
  // closes every event set and frees the node and all handles.
  nvmlReturn_t shutdown();
  // Called when the library is unloaded or the process exits: stops the
  // control thread (if any) so it never outlives the code it runs.
  void unload();

  // The state mutex. Everything below requires it to be held.
  std::unique_lock<std::mutex> lock() { return std::unique_lock<std::mutex>(mutex_); }

  bool initialised() const { return refcount_ > 0; }
  Node& node() { return *node_; }

  // Node-wide injected failure for `function` (control "fail" without a GPU),
  // or NVML_SUCCESS.
  nvmlReturn_t node_failure(std::string_view function) const;
  // Per-call checks on a GPU, in order: lost (GPU_IS_LOST), injected failure,
  // listed as unsupported (NOT_SUPPORTED). NVML_SUCCESS when the call may go on.
  nvmlReturn_t gpu_gate(const Gpu& gpu, std::string_view function) const;
  // Validates a device handle and runs gpu_gate() for `function`. Unknown
  // handles and MIG handles whose device no longer exists are
  // INVALID_ARGUMENT.
  nvmlReturn_t resolve(nvmlDevice_t handle, std::string_view function, DeviceRef& out);
  // Same for GPU- and compute-instance handles; `out` is the MIG device that
  // backs the instance. Instances that no longer exist are INVALID_ARGUMENT.
  nvmlReturn_t resolve(nvmlGpuInstance_t handle, std::string_view function, DeviceRef& out);
  nvmlReturn_t resolve(nvmlComputeInstance_t handle, std::string_view function, DeviceRef& out);

  // Stable handles, created on first use. The GPU must exist.
  nvmlDevice_t gpu_handle(unsigned gpu);
  nvmlDevice_t mig_handle(unsigned gpu, const std::string& mig_uuid);
  nvmlGpuInstance_t gpu_instance_handle(unsigned gpu, unsigned gpu_instance_id);
  nvmlComputeInstance_t compute_instance_handle(unsigned gpu, unsigned gpu_instance_id, unsigned compute_instance_id);

  // Event sets.
  nvmlEventSet_t create_event_set();
  // The set, kept alive for the caller even if freed meanwhile; null if unknown.
  std::shared_ptr<nvmlEventSet_st> find_event_set(nvmlEventSet_t set) const;
  void free_event_set(nvmlEventSet_t set);
  // Queues an event for every set registered for `type` on `event.gpu` and
  // wakes their waiters.
  void queue_event(const QueuedEvent& event);
  // Wakes every waiter to look at its set again (a GPU was lost).
  void wake_event_sets();
  // Blocks (releasing `held`, which must hold the state mutex) until `set` has
  // an event, is closed, one of its GPUs is lost, or `timeout_ms` passes.
  // Returns SUCCESS with `out` filled, GPU_IS_LOST when no event is queued and
  // a GPU registered on the set is lost, TIMEOUT, or
  // UNINITIALIZED/INVALID_ARGUMENT when the library shut down or the set was
  // freed while waiting.
  nvmlReturn_t wait_event(std::unique_lock<std::mutex>& held, const std::shared_ptr<nvmlEventSet_st>& set,
                          unsigned timeout_ms, QueuedEvent& out);

  // Control protocol (commands.cc): one JSON command in, one JSON reply out
  // (no trailing newline). Takes the state mutex itself; safe on any thread.
  std::string handle_control(std::string_view line);

 private:
  State();
  ~State();  // never runs (see instance()); defined where ControlServer is complete

  // Frees the node, handles and event sets; returns the control server so the
  // caller can stop it after releasing the state mutex. Requires the mutex.
  std::unique_ptr<ControlServer> teardown_locked();
  // The rest of resolve() for an instance handle found in its registry: runs
  // gpu_gate() on GPU `gpu_index`, then finds the MIG device of GPU instance
  // `gpu_instance_id` in MIG mode and, for a compute-instance handle
  // (`compute_instance_id` set), with that compute instance; a missing one is
  // INVALID_ARGUMENT.
  nvmlReturn_t resolve_instance(unsigned gpu_index, unsigned gpu_instance_id,
                                std::optional<unsigned> compute_instance_id,
                                std::string_view function, DeviceRef& out);

  std::mutex lifecycle_mutex_;  // serialises init()/shutdown()/unload()
  std::mutex mutex_;            // the state mutex

  // Guarded by mutex_.
  unsigned refcount_ = 0;
  std::unique_ptr<Node> node_;
  std::unique_ptr<ControlServer> control_;
  std::vector<std::unique_ptr<nvmlDevice_st>> gpu_handles_;
  std::map<std::pair<unsigned, std::string>, std::unique_ptr<nvmlDevice_st>> mig_handles_;
  std::map<std::pair<unsigned, unsigned>, std::unique_ptr<nvmlGpuInstance_st>> gpu_instance_handles_;
  std::map<std::tuple<unsigned, unsigned, unsigned>, std::unique_ptr<nvmlComputeInstance_st>> compute_instance_handles_;
  std::unordered_set<const nvmlDevice_st*> device_registry_;
  std::unordered_set<const nvmlGpuInstance_st*> gpu_instance_registry_;
  std::unordered_set<const nvmlComputeInstance_st*> compute_instance_registry_;
  std::unordered_map<const nvmlEventSet_st*, std::shared_ptr<nvmlEventSet_st>> event_sets_;
};

}  // namespace fake_nvml
