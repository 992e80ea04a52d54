// ClaimSources the agent can use before the API client is wired in:
//   FileClaimSource   reads a ResourceClaim list (JSON, as
//                     `kubectl get resourceclaims -A -o json` prints it, or a
//                     single ResourceClaim) afresh at every Get;
//   NoClaimSource     fails every Get with UNAVAILABLE saying why: the node
//                     plugin still serves (registration, unprepare of
//                     checkpointed claims, health), and no prepare is faked.
//
// Thread-safety: Get may be called from several threads (no shared state).
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "dra/claims.h"

namespace danqing::dra {

// The allocation of one ResourceClaim object (resource.k8s.io/v1 JSON):
// metadata.{namespace,name,uid}; status.allocation.devices.results[]
// {request, driver, pool, device, shareID}; .config[]{requests, opaque{driver,
// parameters}}. INVALID_ARGUMENT naming the field when a field is missing or
// of the wrong type; FAILED_PRECONDITION when the claim is not allocated.
Result<ClaimAllocation> ClaimAllocationFromJson(const nlohmann::json& claim);

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
