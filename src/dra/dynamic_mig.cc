#include "dra/dynamic_mig.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "common/atomic_file.h"

namespace danqing::dra {
namespace {

using Json = nlohmann::json;

// "1g.10gb+me" → "1g10gb-me" (as MigDeviceName writes profiles).
std::string ProfileLabel(const std::string& profile) {
  std::string out;
  for (const char c : profile) {
    const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if ((l >= 'a' && l <= 'z') || (l >= '0' && l <= '9')) {
      out.push_back(l);
    } else if (l == '+' || l == '-') {
      out.push_back('-');
    }
  }
  return out.empty() ? "unknown" : out;
}

std::string StaticName(int gpu_index, const std::string& profile, uint32_t gi, uint32_t ci) {
  return "gpu-" + std::to_string(gpu_index) + "-mig-" + ProfileLabel(profile) + "-" +
         std::to_string(gi) + "-" + std::to_string(ci);
}

std::string Quantity(uint64_t bytes) {
  static constexpr std::pair<const char*, int> kUnits[] = {
      {"Ti", 40}, {"Gi", 30}, {"Mi", 20}, {"Ki", 10}};
  for (const auto& [suffix, shift] : kUnits) {
    const uint64_t unit = 1ULL << shift;
    if (bytes >= unit && bytes % unit == 0) return std::to_string(bytes / unit) + suffix;
  }
  return std::to_string(bytes);
}

Json CountersJson(const Counters& c) {
  Json j = Json::object();
  for (const auto& [name, v] : c) j[name] = {{"value", std::to_string(v)}};
  return j;
}

std::string Where(const std::string& claim_uid, const std::string& device) {
  return "claim " + claim_uid + ", device " + device + ": ";
}

}  // namespace

bool DynamicMigConfig::Selects(int index, const std::string& uuid) const {
  for (const auto& g : gpus) {
    if (g == "all" || g == uuid || g == std::to_string(index)) return true;
  }
  return false;
}

Result<DynamicMigConfig> ParseDynamicMigConfig(const Json& j) {
  if (!j.is_object()) return InvalidArgument("dynamicMig: expected an object");
  DynamicMigConfig c;
  for (const auto& [key, value] : j.items()) {
    if (key == "gpus") {
      if (!value.is_array())
        return InvalidArgument("dynamicMig.gpus: expected a list of GPU UUIDs or indices");
      for (std::size_t i = 0; i < value.size(); ++i) {
        const std::string where = "dynamicMig.gpus[" + std::to_string(i) + "]";
        std::string item;
        if (value[i].is_string()) {
          item = value[i].get<std::string>();
        } else if (value[i].is_number_unsigned()) {
          item = std::to_string(value[i].get<uint64_t>());
        } else {
          return InvalidArgument(where + ": expected a GPU UUID, an NVML index or \"all\"");
        }
        const bool digits = !item.empty() && std::all_of(item.begin(), item.end(), [](char ch) {
          return std::isdigit(static_cast<unsigned char>(ch)) != 0;
        });
        if (!(item == "all" || digits || item.rfind("GPU-", 0) == 0)) {
          return InvalidArgument(where + ": \"" + item +
                                 "\" is not a GPU UUID (GPU-...), an NVML index or \"all\"");
        }
        if (std::find(c.gpus.begin(), c.gpus.end(), item) == c.gpus.end()) c.gpus.push_back(item);
      }
    } else if (key == "destroyOrphans") {
      if (!value.is_boolean())
        return InvalidArgument("dynamicMig.destroyOrphans: expected true or false");
      c.destroy_orphans = value.get<bool>();
    } else {
      return InvalidArgument("dynamicMig." + key + ": unknown field (known: gpus, destroyOrphans)");
    }
  }
  return c;
}

std::string DynamicMigDeviceName(int gpu_index, const std::string& profile, uint32_t start) {
  return "gpu-" + std::to_string(gpu_index) + "-mig-" + ProfileLabel(profile) + "-at-" +
         std::to_string(start);
}

std::string CounterSetName(int gpu_index) {
  return "gpu-" + std::to_string(gpu_index) + "-mig";
}

std::optional<ParsedPlacementName> ParsePlacementName(const std::string& name) {
  if (name.rfind("gpu-", 0) != 0) return std::nullopt;
  const auto mig = name.find("-mig-");
  const auto at = name.rfind("-at-");
  if (mig == std::string::npos || at == std::string::npos || at <= mig + 5) return std::nullopt;
  const std::string index = name.substr(4, mig - 4);
  const std::string start = name.substr(at + 4);
  const auto all_digits = [](const std::string& s) {
    return !s.empty() && s.size() < 9 && std::all_of(s.begin(), s.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c)) != 0;
    });
  };
  if (!all_digits(index) || !all_digits(start)) return std::nullopt;
  ParsedPlacementName p;
  p.gpu_index = std::stoi(index);
  p.profile_label = name.substr(mig + 5, at - mig - 5);
  p.start = static_cast<uint32_t>(std::stoul(start));
  return p;
}

