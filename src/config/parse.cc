// ParseConfig: the v1 config file schema over a YamlNode tree. Table-driven
// sections (flags, imex, danqing) go through settings.h; version, resources
// and sharing are parsed here, with NVIDIA's rules for them.
//
// Every error is "<source>:<line>:<col>: <field path>: <reason>".
//
// Thread-safety: reentrant; a FileParser is used by one call only.
#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "config/settings.h"
#include "config/values.h"
#include "config/yaml_tree.h"

namespace danqing::config {
namespace {

using internal::Describe;
using internal::PlainType;
using internal::Quote;
using internal::YamlNode;

#define DQ_RETURN_IF_ERROR(expr)          \
  do {                                    \
    if (Status _st = (expr); !_st.ok()) { \
      return _st;                         \
    }                                     \
  } while (false)

const std::vector<std::string_view> kTopLevelFields{"version", "flags", "resources",
                                                    "sharing", "imex",  "danqing"};

std::string Join(std::string_view prefix, std::string_view key) {
  std::string out(prefix);
  if (!out.empty()) out += '.';
  // Keys are echoed in paths; quote anything that is not a plain identifier.
  const bool simple = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
  out += simple ? std::string(key) : Quote(key);
  return out;
}

std::string Index(std::string_view path, std::size_t i) {
  return std::string(path) + "[" + std::to_string(i) + "]";
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  auto lower = [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; };
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [&](char x, char y) { return lower(x) == lower(y); });
}

bool IsPlainInt(const YamlNode& n) {
  return n.is_scalar() && n.plain && internal::ResolvePlain(n.scalar) == PlainType::kInt;
}

const YamlNode* Field(const YamlNode& map, std::string_view name) {
  for (const auto& e : map.entries) {
    if (e.key.is_scalar() && e.key.scalar == name) return &e.value;
  }
  return nullptr;
}

bool Present(const YamlNode* value) {
  return value != nullptr && !value->is_null();
}

class FileParser {
 public:
  explicit FileParser(std::string_view source) : source_(source) {
    config_.source = std::string(source);
  }

  Result<Config> Parse(const YamlNode& root) {
    if (root.is_null()) {
      return InvalidArgument(source_ +
                             ": the config file is empty; expected a mapping that starts with "
                             "`version: v1`");
    }
    if (!root.is_mapping()) {
      return Error(root, "",
                   "the config file must be a mapping of fields (version, flags, sharing, ...), "
                   "got " +
                       Describe(root));
    }
    DQ_RETURN_IF_ERROR(CheckFields(root, "", kTopLevelFields));

    // As NVIDIA's parser does, a file without `version` is taken as v1.
    const YamlNode* version = Field(root, "version");
    if (Present(version) && (!version->is_scalar() || version->scalar != kVersion)) {
      return Error(*version, "version",
                   "unknown version " +
                       (version->is_scalar() ? Quote(version->scalar) : Describe(*version)) +
                       "; the supported version is \"v1\"");
    }

    for (const auto& e : root.entries) {
      const std::string& key = e.key.scalar;
      if (key == "version" || e.value.is_null()) continue;
      if (key == "resources") {
        DQ_RETURN_IF_ERROR(ParseResources(e.value));
      } else if (key == "sharing") {
        DQ_RETURN_IF_ERROR(ParseSharing(e.value));
      } else {  // flags, imex, danqing
        DQ_RETURN_IF_ERROR(ParseTableSection(e.value, key));
      }
    }
    return std::move(config_);
  }

 private:
  std::string Where(const YamlNode& n) const {
    std::string out = source_;
    if (n.line > 0) out += ":" + std::to_string(n.line) + ":" + std::to_string(n.column);
    return out;
  }

  Status Error(const YamlNode& at, std::string_view path, std::string_view reason) const {
    std::string msg = Where(at) + ": ";
    if (!path.empty()) msg += std::string(path) + ": ";
    msg += reason;
    return InvalidArgument(std::move(msg));
  }

  void Record(const std::string& path, const YamlNode& at) { config_.origin[path] = Where(at); }

