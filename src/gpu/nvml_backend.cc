#include "gpu/nvml_backend.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "common/read_file.h"

namespace danqing::gpu {
namespace {

constexpr uint64_t kMiB = 1024ULL * 1024ULL;
constexpr unsigned int kNotMig = 0xFFFFFFFFu;
// Profile constants to probe; newer drivers define more than the 0xA of R470.
constexpr unsigned int kMaxGpuInstanceProfiles = 0x20;
constexpr uint64_t kWatchedEvents = nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError |
                                    nvmlEventTypeSingleBitEccError | nvmlEventMigConfigChange;

std::string_view BrandName(nvmlBrandType_t brand) {
  switch (brand) {
    case NVML_BRAND_QUADRO: return "Quadro";
    case NVML_BRAND_TESLA: return "Tesla";
    case NVML_BRAND_NVS: return "NVS";
    case NVML_BRAND_GRID: return "GRID";
    case NVML_BRAND_GEFORCE: return "GeForce";
    case NVML_BRAND_TITAN: return "Titan";
    case NVML_BRAND_NVIDIA_VAPPS: return "NVIDIA Virtual Applications";
    case NVML_BRAND_NVIDIA_VPC: return "NVIDIA Virtual PC";
    case NVML_BRAND_NVIDIA_VCS: return "NVIDIA Virtual Compute Server";
    case NVML_BRAND_NVIDIA_VWS: return "NVIDIA RTX Virtual Workstation";
    case NVML_BRAND_NVIDIA_CLOUD_GAMING: return "NVIDIA Cloud Gaming";
    case NVML_BRAND_QUADRO_RTX: return "Quadro RTX";
    case NVML_BRAND_NVIDIA_RTX: return "NVIDIA RTX";
    case NVML_BRAND_NVIDIA: return "NVIDIA";
    case NVML_BRAND_GEFORCE_RTX: return "GeForce RTX";
    case NVML_BRAND_TITAN_RTX: return "Titan RTX";
    case NVML_BRAND_UNKNOWN: break;
  }
  return "Unknown";
}

std::string_view ArchitectureName(nvmlDeviceArchitecture_t arch) {
  switch (arch) {
    case NVML_DEVICE_ARCH_KEPLER: return "Kepler";
    case NVML_DEVICE_ARCH_MAXWELL: return "Maxwell";
    case NVML_DEVICE_ARCH_PASCAL: return "Pascal";
    case NVML_DEVICE_ARCH_VOLTA: return "Volta";
    case NVML_DEVICE_ARCH_TURING: return "Turing";
    case NVML_DEVICE_ARCH_AMPERE: return "Ampere";
    case NVML_DEVICE_ARCH_ADA: return "Ada Lovelace";
    case NVML_DEVICE_ARCH_HOPPER: return "Hopper";
    case NVML_DEVICE_ARCH_BLACKWELL: return "Blackwell";
    default: return "Unknown";
  }
}

PcieLevel FromNvmlLevel(nvmlGpuTopologyLevel_t level) {
  switch (level) {
    case NVML_TOPOLOGY_INTERNAL: return PcieLevel::kSame;
    case NVML_TOPOLOGY_SINGLE: return PcieLevel::kSwitch;
    case NVML_TOPOLOGY_MULTIPLE: return PcieLevel::kMultiSwitch;
    case NVML_TOPOLOGY_HOSTBRIDGE: return PcieLevel::kHostBridge;
    case NVML_TOPOLOGY_NODE: return PcieLevel::kNumaNode;
    case NVML_TOPOLOGY_SYSTEM: return PcieLevel::kSystem;
  }
  return PcieLevel::kUnknown;
}

// A PCI location independent of how the driver formatted the bus id string.
using PciKey = std::tuple<uint32_t, uint32_t, uint32_t>;
PciKey KeyOf(const nvmlPciInfo_t& pci) { return {pci.domain, pci.bus, pci.device}; }

std::string FormatBusId(const nvmlPciInfo_t& pci) {
  char buf[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
  std::snprintf(buf, sizeof buf, "%08X:%02X:%02X.0", pci.domain, pci.bus, pci.device);
  return buf;
}

// "MIG 1g.10gb" → "1g.10gb".
std::string StripMigPrefix(std::string name) {
  constexpr std::string_view kPrefix = "MIG ";
  if (name.compare(0, kPrefix.size(), kPrefix) == 0) name.erase(0, kPrefix.size());
  return name;
}

// NVIDIA's naming rule for a GPU instance's memory: the fraction of the
// GPU's memory, rounded up to eighths, times the GPU's size in GB.
uint64_t MigMemoryGb(uint64_t gpu_memory_bytes, uint64_t mig_memory_bytes) {
  if (gpu_memory_bytes == 0) return (mig_memory_bytes + (1ULL << 30) - 1) >> 30;
  const double fraction =
      static_cast<double>(mig_memory_bytes) / static_cast<double>(gpu_memory_bytes);
  const double eighths = std::ceil(fraction * 8.0 - 1e-9) / 8.0;
  return static_cast<uint64_t>(
      std::llround(eighths * static_cast<double>(gpu_memory_bytes) / (1024.0 * 1024.0 * 1024.0)));
}

// Reads a string attribute into a fixed buffer.
template <size_t N, typename Fn>
Result<std::string> ReadString(const NvmlSession& s, Fn fn, nvmlDevice_t dev,
                               std::string_view call) {
  std::array<char, N> buf{};
  nvmlReturn_t r = fn(dev, buf.data(), static_cast<unsigned int>(buf.size()));
  if (r != NVML_SUCCESS) return s.Check(r, call);
  buf.back() = '\0';
  return std::string(buf.data());
}

// Collects optional sensor reads: unsupported → absent, lost → abort,
// anything else → recorded as a failure.
class SensorReader {
 public:
  SensorReader(const NvmlSession& s, Sensors& out) : s_(s), out_(out) {}

  // Returns true when the value was read.
  bool Take(nvmlReturn_t r, std::string_view call) {
    if (r == NVML_SUCCESS) return true;
    if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_NO_DATA) return false;
    Status st = s_.Check(r, std::string(call) + " on " + out_.uuid);
    if (r == NVML_ERROR_GPU_IS_LOST) {
      if (lost_.ok()) lost_ = st;
    } else {
      out_.failures.push_back(std::move(st));
    }
    return false;
  }
  bool lost() const { return !lost_.ok(); }
  const Status& lost_status() const { return lost_; }

 private:
  const NvmlSession& s_;
  Sensors& out_;
  Status lost_;
};

// Registers `dev` on `set` for the watched events it supports; why not, if it
// cannot be.
Status RegisterForEvents(const NvmlSession& s, nvmlEventSet_t set, nvmlDevice_t dev,
                         const std::string& uuid) {
  const auto& api = s.api();
  unsigned long long supported = kWatchedEvents;
  if (api.DeviceGetSupportedEventTypes != nullptr) {
    if (nvmlReturn_t r = api.DeviceGetSupportedEventTypes(dev, &supported); r != NVML_SUCCESS) {
      return s.Check(r, "nvmlDeviceGetSupportedEventTypes on " + uuid);
    }
  }
  if (nvmlReturn_t r = api.DeviceRegisterEvents(dev, supported & kWatchedEvents, set); r != NVML_SUCCESS) {
    return s.Check(r, "nvmlDeviceRegisterEvents on " + uuid);
  }
  return Status::Ok();
}

class NvmlEventStream final : public EventStream {
 public:
  NvmlEventStream(std::shared_ptr<NvmlSession> session, nvmlEventSet_t set,
                  std::unordered_map<nvmlDevice_t, std::string> uuids,
                  std::vector<DeviceError> errors)
      : session_(std::move(session)), set_(set), uuids_(std::move(uuids)),
        errors_(std::move(errors)) {}
  ~NvmlEventStream() override { session_->api().EventSetFree(set_); }

