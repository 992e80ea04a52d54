// ClaimReader: the ClaimSource the agent uses when an API server is
// configured. It GETs each ResourceClaim (resource.k8s.io/v1) through the
// kube::Client and parses it with ParseClaim (claims.h), keeping only this
// driver's results and opaque configs.
//
// Errors keep the API error's kind (NOT_FOUND for a deleted claim,
// PERMISSION_DENIED when RBAC refuses, UNAVAILABLE/DEADLINE_EXCEEDED when the
// API server does not answer: the kubelet retries) with the claim named;
// nothing throws.
//
// Thread-safety: Get is safe from any thread (the client is).
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "dra/claims.h"
#include "kube/client.h"

namespace danqing::dra {

// The REST path of a claim.
std::string ClaimPath(std::string_view namespace_name, std::string_view name);

class ClaimReader : public ClaimSource {
 public:
  // `client` must outlive the reader.
  ClaimReader(kube::Client& client, std::string driver)
      : client_(client), driver_(std::move(driver)) {}

  // GETs and parses the claim. `uid` empty: any UID.
  Result<ClaimAllocation> Get(const std::string& ns, const std::string& name,
                              const std::string& uid) override;

 private:
  kube::Client& client_;
  std::string driver_;
};

}  // namespace danqing::dra
