// Fake NVML: JSON profile -> node model, with validation, and back.
// Thread-safety: pure functions over values; no shared state.
#include "profile.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <limits>
#include <utility>

#include "codes.h"

namespace fake_nvml {
namespace {

// ---------------------------------------------------------------------------
// Small helpers for error messages and strict field access.

[[noreturn]] void fail(const std::string& where, const std::string& message) {
  throw ProfileError(where.empty() ? message : where + ": " + message);
}

std::string join_path(const std::string& where, std::string_view key) {
  return where.empty() ? std::string(key) : where + "." + std::string(key);
}

std::string index_path(const std::string& where, std::size_t index) {
  return where + "[" + std::to_string(index) + "]";
}

// A short rendering of a value for "expected X, got Y" messages.
std::string describe(const json& value) {
  std::string text = value.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return std::string(value.type_name()) + " " + text;
}

std::string in_quotes(std::string_view text) { return "\"" + std::string(text) + "\""; }

// Unsigned integer in [0, max]: a JSON number, or a string of hex ("0x20B210DE")
// or decimal digits, so PCI ids can be written readably.
std::uint64_t as_uint(const json& value, const std::string& where, std::uint64_t max) {
  std::uint64_t result = 0;
  if (value.is_number_unsigned()) {
    result = value.get<std::uint64_t>();
  } else if (value.is_number_integer()) {
    const auto signed_value = value.get<std::int64_t>();
    if (signed_value < 0) fail(where, "must not be negative, got " + value.dump());
    result = static_cast<std::uint64_t>(signed_value);
  } else if (value.is_string()) {
    std::string_view text = value.get_ref<const std::string&>();
    int base = 10;
    if (text.starts_with("0x") || text.starts_with("0X")) {
      text.remove_prefix(2);
      base = 16;
    }
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), result, base);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
      fail(where, "expected an unsigned integer (or a \"0x...\" string), got " + describe(value));
    }
  } else {
    fail(where, "expected an unsigned integer, got " + describe(value));
  }
  if (result > max) fail(where, "value " + std::to_string(result) + " is above the maximum " + std::to_string(max));
  return result;
}

std::int64_t as_int(const json& value, const std::string& where, std::int64_t min, std::int64_t max) {
  if (!value.is_number_integer()) fail(where, "expected an integer, got " + describe(value));
  if (value.is_number_unsigned() && value.get<std::uint64_t>() > static_cast<std::uint64_t>(max)) {
    fail(where, "value " + value.dump() + " is out of range");
  }
  const auto result = value.get<std::int64_t>();
  if (result < min || result > max) {
    fail(where, "value " + std::to_string(result) + " is outside [" + std::to_string(min) + ", " +
                    std::to_string(max) + "]");
  }
  return result;
}

std::string as_string(const json& value, const std::string& where) {
  if (!value.is_string()) fail(where, "expected a string, got " + describe(value));
  return value.get<std::string>();
}

bool as_bool(const json& value, const std::string& where) {
  if (!value.is_boolean()) fail(where, "expected true or false, got " + describe(value));
  return value.get<bool>();
}

// A label for PCIe components: strings and integers are both accepted.
std::string as_label(const json& value, const std::string& where) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_integer()) return std::to_string(value.get<std::int64_t>());
  fail(where, "expected a string or integer id, got " + describe(value));
}

const json& as_array(const json& value, const std::string& where) {
  if (!value.is_array()) fail(where, "expected an array, got " + describe(value));
  return value;
}

// Strict view of a JSON object: reading a member marks it used, and
// reject_unknown() fails on members nobody read (typos). Members whose name
// starts with '_' are comments and always allowed.
class Fields {
 public:
  Fields(const json& value, std::string where) : value_(value), where_(std::move(where)) {
    if (!value_.is_object()) fail(where_, "expected an object, got " + describe(value_));
  }

