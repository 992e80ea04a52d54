// The public entry points of the config module that sit above the file
// parser: reading files, flags > environment > file resolution, cross-setting
// validation, the flag table, reporting and formatting. See config.h.
//
// Thread-safety: reentrant; FlagTable() is a function-local static built once.
#include "config/config.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "common/read_file.h"
#include "config/settings.h"
#include "config/values.h"
#include "config/yaml_tree.h"

namespace danqing::config {
namespace {

using internal::Quote;
using internal::Setting;
using internal::Settings;

std::string OriginOf(const Config& c, const std::string& path) {
  const auto it = c.origin.find(path);
  return it == c.origin.end() ? "" : it->second;
}

// "flags.mpsRoot (config.yaml:3:12)" or just "flags.mpsRoot".
std::string Cite(const Config& c, const std::string& path) {
  const std::string origin = OriginOf(c, path);
  return origin.empty() ? path : path + " (" + origin + ")";
}

std::string Indent(std::size_t level) {
  return std::string(2 * level, ' ');
}

std::vector<std::string_view> SplitPath(std::string_view path) {
  std::vector<std::string_view> out;
  while (true) {
    const auto dot = path.find('.');
    out.push_back(path.substr(0, dot));
    if (dot == std::string_view::npos) return out;
    path.remove_prefix(dot + 1);
  }
}

void FormatReplicated(const ReplicatedResources& r, std::string_view name, std::string* out) {
  *out += Indent(1) + std::string(name) + ":\n";
  *out += Indent(2) + "renameByDefault: " + (r.rename_by_default ? "true" : "false") + "\n";
  *out += Indent(2) +
          "failRequestsGreaterThanOne: " + (r.fail_requests_greater_than_one ? "true" : "false") +
          "\n";
  *out += Indent(2) + "resources:\n";
  for (const ReplicatedResource& res : r.resources) {
    *out += Indent(2) + "- name: " + Quote(res.name) + "\n";
    if (!res.rename.empty()) *out += Indent(3) + "rename: " + Quote(res.rename) + "\n";
    *out += Indent(3) + "devices: ";
    switch (res.devices.kind) {
      case ReplicatedDevices::Kind::kAll: *out += "\"all\""; break;
      case ReplicatedDevices::Kind::kCount: *out += std::to_string(res.devices.count); break;
      case ReplicatedDevices::Kind::kList: {
        *out += "[";
        for (std::size_t i = 0; i < res.devices.list.size(); ++i) {
          *out += (i > 0 ? ", " : "") + Quote(res.devices.list[i]);
        }
        *out += "]";
        break;
      }
    }
    *out += "\n" + Indent(3) + "replicas: " + std::to_string(res.replicas) + "\n";
  }
}

void FormatPatterns(const std::vector<ResourcePattern>& list, std::string_view name,
                    std::string* out) {
  if (list.empty()) return;
  *out += Indent(1) + std::string(name) + ":\n";
  for (const ResourcePattern& r : list) {
    *out += Indent(1) + "- pattern: " + Quote(r.pattern) + "\n";
    *out += Indent(2) + "name: " + Quote(r.name) + "\n";
  }
}

bool IsReplicated(const ReplicatedResources& r) {
  return std::any_of(r.resources.begin(), r.resources.end(),
                     [](const ReplicatedResource& res) { return res.replicas > 1; });
}

}  // namespace

// --- Sharing -----------------------------------------------------------------

SharingStrategy Sharing::strategy() const {
  if (mps && IsReplicated(*mps)) return SharingStrategy::kMps;
  if (time_slicing && IsReplicated(*time_slicing)) return SharingStrategy::kTimeSlicing;
  return SharingStrategy::kNone;
}

const ReplicatedResources* Sharing::replicated() const {
  switch (strategy()) {
    case SharingStrategy::kMps: return &*mps;
    case SharingStrategy::kTimeSlicing: return &*time_slicing;
    case SharingStrategy::kNone: return nullptr;
  }
  return nullptr;
}

// --- Files ---------------------------------------------------------------------

Result<Config> LoadConfigFile(const std::string& path) {
  // Not a plain open(): a FIFO there would block the reload, and the thread
  // that takes SIGTERM with it (see common/read_file.h).
  auto text = ReadRegularFile(path, internal::kMaxYamlBytes);
  if (!text.ok()) {
    const Status& st = text.status();
    switch (st.code()) {
      case StatusCode::kNotFound:
      case StatusCode::kPermissionDenied:
        return Status(st.code(), "cannot open config file " + Quote(path) + ": " + st.message());
      case StatusCode::kResourceExhausted:
        return InvalidArgument(path + ": file is " + st.message());
      default:
        return InvalidArgument("cannot read config file " + Quote(path) + ": " + st.message());
    }
  }
  return ParseConfig(*text, path);
}

// --- Flags > environment > file ------------------------------------------------

EnvLookup ProcessEnvironment() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

Result<Config> Resolve(const CommandLine& command_line, const EnvLookup& env) {
  auto lookup = [&](std::string_view name) -> std::optional<std::string> {
    if (!env || name.empty()) return std::nullopt;
    auto v = env(name);
    if (v && v->empty()) return std::nullopt;  // an empty variable counts as unset
    return v;
  };

  // 1. The config file, if any, over the defaults.
  Config config;
  std::optional<std::string> file;
  std::string file_origin;
  if (command_line.config_file) {  // given, even empty: the flag decides
    if (!command_line.config_file->empty()) file = command_line.config_file;
    file_origin = "flag --config-file";
  } else if (auto v = lookup("CONFIG_FILE")) {
    file = std::move(v);
    file_origin = "environment variable CONFIG_FILE";
  }
  if (file) {
    auto loaded = LoadConfigFile(*file);
    if (!loaded.ok()) {
      const Status st = loaded.status();
      if (st.code() == StatusCode::kInvalidArgument && st.message().rfind("cannot ", 0) != 0) {
        return st;  // a content error already names the file and field
      }
      return Status(st.code(), st.message() + " (named by " + file_origin + ")");
    }
    config = std::move(loaded).value();
  }

  // 2. Environment variables.
  for (const Setting& s : Settings()) {
    for (const std::string_view name : {s.env, s.env_alias}) {
      const auto value = lookup(name);
      if (!value) continue;
      if (std::string reason = internal::ApplyText(s, *value, config); !reason.empty()) {
        return InvalidArgument("environment variable " + std::string(name) + "=" + Quote(*value) +
                               ": " + reason + " (setting " + std::string(s.path) + ")");
      }
      config.origin[std::string(s.path)] = "environment variable " + std::string(name);
      break;
    }
  }

  // 3. Flags.
  for (const Setting& s : Settings()) {
    if (s.command_line == nullptr) continue;
    const std::optional<std::string>& value = command_line.*(s.command_line);
    if (!value) continue;
    if (std::string reason = internal::ApplyText(s, *value, config); !reason.empty()) {
      return InvalidArgument("flag --" + std::string(s.flag) + "=" + Quote(*value) + ": " + reason +
                             " (setting " + std::string(s.path) + ")");
    }
    config.origin[std::string(s.path)] = "flag --" + std::string(s.flag);
  }

  // 4. Derived defaults, then the checks that span settings.
  if (config.flags.nvidia_dev_root.empty()) {
    config.flags.nvidia_dev_root = config.flags.nvidia_driver_root;
  }
  if (Status st = Validate(config); !st.ok()) return st;
  return config;
}

Status Validate(const Config& c) {
  if (c.flags.plugin.device_list_strategy.empty()) {
    return InvalidArgument("invalid configuration: " + Cite(c, "flags.plugin.deviceListStrategy") +
                           " is empty; give at least one of envvar, volume-mounts, "
                           "cdi-annotations or cdi-cri");
  }
  if (c.sharing.strategy() == SharingStrategy::kMps) {
    if (c.flags.mig_strategy == MigStrategy::kMixed) {
      return InvalidArgument("invalid configuration: " + Cite(c, "sharing.mps") +
                             " is not supported with " + Cite(c, "flags.migStrategy") + " = mixed");
    }
    if (c.flags.mps_root.empty()) {
      return InvalidArgument("invalid configuration: " + Cite(c, "sharing.mps") +
                             " requires flags.mpsRoot (--mps-root, MPS_ROOT) to be set");
    }
    // A valid MPS section all the same: Danqing runs no MPS control daemon,
    // and advertising the GPUs unshared instead would leave the pods that
    // ask for the replicas Pending without saying why.
    return InvalidArgument("invalid configuration: " + Cite(c, "sharing.mps") +
                           " is not supported: Danqing does not run an MPS control daemon; "
                           "share GPUs with sharing.timeSlicing instead");
  }
  if (c.danqing.mode == "split" && c.danqing.dra_gpus.empty()) {
    return InvalidArgument(
        "invalid configuration: " + Cite(c, "danqing.mode") +
        " = split needs danqing.draGpus (--dra-gpus): the GPUs served through DRA");
  }
  if (c.danqing.mode != "split" && !c.danqing.dra_gpus.empty()) {
    return InvalidArgument("invalid configuration: " + Cite(c, "danqing.draGpus") + " is set but " +
                           Cite(c, "danqing.mode") + " is not split");
  }
  if (c.danqing.mode == "device-plugin" && !c.danqing.dra_dynamic_mig.empty()) {
    return InvalidArgument("invalid configuration: " + Cite(c, "danqing.draDynamicMig") +
                           " is set but " + Cite(c, "danqing.mode") +
                           " is device-plugin: dynamic MIG needs mode dra or split");
  }
  if (c.danqing.mode != "device-plugin" && c.danqing.node_name.empty()) {
    return InvalidArgument(
        "invalid configuration: " + Cite(c, "danqing.mode") + " = " + c.danqing.mode +
        " needs danqing.nodeName (--node-name, NODE_NAME from the downward API): it "
        "names the DRA pool");
  }
  const auto& ids = c.imex.channel_ids;
  if (!(ids.empty() || (ids.size() == 1 && ids[0] == 0))) {
    return InvalidArgument("invalid configuration: " + Cite(c, "imex.channelIDs") +
                           " must be [] or [0]");
  }
  return Status::Ok();
}

const std::vector<FlagSpec>& FlagTable() {
  static const std::vector<FlagSpec> table = [] {
    std::vector<FlagSpec> out;
    out.push_back(FlagSpec{
        .name = "config-file",
        .env = "CONFIG_FILE",
        .help = "Config file: NVIDIA's v1 format, plus an optional danqing: section",
        .kind = FlagKind::kString,
        .field = &CommandLine::config_file,
    });
    const Config defaults;
    for (const Setting& s : Settings()) {
      if (s.flag.empty()) continue;
      out.push_back(FlagSpec{
          .name = s.flag,
          .alias = s.flag_alias,
          .env = s.env,
          .env_alias = s.env_alias,
          .config_path = s.path,
          .help = s.help,
          .default_value = internal::ValueText(s, defaults),
          .kind = internal::KindOf(s),
          .field = s.command_line,
          .nvidia = s.nvidia,
          .ignored = !s.ignored_reason.empty(),
      });
    }
    return out;
  }();
  return table;
}

// --- Reporting -----------------------------------------------------------------

std::string IgnoredSetting::ToString() const {
  std::string out = path;
  if (!origin.empty()) out += " (" + origin + ")";
  return out + " is accepted but ignored: " + reason;
}

std::vector<IgnoredSetting> AcceptedButIgnored(const Config& config) {
  std::vector<IgnoredSetting> out;
  const Config defaults;
  for (const Setting& s : Settings()) {
    if (s.ignored_reason.empty()) continue;
    if (internal::ValueText(s, config) == internal::ValueText(s, defaults)) continue;
    const std::string path(s.path);
    out.push_back({path, OriginOf(config, path), std::string(s.ignored_reason)});
  }
  if (!config.resources.gpus.empty() || !config.resources.mig.empty()) {
    out.push_back({"resources", OriginOf(config, "resources"),
                   "custom resource patterns are not supported (NVIDIA's plugin ignores them "
                   "too); GPUs are advertised as nvidia.com/gpu and MIG devices as "
                   "nvidia.com/mig-<profile>"});
  }
  return out;
}

std::string FormatConfig(const Config& config) {
  std::string out = "version: " + Quote(config.version) + "\n";
  std::vector<std::string_view> open;  // the sections we are inside
  for (const Setting& s : Settings()) {
    const std::vector<std::string_view> parts = SplitPath(s.path);
    const std::size_t depth = parts.size() - 1;
    std::size_t common = 0;
    while (common < open.size() && common < depth && open[common] == parts[common]) ++common;
    open.resize(common);
    for (std::size_t i = common; i < depth; ++i) {
      out += Indent(i) + std::string(parts[i]) + ":\n";
      open.push_back(parts[i]);
    }
    out += Indent(depth) + std::string(parts.back()) + ": " + internal::ValueYaml(s, config) + "\n";
  }
  if (!config.resources.gpus.empty() || !config.resources.mig.empty()) {
    out += "resources:\n";
    FormatPatterns(config.resources.gpus, "gpus", &out);
    FormatPatterns(config.resources.mig, "mig", &out);
  }
  if (config.sharing.time_slicing || config.sharing.mps) {
    out += "sharing:\n";
    if (config.sharing.time_slicing)
      FormatReplicated(*config.sharing.time_slicing, "timeSlicing", &out);
    if (config.sharing.mps) FormatReplicated(*config.sharing.mps, "mps", &out);
  }
  return out;
}

}  // namespace danqing::config