  // `node` must be a mapping with string keys, each in `known` and given once.
  Status CheckFields(const YamlNode& node, std::string_view path,
                     const std::vector<std::string_view>& known) const {
    if (!node.is_mapping()) {
      return Error(node, path, "expected a mapping, got " + Describe(node));
    }
    for (std::size_t i = 0; i < node.entries.size(); ++i) {
      const YamlNode& key = node.entries[i].key;
      if (!key.is_scalar()) {
        return Error(key, path, "field names must be strings, got " + Describe(key));
      }
      const std::string child = Join(path, key.scalar);
      if (std::find(known.begin(), known.end(), key.scalar) == known.end()) {
        std::string reason = "unknown field";
        const auto near = std::find_if(known.begin(), known.end(), [&](std::string_view k) {
          return EqualsIgnoreCase(k, key.scalar);
        });
        if (near != known.end()) {
          reason += "; did you mean \"" + std::string(*near) + "\"?";
        } else {
          reason += "; expected one of: ";
          for (std::size_t k = 0; k < known.size(); ++k) {
            reason += (k > 0 ? ", " : "") + std::string(known[k]);
          }
        }
        return Error(key, child, reason);
      }
      for (std::size_t j = 0; j < i; ++j) {
        const YamlNode& earlier = node.entries[j].key;
        if (earlier.scalar == key.scalar) {
          return Error(
              key, child,
              "duplicate field (first given at line " + std::to_string(earlier.line) + ")");
        }
      }
    }
    return Status::Ok();
  }

  // A section made of settings-table rows (flags, flags.plugin, imex, danqing...).
  Status ParseTableSection(const YamlNode& node, const std::string& path) {
    DQ_RETURN_IF_ERROR(CheckFields(node, path, internal::TableChildren(path)));
    for (const auto& e : node.entries) {
      const std::string child = path + "." + e.key.scalar;
      if (e.value.is_null()) continue;  // null leaves the default, as in NVIDIA's parser
      if (const internal::Setting* s = internal::FindSetting(child)) {
        if (auto problem = internal::ApplyNode(*s, e.value, config_)) {
          return Error(*problem->at, child + problem->suffix, problem->reason);
        }
        Record(child, e.value);
      } else {
        DQ_RETURN_IF_ERROR(ParseTableSection(e.value, child));
      }
    }
    return Status::Ok();
  }

  Status ParseBool(const YamlNode* value, const std::string& path, bool* out) const {
    if (!Present(value)) return Status::Ok();
    const auto b =
        value->is_scalar() && value->plain ? internal::YamlBool(value->scalar) : std::nullopt;
    if (!b)
      return Error(*value, path, "expected a boolean (true or false), got " + Describe(*value));
    *out = *b;
    return Status::Ok();
  }

  Status ParseResourceName(const YamlNode& value, const std::string& path, std::string* out) const {
    if (!value.is_scalar()) {
      return Error(value, path,
                   "expected a resource name such as \"nvidia.com/gpu\", got " + Describe(value));
    }
    if (std::string reason = internal::CheckResourceName(value.scalar, out); !reason.empty()) {
      return Error(value, path, reason);
    }
    return Status::Ok();
  }

  // resources: {gpus: [{pattern, name}], mig: [{pattern, name}]}
  Status ParseResources(const YamlNode& node) {
    DQ_RETURN_IF_ERROR(CheckFields(node, "resources", {"gpus", "mig"}));
    DQ_RETURN_IF_ERROR(
        ParsePatterns(Field(node, "gpus"), "resources.gpus", &config_.resources.gpus));
    DQ_RETURN_IF_ERROR(ParsePatterns(Field(node, "mig"), "resources.mig", &config_.resources.mig));
    Record("resources", node);
    return Status::Ok();
  }

  Status ParsePatterns(const YamlNode* list, const std::string& path,
                       std::vector<ResourcePattern>* out) const {
    if (!Present(list)) return Status::Ok();
    if (!list->is_sequence()) return Error(*list, path, "expected a list, got " + Describe(*list));
    for (std::size_t i = 0; i < list->items.size(); ++i) {
      const YamlNode& item = list->items[i];
      const std::string item_path = Index(path, i);
      DQ_RETURN_IF_ERROR(CheckFields(item, item_path, {"pattern", "name"}));
      ResourcePattern r;
      const YamlNode* pattern = Field(item, "pattern");
      if (!Present(pattern)) {
        return Error(item, item_path + ".pattern", "missing; resources must have a pattern");
      }
      if (!pattern->is_scalar()) {
        return Error(*pattern, item_path + ".pattern",
                     "expected a string, got " + Describe(*pattern));
      }
      r.pattern = pattern->scalar;
      const YamlNode* name = Field(item, "name");
      if (!Present(name))
        return Error(item, item_path + ".name", "missing; resources must have a name");
      DQ_RETURN_IF_ERROR(ParseResourceName(*name, item_path + ".name", &r.name));
      out->push_back(std::move(r));
    }
    return Status::Ok();
  }