  // The member, or nullptr when absent or JSON null.
  const json* find(std::string_view key) {
    used_.emplace(key);
    const auto it = value_.find(key);
    if (it == value_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  const json& at(std::string_view key) {
    const json* member = find(key);
    if (member == nullptr) fail(where_, "missing required field " + in_quotes(key));
    return *member;
  }

  std::string path(std::string_view key) const { return join_path(where_, key); }

  std::string string(std::string_view key) { return as_string(at(key), path(key)); }

  std::string string_or(std::string_view key, std::string fallback) {
    const json* member = find(key);
    return member != nullptr ? as_string(*member, path(key)) : std::move(fallback);
  }

  template <typename T>
  T uint(std::string_view key, T max = std::numeric_limits<T>::max()) {
    return static_cast<T>(as_uint(at(key), path(key), max));
  }

  template <typename T>
  T uint_or(std::string_view key, T fallback, T max = std::numeric_limits<T>::max()) {
    const json* member = find(key);
    return member != nullptr ? static_cast<T>(as_uint(*member, path(key), max)) : fallback;
  }

  bool boolean_or(std::string_view key, bool fallback) {
    const json* member = find(key);
    return member != nullptr ? as_bool(*member, path(key)) : fallback;
  }

  void reject_unknown() const {
    for (const auto& [key, member] : value_.items()) {
      if (key.starts_with("_") || used_.contains(key)) continue;
      fail(where_, "unknown field " + in_quotes(key));
    }
  }

 private:
  const json& value_;
  std::string where_;
  std::set<std::string, std::less<>> used_;
};

// ---------------------------------------------------------------------------
// Enumerations written by name.

struct NamedValue {
  std::string_view name;
  unsigned value;
};

constexpr std::array kArchitectures = {
    NamedValue{"KEPLER", NVML_DEVICE_ARCH_KEPLER},   NamedValue{"MAXWELL", NVML_DEVICE_ARCH_MAXWELL},
    NamedValue{"PASCAL", NVML_DEVICE_ARCH_PASCAL},   NamedValue{"VOLTA", NVML_DEVICE_ARCH_VOLTA},
    NamedValue{"TURING", NVML_DEVICE_ARCH_TURING},   NamedValue{"AMPERE", NVML_DEVICE_ARCH_AMPERE},
    NamedValue{"ADA", NVML_DEVICE_ARCH_ADA},         NamedValue{"HOPPER", NVML_DEVICE_ARCH_HOPPER},
    NamedValue{"BLACKWELL", NVML_DEVICE_ARCH_BLACKWELL},
    NamedValue{"UNKNOWN", NVML_DEVICE_ARCH_UNKNOWN},
};

constexpr std::array kBrands = {
    NamedValue{"UNKNOWN", NVML_BRAND_UNKNOWN},
    NamedValue{"QUADRO", NVML_BRAND_QUADRO},
    NamedValue{"TESLA", NVML_BRAND_TESLA},
    NamedValue{"NVS", NVML_BRAND_NVS},
    NamedValue{"GRID", NVML_BRAND_GRID},
    NamedValue{"GEFORCE", NVML_BRAND_GEFORCE},
    NamedValue{"TITAN", NVML_BRAND_TITAN},
    NamedValue{"NVIDIA_VAPPS", NVML_BRAND_NVIDIA_VAPPS},
    NamedValue{"NVIDIA_VPC", NVML_BRAND_NVIDIA_VPC},
    NamedValue{"NVIDIA_VCS", NVML_BRAND_NVIDIA_VCS},
    NamedValue{"NVIDIA_VWS", NVML_BRAND_NVIDIA_VWS},
    NamedValue{"NVIDIA_CLOUD_GAMING", NVML_BRAND_NVIDIA_CLOUD_GAMING},
    NamedValue{"QUADRO_RTX", NVML_BRAND_QUADRO_RTX},
    NamedValue{"NVIDIA_RTX", NVML_BRAND_NVIDIA_RTX},
    NamedValue{"NVIDIA", NVML_BRAND_NVIDIA},
    NamedValue{"GEFORCE_RTX", NVML_BRAND_GEFORCE_RTX},
    NamedValue{"TITAN_RTX", NVML_BRAND_TITAN_RTX},
};

template <std::size_t N>
unsigned parse_named(const json& value, const std::string& where, const std::array<NamedValue, N>& table,
                     std::string_view what) {
  if (value.is_string()) {
    const auto& text = value.get_ref<const std::string&>();
    for (const NamedValue& entry : table) {
      if (entry.name == text) return entry.value;
    }
    std::string known;
    for (const NamedValue& entry : table) known += (known.empty() ? "" : ", ") + std::string(entry.name);
    fail(where, "unknown " + std::string(what) + " " + in_quotes(text) + " (known: " + known + ")");
  }
  return static_cast<unsigned>(as_uint(value, where, std::numeric_limits<unsigned>::max()));
}

template <std::size_t N>
std::string name_of(unsigned value, const std::array<NamedValue, N>& table) {
  for (const NamedValue& entry : table) {
    if (entry.value == value) return std::string(entry.name);
  }
  return std::to_string(value);
}

// ---------------------------------------------------------------------------
// Pieces of a GPU entry.

// Memory slices a GPU instance of `slice_count` compute slices occupies on the
// 8-slice GPUs (1g=1, 2g=2, 3g=4, 4g=4, 7g=8).
unsigned default_memory_slices(unsigned slice_count) {
  switch (slice_count) {
    case 1: return 1;
    case 2: return 2;
    case 3:
    case 4: return 4;
    default: return kMigMemorySlices;
  }
}

MigProfile parse_mig_profile(const json& value, const std::string& where) {
  Fields f(value, where);
  MigProfile p;
  p.profile = f.uint<unsigned>("profile", NVML_GPU_INSTANCE_PROFILE_COUNT - 1);
  p.id = f.uint<unsigned>("id");
  p.name = f.string("name");
  if (!p.name.starts_with("MIG ")) fail(f.path("name"), "must look like \"MIG 1g.10gb\", got " + in_quotes(p.name));
  p.slice_count = f.uint<unsigned>("slice_count", kMigComputeSlices);
  if (p.slice_count == 0) fail(f.path("slice_count"), "must be at least 1");
  p.memory_slices = f.uint_or<unsigned>("memory_slices", default_memory_slices(p.slice_count), kMigMemorySlices);
  if (p.memory_slices == 0) fail(f.path("memory_slices"), "must be at least 1");
  p.instance_count = f.uint<unsigned>("instance_count", kMaxMigDevices);
  p.multiprocessor_count = f.uint<unsigned>("multiprocessor_count");
  p.memory_mib = f.uint<std::uint64_t>("memory_mib");
  p.copy_engine_count = f.uint_or<unsigned>("copy_engine_count", 0);
  p.decoder_count = f.uint_or<unsigned>("decoder_count", 0);
  p.encoder_count = f.uint_or<unsigned>("encoder_count", 0);
  p.jpeg_count = f.uint_or<unsigned>("jpeg_count", 0);
  p.ofa_count = f.uint_or<unsigned>("ofa_count", 0);
  p.p2p = f.boolean_or("p2p", false);
  f.reject_unknown();
  return p;
}

std::vector<MigProfile> parse_mig_table(const json& value, const std::string& where) {
  std::vector<MigProfile> table;
  const json& entries = as_array(value, where);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const std::string entry_where = index_path(where, i);
    MigProfile p = parse_mig_profile(entries[i], entry_where);
    for (const MigProfile& other : table) {
      if (other.profile == p.profile) fail(entry_where, "profile constant " + std::to_string(p.profile) + " appears twice");
      if (other.name == p.name) fail(entry_where, "profile name " + in_quotes(p.name) + " appears twice");
    }
    table.push_back(std::move(p));
  }
  return table;
}

NvLink parse_nvlink(const json& value, const std::string& where) {
  // Either a bare bus id (an active link), null (a link with no peer), or
  // {"remote": bus id or null, "active": bool (default: a remote is given)}.
  NvLink link;
  const json* remote = value.is_null() ? nullptr : &value;
  std::string remote_where = where;
  if (value.is_object()) {
    Fields f(value, where);
    remote = f.find("remote");
    remote_where = f.path("remote");
    link.active = f.boolean_or("active", remote != nullptr);
    f.reject_unknown();
  } else {
    link.active = remote != nullptr;
  }
  if (remote != nullptr) {
    const std::string text = as_string(*remote, remote_where);
    link.remote = parse_bus_id(text);
    if (!link.remote) fail(remote_where, "malformed PCI bus id " + in_quotes(text));
  }
  return link;
}

Gpu parse_gpu(const json& value, const std::string& where, unsigned index,
              const std::map<std::string, std::vector<MigProfile>>& model_tables) {
  Fields f(value, where);
  Gpu g;

  g.uuid = f.string("uuid");
  if (!is_valid_uuid(g.uuid, "GPU-")) {
    fail(f.path("uuid"), "expected \"GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx\" (hex), got " + in_quotes(g.uuid));
  }
  g.name = f.string("name");
  if (g.name.empty() || g.name.size() >= NVML_DEVICE_NAME_V2_BUFFER_SIZE) fail(f.path("name"), "bad length");
  if (const json* brand = f.find("brand")) {
    g.brand = static_cast<nvmlBrandType_t>(parse_named(*brand, f.path("brand"), kBrands, "brand"));
  }
  g.architecture = parse_named(f.at("architecture"), f.path("architecture"), kArchitectures, "architecture");
  {
    const json& cc = as_array(f.at("compute_capability"), f.path("compute_capability"));
    if (cc.size() != 2) fail(f.path("compute_capability"), "expected [major, minor]");
    g.cc_major = static_cast<int>(as_int(cc[0], f.path("compute_capability[0]"), 1, 99));
    g.cc_minor = static_cast<int>(as_int(cc[1], f.path("compute_capability[1]"), 0, 99));
  }
  g.minor_number = f.uint_or<unsigned>("minor_number", index, 255);

  {
    Fields pci(f.at("pci"), f.path("pci"));
    const std::string bus_id = pci.string("bus_id");
    const auto address = parse_bus_id(bus_id);
    if (!address) fail(pci.path("bus_id"), "malformed PCI bus id " + in_quotes(bus_id) + " (want \"00000000:07:00.0\")");
    g.pci = *address;
    g.pci_device_id = pci.uint<unsigned>("device_id");
    g.pci_subsystem_id = pci.uint_or<unsigned>("subsystem_id", 0);
    pci.reject_unknown();
  }
  if (const json* numa = f.find("numa_node")) {
    g.numa_node = static_cast<int>(as_int(*numa, f.path("numa_node"), -1, 1023));
  }
  if (const json* pcie = f.find("pcie")) {
    Fields p(*pcie, f.path("pcie"));
    if (const json* v = p.find("switch")) g.pcie.switch_id = as_label(*v, p.path("switch"));
    if (const json* v = p.find("switch_parent")) g.pcie.switch_parent = as_label(*v, p.path("switch_parent"));
    if (const json* v = p.find("host_bridge")) g.pcie.host_bridge = as_label(*v, p.path("host_bridge"));
    p.reject_unknown();
  }
  if (const json* links = f.find("nvlinks")) {
    const json& entries = as_array(*links, f.path("nvlinks"));
    if (entries.size() > NVML_NVLINK_MAX_LINKS) {
      fail(f.path("nvlinks"), "has " + std::to_string(entries.size()) + " links; NVML allows at most " +
                                  std::to_string(NVML_NVLINK_MAX_LINKS));
    }
    for (std::size_t i = 0; i < entries.size(); ++i) {
      g.nvlinks.push_back(parse_nvlink(entries[i], index_path(f.path("nvlinks"), i)));
    }
  }

  g.memory_total_mib = f.uint<std::uint64_t>("memory_total_mib");
  g.memory_reserved_mib = f.uint_or<std::uint64_t>("memory_reserved_mib", 0);
  if (g.memory_total_mib == 0 || g.memory_reserved_mib >= g.memory_total_mib) {
    fail(where, "memory_reserved_mib must be below memory_total_mib, and the total above 0");
  }
  g.multiprocessor_count = f.uint<unsigned>("multiprocessor_count");

  const json* sensors = f.find("sensors");
  g.sensors = parse_sensors(sensors != nullptr ? *sensors : json::object(), f.path("sensors"));
  if (g.sensors.memory_used_mib && *g.sensors.memory_used_mib > g.memory_total_mib - g.memory_reserved_mib) {
    fail(f.path("sensors.memory_used_mib"), "exceeds the usable memory");
  }

  if (const json* table = f.find("mig_profiles")) {
    g.mig_profiles = parse_mig_table(*table, f.path("mig_profiles"));
  } else if (const auto it = model_tables.find(g.name); it != model_tables.end()) {
    g.mig_profiles = it->second;
  }
  if (const json* mig = f.find("mig")) g.mig = parse_mig(*mig, g, f.path("mig"));
  if (const json* processes = f.find("processes")) {
    g.processes = parse_processes(*processes, g, f.path("processes"));
  }

  if (const json* unsupported = f.find("unsupported")) {
    const json& names = as_array(*unsupported, f.path("unsupported"));
    for (std::size_t i = 0; i < names.size(); ++i) {
      const std::string name = as_string(names[i], index_path(f.path("unsupported"), i));
      if (!is_exported_function(name)) {
        fail(index_path(f.path("unsupported"), i), in_quotes(name) + " is not an NVML function this library exports");
      }
      g.unsupported.insert(name);
    }
  }
  g.lost = f.boolean_or("lost", false);
  f.reject_unknown();
  return g;
}

// Cross-GPU rules: unique UUIDs, bus ids and minor numbers; NVLinks that end
// at a known device; GPU-to-GPU link counts that agree on both ends.
void check_node(const Node& node) {
  std::set<std::string, std::less<>> uuids;
  std::set<std::string, std::less<>> bus_ids;
  std::set<unsigned> minors;
  for (std::size_t i = 0; i < node.gpus.size(); ++i) {
    const Gpu& g = node.gpus[i];
    const std::string where = index_path("gpus", i);
    if (!uuids.insert(g.uuid).second) fail(where, "duplicate UUID " + in_quotes(g.uuid));
    for (const MigDevice& m : g.mig.devices) {
      if (!uuids.insert(m.uuid).second) fail(where + ".mig", "duplicate UUID " + in_quotes(m.uuid));
    }
    if (!bus_ids.insert(g.pci.bus_id()).second) fail(where, "duplicate PCI bus id " + in_quotes(g.pci.bus_id()));
    if (!minors.insert(g.minor_number).second) fail(where, "duplicate minor_number " + std::to_string(g.minor_number));
  }
  for (std::size_t i = 0; i < node.nvswitches.size(); ++i) {
    const std::string bus_id = node.nvswitches[i].address.bus_id();
    if (!bus_ids.insert(bus_id).second) fail(index_path("nvswitches", i), "duplicate PCI bus id " + in_quotes(bus_id));
  }
  for (std::size_t i = 0; i < node.gpus.size(); ++i) {
    const Gpu& g = node.gpus[i];
    for (std::size_t l = 0; l < g.nvlinks.size(); ++l) {
      const NvLink& link = g.nvlinks[l];
      if (!link.remote) continue;
      const std::string where = index_path(index_path("gpus", i) + ".nvlinks", l);
      if (*link.remote == g.pci) fail(where, "a GPU cannot link to itself");
      const Gpu* peer = node.find_gpu(*link.remote);
      if (peer == nullptr) {
        if (node.find_nvswitch(*link.remote) == nullptr) {
          fail(where, "remote " + in_quotes(link.remote->bus_id()) + " is neither a GPU nor a listed NVSwitch");
        }
        continue;
      }
      const auto count_links = [](const Gpu& from, const PciAddress& to) {
        return std::count_if(from.nvlinks.begin(), from.nvlinks.end(),
                             [&to](const NvLink& x) { return x.remote && *x.remote == to; });
      };
      if (count_links(g, peer->pci) != count_links(*peer, g.pci)) {
        fail(where, "GPU " + g.pci.bus_id() + " has " + std::to_string(count_links(g, peer->pci)) + " link(s) to " +
                        peer->pci.bus_id() + " but that GPU has " + std::to_string(count_links(*peer, g.pci)) +
                        " back");
      }
    }
  }
}

std::uint64_t now_us() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

// 1-based line and column of a byte offset, for JSON syntax errors.
std::pair<std::size_t, std::size_t> line_and_column(std::string_view text, std::size_t offset) {
  offset = std::min(offset, text.size());
  const std::string_view before = text.substr(0, offset);
  const auto line = static_cast<std::size_t>(std::count(before.begin(), before.end(), '\n')) + 1;
  const auto last_newline = before.rfind('\n');
  const std::size_t column = last_newline == std::string_view::npos ? offset + 1 : offset - last_newline;
  return {line, column};
}

std::string read_file(const std::string& path) {
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) throw ProfileError("cannot read profile \"" + path + "\": " + std::strerror(errno));
  std::string text;
  std::array<char, 65536> chunk{};
  std::size_t n = 0;
  while ((n = std::fread(chunk.data(), 1, chunk.size(), file.get())) > 0) text.append(chunk.data(), n);
  if (std::ferror(file.get()) != 0) throw ProfileError("cannot read profile \"" + path + "\": read error");
  return text;
}

}  // namespace