std::vector<DynamicMigDevice> DynamicMigDevices(const MigGpuSpec& gpu,
                                                const std::set<uint32_t>& owned) {
  std::vector<DynamicMigDevice> out;
  // Static instances: published as they are; their slices are taken.
  std::vector<std::pair<uint32_t, uint32_t>> taken;  // start, size
  for (const auto& inst : gpu.instances) {
    if (owned.contains(inst.gpu_instance_id)) continue;
    const MigProfileSpec* p = gpu.FindProfile(inst.profile_id);
    if (p == nullptr) continue;
    taken.emplace_back(inst.start, p->memory_slices);
    DynamicMigDevice d;
    d.name = StaticName(gpu.index, p->name, inst.gpu_instance_id, inst.compute_instance_id);
    d.gpu_index = gpu.index;
    d.gpu_uuid = gpu.uuid;
    d.profile_id = p->profile_id;
    d.profile = p->name;
    d.start = inst.start;
    d.existing = true;
    d.gpu_instance_id = inst.gpu_instance_id;
    d.compute_instance_id = inst.compute_instance_id;
    d.mig_uuid = inst.uuid;
    d.consumes = PlacementCounters(*p, inst.start);
    out.push_back(std::move(d));
  }
  for (const auto& p : gpu.profiles) {
    for (uint32_t start : p.placement_starts) {
      const bool blocked = std::any_of(taken.begin(), taken.end(), [&](const auto& t) {
        return PlacementsOverlap(start, p.memory_slices, t.first, t.second);
      });
      if (blocked) continue;
      DynamicMigDevice d;
      d.name = DynamicMigDeviceName(gpu.index, p.name, start);
      d.gpu_index = gpu.index;
      d.gpu_uuid = gpu.uuid;
      d.profile_id = p.profile_id;
      d.profile = p.name;
      d.start = start;
      d.consumes = PlacementCounters(p, start);
      out.push_back(std::move(d));
    }
  }
  return out;
}

