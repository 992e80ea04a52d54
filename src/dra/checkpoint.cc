#include "dra/checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/read_file.h"

namespace danqing::dra {

FileWriter AtomicFileWriter() {
  return [](const std::string& path, std::string_view content) {
    return WriteFileAtomically(path, content);
  };
}

std::string Fnv1a64Hex(std::string_view s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

Checkpoint::Checkpoint(std::string dir, FileWriter writer)
    : dir_(std::move(dir)), writer_(std::move(writer)) {}

std::string Checkpoint::path() const {
  return dir_ + "/" + std::string(kCheckpointFile);
}

Result<std::map<std::string, PreparedClaim>> Checkpoint::Load() const {
  const std::string p = path();
  const auto text = ReadRegularFile(p, kMaxTextFileBytes);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) return NotFound("no checkpoint at " + p);
    return FailedPrecondition("checkpoint " + p + " cannot be read: " + text.status().message());
  }
  auto bad = [&p](const std::string& why) {
    return FailedPrecondition("checkpoint " + p + " is corrupt: " + why);
  };
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad("not JSON (truncated?)");
  if (!j.is_object()) return bad("not a JSON object");
  if (!j.contains("version") || !j.at("version").is_number_integer() ||
      j.at("version").get<int>() != kCheckpointVersion) {
    return bad("version is not " + std::to_string(kCheckpointVersion));
  }
  if (!j.contains("checksum") || !j.at("checksum").is_string()) return bad("no checksum");
  if (!j.contains("claims") || !j.at("claims").is_array()) return bad("no claims list");
  const std::string want = "fnv1a64:" + Fnv1a64Hex(j.at("claims").dump());
  if (j.at("checksum").get<std::string>() != want) return bad("checksum mismatch");
  std::map<std::string, PreparedClaim> out;
  for (const auto& jc : j.at("claims")) {
    auto c = PreparedClaimFromJson(jc);
    if (!c.ok()) return bad(c.status().message());
    out[c->uid] = std::move(*c);
  }
  return out;
}

Status Checkpoint::Save(const std::map<std::string, PreparedClaim>& claims) const {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [uid, c] : claims) list.push_back(ToJson(c));
  const std::string checksum = "fnv1a64:" + Fnv1a64Hex(list.dump());
  const nlohmann::json j = {
      {"version", kCheckpointVersion}, {"checksum", checksum}, {"claims", std::move(list)}};
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return Unavailable("cannot create checkpoint directory " + dir_ + ": " + ec.message());
  Status s = writer_(path(), j.dump() + "\n");
  if (!s.ok()) return s.WithContext("checkpoint");
  return Status::Ok();
}

}  // namespace danqing::dra