// ---------------------------------------------------------------------------
// PCI addresses.

std::string PciAddress::bus_id() const {
  std::array<char, 32> buffer{};
  std::snprintf(buffer.data(), buffer.size(), "%08X:%02X:%02X.%X", domain, bus, device, function);
  return buffer.data();
}

std::string PciAddress::legacy_bus_id() const {
  std::array<char, 32> buffer{};
  std::snprintf(buffer.data(), buffer.size(), "%04X:%02X:%02X.%X", domain & 0xFFFFU, bus, device, function);
  return buffer.data();
}

std::optional<PciAddress> parse_bus_id(std::string_view text) {
  const auto parse_hex = [](std::string_view part, std::size_t max_digits, unsigned max_value,
                            unsigned& out) -> bool {
    if (part.empty() || part.size() > max_digits) return false;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), out, 16);
    return ec == std::errc() && end == part.data() + part.size() && out <= max_value;
  };
  PciAddress address;
  const auto dot = text.rfind('.');
  if (dot == std::string_view::npos) return std::nullopt;
  if (!parse_hex(text.substr(dot + 1), 1, 7, address.function)) return std::nullopt;
  text = text.substr(0, dot);
  const auto last_colon = text.rfind(':');
  if (last_colon == std::string_view::npos) return std::nullopt;
  if (!parse_hex(text.substr(last_colon + 1), 2, 0x1F, address.device)) return std::nullopt;
  text = text.substr(0, last_colon);
  const auto first_colon = text.rfind(':');
  const std::string_view bus = first_colon == std::string_view::npos ? text : text.substr(first_colon + 1);
  if (!parse_hex(bus, 2, 0xFF, address.bus)) return std::nullopt;
  if (first_colon != std::string_view::npos &&
      !parse_hex(text.substr(0, first_colon), 8, 0xFFFFFFFFU, address.domain)) {
    return std::nullopt;
  }
  return address;
}