std::vector<Json> BuildDynamicMigSlices(
    const std::vector<MigGpuSpec>& gpus,
    const std::map<std::string, std::set<uint32_t>>& owned_by_gpu, int64_t generation,
    const DynamicSliceOptions& options) {
  const std::string prefix = options.slice_prefix.empty()
                                 ? options.node_name + "-" + options.driver + "-mig"
                                 : options.slice_prefix;
  const std::string pool = options.node_name + "-mig";
  std::vector<Json> specs;
  // Counter sets, at most 8 per slice.
  Json sets = Json::array();
  for (const auto& gpu : gpus) {
    sets.push_back(
        {{"name", CounterSetName(gpu.index)}, {"counters", CountersJson(GpuCounters(gpu))}});
    if (sets.size() == kMaxCounterSetsPerSlice) {
      specs.push_back({{"sharedCounters", sets}});
      sets = Json::array();
    }
  }
  if (!sets.empty()) specs.push_back({{"sharedCounters", sets}});
  // Devices, at most max_devices_per_slice per slice.
  Json devices = Json::array();
  const std::size_t per_slice = std::max<std::size_t>(1, options.max_devices_per_slice);
  for (const auto& gpu : gpus) {
    static const std::set<uint32_t> kNone;
    const auto owned = owned_by_gpu.find(gpu.uuid);
    for (const auto& d :
         DynamicMigDevices(gpu, owned == owned_by_gpu.end() ? kNone : owned->second)) {
      const MigProfileSpec* p = gpu.FindProfile(d.profile_id);
      Json attrs = {{"type", {{"string", "mig"}}},       {"migProfile", {{"string", d.profile}}},
                    {"uuid", {{"string", d.gpu_uuid}}},  {"productName", {{"string", gpu.product}}},
                    {"index", {{"int", d.gpu_index}}},   {"placementStart", {{"int", d.start}}},
                    {"dynamic", {{"bool", !d.existing}}}};
      if (d.existing) {
        attrs["migUUID"] = {{"string", d.mig_uuid}};
        attrs["gpuInstanceID"] = {{"int", d.gpu_instance_id}};
        attrs["computeInstanceID"] = {{"int", d.compute_instance_id}};
      }
      Json dev = {{"name", d.name},
                  {"attributes", attrs},
                  {"capacity",
                   {{"memory", {{"value", Quantity(p->memory_bytes)}}},
                    {"multiprocessors", {{"value", std::to_string(p->multiprocessors)}}}}},
                  {"consumesCounters", Json::array({{{"counterSet", CounterSetName(d.gpu_index)},
                                                     {"counters", CountersJson(d.consumes)}}})}};
      devices.push_back(std::move(dev));
      if (devices.size() == per_slice) {
        specs.push_back({{"devices", devices}});
        devices = Json::array();
      }
    }
  }
  if (!devices.empty()) specs.push_back({{"devices", devices}});
  if (specs.empty()) specs.push_back({{"devices", Json::array()}});

  std::vector<Json> out;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    Json spec = specs[i];
    spec["driver"] = options.driver;
    spec["nodeName"] = options.node_name;
    spec["pool"] = {{"name", pool},
                    {"generation", generation},
                    {"resourceSliceCount", static_cast<int64_t>(specs.size())}};
    out.push_back({{"apiVersion", "resource.k8s.io/v1"},
                   {"kind", "ResourceSlice"},
                   {"metadata", {{"name", prefix + "-" + std::to_string(i)}}},
                   {"spec", std::move(spec)}});
  }
  return out;
}

bool CountersAllow(const std::vector<Json>& slices, const std::vector<std::string>& devices) {
  std::map<std::string, Counters> capacity;    // counter set → counters
  std::map<std::string, const Json*> by_name;  // device name → device
  for (const auto& s : slices) {
    const Json& spec = s.at("spec");
    if (const auto it = spec.find("sharedCounters"); it != spec.end()) {
      for (const auto& set : *it) {
        Counters& c = capacity[set.at("name").get<std::string>()];
        for (const auto& [name, v] : set.at("counters").items()) {
          c[name] = std::stoll(v.at("value").get<std::string>());
        }
      }
    }
    if (const auto it = spec.find("devices"); it != spec.end()) {
      for (const auto& d : *it) by_name[d.at("name").get<std::string>()] = &d;
    }
  }
  std::map<std::string, Counters> used;
  for (const auto& name : devices) {
    const auto it = by_name.find(name);
    if (it == by_name.end()) return false;
    const auto cc = it->second->find("consumesCounters");
    if (cc == it->second->end()) continue;
    for (const auto& entry : *cc) {
      const std::string set = entry.at("counterSet").get<std::string>();
      const auto cap = capacity.find(set);
      if (cap == capacity.end()) return false;
      Counters use;
      for (const auto& [counter, v] : entry.at("counters").items()) {
        use[counter] = std::stoll(v.at("value").get<std::string>());
      }
      if (!TryConsume(cap->second, used[set], use)) return false;
    }
  }
  return true;
}

// --- Prepare. -------------------------------------------------------------------

Json ToJson(const MigInstance& m) {
  Json j = {{"gpuIndex", m.gpu_index},
            {"gpuUUID", m.gpu_uuid},
            {"device", m.device},
            {"profileID", m.profile_id},
            {"start", m.start},
            {"gpuInstanceID", m.gpu_instance_id},
            {"computeInstanceID", m.compute_instance_id},
            {"migUUID", m.mig_uuid}};
  if (m.parent_minor) j["parentMinor"] = *m.parent_minor;
  return j;
}
Result<MigInstance> MigInstanceFromJson(const Json& j) {
  try {
    MigInstance m;
    m.gpu_index = j.at("gpuIndex").get<int>();
    m.gpu_uuid = j.at("gpuUUID").get<std::string>();
    m.device = j.at("device").get<std::string>();
    m.profile_id = j.at("profileID").get<uint32_t>();
    m.start = j.at("start").get<uint32_t>();
    m.gpu_instance_id = j.at("gpuInstanceID").get<uint32_t>();
    m.compute_instance_id = j.at("computeInstanceID").get<uint32_t>();
    m.mig_uuid = j.at("migUUID").get<std::string>();
    if (j.contains("parentMinor")) m.parent_minor = j.at("parentMinor").get<uint32_t>();
    return m;
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(std::string("MIG instance record: ") + e.what());
  }
}