  // sharing: {timeSlicing: {...}, mps: {...}}
  Status ParseSharing(const YamlNode& node) {
    DQ_RETURN_IF_ERROR(CheckFields(node, "sharing", {"timeSlicing", "mps"}));
    if (const YamlNode* ts = Field(node, "timeSlicing"); Present(ts)) {
      ReplicatedResources r;
      DQ_RETURN_IF_ERROR(ParseReplicated(*ts, "sharing.timeSlicing", /*mps=*/false, &r));
      config_.sharing.time_slicing = std::move(r);
      Record("sharing.timeSlicing", *ts);
    }
    if (const YamlNode* mps = Field(node, "mps"); Present(mps)) {
      ReplicatedResources r;
      DQ_RETURN_IF_ERROR(ParseReplicated(*mps, "sharing.mps", /*mps=*/true, &r));
      config_.sharing.mps = std::move(r);
      Record("sharing.mps", *mps);
    }
    return Status::Ok();
  }

  Status ParseReplicated(const YamlNode& node, const std::string& path, bool mps,
                         ReplicatedResources* out) const {
    DQ_RETURN_IF_ERROR(
        CheckFields(node, path, {"renameByDefault", "failRequestsGreaterThanOne", "resources"}));
    // NVIDIA keeps failing multi-device requests under MPS unless told otherwise.
    out->fail_requests_greater_than_one = mps;
    DQ_RETURN_IF_ERROR(ParseBool(Field(node, "renameByDefault"), path + ".renameByDefault",
                                 &out->rename_by_default));
    DQ_RETURN_IF_ERROR(ParseBool(Field(node, "failRequestsGreaterThanOne"),
                                 path + ".failRequestsGreaterThanOne",
                                 &out->fail_requests_greater_than_one));

    const std::string list_path = path + ".resources";
    const YamlNode* list = Field(node, "resources");
    constexpr std::string_view kNoResources =
        "no resources specified; list the resources to share, e.g. "
        "`- name: nvidia.com/gpu` with `replicas: 4`";
    if (!Present(list)) return Error(list ? *list : node, list_path, kNoResources);
    if (!list->is_sequence()) {
      return Error(*list, list_path, "expected a list, got " + Describe(*list));
    }
    if (list->items.empty()) return Error(*list, list_path, kNoResources);

    for (std::size_t i = 0; i < list->items.size(); ++i) {
      ReplicatedResource r;
      DQ_RETURN_IF_ERROR(ParseReplicatedResource(list->items[i], Index(list_path, i), &r));
      if (out->rename_by_default && r.rename.empty()) r.rename = r.name + ".shared";
      out->resources.push_back(std::move(r));
    }

    // Each resource is shared once, and no two are advertised under one name.
    const auto& rs = out->resources;
    for (std::size_t i = 0; i < rs.size(); ++i) {
      for (std::size_t j = 0; j < i; ++j) {
        const YamlNode& item = list->items[i];
        if (rs[i].name == rs[j].name) {
          const YamlNode* name = Field(item, "name");
          return Error(name ? *name : item, Index(list_path, i) + ".name",
                       "duplicate resource " + Quote(rs[i].name) + "; " + Index(list_path, j) +
                           " (line " + std::to_string(list->items[j].line) + ") already shares it");
        }
        if (rs[i].advertised_name() == rs[j].advertised_name()) {
          const YamlNode* rename = Field(item, "rename");
          return Error(Present(rename) ? *rename : item, Index(list_path, i) + ".rename",
                       Index(list_path, j) + " (line " + std::to_string(list->items[j].line) +
                           ") is already advertised as " + Quote(rs[i].advertised_name()));
        }
      }
    }
    return Status::Ok();
  }

