// The opaque configuration of gpu.danqing.io claims: what a DeviceClass's or
// a ResourceClaim's `config[].opaque.parameters` may say to this driver.
//
//   {"apiVersion": "gpu.danqing.io/v1",       optional; this value only
//    "kind": "GpuConfig",                     optional; this value only
//    "sharing": {                             optional; absent: the GPU as it is
//      "strategy": "TimeSlicing",             required in sharing
//      "interval": "Default|Short|Medium|Long"  optional, TimeSlicing only; default Default
//    }}
//
// Any other field is an error naming it. Errors are INVALID_ARGUMENT with
// the field's path ("sharing.interval") and the value found.
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace danqing::dra {

inline constexpr std::string_view kConfigApiVersion = "gpu.danqing.io/v1";
inline constexpr std::string_view kConfigKind = "GpuConfig";

// The GPU's compute time-slice, in the four steps the driver offers
// (nvidia-smi compute-policy --set-timeslice 0..3); Default is the driver's own.
enum class TimeSlice { kDefault = 0, kShort = 1, kMedium = 2, kLong = 3 };
std::string_view TimeSliceName(TimeSlice t);
std::optional<TimeSlice> ParseTimeSlice(std::string_view name);

struct GpuConfig {
  std::optional<TimeSlice> time_slice;  // set: sharing.strategy TimeSlicing
  bool operator==(const GpuConfig&) const = default;
};

Result<GpuConfig> ParseGpuConfig(const nlohmann::json& parameters);

}  // namespace danqing::dra
