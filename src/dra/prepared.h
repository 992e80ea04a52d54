// What the node plugin remembers of a prepared claim: enough to answer a
// repeated NodePrepareResources without the API server, to undo it at
// NodeUnprepareResources (also after a restart), and to stream the health of
// its devices. Kept in the checkpoint and, as a spare copy, in an annotation
// of the claim's CDI spec (so a lost checkpoint can be rebuilt from disk).
//
// Thread-safety: values.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "dra/opaque_config.h"

namespace danqing::dra {

struct PreparedDevice {
  std::vector<std::string> requests;  // request names the device satisfies
  std::string pool;
  std::string device;                // name in the pool
  std::vector<std::string> cdi_ids;  // vendor/class=name
  std::optional<std::string> share_id;
  std::string gpu_uuid;  // the physical GPU (time-slicing, health)
  bool operator==(const PreparedDevice&) const = default;
};

struct PreparedClaim {
  std::string uid;
  std::string ns;
  std::string name;
  std::vector<PreparedDevice> devices;
  std::optional<TimeSlice> time_slice;  // applied to every GPU of `devices`
  bool operator==(const PreparedClaim&) const = default;
};

nlohmann::json ToJson(const PreparedClaim& c);
// INVALID_ARGUMENT naming the field that is missing or of the wrong type.
Result<PreparedClaim> PreparedClaimFromJson(const nlohmann::json& j);

}  // namespace danqing::dra
