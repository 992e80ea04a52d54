#include "dra/opaque_config.h"

#include "common/printable.h"

namespace danqing::dra {
namespace {

std::string Shown(const nlohmann::json& v) {
  std::string s = v.dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return Printable(s);
}

}  // namespace

std::string_view TimeSliceName(TimeSlice t) {
  switch (t) {
    case TimeSlice::kDefault: return "Default";
    case TimeSlice::kShort: return "Short";
    case TimeSlice::kMedium: return "Medium";
    case TimeSlice::kLong: return "Long";
  }
  return "Default";
}

std::optional<TimeSlice> ParseTimeSlice(std::string_view name) {
  for (TimeSlice t :
       {TimeSlice::kDefault, TimeSlice::kShort, TimeSlice::kMedium, TimeSlice::kLong}) {
    if (TimeSliceName(t) == name) return t;
  }
  return std::nullopt;
}

Result<GpuConfig> ParseGpuConfig(const nlohmann::json& parameters) {
  if (!parameters.is_object()) {
    return InvalidArgument("parameters: want an object, found " + Shown(parameters));
  }
  GpuConfig out;
  for (const auto& [key, value] : parameters.items()) {
    if (key == "apiVersion") {
      if (!value.is_string() || value.get<std::string>() != kConfigApiVersion) {
        return InvalidArgument("parameters.apiVersion: want \"" + std::string(kConfigApiVersion) +
                               "\", found " + Shown(value));
      }
    } else if (key == "kind") {
      if (!value.is_string() || value.get<std::string>() != kConfigKind) {
        return InvalidArgument("parameters.kind: want \"" + std::string(kConfigKind) +
                               "\", found " + Shown(value));
      }
    } else if (key == "sharing") {
      if (!value.is_object())
        return InvalidArgument("parameters.sharing: want an object, found " + Shown(value));
      std::optional<std::string> strategy;
      std::optional<TimeSlice> interval;
      for (const auto& [skey, svalue] : value.items()) {
        if (skey == "strategy") {
          if (!svalue.is_string() || svalue.get<std::string>() != "TimeSlicing") {
            return InvalidArgument("parameters.sharing.strategy: want \"TimeSlicing\", found " +
                                   Shown(svalue));
          }
          strategy = svalue.get<std::string>();
        } else if (skey == "interval") {
          std::optional<TimeSlice> t;
          if (svalue.is_string()) t = ParseTimeSlice(svalue.get<std::string>());
          if (!t) {
            return InvalidArgument(
                "parameters.sharing.interval: want one of Default, Short, Medium, Long, found " +
                Shown(svalue));
          }
          interval = t;
        } else {
          return InvalidArgument("parameters.sharing." + Printable(skey) +
                                 ": unknown field (known: strategy, interval)");
        }
      }
      if (!strategy)
        return InvalidArgument("parameters.sharing.strategy: missing (want \"TimeSlicing\")");
      out.time_slice = interval.value_or(TimeSlice::kDefault);
    } else {
      return InvalidArgument("parameters." + Printable(key) +
                             ": unknown field (known: apiVersion, kind, sharing)");
    }
  }
  return out;
}

}  // namespace danqing::dra
