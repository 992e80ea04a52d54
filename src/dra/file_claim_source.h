// ClaimSources the agent uses where no API server is configured:
//   FileClaimSource   reads a ResourceClaim list (JSON, as
//                     `kubectl get resourceclaims -A -o json` prints it, or a
//                     single ResourceClaim) afresh at every Get, parsed with
//                     ParseClaim (claims.h) as the API server's answers are;
//   NoClaimSource     fails every Get with UNAVAILABLE saying why: the node
//                     plugin still serves (registration, unprepare of
//                     checkpointed claims, health), and no prepare is faked.
//
// Thread-safety: Get may be called from several threads (no shared state).
#pragma once

#include <string>

#include "dra/claims.h"

namespace danqing::dra {

class FileClaimSource : public ClaimSource {
 public:
  explicit FileClaimSource(std::string path) : path_(std::move(path)) {}
  Result<ClaimAllocation> Get(const std::string& ns, const std::string& name,
                              const std::string& uid) override;

 private:
  std::string path_;
};

class NoClaimSource : public ClaimSource {
 public:
  explicit NoClaimSource(std::string why) : why_(std::move(why)) {}
  Result<ClaimAllocation> Get(const std::string& ns, const std::string& name,
                              const std::string& uid) override;

 private:
  std::string why_;
};

}  // namespace danqing::dra
