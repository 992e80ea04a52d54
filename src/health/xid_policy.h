// XidPolicy: what an NVML XID critical-error event means for a GPU's health.
//
// Three classes, after NVIDIA's XID catalogue:
//   kIgnore    application errors (an illegal address, a kernel that was
//              killed...): the GPU is fine, the workload is not. Never change
//              health.
//   kUnhealthy the device misbehaved; it is taken out of service and returns
//              on its own after a quiet period without a new such XID.
//   kReset     the GPU needs a reset (fell off the bus, uncontained ECC, GSP
//              errors...): it stays out of service until the agent restarts
//              after the operator reset the GPU.
//
// Operators adjust it with NVIDIA's variables, with NVIDIA's meaning:
//   DP_DISABLE_HEALTHCHECKS  "all" or "xids": no XID marks a device unhealthy
//                            ("all" also switches off the polled checks);
//                            else a comma-separated list of XIDs to ignore,
//                            in addition to the application errors.
//   DP_ENABLE_HEALTHCHECKS   XIDs that count even if ignored above (also
//                            application errors, or with "all"/"xids" set).
//                            "all" or "xids": every XID counts.
// and with Danqing's danqing.resetXids (XIDs added to the reset class).
//
// Thread-safety: a value; const methods may be called from any thread.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace danqing::health {

enum class XidAction { kIgnore, kUnhealthy, kReset };
std::string_view XidActionName(XidAction a);  // "ignore", "unhealthy", "reset"

// A short description of a well-known XID ("GPU has fallen off the bus"), or
// "" for one Danqing has no text for.
std::string_view XidDescription(uint64_t xid);

// The built-in classes (before any operator setting).
const std::set<uint64_t>& DefaultApplicationXids();  // 13, 31, 43, 45, 68, 109
const std::set<uint64_t>& DefaultResetXids();        // 48, 64, 74, 79, 95, 119, 120, 140, 154

class XidPolicy {
 public:
  XidPolicy();  // the built-in classes, every check on

  // From NVIDIA's two variables (empty = unset) and extra reset-class XIDs.
  // INVALID_ARGUMENT for anything but "all", "xids" or a comma-separated list
  // of non-negative integers.
  static Result<XidPolicy> Make(std::string_view disable_health_checks,
                                std::string_view enable_health_checks,
                                const std::vector<int>& reset_xids);

  XidAction Classify(uint64_t xid) const;

  // False with DP_DISABLE_HEALTHCHECKS=all: the polled checks (lost GPU,
  // thermal, ECC, row remapping) are off too.
  bool polled_checks() const { return polled_checks_; }
  // False when no XID can change health (nothing to subscribe to for XIDs).
  bool any_xid_counts() const;

  // One line for the start-up log: "XIDs ignored: 13,31,...; reset class: ...".
  std::string Describe() const;

 private:
  bool all_xids_ignored_ = false;  // "all"/"xids" in DP_DISABLE_HEALTHCHECKS
  bool all_xids_enabled_ = false;  // "all"/"xids" in DP_ENABLE_HEALTHCHECKS
  bool polled_checks_ = true;
  std::set<uint64_t> ignored_;     // application errors + DP_DISABLE list
  std::set<uint64_t> enabled_;     // DP_ENABLE list (wins over ignored)
  std::set<uint64_t> reset_;
};

}  // namespace danqing::health
