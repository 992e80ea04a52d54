#include "dra/file_claim_source.h"

#include <nlohmann/json.hpp>

#include "common/printable.h"
#include "common/read_file.h"

namespace danqing::dra {
namespace {

using T = nlohmann::json::value_t;

Result<std::string> Str(const nlohmann::json& j, const char* key, const std::string& where,
                        bool required = true) {
  if (!j.is_object() || !j.contains(key)) {
    if (!required) return std::string();
    return InvalidArgument(where + "." + key + ": missing");
  }
  if (!j.at(key).is_string()) return InvalidArgument(where + "." + key + ": want a string");
  return j.at(key).get<std::string>();
}

}  // namespace

Result<ClaimAllocation> ClaimAllocationFromJson(const nlohmann::json& claim) {
  if (!claim.is_object()) return InvalidArgument("ResourceClaim: want an object");
  if (!claim.contains("metadata") || !claim["metadata"].is_object()) {
    return InvalidArgument("metadata: missing");
  }
  const auto& md = claim["metadata"];
  ClaimAllocation a;
  for (auto [key, out] :
       {std::pair{"namespace", &a.ns}, std::pair{"name", &a.name}, std::pair{"uid", &a.uid}}) {
    auto v = Str(md, key, "metadata");
    if (!v.ok()) return v.status();
    *out = *v;
  }
  const nlohmann::json* alloc = nullptr;
  if (claim.contains("status") && claim["status"].is_object() &&
      claim["status"].contains("allocation")) {
    alloc = &claim["status"]["allocation"];
  }
  if (alloc == nullptr || alloc->is_null()) {
    return FailedPrecondition("resourceclaim " + Printable(a.ns) + "/" + Printable(a.name) +
                              " is not allocated");
  }
  if (!alloc->is_object()) return InvalidArgument("status.allocation: want an object");
  if (!alloc->contains("devices")) return a;
  const auto& devices = (*alloc)["devices"];
  if (!devices.is_object()) return InvalidArgument("status.allocation.devices: want an object");
  if (devices.contains("results")) {
    if (!devices["results"].is_array())
      return InvalidArgument("status.allocation.devices.results: want a list");
    for (size_t i = 0; i < devices["results"].size(); ++i) {
      const auto& r = devices["results"][i];
      const std::string where = "status.allocation.devices.results[" + std::to_string(i) + "]";
      AllocatedDevice d;
      for (auto [key, out] : {std::pair{"request", &d.request}, std::pair{"driver", &d.driver},
                              std::pair{"pool", &d.pool}, std::pair{"device", &d.device}}) {
        auto v = Str(r, key, where);
        if (!v.ok()) return v.status();
        *out = *v;
      }
      if (r.contains("shareID") && !r["shareID"].is_null()) {
        auto v = Str(r, "shareID", where);
        if (!v.ok()) return v.status();
        d.share_id = *v;
      }
      a.devices.push_back(std::move(d));
    }
  }
  if (devices.contains("config")) {
    if (!devices["config"].is_array())
      return InvalidArgument("status.allocation.devices.config: want a list");
    for (size_t i = 0; i < devices["config"].size(); ++i) {
      const auto& c = devices["config"][i];
      const std::string where = "status.allocation.devices.config[" + std::to_string(i) + "]";
      if (!c.is_object()) return InvalidArgument(where + ": want an object");
      if (!c.contains("opaque")) continue;  // not an opaque config: nothing for a driver
      OpaqueConfig oc;
      if (c.contains("requests")) {
        if (!c["requests"].is_array()) return InvalidArgument(where + ".requests: want a list");
        for (const auto& rq : c["requests"]) {
          if (!rq.is_string()) return InvalidArgument(where + ".requests: want strings");
          oc.requests.push_back(rq.get<std::string>());
        }
      }
      auto driver = Str(c["opaque"], "driver", where + ".opaque");
      if (!driver.ok()) return driver.status();
      oc.driver = *driver;
      oc.parameters =
          c["opaque"].contains("parameters") ? c["opaque"]["parameters"] : nlohmann::json::object();
      a.config.push_back(std::move(oc));
    }
  }
  return a;
}

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
    auto a = ClaimAllocationFromJson(c);
    if (!a.ok()) return a.status().WithContext("claims file " + path_);
    if (a->uid != uid) {
      return NotFound("resourceclaim " + Printable(ns) + "/" + Printable(name) + " has UID " +
                      Printable(a->uid) + ", not " + Printable(uid));
    }
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
