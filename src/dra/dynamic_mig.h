// Dynamic MIG (issue 26): the scheduler picks a MIG placement, the agent cuts
// the instance when the claim is prepared.
//
// Offer. For each GPU in MIG mode that the configuration marks dynamic, the
// pool carries one counter set "gpu-<index>-mig" (mig_placements.h: one
// counter per memory slice, the compute slices, the engines NVML reports)
// and one device per possible placement of every GPU-instance profile the
// GPU supports: "gpu-<index>-mig-<profile>-at-<start>" (profile as in
// MigDeviceName: "1g10gb", "1g10gb-me"), each consuming the counters of its
// placement. The scheduler allocates a device only while the counters allow,
// so two placements that overlap are never both allocated. MIG instances that
// already exist and that no claim created (static ones, laid out by an
// operator) are published as "gpu-<index>-mig-<profile>-<gi>-<ci>" (the
// static name) consuming their counters, and the dynamic placements that
// overlap them are left out (they could not be created).
//
// resource.k8s.io/v1 limits: a slice carries devices or shared counters, not
// both; at most 8 counter sets per slice, 32 counters per set; at most 64
// devices in a slice where a device consumes counters (128 otherwise). The
// counter sets go first (ceil(GPUs / 8) slices), then the devices, all in one
// pool. Counter names and device names are DNS labels.
//
// Prepare. The device name tells the GPU, profile and placement: the GPU
// instance is created there, then its compute instance (the one spanning it),
// both through MigControl; if the compute instance cannot be made the GPU
// instance is destroyed again (no half-made instance). Unprepare destroys the
// compute and then the GPU instance. All of it is serialised per GPU (one
// mutex each): two claims on one GPU are prepared one after the other, each
// gets its instance or its own error; other GPUs are not held up.
//
// Restart. Reconcile() compares the instances on the GPUs with the prepared
// claims (checkpoint): the instances of prepared claims are kept (and known
// again); others on dynamic GPUs are orphans: reported (for doctor), and
// destroyed only when DynamicMigConfig::destroy_orphans is set.
//
// Thread-safety: the free functions are pure. DynamicMig is safe to use from
// any thread; MigControl implementations must be safe for calls on different
// GPUs at once (calls on one GPU are serialised by DynamicMig).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "dra/mig_placements.h"

namespace danqing::dra {

inline constexpr std::size_t kMaxCounterSetsPerSlice = 8;
inline constexpr std::size_t kMaxCountersPerSet = 32;
inline constexpr std::size_t kMaxDevicesPerSliceWithCounters = 64;

// Which GPUs are dynamic (configuration: danqing.draDynamicMig).
struct DynamicMigConfig {
  // GPU UUIDs or NVML indices ("0", "GPU-..."), or "all". Empty: none.
  std::vector<std::string> gpus;
  // Destroy MIG instances on dynamic GPUs that no prepared claim holds.
  bool destroy_orphans = false;

