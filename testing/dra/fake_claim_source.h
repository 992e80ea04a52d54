// FakeClaimSource: an in-memory ClaimSource for tests and benchmarks. Claims
// are put in by the test (playing the scheduler that wrote
// status.allocation); Get answers them as the API server would, by
// namespace/name, NOT_FOUND for an unknown claim or another UID. Errors can
// be injected, and Get can be held at a gate (a slow API server; an agent
// killed mid-prepare).
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "dra/claim_preparer.h"
#include "dra/claims.h"

namespace danqing::testing {

class FakeClaimSource : public dra::ClaimSource {
 public:
  void Put(const dra::ClaimAllocation& a) {
    std::lock_guard<std::mutex> l(mu_);
    claims_[a.ns + "/" + a.name] = a;
  }
  void Remove(const std::string& ns, const std::string& name) {
    std::lock_guard<std::mutex> l(mu_);
    claims_.erase(ns + "/" + name);
  }
  // Every Get fails with `s` until cleared (nullopt).
  void FailWith(std::optional<Status> s) {
    std::lock_guard<std::mutex> l(mu_);
    fail_ = std::move(s);
  }
  // Closed: Get waits at the gate until it is opened again.
  void CloseGate() {
    std::lock_guard<std::mutex> l(mu_);
    gate_open_ = false;
  }
  void OpenGate() {
    std::lock_guard<std::mutex> l(mu_);
    gate_open_ = true;
    cv_.notify_all();
  }
  // Blocks until `n` Gets are waiting at the closed gate.
  void WaitForWaiters(int n) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return waiting_ >= n; });
  }
  uint64_t gets() const {
    std::lock_guard<std::mutex> l(mu_);
    return gets_;
  }

  Result<dra::ClaimAllocation> Get(const std::string& ns, const std::string& name,
                                   const std::string& uid) override {
    std::unique_lock<std::mutex> l(mu_);
    ++gets_;
    ++waiting_;
    cv_.notify_all();
    cv_.wait(l, [&] { return gate_open_; });
    --waiting_;
    if (fail_) return *fail_;
    auto it = claims_.find(ns + "/" + name);
    if (it == claims_.end())
      return NotFound("resourceclaims \"" + name + "\" not found in namespace " + ns);
    if (it->second.uid != uid) {
      return NotFound("resourceclaim " + ns + "/" + name + " has UID " + it->second.uid + ", not " +
                      uid);
    }
    return it->second;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, dra::ClaimAllocation> claims_;  // guarded by mu_
  std::optional<Status> fail_;                          // guarded by mu_
  bool gate_open_ = true;                               // guarded by mu_
  int waiting_ = 0;                                     // guarded by mu_
  uint64_t gets_ = 0;                                   // guarded by mu_
};

// A TimeSlicer that records what it was told; NOT_SUPPORTED for GPUs named
// in `unsupported`.
class FakeTimeSlicer : public dra::TimeSlicer {
 public:
  Status Set(const std::string& gpu_uuid, dra::TimeSlice slice) override {
    std::lock_guard<std::mutex> l(mu_);
    if (unsupported_.count(gpu_uuid))
      return {StatusCode::kNotSupported, "time-slice not supported on " + gpu_uuid};
    slices_[gpu_uuid] = slice;
    ++calls_;
    return Status::Ok();
  }
  void Unsupported(const std::string& gpu_uuid) {
    std::lock_guard<std::mutex> l(mu_);
    unsupported_[gpu_uuid] = true;
  }
  std::optional<dra::TimeSlice> SliceOf(const std::string& gpu_uuid) const {
    std::lock_guard<std::mutex> l(mu_);
    auto it = slices_.find(gpu_uuid);
    if (it == slices_.end()) return std::nullopt;
    return it->second;
  }
  int calls() const {
    std::lock_guard<std::mutex> l(mu_);
    return calls_;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, dra::TimeSlice> slices_;
  std::map<std::string, bool> unsupported_;
  int calls_ = 0;
};

}  // namespace danqing::testing