DynamicMig::DynamicMig(std::shared_ptr<MigControl> control, DynamicMigConfig config,
                       std::string state_file)
    : control_(std::move(control)),
      config_(std::move(config)),
      state_file_(std::move(state_file)) {}

Result<std::map<std::string, std::vector<MigInstance>>> DynamicMig::LoadState(
    const std::string& state_file) {
  std::map<std::string, std::vector<MigInstance>> out;
  std::error_code ec;
  if (!std::filesystem::exists(state_file, ec)) return out;
  std::ifstream in(state_file);
  std::stringstream text;
  text << in.rdbuf();
  const Json j = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("claims") || !j.at("claims").is_object()) {
    return InvalidArgument("dynamic MIG state " + state_file +
                           ": not a {\"claims\": {...}} object");
  }
  for (const auto& [uid, list] : j.at("claims").items()) {
    if (!list.is_array())
      return InvalidArgument("dynamic MIG state " + state_file + ": claims." + uid +
                             ": not a list");
    for (const auto& item : list) {
      auto m = MigInstanceFromJson(item);
      if (!m.ok())
        return m.status().WithContext("dynamic MIG state " + state_file + ": claims." + uid);
      out[uid].push_back(*m);
    }
  }
  return out;
}

Status DynamicMig::SaveLocked() const {
  if (state_file_.empty()) return Status::Ok();
  Json claims = Json::object();
  for (const auto& [uid, list] : held_) {
    Json a = Json::array();
    for (const auto& m : list) a.push_back(ToJson(m));
    claims[uid] = std::move(a);
  }
  return WriteFileAtomically(state_file_, Json{{"version", 1}, {"claims", claims}}.dump(2) + "\n");
}

std::mutex& DynamicMig::GpuMutex(int gpu_index) {
  const std::lock_guard<std::mutex> lock(mutex_);
  auto& slot = gpu_mutexes_[gpu_index];
  if (!slot) slot = std::make_unique<std::mutex>();
  return *slot;
}