  Result<std::optional<GpuEvent>> Wait(std::chrono::milliseconds timeout) override {
    nvmlEventData_t data{};
    data.gpuInstanceId = kNotMig;
    data.computeInstanceId = kNotMig;
    const auto ms = static_cast<unsigned int>(std::clamp<int64_t>(timeout.count(), 0, 1 << 30));
    nvmlReturn_t r = session_->api().EventSetWait(set_, &data, ms);
    if (r == NVML_ERROR_TIMEOUT) return std::optional<GpuEvent>{};
    if (r != NVML_SUCCESS) return session_->Check(r, "nvmlEventSetWait");
    GpuEvent ev;
    ev.received = std::chrono::steady_clock::now();
    if (auto it = uuids_.find(data.device); it != uuids_.end()) ev.uuid = it->second;
    if (data.eventType & nvmlEventTypeXidCriticalError) {
      ev.kind = EventKind::kXid;
      ev.xid = data.eventData;
    } else if (data.eventType & nvmlEventTypeDoubleBitEccError) {
      ev.kind = EventKind::kDoubleBitEcc;
    } else if (data.eventType & nvmlEventTypeSingleBitEccError) {
      ev.kind = EventKind::kSingleBitEcc;
    } else if (data.eventType & nvmlEventMigConfigChange) {
      ev.kind = EventKind::kMigConfigChange;
    }
    if (data.gpuInstanceId != kNotMig) ev.gpu_instance_id = data.gpuInstanceId;
    if (data.computeInstanceId != kNotMig) ev.compute_instance_id = data.computeInstanceId;
    return std::optional<GpuEvent>(std::move(ev));
  }

  const std::vector<DeviceError>& errors() const override { return errors_; }

