// The table of scalar settings: one row per setting that has a single value
// (string, boolean, duration, enum, list), with its config path, flag,
// environment variable, help text and how it binds to Config. The file
// parser, the environment and flag layers, FlagTable(), FormatConfig() and
// AcceptedButIgnored() are all driven by this table, so a new setting is one
// row in settings.cc (plus its Config field and its line in the docs).
//
// Structured parts of the schema (version, resources, sharing) are parsed by
// hand in parse.cc.
//
// Internal to src/config; not part of the module's public API.
//
// Thread-safety: the table is built once (function-local static) and is
// immutable afterwards.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "config/config.h"
#include "config/yaml_tree.h"

namespace danqing::config::internal {

// Bindings: how a setting reads and writes its Config field. Validators and
// setters return "" for OK, else the reason.
struct StringField {
  std::string& (*ref)(Config&);
  std::string (*check)(std::string_view) = nullptr;  // optional
};
struct BoolField {
  bool& (*ref)(Config&);
};
struct DurationField {
  Duration& (*ref)(Config&);
  bool number_is_nanoseconds = false;  // NVIDIA's Duration also takes a bare number
  bool positive = false;               // must be > 0
};
struct EnumField {  // any single value parsed from text (enums, validated words)
  std::string (*set)(Config&, std::string_view);
  std::string (*get)(const Config&);
};
struct ListField {  // a string or a list of strings in files; comma-separated in text
  std::string (*set)(Config&, const std::vector<std::string>&);
  std::vector<std::string> (*get)(const Config&);
};
struct IntListField {  // a list of integers in files; comma-separated in text
  std::vector<int>& (*ref)(Config&);
};
using Binding =
    std::variant<StringField, BoolField, DurationField, EnumField, ListField, IntListField>;

struct Setting {
  std::string_view path = {};  // "flags.plugin.deviceListStrategy"
  std::string_view flag = {};  // "device-list-strategy"; empty: no flag
  std::string_view flag_alias = {};
  std::string_view env = {};  // "DEVICE_LIST_STRATEGY"; empty: no variable
  std::string_view env_alias = {};
  std::optional<std::string> CommandLine::*command_line = nullptr;  // set iff flag is
  std::string_view help = {};
  Binding binding = {};
  bool nvidia = true;                    // false: a Danqing addition
  std::string_view ignored_reason = {};  // non-empty: accepted, not acted on
};

// All rows, grouped by section (every section's rows are contiguous).
const std::vector<Setting>& Settings();

// The row for a full path; nullptr when none.
const Setting* FindSetting(std::string_view path);

// True when some row lives under `path` (e.g. "flags.plugin").
bool IsTableSection(std::string_view path);

// Names of the direct children of a table section, in table order.
std::vector<std::string_view> TableChildren(std::string_view section);

// A problem found while applying a YAML node: where (the node and a path
// suffix such as "[2]" for a list item) and why.
struct NodeProblem {
  const YamlNode* at = nullptr;
  std::string suffix;
  std::string reason;
};

// Applies a non-null YAML value to the setting's field.
std::optional<NodeProblem> ApplyNode(const Setting& s, const YamlNode& value, Config& config);

// Applies a value from an environment variable or a flag.
std::string ApplyText(const Setting& s, std::string_view text, Config& config);

// The setting's value as text in the form ApplyText takes ("true", "1s",
// "envvar,cdi-cri").
std::string ValueText(const Setting& s, const Config& config);

// The setting's value as a YAML flow scalar or sequence.
std::string ValueYaml(const Setting& s, const Config& config);

// The FlagKind a flag parser should use for the setting.
FlagKind KindOf(const Setting& s);

// How a YAML node is described in type errors: `string "x"`, `integer 4`,
// `a list`, ...
std::string Describe(const YamlNode& node);

}  // namespace danqing::config::internal
