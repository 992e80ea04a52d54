#include "dra/claim_reader.h"

namespace danqing::dra {

std::string ClaimPath(std::string_view ns, std::string_view name) {
  return "/apis/resource.k8s.io/v1/namespaces/" + std::string(ns) + "/resourceclaims/" +
         std::string(name);
}

Result<ClaimAllocation> ClaimReader::Get(const std::string& ns, const std::string& name,
                                         const std::string& uid) {
  // Names from the kubelet are DNS labels/subdomains: anything that could
  // change the path is refused rather than sent.
  for (const std::string* part : {&ns, &name}) {
    if (part->empty() || part->find_first_of("/?#%\\ ") != std::string::npos || *part == "." ||
        *part == "..") {
      return InvalidArgument("ResourceClaim \"" + ns + "/" + name +
                             "\": namespace and name must be non-empty DNS names");
    }
  }
  auto r = client_.Get(ClaimPath(ns, name));
  if (!r.ok()) {
    const Status st = r.error().ToStatus();
    return Status(st.code(), "ResourceClaim " + ns + "/" + name + ": " + st.message());
  }
  return ParseClaim(*r, driver_, uid);
}

}  // namespace danqing::dra