  size_t RetryErrors() override {
    const auto& api = session_->api();
    size_t added = 0;
    for (auto it = errors_.begin(); it != errors_.end();) {
      if (it->uuid.empty() || it->status.code() == StatusCode::kNotSupported) {
        ++it;  // nothing to look up, or no events from this GPU whatever happens
        continue;
      }
      // By UUID afresh, not from a cache: the GPU may have come back under a
      // new handle.
      nvmlDevice_t dev = nullptr;
      Status st;
      if (api.DeviceGetHandleByUUID == nullptr) {
        st = Status(StatusCode::kNotSupported, "NVML library has no nvmlDeviceGetHandleByUUID");
      } else if (nvmlReturn_t r = api.DeviceGetHandleByUUID(it->uuid.c_str(), &dev); r != NVML_SUCCESS) {
        st = session_->Check(r, "nvmlDeviceGetHandleByUUID(" + it->uuid + ")");
      } else {
        st = RegisterForEvents(*session_, set_, dev, it->uuid);
      }
      if (!st.ok()) {
        it->status = std::move(st);
        ++it;
        continue;
      }
      uuids_[dev] = it->uuid;
      it = errors_.erase(it);
      ++added;
    }
    return added;
  }

 private:
  std::shared_ptr<NvmlSession> session_;
  nvmlEventSet_t set_;
  std::unordered_map<nvmlDevice_t, std::string> uuids_;
  std::vector<DeviceError> errors_;
};

}  // namespace

// ---------------------------------------------------------------------------
Result<std::shared_ptr<NvmlSession>> NvmlSession::Start(std::unique_ptr<NvmlLibrary> lib) {
  nvmlReturn_t r = lib->api().Init();
  if (r != NVML_SUCCESS) {
    Status st = NvmlStatus(*lib, r, "nvmlInit");
    return Status(StatusCode::kUnavailable,
                  st.message() + " (library " + lib->path() + "; is the driver loaded?)");
  }
  return std::shared_ptr<NvmlSession>(new NvmlSession(std::move(lib)));
}

NvmlSession::~NvmlSession() { lib_->api().Shutdown(); }

// ---------------------------------------------------------------------------
namespace {

// A system-wide NVML string (nvmlSystemGetDriverVersion, ...); empty when the
// library lacks the call or it fails.
std::string SystemString(nvmlReturn_t (*get)(char*, unsigned int)) {
  if (get == nullptr) return {};
  std::array<char, NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE> buf{};
  if (get(buf.data(), buf.size()) != NVML_SUCCESS) return {};
  buf.back() = '\0';
  return buf.data();
}

}  // namespace

std::optional<int> PciNumaNode(const std::string& sysfs_root, const PciInfo& pci) {
  unsigned function = 0;
  if (const size_t dot = pci.bus_id.rfind('.'); dot != std::string::npos) {
    function = static_cast<unsigned>(std::strtoul(pci.bus_id.c_str() + dot + 1, nullptr, 16));
  }
  char address[32];
  std::snprintf(address, sizeof address, "%04x:%02x:%02x.%x", pci.domain, pci.bus, pci.device, function);
  // sysfs_root is configurable: read through ReadTextFile, which never
  // blocks on a FIFO.
  const auto text = ReadTextFile(sysfs_root + "/bus/pci/devices/" + address + "/numa_node");
  if (!text) return std::nullopt;  // no file
  char* end = nullptr;
  const long node = std::strtol(text->c_str(), &end, 10);
  if (end == text->c_str() || node < 0 || node > 1 << 16)
    return std::nullopt;  // -1: one node, or none known
  return static_cast<int>(node);
}

Result<std::unique_ptr<NvmlBackend>> NvmlBackend::Create(const std::string& library_path,
                                                         const std::string& sysfs_root) {
  auto lib = NvmlLibrary::Open(ResolveNvmlLibraryPath(library_path));
  if (!lib.ok()) return lib.status();
  for (const auto& m : (*lib)->missing()) {
    spdlog::info("nvml: optional feature off, library lacks {}", m);
  }
  auto session = NvmlSession::Start(std::move(lib).value());
  if (!session.ok()) return session.status();
  std::unique_ptr<NvmlBackend> backend(new NvmlBackend(std::move(session).value()));
  backend->sysfs_root_ = sysfs_root;
  const auto& api = backend->session_->api();
  backend->nvml_version_ = SystemString(api.SystemGetNVMLVersion);
  if (backend->session_->lib().processes_v3()) {
    const std::string driver = SystemString(api.SystemGetDriverVersion);
    backend->process_stride_ = ProcessInfoStride(driver);
    if (backend->process_stride_ != sizeof(nvmlProcessInfo_t)) {
      spdlog::info("nvml: driver {} writes {}-byte process entries under _v3; reading them as such", driver,
                   backend->process_stride_);
    }
  }
  return backend;
}

std::string NvmlBackend::Describe() const {
  std::string out = "NVML";
  if (!nvml_version_.empty()) out += " " + nvml_version_;
  out += " from " + session_->lib().path();
  return out;
}

Result<Gpu> NvmlBackend::ReadGpu(nvmlDevice_t dev, int index) {
  const NvmlSession& s = *session_;
  const auto& api = s.api();
  Gpu gpu;
  gpu.index = index;
  auto uuid = ReadString<NVML_DEVICE_UUID_V2_BUFFER_SIZE>(s, api.DeviceGetUUID, dev,
                                                           "nvmlDeviceGetUUID");
  if (!uuid.ok()) return uuid.status();
  gpu.uuid = *uuid;
  auto ctx = [&](std::string_view call) { return std::string(call) + " on " + gpu.uuid; };
  // A required attribute: lost or failing → the device is unusable.
  auto must = [&](nvmlReturn_t r, std::string_view call) -> Status {
    return r == NVML_SUCCESS ? Status::Ok() : s.Check(r, ctx(call));
  };
  // An optional attribute: only "lost" is fatal (checked once at the end);
  // other failures are logged and leave the field at its default.
  Status lost;
  auto may = [&](nvmlReturn_t r, std::string_view call) -> bool {
    if (r == NVML_SUCCESS) return true;
    if (r == NVML_ERROR_GPU_IS_LOST) {
      if (lost.ok()) lost = s.Check(r, ctx(call));
    } else if (r != NVML_ERROR_NOT_SUPPORTED) {
      spdlog::warn("nvml: {}", s.Check(r, ctx(call)).ToString());
    }
    return false;
  };

  auto name = ReadString<NVML_DEVICE_NAME_V2_BUFFER_SIZE>(s, api.DeviceGetName, dev,
                                                           "nvmlDeviceGetName");
  if (!name.ok()) return name.status().WithContext(gpu.uuid);
  gpu.name = *name;

  if (api.DeviceGetPciInfo != nullptr) {
    nvmlPciInfo_t pci{};
    if (Status st = must(api.DeviceGetPciInfo(dev, &pci), "nvmlDeviceGetPciInfo"); !st.ok()) {
      return st;
    }
    gpu.pci = {FormatBusId(pci), pci.domain, pci.bus, pci.device, pci.pciDeviceId,
               pci.pciSubSystemId};
  }
  if (api.DeviceGetMemoryInfo != nullptr) {
    nvmlMemory_t mem{};
    if (may(api.DeviceGetMemoryInfo(dev, &mem), "nvmlDeviceGetMemoryInfo")) {
      gpu.memory_bytes = mem.total;
    }
  }
  if (api.DeviceGetMinorNumber != nullptr) {
    unsigned int minor = 0;
    if (may(api.DeviceGetMinorNumber(dev, &minor), "nvmlDeviceGetMinorNumber")) {
      gpu.minor_number = minor;
    }
  }
  // The NUMA node the kubelet's Topology Manager means is the one of the CPUs
  // and memory next to the GPU's PCI slot: sysfs's numa_node, as NVIDIA's
  // plugin reads it. nvmlDeviceGetNumaNodeId is another figure: it applies
  // only where the GPU's own memory is a NUMA node (Grace Hopper), and names
  // that node, which has no CPUs.
  gpu.numa_node = PciNumaNode(sysfs_root_, gpu.pci);
  if (api.DeviceGetCudaComputeCapability != nullptr) {
    may(api.DeviceGetCudaComputeCapability(dev, &gpu.cuda_major, &gpu.cuda_minor),
           "nvmlDeviceGetCudaComputeCapability");
  }
  gpu.brand = "Unknown";
  if (api.DeviceGetBrand != nullptr) {
    nvmlBrandType_t brand = NVML_BRAND_UNKNOWN;
    if (may(api.DeviceGetBrand(dev, &brand), "nvmlDeviceGetBrand")) gpu.brand = BrandName(brand);
  }
  gpu.architecture = "Unknown";
  if (api.DeviceGetArchitecture != nullptr) {
    nvmlDeviceArchitecture_t arch = NVML_DEVICE_ARCH_UNKNOWN;
    if (may(api.DeviceGetArchitecture(dev, &arch), "nvmlDeviceGetArchitecture")) {
      gpu.architecture = ArchitectureName(arch);
    }
  }
  if (api.DeviceGetMigMode != nullptr) {
    unsigned int current = 0;
    unsigned int pending = 0;
    if (may(api.DeviceGetMigMode(dev, &current, &pending), "nvmlDeviceGetMigMode")) {
      gpu.mig_mode = current == NVML_DEVICE_MIG_ENABLE ? MigMode::kEnabled : MigMode::kDisabled;
      gpu.mig_pending_change = current != pending;
    }
  }
  if (!lost.ok()) return lost;
  return gpu;
}

Result<std::string> NvmlBackend::MigProfileName(nvmlDevice_t parent, const Gpu& gpu,
                                                uint32_t profile_id, uint64_t memory_bytes,
                                                uint32_t slices) {
  const auto& api = session_->api();
  for (unsigned int p = 0; p < kMaxGpuInstanceProfiles; ++p) {
    if (api.DeviceGetGpuInstanceProfileInfoV != nullptr) {
      nvmlGpuInstanceProfileInfo_v2_t info{};
      info.version = nvmlGpuInstanceProfileInfo_v2;
      nvmlReturn_t r = api.DeviceGetGpuInstanceProfileInfoV(parent, p, &info);
      if (r == NVML_ERROR_INVALID_ARGUMENT) break;
      if (r == NVML_SUCCESS && info.id == profile_id) {
        info.name[sizeof info.name - 1] = '\0';
        if (info.name[0] != '\0') return StripMigPrefix(info.name);
        memory_bytes = info.memorySizeMB * kMiB;
        slices = info.sliceCount;
        break;
      }
      if (r == NVML_SUCCESS) continue;
    }
    if (api.DeviceGetGpuInstanceProfileInfo != nullptr) {
      nvmlGpuInstanceProfileInfo_t info{};
      nvmlReturn_t r = api.DeviceGetGpuInstanceProfileInfo(parent, p, &info);
      if (r == NVML_ERROR_INVALID_ARGUMENT) break;
      if (r == NVML_SUCCESS && info.id == profile_id) {
        memory_bytes = info.memorySizeMB * kMiB;
        slices = info.sliceCount;
        break;
      }
    }
  }
  if (slices == 0) {
    return Internal("cannot name MIG profile " + std::to_string(profile_id) + " of " + gpu.uuid);
  }
  return std::to_string(slices) + "g." + std::to_string(MigMemoryGb(gpu.memory_bytes, memory_bytes)) +
         "gb";
}

void NvmlBackend::ReadMigDevices(nvmlDevice_t dev, Gpu& gpu, std::vector<DeviceError>& errors,
                                 std::unordered_map<std::string, nvmlDevice_t>& handles) {
  const NvmlSession& s = *session_;
  const auto& api = s.api();
  if (gpu.mig_mode != MigMode::kEnabled || api.DeviceGetMaxMigDeviceCount == nullptr ||
      api.DeviceGetMigDeviceHandleByIndex == nullptr) {
    return;
  }
  unsigned int max = 0;
  if (nvmlReturn_t r = api.DeviceGetMaxMigDeviceCount(dev, &max); r != NVML_SUCCESS) {
    errors.push_back({gpu.index, gpu.uuid, s.Check(r, "nvmlDeviceGetMaxMigDeviceCount on " + gpu.uuid)});
    return;
  }
  for (unsigned int i = 0; i < max; ++i) {
    nvmlDevice_t mig = nullptr;
    nvmlReturn_t r = api.DeviceGetMigDeviceHandleByIndex(dev, i, &mig);
    if (r == NVML_ERROR_NOT_FOUND) continue;  // an empty slot
    if (r != NVML_SUCCESS) {
      errors.push_back({gpu.index, gpu.uuid,
                        s.Check(r, "nvmlDeviceGetMigDeviceHandleByIndex(" + std::to_string(i) +
                                       ") on " + gpu.uuid)});
      continue;
    }
    MigDevice m;
    m.parent_uuid = gpu.uuid;
    m.parent_index = gpu.index;
    m.index = static_cast<int>(i);
    auto uuid = ReadString<NVML_DEVICE_UUID_V2_BUFFER_SIZE>(s, api.DeviceGetUUID, mig,
                                                             "nvmlDeviceGetUUID");
    if (!uuid.ok()) {
      errors.push_back({gpu.index, gpu.uuid, uuid.status().WithContext("MIG device " + std::to_string(i) + " of " + gpu.uuid)});
      continue;
    }
    m.uuid = *uuid;
    Status st;
    auto step = [&](nvmlReturn_t rr, std::string_view call) {
      if (st.ok() && rr != NVML_SUCCESS) st = s.Check(rr, std::string(call) + " on " + m.uuid);
    };
    if (api.DeviceGetGpuInstanceId != nullptr) {
      step(api.DeviceGetGpuInstanceId(mig, &m.gpu_instance_id), "nvmlDeviceGetGpuInstanceId");
    }
    if (api.DeviceGetComputeInstanceId != nullptr) {
      step(api.DeviceGetComputeInstanceId(mig, &m.compute_instance_id),
           "nvmlDeviceGetComputeInstanceId");
    }
    if (api.DeviceGetMemoryInfo != nullptr) {
      nvmlMemory_t mem{};
      step(api.DeviceGetMemoryInfo(mig, &mem), "nvmlDeviceGetMemoryInfo");
      m.memory_bytes = mem.total;
    }
    if (api.DeviceGetAttributes != nullptr) {
      nvmlDeviceAttributes_t attr{};
      step(api.DeviceGetAttributes(mig, &attr), "nvmlDeviceGetAttributes");
      m.multiprocessor_count = attr.multiprocessorCount;
      m.gpu_instance_slices = attr.gpuInstanceSliceCount;
      m.compute_instance_slices = attr.computeInstanceSliceCount;
      if (attr.memorySizeMB != 0) m.memory_bytes = attr.memorySizeMB * kMiB;
    }
    if (api.DeviceGetGpuInstanceById != nullptr && api.GpuInstanceGetInfo != nullptr && st.ok()) {
      nvmlGpuInstance_t gi = nullptr;
      nvmlGpuInstanceInfo_t info{};
      step(api.DeviceGetGpuInstanceById(dev, m.gpu_instance_id, &gi), "nvmlDeviceGetGpuInstanceById");
      if (st.ok()) step(api.GpuInstanceGetInfo(gi, &info), "nvmlGpuInstanceGetInfo");
      if (st.ok()) {
        m.gpu_instance_profile_id = info.profileId;
        m.placement_start = info.placement.start;
        if (m.gpu_instance_slices == 0) m.gpu_instance_slices = info.placement.size;
      }
    }
    if (!st.ok()) {
      errors.push_back({gpu.index, gpu.uuid, st});
      continue;
    }
    auto profile = MigProfileName(dev, gpu, m.gpu_instance_profile_id, m.memory_bytes,
                                  m.gpu_instance_slices);
    if (!profile.ok()) {
      errors.push_back({gpu.index, gpu.uuid, profile.status()});
      continue;
    }
    m.profile = *profile;
    handles[m.uuid] = mig;
    gpu.mig_devices.push_back(std::move(m));
  }
}

Topology NvmlBackend::ReadTopology(const std::vector<Gpu>& gpus,
                                   const std::vector<nvmlDevice_t>& handles) {
  const auto& api = session_->api();
  const size_t n = gpus.size();
  Topology topo(n);
  std::map<PciKey, size_t> by_pci;
  for (size_t i = 0; i < n; ++i) {
    by_pci[{gpus[i].pci.domain, gpus[i].pci.bus, gpus[i].pci.device}] = i;
  }
  // Per GPU: direct links to each other GPU, and links into NVSwitches.
  std::vector<std::vector<int>> direct(n, std::vector<int>(n, 0));
  std::vector<int> switch_links(n, 0);
  if (api.DeviceGetNvLinkState != nullptr && api.DeviceGetNvLinkRemotePciInfo != nullptr) {
    for (size_t i = 0; i < n; ++i) {
      for (unsigned int link = 0; link < NVML_NVLINK_MAX_LINKS; ++link) {
        nvmlEnableState_t active = NVML_FEATURE_DISABLED;
        nvmlReturn_t r = api.DeviceGetNvLinkState(handles[i], link, &active);
        if (r != NVML_SUCCESS) break;  // NOT_SUPPORTED past the last link
        if (active != NVML_FEATURE_ENABLED) continue;
        nvmlPciInfo_t remote{};
        if (api.DeviceGetNvLinkRemotePciInfo(handles[i], link, &remote) != NVML_SUCCESS) continue;
        if (auto it = by_pci.find(KeyOf(remote)); it != by_pci.end()) {
          if (it->second != i) ++direct[i][it->second];
        } else {
          ++switch_links[i];  // the far end is an NVSwitch (or a GPU we do not manage)
        }
      }
    }
  }
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = 0; b < n; ++b) {
      GpuLink& l = topo.at(a, b);
      if (a == b) {
        l.pcie = PcieLevel::kSame;
        continue;
      }
      l.nvlinks = std::max(direct[a][b], direct[b][a]) + std::min(switch_links[a], switch_links[b]);
      if (b < a) {
        l.pcie = topo.at(b, a).pcie;
        continue;
      }
      if (api.DeviceGetTopologyCommonAncestor != nullptr) {
        nvmlGpuTopologyLevel_t level = NVML_TOPOLOGY_SYSTEM;
        if (api.DeviceGetTopologyCommonAncestor(handles[a], handles[b], &level) == NVML_SUCCESS) {
          l.pcie = FromNvmlLevel(level);
        }
      }
      if (l.pcie == PcieLevel::kUnknown && gpus[a].numa_node && gpus[b].numa_node) {
        l.pcie = *gpus[a].numa_node == *gpus[b].numa_node ? PcieLevel::kNumaNode : PcieLevel::kSystem;
      }
    }
  }
  return topo;
}