bool is_valid_uuid(std::string_view uuid, std::string_view prefix) {
  if (!uuid.starts_with(prefix)) return false;
  uuid.remove_prefix(prefix.size());
  constexpr std::array<std::size_t, 5> kGroups = {8, 4, 4, 4, 12};
  for (std::size_t i = 0; i < kGroups.size(); ++i) {
    if (uuid.size() < kGroups[i]) return false;
    for (char ch : uuid.substr(0, kGroups[i])) {
      if (std::isxdigit(static_cast<unsigned char>(ch)) == 0) return false;
    }
    uuid.remove_prefix(kGroups[i]);
    if (i + 1 < kGroups.size()) {
      if (uuid.empty() || uuid.front() != '-') return false;
      uuid.remove_prefix(1);
    }
  }
  return uuid.empty();
}

// ---------------------------------------------------------------------------
// Model queries.

std::string_view MigProfile::short_name() const {
  std::string_view view = name;
  if (view.starts_with("MIG ")) view.remove_prefix(4);
  return view;
}

const MigDevice* Gpu::find_mig_by_uuid(std::string_view mig_uuid) const {
  const auto it = std::find_if(mig.devices.begin(), mig.devices.end(),
                               [mig_uuid](const MigDevice& d) { return d.uuid == mig_uuid; });
  return it == mig.devices.end() ? nullptr : &*it;
}

