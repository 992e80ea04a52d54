// ClaimPreparer: the node plugin's NodePrepareResources and
// NodeUnprepareResources, without gRPC.
//
// Prepare of one claim:
//   1. Already prepared (by UID): the recorded answer, again (the kubelet
//      repeats calls after its own restarts); its CDI spec is rewritten if
//      it went missing.
//   2. The allocation from the ClaimSource; its results for other drivers
//      are left to them.
//   3. Each of our devices must be in this node's pool, known and healthy
//      (the DeviceTable published by the agent); the opaque configs for our
//      driver must parse (opaque_config.h) and agree per GPU.
//   4. Time-slicing, where a config asks for it, through the TimeSlicer; two
//      claims on one GPU must ask for the same slice (the GPU has one).
//   5. The claim's CDI spec is written (claim_cdi.h), then the checkpoint.
//      When either write fails (a full disk) everything of this claim is
//      undone and the error returned: nothing prepared before is lost.
// Every error names the claim (namespace/name, UID) and, where one is at
// fault, the device.
//
// Unprepare of one claim: checkpoint without it first, then the CDI spec and
// its time-slices go; a claim not prepared is OK (idempotent).
//
// Restore (at start): the checkpoint is loaded; a corrupt one is reported
// (log, corrupt_checkpoints) and rebuilt from the claims' CDI specs, which
// carry each PreparedClaim; a missing one is rebuilt the same way. A CDI spec
// of a claim the (good) checkpoint does not hold is the trace of a prepare
// interrupted between its two writes: removed (the kubelet prepares again).
// Time-slices of restored claims are applied again (a reboot resets them).
//
// Thread-safety: all methods may be called from any thread. The ClaimSource
// is called without the lock held; the writes and the state are under mu_,
// so prepares of claims on the same GPU are serialised where they touch it.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "dra/checkpoint.h"
#include "dra/claim_cdi.h"
#include "dra/claims.h"
#include "dra/node_devices.h"
#include "dra/opaque_config.h"
#include "dra/prepared.h"

namespace danqing::dra {

// Sets a GPU's compute time-slice: the scheduling slice every context on the
// GPU gets, one setting per GPU (what `nvidia-smi compute-policy
// --set-timeslice` sets; NvidiaSmiTimeSlicer in time_slicer.h). Tests pass a
// fake.
class TimeSlicer {
 public:
  virtual ~TimeSlicer() = default;
  // OK: set. NOT_SUPPORTED: the GPU or driver cannot (the claim is prepared
  // all the same, time-sliced at the driver's default, and a warning logged);
  // any other error fails the prepare.
  virtual Status Set(const std::string& gpu_uuid, TimeSlice slice) = 0;
};

// Devices made when a claim is prepared and unmade when it is unprepared
// (dynamic MIG: the agent's adapter over dynamic_mig.h), for the devices of
// one pool of this node. Make is idempotent per (claim, device): a repeat
// gives the same node device; Unmake of what is not made is OK.
class DeviceMaker {
 public:
  virtual ~DeviceMaker() = default;
  // The pool whose devices it makes ("<node>-mig").
  virtual std::string pool() const = 0;
  // Whether `device` of that pool is made at prepare (a placement); others
  // of the pool are looked up in the DeviceTable (static MIG instances).
  virtual bool Makes(const std::string& device) const = 0;
  // The device made for the claim (its GPU's health is checked before).
  // Errors name the device.
  virtual Result<NodeDevice> Make(const std::string& claim_uid, const std::string& device) = 0;
  virtual Status Unmake(const std::string& claim_uid, const std::string& device) = 0;
};

struct ClaimRef {
  std::string ns;
  std::string name;
  std::string uid;
};

struct PreparerOptions {
  std::string driver_name = "gpu.danqing.io";
  std::string checkpoint_dir = "/var/lib/kubelet/plugins/gpu.danqing.io";
  ClaimCdiOptions cdi;                     // cdi.kind empty: "<driver_name>/claim"
  FileWriter writer = AtomicFileWriter();  // for the CDI specs and the checkpoint
};

struct PreparerStats {
  uint64_t prepares = 0;        // claims prepared (new, not repeats)
  uint64_t prepare_errors = 0;  // claims answered with an error
  uint64_t unprepares = 0;
  uint64_t unprepare_errors = 0;
  uint64_t corrupt_checkpoints = 0;
  uint64_t restored_claims = 0;  // at the last Restore
  uint64_t orphan_specs_removed = 0;
};

class ClaimPreparer {
 public:
  // `source` must outlive the preparer; `slicer` may be null (time-slicing
  // then NOT_SUPPORTED on every GPU).
  ClaimPreparer(PreparerOptions options, ClaimSource* source, TimeSlicer* slicer);