  bool Selects(int index, const std::string& uuid) const;
};

// Parses {"gpus": [...], "destroyOrphans": bool}; unknown members and wrong
// types are INVALID_ARGUMENT naming the field ("dynamicMig.gpus[1]: ...").
Result<DynamicMigConfig> ParseDynamicMigConfig(const nlohmann::json& j);

// --- Offer. -----------------------------------------------------------------

struct DynamicMigDevice {
  std::string name;
  int gpu_index = -1;
  std::string gpu_uuid;
  uint32_t profile_id = 0;
  std::string profile;  // "1g.10gb"
  uint32_t start = 0;
  bool existing = false;  // a static instance (gi/ci set)
  uint32_t gpu_instance_id = 0;
  uint32_t compute_instance_id = 0;
  std::string mig_uuid;  // static instances
  Counters consumes;
};

// "gpu-3-mig-1g10gb-at-4".
std::string DynamicMigDeviceName(int gpu_index, const std::string& profile, uint32_t start);
// "gpu-3-mig".
std::string CounterSetName(int gpu_index);
// Parses a DynamicMigDeviceName; nullopt for any other name.
struct ParsedPlacementName {
  int gpu_index = -1;
  std::string profile_label;  // "1g10gb-me"
  uint32_t start = 0;
};
std::optional<ParsedPlacementName> ParsePlacementName(const std::string& name);

// The devices of one GPU. `owned` holds the GPU-instance ids of instances
// that prepared claims created (they are the dynamic devices themselves, not
// static ones).
std::vector<DynamicMigDevice> DynamicMigDevices(const MigGpuSpec& gpu,
                                                const std::set<uint32_t>& owned);

struct DynamicSliceOptions {
  std::string driver = "gpu.danqing.io";
  std::string node_name;     // pool name and spec.nodeName
  std::string slice_prefix;  // metadata.name = <prefix>-<k>; empty: "<node>-<driver>-mig"
  std::size_t max_devices_per_slice = kMaxDevicesPerSliceWithCounters;  // lower only in tests
};

// The ResourceSlice objects of the dynamic-MIG pool (its own pool,
// "<node>-mig", so the static pool's generations stay independent): counter
// slices first, then device slices. Device attributes: type "mig",
// migProfile, uuid (parent GPU), index, placementStart, dynamic (bool), and
// for static instances migUUID/gpuInstanceID/computeInstanceID; capacity
// memory and multiprocessors.
std::vector<nlohmann::json> BuildDynamicMigSlices(
    const std::vector<MigGpuSpec>& gpus,
    const std::map<std::string, std::set<uint32_t>>& owned_by_gpu, int64_t generation,
    const DynamicSliceOptions& options);

// The scheduler's check over published slices: whether the named devices can
// all be allocated together without any counter set going over. Unknown
// device names are false.
bool CountersAllow(const std::vector<nlohmann::json>& slices,
                   const std::vector<std::string>& devices);

// --- Prepare. -----------------------------------------------------------------

// What dynamic MIG needs from NVML, per GPU (by NVML index).
class MigControl {
 public:
  virtual ~MigControl() = default;
  // The GPU as it is now: MIG mode on (FAILED_PRECONDITION when not), its
  // profiles and placements, its instances.
  virtual Result<MigGpuSpec> Describe(int gpu_index) = 0;
  // Creates a GPU instance of `profile_id` at `start`; returns its id.
  virtual Result<uint32_t> CreateGpuInstance(int gpu_index, uint32_t profile_id,
                                             uint32_t start) = 0;
  // Creates the compute instance spanning GPU instance `gi`; returns its id.
  virtual Result<uint32_t> CreateComputeInstance(int gpu_index, uint32_t gi) = 0;
  virtual Status DestroyComputeInstance(int gpu_index, uint32_t gi, uint32_t ci) = 0;
  virtual Status DestroyGpuInstance(int gpu_index, uint32_t gi) = 0;
  // The UUID of the MIG device of (gi, ci).
  virtual Result<std::string> MigUuid(int gpu_index, uint32_t gi, uint32_t ci) = 0;
};

// An instance made for a claim.
struct MigInstance {
  int gpu_index = -1;
  std::string gpu_uuid;
  std::string device;  // the placement device's name
  uint32_t profile_id = 0;
  uint32_t start = 0;
  uint32_t gpu_instance_id = 0;
  uint32_t compute_instance_id = 0;
  std::string mig_uuid;
  std::optional<uint32_t> parent_minor;  // /dev/nvidia<minor> of the GPU
  bool operator==(const MigInstance&) const = default;
};

nlohmann::json ToJson(const MigInstance& m);
Result<MigInstance> MigInstanceFromJson(const nlohmann::json& j);

// An instance on a dynamic GPU that no prepared claim holds.
struct OrphanInstance {
  int gpu_index = -1;
  uint32_t gpu_instance_id = 0;
  std::optional<uint32_t> compute_instance_id;  // none: a half-made GPU instance
  std::string profile;
  uint32_t start = 0;
  bool destroyed = false;
  std::string error;  // why destroying failed
};

// For doctor (no agent state needed): the orphans on `gpu_indices` given the
// instances the checkpoint records; destroys nothing.
std::vector<OrphanInstance> FindOrphanInstances(
    std::shared_ptr<MigControl> control, DynamicMigConfig config,
    const std::map<std::string, std::vector<MigInstance>>& prepared,
    const std::vector<int>& gpu_indices);
// One line per orphan: "GPU 0: MIG 3g.40gb at memory slice 4 (GPU instance 2,
// compute instance 0) is held by no prepared claim".
std::string DescribeOrphan(const OrphanInstance& orphan);

class DynamicMig {
 public:
  // `state_file`, when not empty, keeps Held() across restarts: rewritten
  // (atomically) after every change; LoadState() reads it back for
  // Reconcile(). Put it in the DRA checkpoint directory (persistent).
  DynamicMig(std::shared_ptr<MigControl> control, DynamicMigConfig config,
             std::string state_file = "");

  // The instances the state file records, by claim UID. A missing file is an
  // empty map; a file that does not parse is INVALID_ARGUMENT naming it.
  static Result<std::map<std::string, std::vector<MigInstance>>> LoadState(
      const std::string& state_file);

  // Creates the instance for placement device `device` of claim `claim_uid`.
  // Idempotent: a claim that already holds that device gets the same
  // instance. Errors name the claim and the device: NOT_FOUND (not a
  // placement device), INVALID_ARGUMENT (a profile the GPU does not have, a
  // start that is not one of its placements), FAILED_PRECONDITION (the GPU is
  // not dynamic or not in MIG mode), RESOURCE_EXHAUSTED (the placement is
  // taken), others as NVML said; after an error nothing of the claim's is
  // left on the GPU.
  Result<MigInstance> Prepare(const std::string& claim_uid, const std::string& device);
  // Destroys what Prepare made for the claim's device; OK when there is none.
  Status Unprepare(const std::string& claim_uid, const std::string& device);

  // After a restart: `prepared` are the instances the checkpoint holds (by
  // claim UID). They are kept (and known again when they exist on the GPU);
  // those that vanished are dropped from the result. Returns the orphans of
  // the given dynamic GPUs, destroyed when configured.
  std::vector<OrphanInstance> Reconcile(
      const std::map<std::string, std::vector<MigInstance>>& prepared,
      const std::vector<int>& gpu_indices);
  // The orphans now, without destroying anything (for doctor).
  std::vector<OrphanInstance> Orphans(const std::vector<int>& gpu_indices);

  // The instances held, by claim UID.
  std::map<std::string, std::vector<MigInstance>> Held() const;

 private:
  std::mutex& GpuMutex(int gpu_index);
  std::vector<OrphanInstance> FindOrphans(const std::vector<int>& gpu_indices, bool destroy);

  // Writes held_ to state_file_ (requires mutex_); errors are returned to
  // the caller of the change.
  Status SaveLocked() const;

  std::shared_ptr<MigControl> control_;
  DynamicMigConfig config_;
  std::string state_file_;
  mutable std::mutex mutex_;  // guards held_ and gpu_mutexes_
  std::map<std::string, std::vector<MigInstance>> held_;
  std::map<int, std::unique_ptr<std::mutex>> gpu_mutexes_;
};

}  // namespace danqing::dra