const MigDevice* Gpu::find_mig_by_gi(unsigned gpu_instance_id) const {
  const auto it = std::find_if(mig.devices.begin(), mig.devices.end(),
                               [gpu_instance_id](const MigDevice& d) { return d.gpu_instance_id == gpu_instance_id; });
  return it == mig.devices.end() ? nullptr : &*it;
}

const MigProfile* Gpu::find_mig_profile(unsigned profile_constant) const {
  const auto it = std::find_if(mig_profiles.begin(), mig_profiles.end(),
                               [profile_constant](const MigProfile& p) { return p.profile == profile_constant; });
  return it == mig_profiles.end() ? nullptr : &*it;
}

std::uint64_t Gpu::memory_used_mib() const {
  if (sensors.memory_used_mib) return *sensors.memory_used_mib;
  std::uint64_t sum = 0;
  for (const Process& p : processes) sum += p.used_memory_mib;
  return sum;
}

std::uint64_t Gpu::instance_memory_used_mib(unsigned gpu_instance_id) const {
  std::uint64_t sum = 0;
  for (const Process& p : processes) {
    if (p.gpu_instance_id == gpu_instance_id) sum += p.used_memory_mib;
  }
  return sum;
}

const Gpu* Node::find_gpu(const PciAddress& address) const {
  const auto it = std::find_if(gpus.begin(), gpus.end(), [&address](const Gpu& g) { return g.pci == address; });
  return it == gpus.end() ? nullptr : &*it;
}

const NvSwitch* Node::find_nvswitch(const PciAddress& address) const {
  const auto it = std::find_if(nvswitches.begin(), nvswitches.end(),
                               [&address](const NvSwitch& s) { return s.address == address; });
  return it == nvswitches.end() ? nullptr : &*it;
}

// ---------------------------------------------------------------------------
// Parsing.