Result<NodeInventory> NvmlBackend::Discover() {
  const NvmlSession& s = *session_;
  const auto& api = s.api();
  NodeInventory inv;
  for (const auto& m : s.lib().missing()) inv.disabled_features.push_back(m);
  inv.driver_version = SystemString(api.SystemGetDriverVersion);
  if (api.SystemGetCudaDriverVersion != nullptr) {
    api.SystemGetCudaDriverVersion(&inv.cuda_driver_version);
  }
  unsigned int count = 0;
  if (nvmlReturn_t r = api.DeviceGetCount(&count); r != NVML_SUCCESS) {
    return s.Check(r, "nvmlDeviceGetCount");
  }
  std::vector<nvmlDevice_t> gpu_handles;
  std::unordered_map<std::string, nvmlDevice_t> handles;
  for (unsigned int i = 0; i < count; ++i) {
    const int index = static_cast<int>(i);
    nvmlDevice_t dev = nullptr;
    if (nvmlReturn_t r = api.DeviceGetHandleByIndex(i, &dev); r != NVML_SUCCESS) {
      inv.errors.push_back({index, "", s.Check(r, "nvmlDeviceGetHandleByIndex(" + std::to_string(i) + ")")});
      continue;
    }
    auto gpu = ReadGpu(dev, index);
    if (!gpu.ok()) {
      inv.errors.push_back({index, "", gpu.status()});
      continue;
    }
    ReadMigDevices(dev, *gpu, inv.errors, handles);
    handles[gpu->uuid] = dev;
    gpu_handles.push_back(dev);
    inv.gpus.push_back(std::move(gpu).value());
  }
  for (const auto& e : inv.errors) {
    spdlog::warn("nvml: device {} {}: {}", e.index, e.uuid, e.status.ToString());
  }
  inv.topology = ReadTopology(inv.gpus, gpu_handles);
  {
    std::lock_guard<std::mutex> lock(mu_);
    handles_ = std::move(handles);
  }
  return inv;
}

