#include "dra/slices.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <set>
#include <sstream>

#include "dra/node_devices.h"

namespace danqing::dra {
namespace {

constexpr std::string_view kResetConditions[] = {"double-bit-ecc", "retired-pages-pending",
                                                 "row-remap-pending", "row-remap-failure"};

std::vector<std::string> SplitConditions(const std::string& reason) {
  std::vector<std::string> out;
  std::stringstream ss(reason);
  std::string part;
  while (std::getline(ss, part, ',')) {
    if (!part.empty()) out.push_back(part);
  }
  return out;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

Json StringAttr(std::string v) {
  return {{"string", std::move(v)}};
}
Json IntAttr(int64_t v) {
  return {{"int", v}};
}
Json VersionAttr(std::string v) {
  return {{"version", std::move(v)}};
}

// The sysfs form of an NVML bus id: "00000000:07:00.0" → "0000:07:00.0".
std::string SysfsBusId(const gpu::PciInfo& pci) {
  std::string id = Lower(pci.bus_id);
  if (id.size() == 16) id = id.substr(4);
  return id;
}

void AddCommon(SliceDevice& d, const gpu::NodeInventory& inv, const gpu::Gpu& g,
               const std::map<std::string, int>& domains, const SliceOptions& o) {
  Json& a = d.attributes;
  a["uuid"] = StringAttr(d.uuid);
  a["productName"] = StringAttr(g.name.substr(0, 64));
  if (!g.brand.empty()) a["brand"] = StringAttr(g.brand.substr(0, 64));
  if (!g.architecture.empty()) a["architecture"] = StringAttr(g.architecture.substr(0, 64));
  if (g.cuda_major > 0) {
    a["cudaComputeCapability"] =
        VersionAttr(std::to_string(g.cuda_major) + "." + std::to_string(g.cuda_minor) + ".0");
  }
  if (auto v = SemanticVersion(inv.driver_version)) a["driverVersion"] = VersionAttr(*v);
  if (inv.cuda_driver_version > 0) {
    a["cudaDriverVersion"] =
        VersionAttr(std::to_string(inv.cuda_driver_version / 1000) + "." +
                    std::to_string((inv.cuda_driver_version % 1000) / 10) + ".0");
  }
  if (g.minor_number) a["minor"] = IntAttr(*g.minor_number);
  a["pcieBusID"] = StringAttr(SysfsBusId(g.pci));
  if (!o.sysfs_root.empty()) {
    if (auto root = PcieRoot(o.sysfs_root, g.pci))
      a[std::string(kPcieRootAttribute)] = StringAttr(*root);
  }
  if (g.numa_node && *g.numa_node >= 0) a["numaNode"] = IntAttr(*g.numa_node);
  if (auto it = domains.find(g.uuid); it != domains.end()) a["nvlinkDomain"] = IntAttr(it->second);
}

void ApplyHealth(SliceDevice& d, const DeviceConditions& conditions, const SliceOptions& o) {
  // The GPU's conditions reach each device on it; a MIG device may have its own.
  std::vector<std::string> reasons;
  bool reset = false;
  for (const std::string& uuid : {d.gpu_uuid, d.uuid}) {
    auto it = conditions.find(uuid);
    if (it == conditions.end()) continue;
    for (auto& r : SplitConditions(it->second.reason)) {
      if (std::find(reasons.begin(), reasons.end(), r) == reasons.end()) reasons.push_back(r);
    }
    reset = reset || it->second.needs_reset;
    if (d.uuid == d.gpu_uuid) break;
  }
  if (reasons.empty()) {
    // A condition with no reason text is still a condition.
    if (conditions.contains(d.gpu_uuid) || conditions.contains(d.uuid))
      reasons.push_back("unhealthy");
    else
      return;
  }
  std::string joined;
  for (const auto& r : reasons) joined += (joined.empty() ? "" : ",") + r;
  d.taints.push_back(
      {o.driver + "/unhealthy", LabelValue(joined), reset ? "NoExecute" : "NoSchedule", ""});
}

}  // namespace

DeviceConditions ConditionsFromSnapshot(const std::vector<health::DeviceHealth>& snapshot) {
  DeviceConditions out;
  for (const auto& h : snapshot) {
    if (h.healthy) continue;
    out[h.uuid] = {h.reason, h.needs_reset};
  }
  return out;
}

DeviceConditions ConditionsFromUnhealthy(const std::map<std::string, std::string>& unhealthy,
                                         const health::XidPolicy& policy) {
  DeviceConditions out;
  for (const auto& [uuid, reason] : unhealthy) {
    DeviceCondition c{reason, false};
    for (const auto& name : SplitConditions(reason)) {
      for (auto r : kResetConditions) c.needs_reset = c.needs_reset || name == r;
      if (name.rfind("xid-", 0) == 0) {
        const std::string num = name.substr(4);
        if (!num.empty() && std::all_of(num.begin(), num.end(), [](char ch) {
              return std::isdigit(static_cast<unsigned char>(ch)) != 0;
            })) {
          c.needs_reset =
              c.needs_reset || policy.Classify(std::stoull(num)) == health::XidAction::kReset;
        }
      }
    }
    out[uuid] = std::move(c);
  }
  return out;
}

std::string SliceName(const SliceOptions& options, std::size_t index) {
  return options.node_name + "-" + options.driver + "-" + std::to_string(index);
}

std::optional<std::string> SemanticVersion(std::string_view version) {
  std::vector<std::string> parts;
  std::string cur;
  for (const char c : version) {
    if (c == '.') {
      parts.push_back(cur);
      cur.clear();
    } else if (c >= '0' && c <= '9') {
      cur.push_back(c);
    } else {
      return std::nullopt;
    }
  }
  parts.push_back(cur);
  if (parts.empty() || parts.size() > 3) return std::nullopt;
  std::string out;
  for (std::size_t i = 0; i < 3; ++i) {
    std::string p = i < parts.size() ? parts[i] : "0";
    if (p.empty() || p.size() > 9) return std::nullopt;
    p.erase(0, std::min(p.find_first_not_of('0'), p.size() - 1));
    out += (i > 0 ? "." : "") + p;
  }
  return out;
}

std::string BinaryQuantity(uint64_t bytes) {
  static constexpr const char* kSuffix[] = {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
  int s = 0;
  while (bytes != 0 && bytes % 1024 == 0 && s < 6) {
    bytes /= 1024;
    ++s;
  }
  return std::to_string(bytes) + kSuffix[s];
}

std::string LabelValue(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '_' || c == '-') {
      out.push_back(c);
    } else if (c == ',') {
      out.push_back('_');
    } else {
      out.push_back('-');
    }
  }
  if (out.size() > 63) out.resize(63);
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  while (!out.empty() && !alnum(out.back())) out.pop_back();
  std::size_t b = 0;
  while (b < out.size() && !alnum(out[b])) ++b;
  return out.substr(b);
}

std::map<std::string, int> NvlinkDomains(const gpu::NodeInventory& inv) {
  const std::size_t n = inv.gpus.size();
  std::vector<std::size_t> parent(n);
  for (std::size_t i = 0; i < n; ++i) parent[i] = i;
  auto find = [&](std::size_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  if (inv.topology.size() == n) {
    for (std::size_t a = 0; a < n; ++a) {
      for (std::size_t b = a + 1; b < n; ++b) {
        if (inv.topology.at(a, b).nvlinks > 0 || inv.topology.at(b, a).nvlinks > 0)
          parent[find(a)] = find(b);
      }
    }
  }
  std::map<std::size_t, int> lowest;
  for (std::size_t i = 0; i < n; ++i) {
    auto [it, fresh] = lowest.emplace(find(i), inv.gpus[i].index);
    if (!fresh) it->second = std::min(it->second, inv.gpus[i].index);
  }
  std::map<std::string, int> out;
  for (std::size_t i = 0; i < n; ++i) out[inv.gpus[i].uuid] = lowest[find(i)];
  return out;
}

std::optional<std::string> PcieRoot(const std::string& sysfs_root, const gpu::PciInfo& pci) {
  const std::string link = sysfs_root + "/bus/pci/devices/" + SysfsBusId(pci);
  char buf[PATH_MAX];
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
  if (n <= 0) return std::nullopt;
  const std::string target(buf, static_cast<std::size_t>(n));
  // ".../devices/pci0000:00/0000:00:01.0/0000:07:00.0": the "pciDDDD:BB" part.
  std::stringstream ss(target);
  std::string part;
  while (std::getline(ss, part, '/')) {
    if (part.size() == 10 && part.rfind("pci", 0) == 0 && part[7] == ':') return part;
  }
  return std::nullopt;
}

uint32_t KnownMultiprocessors(std::string_view product) {
  // Most specific first.
  static constexpr std::pair<std::string_view, uint32_t> kTable[] = {
      {"H100 PCIe", 114}, {"H100 NVL", 132}, {"H100", 132}, {"H200", 132}, {"H800", 132},
      {"H20", 78},        {"GH200", 132},    {"B200", 148}, {"A100", 108}, {"A800", 108},
      {"A30", 56},        {"A40", 84},       {"A10G", 80},  {"A10", 72},   {"L40S", 142},
      {"L40", 142},       {"L4", 58},        {"T4", 40},    {"V100", 80},  {"P100", 56},
  };
  for (const auto& [needle, sms] : kTable) {
    if (product.find(needle) != std::string_view::npos) return sms;
  }
  return 0;
}

std::vector<SliceDevice> BuildDevices(const gpu::NodeInventory& inventory,
                                      const DeviceConditions& conditions,
                                      const SliceOptions& options) {
  const auto domains = NvlinkDomains(inventory);
  std::vector<const gpu::Gpu*> gpus;
  for (const auto& g : inventory.gpus) {
    if (!options.serve || options.serve(g)) gpus.push_back(&g);
  }
  std::sort(gpus.begin(), gpus.end(),
            [](const gpu::Gpu* a, const gpu::Gpu* b) { return a->index < b->index; });
  std::vector<SliceDevice> out;
  for (const gpu::Gpu* g : gpus) {
    if (g->mig_mode == gpu::MigMode::kEnabled) {
      std::vector<const gpu::MigDevice*> migs;
      for (const auto& m : g->mig_devices) migs.push_back(&m);
      std::sort(migs.begin(), migs.end(), [](const gpu::MigDevice* a, const gpu::MigDevice* b) {
        return std::tie(a->gpu_instance_id, a->compute_instance_id) <
               std::tie(b->gpu_instance_id, b->compute_instance_id);
      });
      for (const gpu::MigDevice* m : migs) {
        SliceDevice d;
        d.name = DeviceNameFor(*g, *m);
        d.uuid = m->uuid;
        d.gpu_uuid = g->uuid;
        d.attributes = Json::object();
        d.attributes["type"] = StringAttr("mig");
        AddCommon(d, inventory, *g, domains, options);
        d.attributes["index"] = IntAttr(g->index);
        d.attributes["migProfile"] = StringAttr(m->profile);
        d.attributes["parentUUID"] = StringAttr(g->uuid);
        d.attributes["parentIndex"] = IntAttr(g->index);
        d.attributes["gpuInstanceID"] = IntAttr(m->gpu_instance_id);
        d.attributes["computeInstanceID"] = IntAttr(m->compute_instance_id);
        d.capacity = Json::object();
        if (m->memory_bytes > 0)
          d.capacity["memory"] = {{"value", BinaryQuantity(m->memory_bytes)}};
        if (m->multiprocessor_count > 0) {
          d.capacity["multiprocessors"] = {{"value", std::to_string(m->multiprocessor_count)}};
        }
        ApplyHealth(d, conditions, options);
        out.push_back(std::move(d));
      }
      continue;
    }
    SliceDevice d;
    d.name = DeviceNameFor(*g);
    d.uuid = g->uuid;
    d.gpu_uuid = g->uuid;
    d.attributes = Json::object();
    d.attributes["type"] = StringAttr("gpu");
    AddCommon(d, inventory, *g, domains, options);
    d.attributes["index"] = IntAttr(g->index);
    d.capacity = Json::object();
    if (g->memory_bytes > 0) d.capacity["memory"] = {{"value", BinaryQuantity(g->memory_bytes)}};
    if (const uint32_t sms = KnownMultiprocessors(g->name); sms > 0) {
      d.capacity["multiprocessors"] = {{"value", std::to_string(sms)}};
    }
    ApplyHealth(d, conditions, options);
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<std::vector<const SliceDevice*>> GroupDevices(const std::vector<SliceDevice>& devices,
                                                          const SliceOptions& options) {
  std::vector<std::vector<const SliceDevice*>> groups(1);
  bool tainted = false;
  const std::size_t max_plain = std::min(options.max_devices_per_slice, kMaxDevicesPerSlice);
  const std::size_t max_tainted = std::min(max_plain, kMaxDevicesPerSliceWithTaints);
  for (const auto& d : devices) {
    const bool t = tainted || !d.taints.empty();
    if (groups.back().size() + 1 > (t ? max_tainted : max_plain)) {
      groups.emplace_back();
      tainted = false;
    }
    groups.back().push_back(&d);
    tainted = tainted || !d.taints.empty();
  }
  return groups;
}

Json DeviceJson(const SliceDevice& d) {
  Json j = {{"name", d.name}};
  if (!d.attributes.empty()) j["attributes"] = d.attributes;
  if (!d.capacity.empty()) j["capacity"] = d.capacity;
  if (!d.taints.empty()) {
    Json ts = Json::array();
    for (const auto& t : d.taints) {
      Json tj = {{"key", t.key}, {"value", t.value}, {"effect", t.effect}};
      if (!t.time_added.empty()) tj["timeAdded"] = t.time_added;
      ts.push_back(std::move(tj));
    }
    j["taints"] = std::move(ts);
  }
  return j;
}

std::vector<Json> BuildSlices(const std::vector<SliceDevice>& devices, int64_t generation,
                              const SliceOptions& options) {
  const auto groups = GroupDevices(devices, options);
  std::vector<Json> out;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    Json devs = Json::array();
    for (const SliceDevice* d : groups[i]) devs.push_back(DeviceJson(*d));
    Json meta = {{"name", SliceName(options, i)}};
    if (!options.node_uid.empty()) {
      meta["ownerReferences"] = Json::array({{{"apiVersion", "v1"},
                                              {"kind", "Node"},
                                              {"name", options.node_name},
                                              {"uid", options.node_uid},
                                              {"controller", true}}});
    }
    Json spec = {{"driver", options.driver},
                 {"nodeName", options.node_name},
                 {"pool",
                  {{"name", options.node_name},
                   {"generation", generation},
                   {"resourceSliceCount", static_cast<int64_t>(groups.size())}}},
                 {"devices", devs}};
    out.push_back({{"apiVersion", "resource.k8s.io/v1"},
                   {"kind", "ResourceSlice"},
                   {"metadata", meta},
                   {"spec", spec}});
  }
  return out;
}

}  // namespace danqing::dra
