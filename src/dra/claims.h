// Claims: a ResourceClaim's allocation as the DRA driver reads it, the one
// parser of resource.k8s.io/v1 ResourceClaim JSON (ParseClaim), and
// ClaimSource, where the node plugin reads an allocation.
//
// The kubelet sends NodePrepareResources only references (namespace, name,
// UID); the driver reads each claim's status.allocation:
//   devices.results[]  {request, driver, pool, device, adminAccess, shareID}
//   devices.config[]   {source FromClass|FromClaim, requests[], opaque
//                       {driver, parameters}}
//   reservedFor[]      {resource, name, uid}: the consumers (several pods
//                      for a shared claim)
// ClaimSource keeps the node plugin independent of the API client: the agent
// backs it with the API client's claim GET (ClaimReader, claim_reader.h),
// or a claims file (file_claim_source.h); tests with an in-memory fake
// (testing/dra/fake_claim_source.h). Every source parses with ParseClaim.
//
// Thread-safety: values and a free function; ClaimSource implementations
// must allow Get from several threads at once (the kubelet may prepare
// claims of different pods concurrently).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace danqing::dra {

// One entry of status.allocation.devices.results.
struct AllocatedDevice {
  std::string request;                  // the request (or "request/subrequest") it satisfies
  std::string driver;                   // the driver that must prepare it
  std::string pool;                     // the pool of the driver: this node's name for ours
  std::string device;                   // the device's name in the pool (a DNS label)
  std::optional<std::string> share_id;  // set when the device allows several allocations
  bool admin_access = false;

  bool operator==(const AllocatedDevice&) const = default;
};

// One entry of status.allocation.devices.config with an opaque config
// (a class's or the claim's own config).
struct OpaqueConfig {
  std::vector<std::string> requests;  // the requests it applies to; empty = every request
  std::string driver;                 // opaque.driver
  nlohmann::json parameters;          // opaque.parameters, as the API server returned it
  std::string source = {};            // "FromClass" | "FromClaim"

  bool operator==(const OpaqueConfig&) const = default;
};

// One entry of status.reservedFor.
struct ReservedFor {
  std::string resource;  // "pods"
  std::string name;
  std::string uid;

  bool operator==(const ReservedFor&) const = default;
};

struct ClaimAllocation {
  std::string ns;
  std::string name;
  std::string uid;                        // metadata.uid
  std::string resource_version;           // metadata.resourceVersion ("" when absent)
  std::vector<AllocatedDevice> devices;   // in order
  std::vector<OpaqueConfig> config;       // opaque configs only, in order
  std::vector<ReservedFor> reserved_for;  // status.reservedFor

  bool operator==(const ClaimAllocation&) const = default;
};

// Parses a ResourceClaim object. `driver`: keep only the results and opaque
// configs of this driver (a claim may hold devices of several drivers);
// empty: keep all. `expected_uid` (may be empty): the UID the kubelet named.
// Errors, each naming the claim and the field ("ResourceClaim default/c1:
// status.allocation.devices.results[1].pool: missing or not a string"):
// INVALID_ARGUMENT for a malformed object; NOT_FOUND when its UID is not
// `expected_uid` (the claim was deleted and made again: the one the kubelet
// asked for is gone); FAILED_PRECONDITION when it has no status.allocation.
Result<ClaimAllocation> ParseClaim(const nlohmann::json& claim, std::string_view driver,
                                   std::string_view expected_uid = "");
// The same from JSON text (INVALID_ARGUMENT when it is not JSON).
Result<ClaimAllocation> ParseClaimText(std::string_view text, std::string_view driver,
                                       std::string_view expected_uid = "");

class ClaimSource {
 public:
  virtual ~ClaimSource() = default;

  // The allocation of claim `ns`/`name`. OK: the claim exists, has UID `uid`
  // and is allocated. Errors (each with the claim named): NOT_FOUND when it
  // does not exist or has another UID (a claim deleted and made again),
  // FAILED_PRECONDITION when it is not allocated, UNAVAILABLE or
  // DEADLINE_EXCEEDED when the source cannot answer now (the kubelet
  // retries), PERMISSION_DENIED when the source refuses the read,
  // INVALID_ARGUMENT when its content cannot be read.
  virtual Result<ClaimAllocation> Get(const std::string& ns, const std::string& name,
                                      const std::string& uid) = 0;
};

}  // namespace danqing::dra
