// Fake NVML: global state, handle registry, event queues and the init/shutdown
// lifecycle (see state.h for the locking rules).
#include <atomic>
#include "state.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>

#include "codes.h"
#include "control.h"

#ifndef FAKE_NVML_DEFAULT_PROFILE
#error "FAKE_NVML_DEFAULT_PROFILE must be defined to the built-in profile's path (CMakeLists.txt does)"
#endif

namespace fake_nvml {
namespace {

// An injected failure for `function`: the exact name, then its unversioned
// name (so "nvmlDeviceGetPciInfo" also covers _v2/_v3), then the wildcard.
std::optional<nvmlReturn_t> find_failure(const FailureMap& failures, std::string_view function) {
  if (failures.empty()) return std::nullopt;
  for (const std::string_view key : {function, base_function_name(function), std::string_view("*")}) {
    if (const auto it = failures.find(key); it != failures.end()) return it->second;
  }
  return std::nullopt;
}

std::string env_or(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

}  // namespace

State::State() = default;
State::~State() = default;

namespace {
std::atomic<State*> g_state{nullptr};
}  // namespace

State& State::instance() {
  // Deliberately leaked: see the comment in state.h.
  static State* const state = [] {
    auto* s = new State();
    g_state.store(s, std::memory_order_release);
    return s;
  }();
  return *state;
}

State* State::existing() { return g_state.load(std::memory_order_acquire); }

// ---------------------------------------------------------------------------
// Lifecycle.

nvmlReturn_t State::init() {
  const std::lock_guard<std::mutex> lifecycle(lifecycle_mutex_);
  {
    const auto held = lock();
    if (refcount_ > 0) {
      ++refcount_;
      return NVML_SUCCESS;
    }
  }

  const std::string path = env_or("FAKE_NVML_PROFILE", FAKE_NVML_DEFAULT_PROFILE);
  auto node = std::make_unique<Node>();
  try {
    *node = load_profile(path);
  } catch (const ProfileError& e) {
    std::fprintf(stderr, "fake-nvml: nvmlInit failed: %s\n", e.what());
    return NVML_ERROR_UNKNOWN;
  }
  if (node->init_error) return *node->init_error;

  {
    const auto held = lock();
    node_ = std::move(node);
    refcount_ = 1;
    gpu_handles_.clear();
    for (unsigned i = 0; i < node_->gpus.size(); ++i) gpu_handle(i);
  }

  // The server thread calls handle_control(), which takes the state mutex, so
  // it is started (and, on failure, torn down) without holding it.
  const std::string control_path = env_or("FAKE_NVML_CONTROL", "");
  if (!control_path.empty()) {
    try {
      auto server = std::make_unique<ControlServer>(
          control_path, [this](std::string_view line) { return handle_control(line); });
      const auto held = lock();
      control_ = std::move(server);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fake-nvml: nvmlInit failed: %s\n", e.what());
      std::unique_ptr<ControlServer> none;
      {
        const auto held = lock();
        none = teardown_locked();
      }
      return NVML_ERROR_UNKNOWN;
    }
  }
  return NVML_SUCCESS;
}

nvmlReturn_t State::shutdown() {
  const std::lock_guard<std::mutex> lifecycle(lifecycle_mutex_);
  std::unique_ptr<ControlServer> server;
  {
    const auto held = lock();
    if (refcount_ == 0) return NVML_ERROR_UNINITIALIZED;
    if (--refcount_ > 0) return NVML_SUCCESS;
    server = teardown_locked();
  }
  server.reset();  // joins the control thread; it may need the state mutex meanwhile
  return NVML_SUCCESS;
}

void State::unload() {
  const std::lock_guard<std::mutex> lifecycle(lifecycle_mutex_);
  std::unique_ptr<ControlServer> server;
  {
    const auto held = lock();
    server = std::move(control_);
  }
  server.reset();
}

std::unique_ptr<ControlServer> State::teardown_locked() {
  refcount_ = 0;
  for (auto& [key, set] : event_sets_) {
    set->closed = true;
    set->ready.notify_all();
  }
  event_sets_.clear();
  device_registry_.clear();
  gpu_instance_registry_.clear();
  compute_instance_registry_.clear();
  gpu_handles_.clear();
  mig_handles_.clear();
  gpu_instance_handles_.clear();
  compute_instance_handles_.clear();
  node_.reset();
  return std::move(control_);
}

// ---------------------------------------------------------------------------
// Per-call checks and handle resolution.

nvmlReturn_t State::node_failure(std::string_view function) const {
  return find_failure(node_->failures, function).value_or(NVML_SUCCESS);
}

nvmlReturn_t State::gpu_gate(const Gpu& gpu, std::string_view function) const {
  if (gpu.lost) return NVML_ERROR_GPU_IS_LOST;
  if (const auto failure = find_failure(node_->failures, function)) return *failure;
  if (const auto failure = find_failure(gpu.failures, function)) return *failure;
  if (gpu.unsupported.contains(function) || gpu.unsupported.contains(base_function_name(function))) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  return NVML_SUCCESS;
}

nvmlReturn_t State::resolve(nvmlDevice_t handle, std::string_view function, DeviceRef& out) {
  if (handle == nullptr || !device_registry_.contains(handle)) return NVML_ERROR_INVALID_ARGUMENT;
  Gpu& gpu = node_->gpus[handle->gpu];
  if (const nvmlReturn_t rc = gpu_gate(gpu, function); rc != NVML_SUCCESS) return rc;
  out = DeviceRef{handle, handle->gpu, &gpu, nullptr, 0};
  if (!handle->mig_uuid.empty()) {
    // A MIG handle outlives its device across a "mig" reconfiguration; it
    // becomes valid again if a device with the same UUID comes back.
    const MigDevice* device = gpu.find_mig_by_uuid(handle->mig_uuid);
    if (device == nullptr || !gpu.mig_enabled() || !device->has_compute_instance) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    out.mig = device;
    out.mig_index = static_cast<unsigned>(device - gpu.mig.devices.data());
  }
  return NVML_SUCCESS;
}

nvmlReturn_t State::resolve(nvmlGpuInstance_t handle, std::string_view function, DeviceRef& out) {
  if (handle == nullptr || !gpu_instance_registry_.contains(handle)) return NVML_ERROR_INVALID_ARGUMENT;
  return resolve_instance(handle->gpu, handle->gpu_instance_id, std::nullopt, function, out);
}

nvmlReturn_t State::resolve(nvmlComputeInstance_t handle, std::string_view function, DeviceRef& out) {
  if (handle == nullptr || !compute_instance_registry_.contains(handle)) return NVML_ERROR_INVALID_ARGUMENT;
  return resolve_instance(handle->gpu, handle->gpu_instance_id, handle->compute_instance_id,
                          function, out);
}

nvmlReturn_t State::resolve_instance(unsigned gpu_index, unsigned gpu_instance_id,
                                     std::optional<unsigned> compute_instance_id,
                                     std::string_view function, DeviceRef& out) {
  Gpu& gpu = node_->gpus[gpu_index];
  if (const nvmlReturn_t rc = gpu_gate(gpu, function); rc != NVML_SUCCESS) return rc;
  const MigDevice* device = gpu.find_mig_by_gi(gpu_instance_id);
  if (device == nullptr || !gpu.mig_enabled()) return NVML_ERROR_INVALID_ARGUMENT;
  if (compute_instance_id &&
      (!device->has_compute_instance || device->compute_instance_id != *compute_instance_id)) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  out = DeviceRef{gpu_handle(gpu_index), gpu_index, &gpu, device,
                  static_cast<unsigned>(device - gpu.mig.devices.data())};
  return NVML_SUCCESS;
}

// ---------------------------------------------------------------------------
// Handles.

nvmlDevice_t State::gpu_handle(unsigned gpu) {
  if (gpu_handles_.size() < node_->gpus.size()) gpu_handles_.resize(node_->gpus.size());
  auto& slot = gpu_handles_.at(gpu);
  if (!slot) {
    slot = std::make_unique<nvmlDevice_st>();
    slot->gpu = gpu;
    device_registry_.insert(slot.get());
  }
  return slot.get();
}

nvmlDevice_t State::mig_handle(unsigned gpu, const std::string& mig_uuid) {
  auto& slot = mig_handles_[{gpu, mig_uuid}];
  if (!slot) {
    slot = std::make_unique<nvmlDevice_st>();
    slot->gpu = gpu;
    slot->mig_uuid = mig_uuid;
    device_registry_.insert(slot.get());
  }
  return slot.get();
}

nvmlGpuInstance_t State::gpu_instance_handle(unsigned gpu, unsigned gpu_instance_id) {
  auto& slot = gpu_instance_handles_[{gpu, gpu_instance_id}];
  if (!slot) {
    slot = std::make_unique<nvmlGpuInstance_st>();
    slot->gpu = gpu;
    slot->gpu_instance_id = gpu_instance_id;
    gpu_instance_registry_.insert(slot.get());
  }
  return slot.get();
}

nvmlComputeInstance_t State::compute_instance_handle(unsigned gpu, unsigned gpu_instance_id,
                                                     unsigned compute_instance_id) {
  auto& slot = compute_instance_handles_[{gpu, gpu_instance_id, compute_instance_id}];
  if (!slot) {
    slot = std::make_unique<nvmlComputeInstance_st>();
    slot->gpu = gpu;
    slot->gpu_instance_id = gpu_instance_id;
    slot->compute_instance_id = compute_instance_id;
    compute_instance_registry_.insert(slot.get());
  }
  return slot.get();
}

// ---------------------------------------------------------------------------
// Events.

nvmlEventSet_t State::create_event_set() {
  auto set = std::make_shared<nvmlEventSet_st>();
  nvmlEventSet_t handle = set.get();
  event_sets_.emplace(handle, std::move(set));
  return handle;
}

std::shared_ptr<nvmlEventSet_st> State::find_event_set(nvmlEventSet_t set) const {
  const auto it = event_sets_.find(set);
  return it == event_sets_.end() ? nullptr : it->second;
}

void State::free_event_set(nvmlEventSet_t set) {
  const auto it = event_sets_.find(set);
  if (it == event_sets_.end()) return;
  it->second->closed = true;
  it->second->ready.notify_all();
  event_sets_.erase(it);
}

void State::wake_event_sets() {
  for (auto& [key, set] : event_sets_) set->ready.notify_all();
}

void State::queue_event(const QueuedEvent& event) {
  for (auto& [key, set] : event_sets_) {
    const auto mask = set->masks.find(event.gpu);
    if (mask == set->masks.end() || (mask->second & event.type) == 0) continue;
    set->queue.push_back(event);
    if (set->queue.size() > kEventQueueLimit) set->queue.pop_front();
    set->ready.notify_all();
  }
}

nvmlReturn_t State::wait_event(std::unique_lock<std::mutex>& held, const std::shared_ptr<nvmlEventSet_st>& set,
                               unsigned timeout_ms, QueuedEvent& out) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  // Like the real library, a set one of whose GPUs fell off the bus answers
  // GPU_IS_LOST, once the events queued before are taken.
  const auto lost = [this, &set] {
    for (const auto& [gpu, mask] : set->masks) {
      if (gpu < node_->gpus.size() && node_->gpus[gpu].lost) return true;
    }
    return false;
  };
  set->ready.wait_until(held, deadline, [&] { return set->closed || !set->queue.empty() || lost(); });
  if (set->closed) return refcount_ == 0 ? NVML_ERROR_UNINITIALIZED : NVML_ERROR_INVALID_ARGUMENT;
  if (set->queue.empty()) return lost() ? NVML_ERROR_GPU_IS_LOST : NVML_ERROR_TIMEOUT;
  out = set->queue.front();
  set->queue.pop_front();
  return NVML_SUCCESS;
}

}  // namespace fake_nvml