  // See above. Never fails for a corrupt checkpoint (it is rebuilt); an
  // error only when the rebuilt checkpoint cannot be written (the plugin
  // still serves: the claims are in memory).
  Status Restore();

  // Publishes the node's devices and their health. Prepared claims are kept
  // whatever it says (a device that became unhealthy stays prepared).
  void SetDevices(std::shared_ptr<const DeviceTable> devices);
  std::shared_ptr<const DeviceTable> devices() const;

  Result<PreparedClaim> Prepare(const ClaimRef& claim);
  Status Unprepare(const ClaimRef& claim);

  std::map<std::string, PreparedClaim> Prepared() const;
  PreparerStats stats() const;
  const PreparerOptions& options() const { return options_; }

  // Devices of maker->pool() are made and unmade through `maker` (must
  // outlive the preparer; set before Restore and any prepare). A device made
  // for a claim whose prepare then fails (a later device, the CDI spec, the
  // checkpoint) is unmade again.
  void SetDeviceMaker(DeviceMaker* maker) { maker_ = maker; }

  // Called (without the lock) after the prepared set or the devices change:
  // the health stream listens. Set before any other call.
  void OnChange(std::function<void()> f) { on_change_ = std::move(f); }

 private:
  // Slices held on one GPU.
  struct GpuSlice {
    TimeSlice slice = TimeSlice::kDefault;
    std::set<std::string> claims;  // UIDs holding it
  };
  Result<PreparedClaim> PrepareOne(const ClaimRef& ref);
  Status UnprepareOne(const ClaimRef& ref);
  // `made` gets the node devices maker_ made (their names in `made_names`),
  // also on error: the caller unmakes them.
  Result<PreparedClaim> PrepareLocked(const ClaimRef& ref, const ClaimAllocation& alloc,
                                      std::vector<const NodeDevice*>* nodes,
                                      std::deque<NodeDevice>* made,
                                      std::vector<std::string>* made_names);
  // Unmakes `names` of claim `uid` (errors logged).
  void UnmakeLocked(const std::string& uid, const std::vector<std::string>& names);
  // The node device of a prepared device: the DeviceTable's, or maker_'s
  // (again, idempotent) into `made`.
  const NodeDevice* NodeOfPrepared(const std::string& uid, const PreparedDevice& d,
                                   std::deque<NodeDevice>* made);
  Status ApplySliceLocked(const PreparedClaim& c, bool restoring);
  void ReleaseSliceLocked(const PreparedClaim& c);
  void Changed();

  const PreparerOptions options_;
  ClaimSource* const source_;
  TimeSlicer* const slicer_;
  Checkpoint checkpoint_;
  std::function<void()> on_change_;
  DeviceMaker* maker_ = nullptr;

  mutable std::mutex mu_;
  std::map<std::string, PreparedClaim> prepared_;  // guarded by mu_, by UID
  std::map<std::string, GpuSlice> slices_;         // guarded by mu_, by GPU UUID
  std::shared_ptr<const DeviceTable> devices_;     // guarded by mu_
  PreparerStats stats_;                            // guarded by mu_
};

// "ns/name (uid)".
std::string ClaimLabel(const ClaimRef& c);

}  // namespace danqing::dra
