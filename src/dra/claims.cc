#include "dra/claims.h"

namespace danqing::dra {
namespace {

using Json = nlohmann::json;

class Parser {
 public:
  explicit Parser(std::string claim) : claim_(std::move(claim)) {}

  Status Error(const std::string& field, const std::string& what) const {
    return InvalidArgument("ResourceClaim " + claim_ + ": " + field + ": " + what);
  }

  // A required string member.
  Result<std::string> Str(const Json& obj, const std::string& at, const char* key) const {
    if (!obj.contains(key) || !obj[key].is_string())
      return Error(at + "." + key, "missing or not a string");
    std::string v = obj[key].get<std::string>();
    if (v.empty()) return Error(at + "." + key, "empty");
    return v;
  }

 private:
  std::string claim_;
};

}  // namespace

Result<ClaimAllocation> ParseClaim(const Json& claim, std::string_view driver,
                                   std::string_view expected_uid) {
  if (!claim.is_object()) return InvalidArgument("ResourceClaim: not a JSON object");
  ClaimAllocation out;
  const Json meta = claim.value("metadata", Json());
  if (!meta.is_object())
    return InvalidArgument("ResourceClaim: metadata: missing or not an object");
  out.ns = meta.value("namespace", "");
  out.name = meta.value("name", "");
  const std::string id = out.ns + "/" + out.name;
  Parser p(id);
  if (out.name.empty()) return p.Error("metadata.name", "missing or empty");
  if (claim.value("kind", "ResourceClaim") != "ResourceClaim") {
    return p.Error("kind", "\"" + claim.value("kind", "") + "\", expected ResourceClaim");
  }
  out.uid = meta.value("uid", "");
  out.resource_version = meta.value("resourceVersion", "");
  if (!expected_uid.empty() && out.uid != expected_uid) {
    return NotFound("ResourceClaim " + id + ": metadata.uid is " + out.uid +
                    ", the kubelet asked for " + std::string(expected_uid) +
                    " (the claim was deleted and created again)");
  }
  const Json status = claim.value("status", Json::object());
  if (!status.is_object()) return p.Error("status", "not an object");
  if (!status.contains("allocation") || status["allocation"].is_null()) {
    return Status(
        StatusCode::kFailedPrecondition,
        "ResourceClaim " + id + ": status.allocation is missing (the claim is not allocated)");
  }
  const Json& alloc = status["allocation"];
  if (!alloc.is_object()) return p.Error("status.allocation", "not an object");
  const Json devices = alloc.value("devices", Json::object());
  if (!devices.is_object()) return p.Error("status.allocation.devices", "not an object");
  const Json results = devices.value("results", Json::array());
  if (!results.is_array()) return p.Error("status.allocation.devices.results", "not a list");
  for (std::size_t i = 0; i < results.size(); ++i) {
    const std::string at = "status.allocation.devices.results[" + std::to_string(i) + "]";
    const Json& r = results[i];
    if (!r.is_object()) return p.Error(at, "not an object");
    AllocatedDevice d;
    auto drv = p.Str(r, at, "driver");
    if (!drv.ok()) return drv.status();
    d.driver = *drv;
    if (!driver.empty() && d.driver != driver) continue;
    for (auto [key, dst] : {std::pair<const char*, std::string*>{"request", &d.request},
                            {"pool", &d.pool},
                            {"device", &d.device}}) {
      auto v = p.Str(r, at, key);
      if (!v.ok()) return v.status();
      *dst = std::move(v).value();
    }
    if (r.contains("shareID") && !r["shareID"].is_null()) {
      if (!r["shareID"].is_string()) return p.Error(at + ".shareID", "not a string");
      d.share_id = r["shareID"].get<std::string>();
    }
    if (r.contains("adminAccess") && !r["adminAccess"].is_null()) {
      if (!r["adminAccess"].is_boolean()) return p.Error(at + ".adminAccess", "not a boolean");
      d.admin_access = r["adminAccess"].get<bool>();
    }
    out.devices.push_back(std::move(d));
  }
  const Json config = devices.value("config", Json::array());
  if (!config.is_array()) return p.Error("status.allocation.devices.config", "not a list");
  for (std::size_t i = 0; i < config.size(); ++i) {
    const std::string at = "status.allocation.devices.config[" + std::to_string(i) + "]";
    const Json& c = config[i];
    if (!c.is_object()) return p.Error(at, "not an object");
    if (!c.contains("opaque") || c["opaque"].is_null()) continue;  // another kind of config
    const Json& o = c["opaque"];
    if (!o.is_object()) return p.Error(at + ".opaque", "not an object");
    auto drv = p.Str(o, at + ".opaque", "driver");
    if (!drv.ok()) return drv.status();
    if (!driver.empty() && *drv != driver) continue;
    OpaqueConfig cc;
    cc.driver = *drv;
    cc.source = c.value("source", "");
    if (cc.source != "FromClass" && cc.source != "FromClaim") {
      return p.Error(at + ".source", "\"" + cc.source + "\", expected FromClass or FromClaim");
    }
    if (c.contains("requests") && !c["requests"].is_null()) {
      if (!c["requests"].is_array()) return p.Error(at + ".requests", "not a list");
      for (std::size_t k = 0; k < c["requests"].size(); ++k) {
        if (!c["requests"][k].is_string()) {
          return p.Error(at + ".requests[" + std::to_string(k) + "]", "not a string");
        }
        cc.requests.push_back(c["requests"][k].get<std::string>());
      }
    }
    if (!o.contains("parameters") || o["parameters"].is_null()) {
      return p.Error(at + ".opaque.parameters", "missing");
    }
    cc.parameters = o["parameters"];
    out.config.push_back(std::move(cc));
  }
  const Json reserved = status.value("reservedFor", Json::array());
  if (!reserved.is_array()) return p.Error("status.reservedFor", "not a list");
  for (std::size_t i = 0; i < reserved.size(); ++i) {
    const Json& r = reserved[i];
    if (!r.is_object())
      return p.Error("status.reservedFor[" + std::to_string(i) + "]", "not an object");
    out.reserved_for.push_back({r.value("resource", ""), r.value("name", ""), r.value("uid", "")});
  }
  return out;
}

Result<ClaimAllocation> ParseClaimText(std::string_view text, std::string_view driver,
                                       std::string_view expected_uid) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("ResourceClaim: the body is not valid JSON");
  return ParseClaim(j, driver, expected_uid);
}

}  // namespace danqing::dra
