#include "dra/claim_cdi.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/read_file.h"

namespace danqing::dra {
namespace fs = std::filesystem;

namespace {

// "<vendor>-<class>_" : every claim spec's file name starts with it.
std::string SpecPrefix(const std::string& kind) {
  std::string p = kind;
  if (auto slash = p.find('/'); slash != std::string::npos) p[slash] = '-';
  return p + "_";
}

}  // namespace

std::string CdiDeviceName(const std::string& claim_uid, const std::string& device) {
  return claim_uid + "-" + device;
}

std::string CdiId(const std::string& kind, const std::string& claim_uid,
                  const std::string& device) {
  return kind + "=" + CdiDeviceName(claim_uid, device);
}

std::string ClaimSpecPath(const ClaimCdiOptions& options, const std::string& claim_uid) {
  return options.cdi_root + "/" + SpecPrefix(options.kind) + claim_uid + ".json";
}

Status WriteClaimSpec(const ClaimCdiOptions& options, const PreparedClaim& claim,
                      const std::vector<const NodeDevice*>& devices, const FileWriter& writer) {
  const auto slash = options.kind.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == options.kind.size()) {
    return InvalidArgument("CDI kind '" + options.kind + "' is not vendor/class");
  }
  nlohmann::json cdi_devices = nlohmann::json::array();
  for (size_t i = 0; i < claim.devices.size() && i < devices.size(); ++i) {
    nlohmann::json nodes = nlohmann::json::array();
    for (const auto& n : deviceplugin::DeviceNodes(devices[i]->device, options.mig_cap_minors)) {
      nodes.push_back({{"path", n}, {"hostPath", deviceplugin::UnderRoot(options.dev_root, n)}});
    }
    cdi_devices.push_back({{"name", CdiDeviceName(claim.uid, claim.devices[i].device)},
                           {"containerEdits", {{"deviceNodes", std::move(nodes)}}}});
  }
  nlohmann::json control = nlohmann::json::array();
  for (const auto& n : deviceplugin::ControlNodes(options.dev_root)) {
    control.push_back({{"path", n}, {"hostPath", deviceplugin::UnderRoot(options.dev_root, n)}});
  }
  nlohmann::json common = {{"deviceNodes", std::move(control)}};
  deviceplugin::AddDriverEdits(options.driver_files, common);
  const nlohmann::json spec = {
      {"cdiVersion", "0.6.0"},
      {"kind", options.kind},
      {"annotations", {{std::string(kPreparedClaimAnnotation), ToJson(claim).dump()}}},
      {"devices", std::move(cdi_devices)},
      {"containerEdits", std::move(common)}};
  std::error_code ec;
  fs::create_directories(options.cdi_root, ec);
  if (ec)
    return Unavailable("cannot create CDI directory " + options.cdi_root + ": " + ec.message());
  Status s = writer(ClaimSpecPath(options, claim.uid), spec.dump(2) + "\n");
  if (!s.ok()) return s.WithContext("CDI spec");
  return Status::Ok();
}

Status RemoveClaimSpec(const ClaimCdiOptions& options, const std::string& claim_uid) {
  const std::string p = ClaimSpecPath(options, claim_uid);
  std::error_code ec;
  fs::remove(p, ec);
  if (ec) return Unavailable("cannot remove CDI spec " + p + ": " + ec.message());
  return Status::Ok();
}

std::map<std::string, PreparedClaim> ReadClaimSpecs(const ClaimCdiOptions& options,
                                                    std::vector<std::string>* skipped) {
  std::map<std::string, PreparedClaim> out;
  const std::string prefix = SpecPrefix(options.kind);
  std::error_code ec;
  for (fs::directory_iterator it(options.cdi_root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0 || it->path().extension() != ".json") continue;
    auto skip = [&](const std::string& why) {
      if (skipped) skipped->push_back(it->path().string() + ": " + why);
    };
    const auto text = ReadRegularFile(it->path().string(), kMaxTextFileBytes);
    if (!text.ok()) {
      skip(text.status().message());
      continue;
    }
    const nlohmann::json spec = nlohmann::json::parse(*text, nullptr, false);
    if (spec.is_discarded() || !spec.is_object() || !spec.contains("annotations") ||
        !spec["annotations"].is_object() ||
        !spec["annotations"].contains(kPreparedClaimAnnotation) ||
        !spec["annotations"][std::string(kPreparedClaimAnnotation)].is_string()) {
      skip("no readable " + std::string(kPreparedClaimAnnotation) + " annotation");
      continue;
    }
    const nlohmann::json j = nlohmann::json::parse(
        spec["annotations"][std::string(kPreparedClaimAnnotation)].get<std::string>(), nullptr,
        false);
    auto claim = PreparedClaimFromJson(j);
    if (!claim.ok()) {
      skip(claim.status().message());
      continue;
    }
    out[claim->uid] = std::move(*claim);
  }
  return out;
}

}  // namespace danqing::dra
