// ClaimReader: a ResourceClaim's allocation for this driver, read from the
// API server (resource.k8s.io/v1) and parsed into plain values.
//
// The kubelet sends NodePrepareResources only claim references (namespace,
// name, UID); the driver GETs each claim and reads status.allocation:
//   devices.results[]  {request, driver, pool, device, adminAccess, shareID}
//   devices.config[]   {source FromClass|FromClaim, requests[], opaque
//                       {driver, parameters}}
// Only results and opaque configs of this driver are kept (a claim may hold
// devices of several drivers). Each error names the claim and the field
// ("ResourceClaim default/c1: status.allocation.devices.results[1].pool:
// missing or not a string"); nothing throws.
//
// Thread-safety: ClaimReader is safe from any thread (the client is).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "kube/client.h"

namespace danqing::dra {

struct AllocatedDevice {
  std::string request;  // "gpu", or "<main>/<subrequest>"
  std::string driver;
  std::string pool;
  std::string device;
  std::optional<std::string> share_id;  // set for devices allocated more than once
  bool admin_access = false;
  bool operator==(const AllocatedDevice&) const = default;
};

struct ClaimConfig {
  std::string source;                 // "FromClass" | "FromClaim"
  std::vector<std::string> requests;  // empty: every request of the claim
  nlohmann::json parameters;          // the opaque parameters (a JSON value), unvalidated
};

struct ReservedFor {
  std::string resource;  // "pods"
  std::string name;
  std::string uid;
};

struct ClaimAllocation {
  std::string namespace_name;
  std::string name;
  std::string uid;
  std::string resource_version;
  std::vector<AllocatedDevice> devices;  // this driver's results, in order
  std::vector<ClaimConfig> config;       // this driver's opaque configs, in order
  std::vector<ReservedFor>
      reserved_for;  // status.reservedFor: the consumers (shared claims: several pods)
};

// Parses a ResourceClaim object. `expected_uid` (may be empty): the UID the
// kubelet named; a different one means the claim was deleted and recreated
// (FAILED_PRECONDITION). Errors: INVALID_ARGUMENT for a malformed object,
// FAILED_PRECONDITION when it has no status.allocation (not allocated).
Result<ClaimAllocation> ParseClaim(const nlohmann::json& claim, std::string_view driver,
                                   std::string_view expected_uid = "");
// The same from JSON text (INVALID_ARGUMENT when it is not JSON).
Result<ClaimAllocation> ParseClaimText(std::string_view text, std::string_view driver,
                                       std::string_view expected_uid = "");

// The REST path of a claim.
std::string ClaimPath(std::string_view namespace_name, std::string_view name);

class ClaimReader {
 public:
  ClaimReader(kube::Client& client, std::string driver)
      : client_(client), driver_(std::move(driver)) {}

  // GETs and parses the claim. API errors keep their kind (NOT_FOUND for a
  // deleted claim, PERMISSION_DENIED, UNAVAILABLE, ...) with the claim named.
  Result<ClaimAllocation> Get(const std::string& namespace_name, const std::string& name,
                              const std::string& expected_uid = "");

 private:
  kube::Client& client_;
  std::string driver_;
};

}  // namespace danqing::dra