Result<MigInstance> DynamicMig::Prepare(const std::string& claim_uid, const std::string& device) {
  const std::string where = Where(claim_uid, device);
  const auto parsed = ParsePlacementName(device);
  if (!parsed) return NotFound(where + "not a dynamic MIG placement device");
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (const auto it = held_.find(claim_uid); it != held_.end()) {
      for (const auto& m : it->second) {
        if (m.device == device) return m;
      }
    }
  }
  const std::lock_guard<std::mutex> gpu_lock(GpuMutex(parsed->gpu_index));
  {
    // The same claim and device prepared meanwhile (a repeat while the first
    // call was still at work): the same answer.
    const std::lock_guard<std::mutex> lock(mutex_);
    if (const auto it = held_.find(claim_uid); it != held_.end()) {
      for (const auto& m : it->second) {
        if (m.device == device) return m;
      }
    }
  }
  auto described = control_->Describe(parsed->gpu_index);
  if (!described.ok())
    return described.status().WithContext(where + "GPU " + std::to_string(parsed->gpu_index));
  const MigGpuSpec& gpu = *described;
  if (!config_.Selects(gpu.index, gpu.uuid)) {
    return FailedPrecondition(where + "GPU " + std::to_string(gpu.index) +
                              " is not configured for dynamic MIG");
  }
  const MigProfileSpec* profile = nullptr;
  for (const auto& p : gpu.profiles) {
    if (ProfileLabel(p.name) == parsed->profile_label) profile = &p;
  }
  if (profile == nullptr) {
    return InvalidArgument(where + "GPU " + std::to_string(gpu.index) + " (" + gpu.product +
                           ") has no MIG profile \"" + parsed->profile_label + "\"");
  }
  if (std::find(profile->placement_starts.begin(), profile->placement_starts.end(),
                parsed->start) == profile->placement_starts.end()) {
    return InvalidArgument(where + "profile " + profile->name +
                           " cannot be placed at memory slice " + std::to_string(parsed->start));
  }
  for (const auto& inst : gpu.instances) {
    const MigProfileSpec* p = gpu.FindProfile(inst.profile_id);
    const uint32_t size = p == nullptr ? 1 : p->memory_slices;
    if (PlacementsOverlap(parsed->start, profile->memory_slices, inst.start, size)) {
      return ResourceExhausted(where + "memory slices " + std::to_string(parsed->start) + "-" +
                               std::to_string(parsed->start + profile->memory_slices - 1) +
                               " are taken by GPU instance " +
                               std::to_string(inst.gpu_instance_id));
    }
  }
  auto gi = control_->CreateGpuInstance(gpu.index, profile->profile_id, parsed->start);
  if (!gi.ok()) return gi.status().WithContext(where + "creating the GPU instance");
  auto ci = control_->CreateComputeInstance(gpu.index, *gi);
  if (!ci.ok()) {
    Status undo = control_->DestroyGpuInstance(gpu.index, *gi);
    std::string message = where + "creating the compute instance: " + ci.status().message();
    if (!undo.ok()) message += "; destroying the GPU instance again failed too: " + undo.message();
    return Status(ci.status().code(), message);
  }
  auto uuid = control_->MigUuid(gpu.index, *gi, *ci);
  if (!uuid.ok()) {
    (void)control_->DestroyComputeInstance(gpu.index, *gi, *ci);
    (void)control_->DestroyGpuInstance(gpu.index, *gi);
    return uuid.status().WithContext(where + "reading the new MIG device");
  }
  MigInstance m{gpu.index, gpu.uuid, device,   profile->profile_id, parsed->start, *gi,
                *ci,       *uuid,    gpu.minor};
  const std::lock_guard<std::mutex> lock(mutex_);
  held_[claim_uid].push_back(m);
  if (Status s = SaveLocked(); !s.ok()) {
    // Not recorded: undo, so that no instance outlives a prepare that failed.
    std::erase_if(held_[claim_uid], [&](const MigInstance& x) { return x.device == device; });
    if (held_[claim_uid].empty()) held_.erase(claim_uid);
    (void)control_->DestroyComputeInstance(gpu.index, *gi, *ci);
    (void)control_->DestroyGpuInstance(gpu.index, *gi);
    return s.WithContext(where + "recording the instance");
  }
  return m;
}

Status DynamicMig::Unprepare(const std::string& claim_uid, const std::string& device) {
  std::optional<MigInstance> m;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = held_.find(claim_uid);
    if (it == held_.end()) return Status::Ok();
    for (const auto& x : it->second) {
      if (x.device == device) m = x;
    }
  }
  if (!m) return Status::Ok();
  const std::string where = Where(claim_uid, device);
  {
    const std::lock_guard<std::mutex> gpu_lock(GpuMutex(m->gpu_index));
    auto described = control_->Describe(m->gpu_index);
    bool gi_present = true;
    bool ci_present = true;
    if (!described.ok() && described.status().code() == StatusCode::kFailedPrecondition) {
      // The GPU left MIG mode: its instances went with it.
      gi_present = false;
      ci_present = false;
    } else if (described.ok()) {
      const auto& insts = described->instances;
      const auto it = std::find_if(insts.begin(), insts.end(), [&](const MigInstanceSpec& s) {
        return s.gpu_instance_id == m->gpu_instance_id;
      });
      gi_present = it != insts.end();
      ci_present = gi_present && !it->uuid.empty();
    }
    if (ci_present) {
      if (Status s = control_->DestroyComputeInstance(m->gpu_index, m->gpu_instance_id,
                                                      m->compute_instance_id);
          !s.ok()) {
        return s.WithContext(where + "destroying the compute instance");
      }
    }
    if (gi_present) {
      if (Status s = control_->DestroyGpuInstance(m->gpu_index, m->gpu_instance_id); !s.ok()) {
        return s.WithContext(where + "destroying the GPU instance");
      }
    }
  }
  const std::lock_guard<std::mutex> lock(mutex_);
  auto it = held_.find(claim_uid);
  if (it != held_.end()) {
    std::erase_if(it->second, [&](const MigInstance& x) { return x.device == device; });
    if (it->second.empty()) held_.erase(it);
  }
  // The instance is gone; a failed write leaves a stale record, which the
  // next Reconcile drops (the instance no longer exists).
  if (Status s = SaveLocked(); !s.ok()) return s.WithContext(where + "recording the release");
  return Status::Ok();
}

