// Value rules of the config schema, shared by the file, environment and flag
// layers: YAML 1.1 scalar resolution (what NVIDIA's Go parser does with an
// unquoted `yes` or `4`), integers, quoting, enum spellings, NVIDIA's
// resource-name and device-reference rules.
//
// Functions that validate return an empty string for OK, else the reason
// (without location; callers add file/line, variable or flag).
//
// Internal to src/config; not part of the module's public API.
//
// Thread-safety: pure functions over immutable tables.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"

namespace danqing::config::internal {

// What a plain (unquoted, untagged) YAML scalar resolves to under YAML 1.1,
// as go-yaml v2 (under sigs.k8s.io/yaml, NVIDIA's parser) resolves it.
enum class PlainType { kString, kNull, kBool, kInt, kFloat };
PlainType ResolvePlain(std::string_view text);

// YAML 1.1 booleans: y/yes/true/on and n/no/false/off in lower, Title or
// UPPER case.
std::optional<bool> YamlBool(std::string_view text);

// A decimal integer with optional sign; nullopt if malformed or out of range.
std::optional<std::int64_t> ParseInteger(std::string_view text);

// Double-quoted, escaped; safe in messages and as a YAML/JSON scalar.
std::string Quote(std::string_view text);

// "a, b or c".
std::string JoinAlternatives(const std::vector<std::string_view>& names);

// Enum spellings (exact, case-sensitive, as NVIDIA compares them).
std::optional<MigStrategy> ParseMigStrategy(std::string_view text);
std::optional<DeviceListStrategy> ParseDeviceListStrategy(std::string_view text);
std::optional<DeviceIdStrategy> ParseDeviceIdStrategy(std::string_view text);
std::optional<DeviceDiscoveryStrategy> ParseDeviceDiscoveryStrategy(std::string_view text);
std::vector<std::string_view> MigStrategyNames();
std::vector<std::string_view> DeviceListStrategyNames();
std::vector<std::string_view> DeviceIdStrategyNames();
std::vector<std::string_view> DeviceDiscoveryStrategyNames();
std::vector<std::string_view> LogLevelNames();

// NVIDIA's NewResourceName: "nvidia.com/" is prepended when absent; the whole
// name is at most 63 characters; the part after "nvidia.com/" is a DNS-1123
// subdomain (lower-case alphanumerics, '-' and '.'). On success sets *full.
std::string CheckResourceName(std::string_view name, std::string* full);

// A reference to a device in sharing.*.resources[i].devices.
enum class DeviceRefKind { kIndex, kUuid };
// "3" (GPU index), "3:1" (MIG index), "GPU-<uuid>", "MIG-<uuid>" or
// "MIG-GPU-<uuid>/<gi>/<ci>"; nullopt for anything else.
std::optional<DeviceRefKind> ClassifyDeviceRef(std::string_view ref);

// "[host]:port" with port 0-65535; host may be empty, a name, IPv4 or
// [IPv6].
std::string CheckListenAddress(std::string_view addr);

// A non-empty absolute path.
std::string CheckAbsolutePath(std::string_view path);

// Empty (no CDI hooks) or an absolute path naming a file, not a directory.
std::string CheckHookPath(std::string_view path);

// An absolute path short enough for a unix socket (sun_path, 107 bytes).
std::string CheckSocketPath(std::string_view path);

// "all", "xids" or comma-separated non-negative integers (DP_DISABLE_HEALTHCHECKS).
std::string CheckXidSelection(std::string_view text);

// Splits "a, b,c" on commas and trims blanks around items; an empty item is
// kept (as "") so callers can reject it.
std::vector<std::string> SplitList(std::string_view text);

std::string_view TrimBlanks(std::string_view text);

}  // namespace danqing::config::internal