Result<nvmlDevice_t> NvmlBackend::HandleFor(const std::string& uuid) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = handles_.find(uuid); it != handles_.end()) return it->second;
  }
  const auto& api = session_->api();
  if (api.DeviceGetHandleByUUID == nullptr) {
    return NotFound("unknown device " + uuid + " (not seen by the last discovery)");
  }
  nvmlDevice_t dev = nullptr;
  nvmlReturn_t r = api.DeviceGetHandleByUUID(uuid.c_str(), &dev);
  if (r != NVML_SUCCESS) return session_->Check(r, "nvmlDeviceGetHandleByUUID(" + uuid + ")");
  std::lock_guard<std::mutex> lock(mu_);
  handles_[uuid] = dev;
  return dev;
}

Result<Sensors> NvmlBackend::ReadSensors(const std::string& uuid) {
  auto handle = HandleFor(uuid);
  if (!handle.ok()) return handle.status();
  nvmlDevice_t dev = *handle;
  const NvmlSession& s = *session_;
  const auto& api = s.api();
  Sensors out;
  out.uuid = uuid;
  SensorReader rd(s, out);

  if (api.DeviceGetUtilizationRates != nullptr) {
    nvmlUtilization_t u{};
    if (rd.Take(api.DeviceGetUtilizationRates(dev, &u), "nvmlDeviceGetUtilizationRates")) {
      out.utilization_gpu = u.gpu;
      out.utilization_memory = u.memory;
    }
  }
  if (rd.lost()) return rd.lost_status();  // no point asking a lost GPU anything else
  if (api.DeviceGetMemoryInfo != nullptr) {
    nvmlMemory_t m{};
    if (rd.Take(api.DeviceGetMemoryInfo(dev, &m), "nvmlDeviceGetMemoryInfo")) {
      out.memory_total_bytes = m.total;
      out.memory_used_bytes = m.used;
      out.memory_free_bytes = m.free;
    }
  }
  if (api.DeviceGetTemperature != nullptr) {
    unsigned int t = 0;
    if (rd.Take(api.DeviceGetTemperature(dev, NVML_TEMPERATURE_GPU, &t), "nvmlDeviceGetTemperature")) {
      out.temperature_c = t;
    }
  }
  if (api.DeviceGetPowerUsage != nullptr) {
    unsigned int p = 0;
    if (rd.Take(api.DeviceGetPowerUsage(dev, &p), "nvmlDeviceGetPowerUsage")) out.power_mw = p;
  }
  if (api.DeviceGetClockInfo != nullptr) {
    const std::pair<nvmlClockType_t, std::optional<uint32_t>*> clocks[] = {
        {NVML_CLOCK_GRAPHICS, &out.clock_graphics_mhz},
        {NVML_CLOCK_SM, &out.clock_sm_mhz},
        {NVML_CLOCK_MEM, &out.clock_mem_mhz},
        {NVML_CLOCK_VIDEO, &out.clock_video_mhz}};
    for (auto [type, slot] : clocks) {
      unsigned int mhz = 0;
      if (rd.Take(api.DeviceGetClockInfo(dev, type, &mhz), "nvmlDeviceGetClockInfo")) *slot = mhz;
    }
  }
  if (api.DeviceGetClockEventReasons != nullptr) {
    unsigned long long reasons = 0;
    if (rd.Take(api.DeviceGetClockEventReasons(dev, &reasons),
                "nvmlDeviceGetCurrentClocksEventReasons")) {
      out.throttle_reasons = reasons;
    }
  }
  if (api.DeviceGetTotalEccErrors != nullptr) {
    const std::tuple<nvmlMemoryErrorType_t, nvmlEccCounterType_t, std::optional<uint64_t>*> ecc[] = {
        {NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, &out.ecc_volatile_corrected},
        {NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &out.ecc_volatile_uncorrected},
        {NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC, &out.ecc_aggregate_corrected},
        {NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC, &out.ecc_aggregate_uncorrected}};
    for (auto [type, counter, slot] : ecc) {
      unsigned long long n = 0;
      if (rd.Take(api.DeviceGetTotalEccErrors(dev, type, counter, &n), "nvmlDeviceGetTotalEccErrors")) {
        *slot = n;
      }
    }
  }
  if (api.DeviceGetRetiredPagesPendingStatus != nullptr) {
    nvmlEnableState_t pending = NVML_FEATURE_DISABLED;
    if (rd.Take(api.DeviceGetRetiredPagesPendingStatus(dev, &pending),
                "nvmlDeviceGetRetiredPagesPendingStatus")) {
      out.retired_pages_pending = pending == NVML_FEATURE_ENABLED;
    }
  }
  if (api.DeviceGetRemappedRows != nullptr) {
    unsigned int corr = 0, unc = 0, pending = 0, failure = 0;
    if (rd.Take(api.DeviceGetRemappedRows(dev, &corr, &unc, &pending, &failure),
                "nvmlDeviceGetRemappedRows")) {
      out.remapped_rows_correctable = corr;
      out.remapped_rows_uncorrectable = unc;
      out.remapped_rows_pending = pending != 0;
      out.remapped_rows_failure = failure != 0;
    }
  }
  if (api.DeviceGetComputeRunningProcesses != nullptr) {
    // Raw entries of process_stride_ bytes, whose first 24 bytes are an
    // nvmlProcessInfo_t on every driver.
    std::vector<unsigned char> raw;
    unsigned int n = 0;
    nvmlReturn_t r = api.DeviceGetComputeRunningProcesses(dev, &n, nullptr);
    // Processes may start between the two calls: retry a few times with headroom.
    for (int attempt = 0; attempt < 4 && r == NVML_ERROR_INSUFFICIENT_SIZE; ++attempt) {
      n += 8;
      raw.assign(static_cast<size_t>(n) * process_stride_, 0);
      r = api.DeviceGetComputeRunningProcesses(dev, &n, reinterpret_cast<nvmlProcessInfo_t*>(raw.data()));
    }
    if (rd.Take(r, "nvmlDeviceGetComputeRunningProcesses")) {
      std::vector<nvmlProcessInfo_t> infos(r == NVML_SUCCESS ? n : 0);
      for (size_t i = 0; i < infos.size(); ++i) {
        std::memcpy(&infos[i], raw.data() + i * process_stride_, sizeof(nvmlProcessInfo_t));
      }
      std::vector<ProcessInfo> procs;
      for (const auto& p : infos) {
        ProcessInfo pi;
        pi.pid = p.pid;
        pi.used_memory_bytes = p.usedGpuMemory;
        if (p.gpuInstanceId != kNotMig) pi.gpu_instance_id = p.gpuInstanceId;
        if (p.computeInstanceId != kNotMig) pi.compute_instance_id = p.computeInstanceId;
        procs.push_back(pi);
      }
      if (api.DeviceGetProcessUtilization != nullptr && !procs.empty()) {
        unsigned int ns = 0;
        nvmlReturn_t ur = api.DeviceGetProcessUtilization(dev, nullptr, &ns, 0);
        std::vector<nvmlProcessUtilizationSample_t> samples;
        if (ur == NVML_ERROR_INSUFFICIENT_SIZE) {
          samples.resize(ns);
          ur = api.DeviceGetProcessUtilization(dev, samples.data(), &ns, 0);
        }
        if (ur == NVML_SUCCESS) {
          samples.resize(ns);
          for (auto& pi : procs) {
            for (const auto& smp : samples) {
              if (smp.pid == pi.pid) {
                pi.sm_util = smp.smUtil;
                pi.mem_util = smp.memUtil;
              }
            }
          }
        } else if (ur != NVML_ERROR_NOT_FOUND) {
          rd.Take(ur, "nvmlDeviceGetProcessUtilization");
        }
      }
      out.processes = std::move(procs);
    }
  }
  if (rd.lost()) return rd.lost_status();
  return out;
}