std::vector<OrphanInstance> DynamicMig::FindOrphans(const std::vector<int>& gpu_indices,
                                                    bool destroy) {
  std::vector<OrphanInstance> out;
  for (int index : gpu_indices) {
    const std::lock_guard<std::mutex> gpu_lock(GpuMutex(index));
    auto described = control_->Describe(index);
    if (!described.ok()) continue;
    if (!config_.Selects(described->index, described->uuid)) continue;
    std::set<uint32_t> owned;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& [uid, list] : held_) {
        for (const auto& m : list) {
          if (m.gpu_uuid == described->uuid) owned.insert(m.gpu_instance_id);
        }
      }
    }
    for (const auto& inst : described->instances) {
      if (owned.contains(inst.gpu_instance_id)) continue;
      OrphanInstance o;
      o.gpu_index = index;
      o.gpu_instance_id = inst.gpu_instance_id;
      if (!inst.uuid.empty()) o.compute_instance_id = inst.compute_instance_id;
      const MigProfileSpec* p = described->FindProfile(inst.profile_id);
      o.profile = p == nullptr ? "profile " + std::to_string(inst.profile_id) : p->name;
      o.start = inst.start;
      if (destroy) {
        Status s = Status::Ok();
        if (o.compute_instance_id)
          s = control_->DestroyComputeInstance(index, inst.gpu_instance_id, *o.compute_instance_id);
        if (s.ok()) s = control_->DestroyGpuInstance(index, inst.gpu_instance_id);
        o.destroyed = s.ok();
        if (!s.ok()) o.error = s.message();
      }
      out.push_back(std::move(o));
    }
  }
  return out;
}

std::vector<OrphanInstance> DynamicMig::Reconcile(
    const std::map<std::string, std::vector<MigInstance>>& prepared,
    const std::vector<int>& gpu_indices) {
  std::map<std::string, std::vector<MigInstance>> kept;
  for (const auto& [uid, list] : prepared) {
    for (const auto& m : list) {
      auto described = control_->Describe(m.gpu_index);
      if (!described.ok() || described->uuid != m.gpu_uuid) continue;
      const bool exists = std::any_of(described->instances.begin(), described->instances.end(),
                                      [&](const MigInstanceSpec& s) {
                                        return s.gpu_instance_id == m.gpu_instance_id &&
                                               s.start == m.start && s.profile_id == m.profile_id;
                                      });
      if (exists) kept[uid].push_back(m);
    }
  }
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    held_ = std::move(kept);
    (void)SaveLocked();  // best effort: the next change rewrites it
  }
  return FindOrphans(gpu_indices, config_.destroy_orphans);
}

std::vector<OrphanInstance> DynamicMig::Orphans(const std::vector<int>& gpu_indices) {
  return FindOrphans(gpu_indices, false);
}

std::map<std::string, std::vector<MigInstance>> DynamicMig::Held() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return held_;
}

std::vector<OrphanInstance> FindOrphanInstances(
    std::shared_ptr<MigControl> control, DynamicMigConfig config,
    const std::map<std::string, std::vector<MigInstance>>& prepared,
    const std::vector<int>& gpu_indices) {
  config.destroy_orphans = false;
  DynamicMig mig(std::move(control), std::move(config));
  return mig.Reconcile(prepared, gpu_indices);
}

std::string DescribeOrphan(const OrphanInstance& o) {
  std::string s = "GPU " + std::to_string(o.gpu_index) + ": MIG " + o.profile +
                  " at memory slice " + std::to_string(o.start) + " (GPU instance " +
                  std::to_string(o.gpu_instance_id);
  s += o.compute_instance_id ? ", compute instance " + std::to_string(*o.compute_instance_id)
                             : ", no compute instance: half-made";
  s += ") is held by no prepared claim";
  if (o.destroyed) s += "; destroyed";
  if (!o.error.empty()) s += "; destroying it failed: " + o.error;
  return s;
}

}  // namespace danqing::dra
