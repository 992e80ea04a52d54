// ClaimSource: where the node plugin reads a ResourceClaim's allocation.
//
// The kubelet sends NodePrepareResources only references (namespace, name,
// UID); the driver reads each claim's status.allocation from the API server.
// This interface is that read, so the node plugin is independent of the API
// client: the agent backs it with the client's claim GET (src/dra/claim_reader),
// tests with an in-memory fake (testing/dra/fake_claim_source.h).
//
// Thread-safety: implementations must allow Get from several threads at once
// (the kubelet may prepare claims of different pods concurrently).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
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

  bool operator==(const AllocatedDevice&) const = default;
};

// One entry of status.allocation.devices.config with an opaque config
// (a class's or the claim's own config).
struct OpaqueConfig {
  std::vector<std::string> requests;  // the requests it applies to; empty = every request
  std::string driver;                 // opaque.driver
  nlohmann::json parameters;          // opaque.parameters, as the API server returned it

  bool operator==(const OpaqueConfig&) const = default;
};

struct ClaimAllocation {
  std::string ns;
  std::string name;
  std::string uid;  // metadata.uid
  std::vector<AllocatedDevice> devices;
  std::vector<OpaqueConfig> config;

  bool operator==(const ClaimAllocation&) const = default;
};

class ClaimSource {
 public:
  virtual ~ClaimSource() = default;

  // The allocation of claim `ns`/`name`. OK: the claim exists, has UID `uid`
  // and is allocated. Errors (each with the claim named): NOT_FOUND when it
  // does not exist or has another UID (a claim deleted and made again),
  // FAILED_PRECONDITION when it is not allocated, UNAVAILABLE or
  // DEADLINE_EXCEEDED when the source cannot answer now (the kubelet
  // retries), INVALID_ARGUMENT when its content cannot be read.
  virtual Result<ClaimAllocation> Get(const std::string& ns, const std::string& name,
                                      const std::string& uid) = 0;
};

}  // namespace danqing::dra