Result<std::unique_ptr<EventStream>> NvmlBackend::WatchEvents(
    const std::vector<std::string>& gpu_uuids) {
  const NvmlSession& s = *session_;
  const auto& api = s.api();
  if (api.EventSetCreate == nullptr || api.DeviceRegisterEvents == nullptr ||
      api.EventSetWait == nullptr || api.EventSetFree == nullptr) {
    return Status(StatusCode::kNotSupported, "NVML library " + s.lib().path() + " has no event API");
  }
  std::vector<std::string> uuids = gpu_uuids;
  if (uuids.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [uuid, h] : handles_) {
      if (uuid.rfind("GPU-", 0) == 0) uuids.push_back(uuid);
    }
    std::sort(uuids.begin(), uuids.end());
  }
  nvmlEventSet_t set = nullptr;
  if (nvmlReturn_t r = api.EventSetCreate(&set); r != NVML_SUCCESS) {
    return s.Check(r, "nvmlEventSetCreate");
  }
  std::unordered_map<nvmlDevice_t, std::string> by_handle;
  std::vector<DeviceError> errors;
  for (const auto& uuid : uuids) {
    auto h = HandleFor(uuid);
    if (!h.ok()) {
      errors.push_back({-1, uuid, h.status()});
      continue;
    }
    if (Status st = RegisterForEvents(s, set, *h, uuid); !st.ok()) {
      errors.push_back({-1, uuid, std::move(st)});
      continue;
    }
    by_handle[*h] = uuid;
  }
  return std::unique_ptr<EventStream>(
      new NvmlEventStream(session_, set, std::move(by_handle), std::move(errors)));
}

}  // namespace danqing::gpu