Sensors parse_sensors(const json& value, const std::string& where) {
  Fields f(value, where);
  Sensors s;
  if (const json* util = f.find("utilization")) {
    Fields u(*util, f.path("utilization"));
    s.gpu_util = u.uint_or<unsigned>("gpu", 0, 100);
    s.memory_util = u.uint_or<unsigned>("memory", 0, 100);
    u.reject_unknown();
  }
  if (const json* used = f.find("memory_used_mib")) s.memory_used_mib = as_uint(*used, f.path("memory_used_mib"), UINT64_MAX);
  s.temperature_c = f.uint_or<unsigned>("temperature_c", 0, 200);
  s.power_mw = f.uint_or<unsigned>("power_mw", 0, 10'000'000);
  if (const json* clocks = f.find("clocks_mhz")) {
    Fields c(*clocks, f.path("clocks_mhz"));
    s.clock_graphics_mhz = c.uint_or<unsigned>("graphics", 0, 100'000);
    s.clock_sm_mhz = c.uint_or<unsigned>("sm", 0, 100'000);
    s.clock_mem_mhz = c.uint_or<unsigned>("mem", 0, 100'000);
    s.clock_video_mhz = c.uint_or<unsigned>("video", 0, 100'000);
    c.reject_unknown();
  }
  s.throttle_reasons = f.uint_or<std::uint64_t>("throttle_reasons", 0);
  if (const json* ecc = f.find("ecc")) {
    Fields e(*ecc, f.path("ecc"));
    const auto counters = [&e](std::string_view key, EccCounters& out) {
      if (const json* member = e.find(key)) {
        Fields c(*member, e.path(key));
        out.corrected = c.uint_or<std::uint64_t>("corrected", 0);
        out.uncorrected = c.uint_or<std::uint64_t>("uncorrected", 0);
        c.reject_unknown();
      }
    };
    counters("volatile", s.ecc_volatile);
    counters("aggregate", s.ecc_aggregate);
    e.reject_unknown();
  }
  s.retired_pages_pending = f.boolean_or("retired_pages_pending", false);
  if (const json* rows = f.find("remapped_rows")) {
    Fields r(*rows, f.path("remapped_rows"));
    s.remapped_correctable = r.uint_or<unsigned>("correctable", 0);
    s.remapped_uncorrectable = r.uint_or<unsigned>("uncorrectable", 0);
    s.remapped_pending = r.boolean_or("pending", false);
    s.remapped_failure = r.boolean_or("failure", false);
    r.reject_unknown();
  }
  f.reject_unknown();
  return s;
}

std::vector<Process> parse_processes(const json& value, const Gpu& gpu, const std::string& where) {
  std::vector<Process> processes;
  const json& entries = as_array(value, where);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const std::string entry_where = index_path(where, i);
    Fields f(entries[i], entry_where);
    Process p;
    p.pid = f.uint<unsigned>("pid");
    if (p.pid == 0) fail(f.path("pid"), "must be above 0");
    p.used_memory_mib = f.uint_or<std::uint64_t>("used_memory_mib", 0);
    p.sm_util = f.uint_or<unsigned>("sm_util", 0, 100);
    p.mem_util = f.uint_or<unsigned>("mem_util", 0, 100);
    if (const json* gi = f.find("gpu_instance_id")) p.gpu_instance_id = static_cast<unsigned>(as_uint(*gi, f.path("gpu_instance_id"), 0xFFFF));
    if (const json* ci = f.find("compute_instance_id")) p.compute_instance_id = static_cast<unsigned>(as_uint(*ci, f.path("compute_instance_id"), 0xFFFF));
    f.reject_unknown();
    if (gpu.mig_enabled()) {
      if (!p.gpu_instance_id) fail(entry_where, "the GPU is in MIG mode, so a process needs \"gpu_instance_id\"");
      const MigDevice* device = gpu.find_mig_by_gi(*p.gpu_instance_id);
      if (device == nullptr) fail(entry_where, "no MIG device with gpu_instance_id " + std::to_string(*p.gpu_instance_id));
      if (!p.compute_instance_id) p.compute_instance_id = device->compute_instance_id;
      if (*p.compute_instance_id != device->compute_instance_id) {
        fail(entry_where, "GPU instance " + std::to_string(*p.gpu_instance_id) + " has compute instance " +
                              std::to_string(device->compute_instance_id) + " only");
      }
    } else if (p.gpu_instance_id || p.compute_instance_id) {
      fail(entry_where, "instance ids given but the GPU is not in MIG mode");
    }
    processes.push_back(p);
  }
  return processes;
}

MigConfig parse_mig(const json& value, const Gpu& gpu, const std::string& where) {
  Fields f(value, where);
  MigConfig mig;
  mig.mode = f.uint_or<unsigned>("mode", NVML_DEVICE_MIG_DISABLE, 1);
  mig.pending = f.uint_or<unsigned>("pending", mig.mode, 1);
  if (!gpu.mig_capable() && (mig.mode != 0 || mig.pending != 0)) {
    fail(where, in_quotes(gpu.name) + " is not MIG capable (no mig_profiles table for this model)");
  }

  // Explicit placements are checked as given; the rest are placed afterwards
  // at the first free start that is a multiple of their size.
  std::vector<bool> has_placement;
  if (const json* devices = f.find("devices")) {
    const json& entries = as_array(*devices, f.path("devices"));
    if (!entries.empty() && mig.mode != NVML_DEVICE_MIG_ENABLE) fail(where, "MIG devices are listed but mode is 0");
    if (entries.size() > kMaxMigDevices) fail(f.path("devices"), "more than " + std::to_string(kMaxMigDevices) + " MIG devices");
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const std::string entry_where = index_path(f.path("devices"), i);
      Fields d(entries[i], entry_where);
      MigDevice device;
      const std::string profile = d.string("profile");
      const auto it = std::find_if(gpu.mig_profiles.begin(), gpu.mig_profiles.end(), [&profile](const MigProfile& p) {
        return p.short_name() == profile || p.name == profile;
      });
      if (it == gpu.mig_profiles.end()) {
        std::string known;
        for (const MigProfile& p : gpu.mig_profiles) known += (known.empty() ? "" : ", ") + std::string(p.short_name());
        fail(d.path("profile"), "unknown MIG profile " + in_quotes(profile) + " for " + in_quotes(gpu.name) + " (known: " + known + ")");
      }
      device.profile = static_cast<std::size_t>(it - gpu.mig_profiles.begin());
      device.gpu_instance_id = d.uint<unsigned>("gpu_instance_id", 0xFFFF);
      device.compute_instance_id = d.uint_or<unsigned>("compute_instance_id", 0, 0xFFFF);
      device.uuid = d.string("uuid");
      if (!is_valid_uuid(device.uuid, "MIG-")) {
        fail(d.path("uuid"), "expected \"MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx\" (hex), got " + in_quotes(device.uuid));
      }
      const json* start = d.find("placement_start");
      has_placement.push_back(start != nullptr);
      if (start != nullptr) device.placement_start = static_cast<unsigned>(as_uint(*start, d.path("placement_start"), kMigMemorySlices - 1));
      d.reject_unknown();
      for (const MigDevice& other : mig.devices) {
        if (other.gpu_instance_id == device.gpu_instance_id) {
          fail(entry_where, "gpu_instance_id " + std::to_string(device.gpu_instance_id) + " is used twice");
        }
        if (other.uuid == device.uuid) fail(entry_where, "duplicate UUID " + in_quotes(device.uuid));
      }
      mig.devices.push_back(std::move(device));
    }
  }
  f.reject_unknown();

  // Geometry: compute and memory slices, per-profile instance limits.
  unsigned compute = 0;
  unsigned memory = 0;
  std::map<std::size_t, unsigned> per_profile;
  for (const MigDevice& device : mig.devices) {
    const MigProfile& p = gpu.mig_profiles[device.profile];
    compute += p.slice_count;
    memory += p.memory_slices;
    if (++per_profile[device.profile] > p.instance_count) {
      fail(where, "more than " + std::to_string(p.instance_count) + " instance(s) of " + in_quotes(p.name));
    }
  }
  if (compute > kMigComputeSlices) {
    fail(where, "MIG devices use " + std::to_string(compute) + " compute slices; the GPU has " + std::to_string(kMigComputeSlices));
  }
  if (memory > kMigMemorySlices) {
    fail(where, "MIG devices use " + std::to_string(memory) + " memory slices; the GPU has " + std::to_string(kMigMemorySlices));
  }

  // Placement: [start, start + memory_slices) ranges may not overlap.
  std::array<int, kMigMemorySlices> owner{};
  owner.fill(-1);
  const auto claim = [&](std::size_t i, bool check_only) {
    const MigDevice& device = mig.devices[i];
    const unsigned size = gpu.mig_profiles[device.profile].memory_slices;
    if (device.placement_start + size > kMigMemorySlices) return false;
    for (unsigned s = device.placement_start; s < device.placement_start + size; ++s) {
      if (owner[s] != -1) return false;
    }
    if (!check_only) {
      for (unsigned s = device.placement_start; s < device.placement_start + size; ++s) owner[s] = static_cast<int>(i);
    }
    return true;
  };
  for (std::size_t i = 0; i < mig.devices.size(); ++i) {
    if (has_placement[i] && !claim(i, false)) {
      fail(index_path(join_path(where, "devices"), i),
           "placement_start " + std::to_string(mig.devices[i].placement_start) + " overlaps another MIG device or runs past slice 7");
    }
  }
  for (std::size_t i = 0; i < mig.devices.size(); ++i) {
    if (has_placement[i]) continue;
    const unsigned size = gpu.mig_profiles[mig.devices[i].profile].memory_slices;
    bool placed = false;
    for (unsigned start = 0; start + size <= kMigMemorySlices && !placed; start += size) {
      mig.devices[i].placement_start = start;
      placed = claim(i, false);
    }
    if (!placed) fail(index_path(join_path(where, "devices"), i), "no free placement; give placement_start");
  }
  return mig;
}

Node parse_profile(const json& doc) {
  try {
    Fields top(doc, "");
    Node node;
    node.driver_version = top.string("driver_version");
    node.cuda_driver_version = static_cast<int>(as_int(top.at("cuda_driver_version"), "cuda_driver_version", 1000, 99999));
    node.nvml_version = top.string_or("nvml_version", std::to_string(node.cuda_driver_version / 1000) + "." + node.driver_version);
    if (const json* init_error = top.find("init_error")) {
      const std::string name = as_string(*init_error, "init_error");
      const auto code = parse_return_code(name);
      if (!code) fail("init_error", "unknown NVML return code " + in_quotes(name) + " (write e.g. \"DRIVER_NOT_LOADED\")");
      if (*code != NVML_SUCCESS) node.init_error = code;
    }

    if (const json* switches = top.find("nvswitches")) {
      const json& entries = as_array(*switches, "nvswitches");
      for (std::size_t i = 0; i < entries.size(); ++i) {
        const std::string where = index_path("nvswitches", i);
        NvSwitch sw;
        std::string bus_id;
        if (entries[i].is_object()) {
          Fields f(entries[i], where);
          bus_id = f.string("bus_id");
          sw.device_id = f.uint_or<unsigned>("device_id", kDefaultNvSwitchDeviceId);
          sw.subsystem_id = f.uint_or<unsigned>("subsystem_id", 0);
          f.reject_unknown();
        } else {
          bus_id = as_string(entries[i], where);
        }
        const auto address = parse_bus_id(bus_id);
        if (!address) fail(where, "malformed PCI bus id " + in_quotes(bus_id));
        sw.address = *address;
        node.nvswitches.push_back(sw);
      }
    }

    std::map<std::string, std::vector<MigProfile>> model_tables;
    if (const json* tables = top.find("mig_profiles")) {
      if (!tables->is_object()) fail("mig_profiles", "expected an object keyed by GPU name, got " + describe(*tables));
      for (const auto& [model, table] : tables->items()) {
        model_tables[model] = parse_mig_table(table, "mig_profiles." + model);
      }
    }

    json defaults = json::object();
    if (const json* d = top.find("gpu_defaults")) {
      if (!d->is_object()) fail("gpu_defaults", "expected an object, got " + describe(*d));
      defaults = *d;
    }

    const json& gpus = as_array(top.at("gpus"), "gpus");
    for (std::size_t i = 0; i < gpus.size(); ++i) {
      const std::string where = index_path("gpus", i);
      if (!gpus[i].is_object()) fail(where, "expected an object, got " + describe(gpus[i]));
      json merged = defaults;
      merged.merge_patch(gpus[i]);
      node.gpus.push_back(parse_gpu(merged, where, static_cast<unsigned>(i), model_tables));
    }
    top.reject_unknown();

    check_node(node);
    const std::uint64_t now = now_us();
    for (Gpu& g : node.gpus) g.processes_timestamp_us = now;
    return node;
  } catch (const json::exception& e) {
    // The Fields helpers check types first, so this means a bug here; still,
    // report it as a bad profile rather than crash the host process.
    throw ProfileError(std::string("unexpected JSON error: ") + e.what());
  }
}

Node load_profile(const std::string& path) {
  const std::string text = read_file(path);
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    const auto [line, column] = line_and_column(text, e.byte == 0 ? 0 : e.byte - 1);
    throw ProfileError("profile \"" + path + "\" is not valid JSON: byte " + std::to_string(e.byte) + " (line " +
                       std::to_string(line) + ", column " + std::to_string(column) + "): " + e.what());
  }
  try {
    return parse_profile(doc);
  } catch (const ProfileError& e) {
    throw ProfileError("profile \"" + path + "\": " + e.what());
  }
}

// ---------------------------------------------------------------------------
// Serialising.

json sensors_to_json(const Sensors& s) {
  json out = {
      {"utilization", {{"gpu", s.gpu_util}, {"memory", s.memory_util}}},
      {"temperature_c", s.temperature_c},
      {"power_mw", s.power_mw},
      {"clocks_mhz",
       {{"graphics", s.clock_graphics_mhz}, {"sm", s.clock_sm_mhz}, {"mem", s.clock_mem_mhz}, {"video", s.clock_video_mhz}}},
      {"throttle_reasons", s.throttle_reasons},
      {"ecc",
       {{"volatile", {{"corrected", s.ecc_volatile.corrected}, {"uncorrected", s.ecc_volatile.uncorrected}}},
        {"aggregate", {{"corrected", s.ecc_aggregate.corrected}, {"uncorrected", s.ecc_aggregate.uncorrected}}}}},
      {"retired_pages_pending", s.retired_pages_pending},
      {"remapped_rows",
       {{"correctable", s.remapped_correctable},
        {"uncorrectable", s.remapped_uncorrectable},
        {"pending", s.remapped_pending},
        {"failure", s.remapped_failure}}},
  };
  if (s.memory_used_mib) out["memory_used_mib"] = *s.memory_used_mib;
  return out;
}

json processes_to_json(const std::vector<Process>& processes) {
  json out = json::array();
  for (const Process& p : processes) {
    json entry = {{"pid", p.pid}, {"used_memory_mib", p.used_memory_mib}, {"sm_util", p.sm_util}, {"mem_util", p.mem_util}};
    if (p.gpu_instance_id) entry["gpu_instance_id"] = *p.gpu_instance_id;
    if (p.compute_instance_id) entry["compute_instance_id"] = *p.compute_instance_id;
    out.push_back(std::move(entry));
  }
  return out;
}

json mig_to_json(const Gpu& gpu) {
  json devices = json::array();
  for (const MigDevice& d : gpu.mig.devices) {
    devices.push_back({{"profile", std::string(gpu.profile_of(d).short_name())},
                       {"gpu_instance_id", d.gpu_instance_id},
                       {"compute_instance_id", d.compute_instance_id},
                       {"uuid", d.uuid},
                       {"placement_start", d.placement_start}});
  }
  return {{"mode", gpu.mig.mode}, {"pending", gpu.mig.pending}, {"devices", std::move(devices)}};
}

json gpu_to_json(const Gpu& gpu, unsigned index) {
  json failures = json::object();
  for (const auto& [function, code] : gpu.failures) failures[function] = std::string(return_code_name(code));
  json out = {
      {"index", index},
      {"uuid", gpu.uuid},
      {"name", gpu.name},
      {"brand", name_of(gpu.brand, kBrands)},
      {"architecture", name_of(gpu.architecture, kArchitectures)},
      {"pci", {{"bus_id", gpu.pci.bus_id()}}},
      {"numa_node", gpu.numa_node},
      {"lost", gpu.lost},
      {"memory", {{"total_mib", gpu.memory_total_mib}, {"reserved_mib", gpu.memory_reserved_mib}, {"used_mib", gpu.memory_used_mib()}}},
      {"sensors", sensors_to_json(gpu.sensors)},
      {"processes", processes_to_json(gpu.processes)},
      {"mig_capable", gpu.mig_capable()},
      {"unsupported", gpu.unsupported},
      {"failures", std::move(failures)},
  };
  if (gpu.mig_capable()) out["mig"] = mig_to_json(gpu);
  return out;
}

}  // namespace fake_nvml