  Status ParseReplicatedResource(const YamlNode& node, const std::string& path,
                                 ReplicatedResource* out) const {
    DQ_RETURN_IF_ERROR(CheckFields(node, path, {"name", "rename", "devices", "replicas"}));

    const YamlNode* name = Field(node, "name");
    if (!Present(name)) {
      return Error(node, path + ".name",
                   "missing; name the resource to share, e.g. \"nvidia.com/gpu\"");
    }
    DQ_RETURN_IF_ERROR(ParseResourceName(*name, path + ".name", &out->name));

    if (const YamlNode* rename = Field(node, "rename"); Present(rename)) {
      DQ_RETURN_IF_ERROR(ParseResourceName(*rename, path + ".rename", &out->rename));
    }

    out->devices = ReplicatedDevices{};  // "all" unless given
    if (const YamlNode* devices = Field(node, "devices"); Present(devices)) {
      DQ_RETURN_IF_ERROR(ParseDevices(*devices, path + ".devices", &out->devices));
    }

    const std::string replicas_path = path + ".replicas";
    const YamlNode* replicas = Field(node, "replicas");
    if (!Present(replicas)) {
      return Error(node, replicas_path, "missing; give the number of replicas per device (>= 2)");
    }
    if (!IsPlainInt(*replicas)) {
      return Error(*replicas, replicas_path, "expected an integer, got " + Describe(*replicas));
    }
    const auto v = internal::ParseInteger(replicas->scalar);
    if (v && *v < 2) {
      return Error(*replicas, replicas_path,
                   "number of replicas must be >= 2, got " + std::to_string(*v));
    }
    if (!v || *v > std::numeric_limits<int>::max()) {
      return Error(*replicas, replicas_path,
                   "number of replicas " + replicas->scalar + " is out of range");
    }
    out->replicas = static_cast<int>(*v);
    return Status::Ok();
  }

  // "all", a count (> 0), or a list of indices or UUIDs (one kind).
  Status ParseDevices(const YamlNode& node, const std::string& path, ReplicatedDevices* out) const {
    if (node.is_scalar()) {
      if (IsPlainInt(node)) {
        const auto v = internal::ParseInteger(node.scalar);
        if (!v || *v <= 0 || *v > std::numeric_limits<int>::max()) {
          return Error(node, path, "a count of devices must be > 0, got " + node.scalar);
        }
        out->kind = ReplicatedDevices::Kind::kCount;
        out->count = static_cast<int>(*v);
        return Status::Ok();
      }
      if (node.scalar == "all") {
        out->kind = ReplicatedDevices::Kind::kAll;
        return Status::Ok();
      }
      return Error(node, path,
                   "devices set as " + Quote(node.scalar) +
                       " but the only valid string is \"all\"; give \"all\", a count, or a list "
                       "of device indices or UUIDs");
    }
    if (!node.is_sequence()) {
      return Error(
          node, path,
          "expected \"all\", a count, or a list of device indices or UUIDs, got " + Describe(node));
    }
    if (node.items.empty()) {
      return Error(node, path,
                   "empty devices list; give \"all\", a count, or a list of device indices or "
                   "UUIDs");
    }
    std::vector<std::string> list;
    internal::DeviceRefKind first_kind = internal::DeviceRefKind::kIndex;
    for (std::size_t i = 0; i < node.items.size(); ++i) {
      const YamlNode& item = node.items[i];
      const std::string item_path = Index(path, i);
      if (!item.is_scalar()) {
        return Error(item, item_path, "expected a device index or UUID, got " + Describe(item));
      }
      std::string ref;
      internal::DeviceRefKind kind = internal::DeviceRefKind::kIndex;
      if (IsPlainInt(item)) {
        const auto v = internal::ParseInteger(item.scalar);
        if (!v || *v < 0) {
          return Error(item, item_path, "a device index must be >= 0, got " + item.scalar);
        }
        ref = std::to_string(*v);
      } else {
        const auto classified = internal::ClassifyDeviceRef(item.scalar);
        if (!classified) {
          return Error(item, item_path,
                       "unsupported device " + Quote(item.scalar) +
                           "; expected a GPU index (0), a MIG index (\"0:1\"), a GPU UUID "
                           "(\"GPU-<uuid>\") or a MIG UUID (\"MIG-<uuid>\")");
        }
        kind = *classified;
        ref = item.scalar;
      }
      if (i == 0) {
        first_kind = kind;
      } else if (kind != first_kind) {
        return Error(item, item_path,
                     "the devices list mixes indices and UUIDs; list devices one way only");
      }
      if (std::find(list.begin(), list.end(), ref) != list.end()) {
        return Error(item, item_path, "duplicate device " + Quote(ref));
      }
      list.push_back(std::move(ref));
    }
    out->kind = ReplicatedDevices::Kind::kList;
    out->list = std::move(list);
    return Status::Ok();
  }

  std::string source_;
  Config config_;
};

}  // namespace

Result<Config> ParseConfig(std::string_view text, std::string_view source) {
  auto root = internal::ParseYaml(text, source);
  if (!root.ok()) return root.status();
  FileParser parser(source);
  return parser.Parse(*root);
}

}  // namespace danqing::config
