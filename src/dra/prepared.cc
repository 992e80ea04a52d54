#include "dra/prepared.h"

#include <nlohmann/json.hpp>

namespace danqing::dra {
namespace {

Status Want(const nlohmann::json& j, const char* key, nlohmann::json::value_t type,
            const std::string& where) {
  if (!j.contains(key)) return InvalidArgument(where + "." + key + ": missing");
  if (j.at(key).type() != type) return InvalidArgument(where + "." + key + ": wrong type");
  return Status::Ok();
}

Result<std::vector<std::string>> Strings(const nlohmann::json& j, const char* key,
                                         const std::string& where) {
  if (Status s = Want(j, key, nlohmann::json::value_t::array, where); !s.ok()) return s;
  std::vector<std::string> out;
  for (const auto& v : j.at(key)) {
    if (!v.is_string()) return InvalidArgument(where + "." + key + ": want strings");
    out.push_back(v.get<std::string>());
  }
  return out;
}

}  // namespace

nlohmann::json ToJson(const PreparedClaim& c) {
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& d : c.devices) {
    nlohmann::json jd = {{"requests", d.requests},
                         {"pool", d.pool},
                         {"device", d.device},
                         {"cdiIDs", d.cdi_ids},
                         {"gpuUUID", d.gpu_uuid}};
    if (d.share_id) jd["shareID"] = *d.share_id;
    devices.push_back(std::move(jd));
  }
  nlohmann::json j = {
      {"uid", c.uid}, {"namespace", c.ns}, {"name", c.name}, {"devices", std::move(devices)}};
  if (c.time_slice) j["timeSlice"] = std::string(TimeSliceName(*c.time_slice));
  return j;
}

Result<PreparedClaim> PreparedClaimFromJson(const nlohmann::json& j) {
  using T = nlohmann::json::value_t;
  if (!j.is_object()) return InvalidArgument("claim: want an object");
  PreparedClaim c;
  for (const char* key : {"uid", "namespace", "name"}) {
    if (Status s = Want(j, key, T::string, "claim"); !s.ok()) return s;
  }
  c.uid = j.at("uid").get<std::string>();
  c.ns = j.at("namespace").get<std::string>();
  c.name = j.at("name").get<std::string>();
  const std::string where = "claim " + c.uid;
  if (Status s = Want(j, "devices", T::array, where); !s.ok()) return s;
  for (const auto& jd : j.at("devices")) {
    if (!jd.is_object()) return InvalidArgument(where + ".devices: want objects");
    PreparedDevice d;
    for (const char* key : {"pool", "device", "gpuUUID"}) {
      if (Status s = Want(jd, key, T::string, where + ".devices[]"); !s.ok()) return s;
    }
    d.pool = jd.at("pool").get<std::string>();
    d.device = jd.at("device").get<std::string>();
    d.gpu_uuid = jd.at("gpuUUID").get<std::string>();
    auto requests = Strings(jd, "requests", where + ".devices[]");
    if (!requests.ok()) return requests.status();
    d.requests = std::move(*requests);
    auto ids = Strings(jd, "cdiIDs", where + ".devices[]");
    if (!ids.ok()) return ids.status();
    d.cdi_ids = std::move(*ids);
    if (jd.contains("shareID")) {
      if (!jd.at("shareID").is_string())
        return InvalidArgument(where + ".devices[].shareID: wrong type");
      d.share_id = jd.at("shareID").get<std::string>();
    }
    c.devices.push_back(std::move(d));
  }
  if (j.contains("timeSlice")) {
    std::optional<TimeSlice> t;
    if (j.at("timeSlice").is_string()) t = ParseTimeSlice(j.at("timeSlice").get<std::string>());
    if (!t) return InvalidArgument(where + ".timeSlice: not a time-slice name");
    c.time_slice = t;
  }
  return c;
}

}  // namespace danqing::dra
