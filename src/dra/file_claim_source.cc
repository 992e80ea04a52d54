#include "dra/file_claim_source.h"

#include <nlohmann/json.hpp>

#include "common/printable.h"
#include "common/read_file.h"

namespace danqing::dra {

Result<ClaimAllocation> FileClaimSource::Get(const std::string& ns, const std::string& name,
                                             const std::string& uid) {
  const auto text = ReadRegularFile(path_, kMaxTextFileBytes);
  if (!text.ok()) return Unavailable("claims file " + path_ + ": " + text.status().message());
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded()) return InvalidArgument("claims file " + path_ + ": not JSON");
  const nlohmann::json* items = &j;
  nlohmann::json one = nlohmann::json::array();
  if (j.is_object() && j.contains("items")) {
    items = &j["items"];
  } else if (j.is_object()) {
    one.push_back(j);
    items = &one;
  }
  if (!items->is_array()) return InvalidArgument("claims file " + path_ + ": items: want a list");
  for (const auto& c : *items) {
    if (!c.is_object() || !c.contains("metadata") || !c["metadata"].is_object()) continue;
    const auto& md = c["metadata"];
    if (md.value("namespace", "") != ns || md.value("name", "") != name) continue;
    auto a = ParseClaim(c, "", uid);
    if (!a.ok()) return a.status().WithContext("claims file " + path_);
    return a;
  }
  return NotFound("resourceclaim " + Printable(ns) + "/" + Printable(name) + " not found in " +
                  path_);
}

Result<ClaimAllocation> NoClaimSource::Get(const std::string& ns, const std::string& name,
                                           const std::string&) {
  return Unavailable("cannot read resourceclaim " + Printable(ns) + "/" + Printable(name) + ": " +
                     why_);
}

}  // namespace danqing::dra
