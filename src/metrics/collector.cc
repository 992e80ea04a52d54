#include "metrics/collector.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "common/read_file.h"
#include "metrics/agent_metrics.h"
#include "podresources/v1/api.pb.h"

namespace danqing::metrics {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

struct ThrottleName {
  uint64_t bit;
  const char* name;
};
constexpr ThrottleName kThrottleReasons[] = {
    {gpu::throttle::kGpuIdle, "gpu_idle"},
    {gpu::throttle::kApplicationsClocksSetting, "applications_clocks_setting"},
    {gpu::throttle::kSwPowerCap, "sw_power_cap"},
    {gpu::throttle::kHwSlowdown, "hw_slowdown"},
    {gpu::throttle::kSyncBoost, "sync_boost"},
    {gpu::throttle::kSwThermalSlowdown, "sw_thermal_slowdown"},
    {gpu::throttle::kHwThermalSlowdown, "hw_thermal_slowdown"},
    {gpu::throttle::kHwPowerBrakeSlowdown, "hw_power_brake_slowdown"},
    {gpu::throttle::kDisplayClockSetting, "display_clock_setting"},
};

// Families in a fixed order, filled row by row.
class Builder {
 public:
  size_t Add(std::string name, std::string help, MetricType type, std::string unit = "") {
    families_.push_back({std::move(name), std::move(help), type, std::move(unit), {}});
    return families_.size() - 1;
  }
  void Put(size_t family, const Labels& labels, double value) {
    families_[family].samples.push_back({"", labels, value});
  }
  std::vector<MetricFamily> Take() { return std::move(families_); }

 private:
  std::vector<MetricFamily> families_;
};

// The ids of every family the collector writes.
struct Ids {
  size_t gpu_util, mem_copy_util, fb_used, fb_free, fb_total, temp, power, sm_clock, mem_clock,
      video_clock, throttle_mask, xid_last, sbe_vol, dbe_vol, sbe_agg, dbe_agg, retired_pending,
      remap_corr, remap_unc, remap_failure;
  size_t remap_pending, throttle_reason, xid_total, healthy, sensors_up, allocated, allocatable,
      holders, processes, unattributed, pod_util, pod_mem, pod_devices, gpus, discovery_errors,
      transitions;

  explicit Ids(Builder& b) {
    using T = MetricType;
    gpu_util = b.Add("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", T::kGauge);
    mem_copy_util = b.Add("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", T::kGauge);
    fb_used = b.Add("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", T::kGauge);
    fb_free = b.Add("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", T::kGauge);
    fb_total = b.Add("DCGM_FI_DEV_FB_TOTAL", "Framebuffer memory total (in MiB).", T::kGauge);
    temp = b.Add("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", T::kGauge);
    power = b.Add("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", T::kGauge);
    sm_clock = b.Add("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", T::kGauge);
    mem_clock = b.Add("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", T::kGauge);
    video_clock =
        b.Add("DCGM_FI_DEV_VIDEO_CLOCK", "Video encoder/decoder clock (in MHz).", T::kGauge);
    throttle_mask = b.Add("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
                          "Current clock throttle reasons (NVML bitmask).", T::kGauge);
    xid_last =
        b.Add("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", T::kGauge);
    sbe_vol = b.Add("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
                    "Total number of single-bit volatile ECC errors.", T::kUnknown);
    dbe_vol = b.Add("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
                    "Total number of double-bit volatile ECC errors.", T::kUnknown);
    sbe_agg = b.Add("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
                    "Total number of single-bit persistent ECC errors.", T::kUnknown);
    dbe_agg = b.Add("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
                    "Total number of double-bit persistent ECC errors.", T::kUnknown);
    retired_pending =
        b.Add("DCGM_FI_DEV_RETIRED_PENDING", "Pages pending retirement (1) or not (0).", T::kGauge);
    remap_corr = b.Add("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
                       "Number of remapped rows for correctable errors.", T::kUnknown);
    remap_unc = b.Add("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
                      "Number of remapped rows for uncorrectable errors.", T::kUnknown);
    remap_failure = b.Add("DCGM_FI_DEV_ROW_REMAP_FAILURE",
                          "Whether remapping of rows has failed (1) or not (0).", T::kGauge);
    remap_pending = b.Add("danqing_gpu_row_remap_pending",
                          "Row remapping pending a GPU reset (1) or not (0).", T::kGauge);
    throttle_reason = b.Add("danqing_gpu_throttle_reason",
                            "1 when the clock is held back for this reason, else 0.", T::kGauge);
    xid_total = b.Add("danqing_gpu_xid_errors", "XID errors seen since the agent started, by XID.",
                      T::kCounter);
    healthy = b.Add("danqing_gpu_healthy",
                    "1 when the device is healthy, 0 when not (reason says why).", T::kGauge);
    sensors_up =
        b.Add("danqing_gpu_sensors_up",
              "1 when the device's sensors were read in the last collection, else 0.", T::kGauge);
    allocated = b.Add("danqing_gpu_allocated_devices",
                      "Kubelet device IDs of this device held by containers (replicas count each).",
                      T::kGauge);
    allocatable = b.Add("danqing_gpu_allocatable_devices",
                        "Kubelet device IDs this device is advertised as (time-slicing replicas).",
                        T::kGauge);
    holders = b.Add("danqing_gpu_containers",
                    "Containers holding at least one device ID of this device.", T::kGauge);
    processes =
        b.Add("danqing_gpu_processes", "Compute processes running on this device.", T::kGauge);
    unattributed = b.Add("danqing_gpu_unattributed_processes",
                         "Compute processes on this device that could not be mapped to a pod "
                         "holding it (host processes, unknown pods).",
                         T::kGauge);
    pod_util = b.Add("danqing_pod_gpu_utilization",
                     "GPU utilization of a container on this device (in %). share=exclusive: the "
                     "device's figure; share=shared: the sum of its processes' SM utilization "
                     "(estimated).",
                     T::kGauge);
    pod_mem = b.Add("danqing_pod_gpu_memory_used_bytes",
                    "GPU memory used by a container on this device. share=exclusive: the device's "
                    "figure; share=shared: the sum of its processes' memory.",
                    T::kGauge, "bytes");
    pod_devices = b.Add("danqing_pod_gpu_devices",
                        "Kubelet device IDs of this device held by the container.", T::kGauge);
    gpus = b.Add("danqing_gpus", "GPUs in the current discovery.", T::kGauge);
    discovery_errors = b.Add("danqing_gpu_discovery_errors",
                             "GPUs the last discovery could not read (e.g. lost).", T::kGauge);
    transitions = b.Add("danqing_health_transitions",
                        "Device health transitions since the agent started, by transition "
                        "(\"unhealthy:xid\", \"healthy:gpu-lost\").",
                        T::kCounter);
  }
};

std::string LocalHostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

std::string_view ReasonOf(const Status& s) {
  switch (s.code()) {
    case StatusCode::kNotFound: return "socket_missing";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kDeadlineExceeded: return "deadline_exceeded";
    default: return "error";
  }
}

std::string Lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// One GPU or MIG device as a row of labels and readings.
struct Row {
  const gpu::Gpu* gpu = nullptr;
  const gpu::MigDevice* mig = nullptr;
  std::string uuid;
  Labels labels;
};

struct PodFigures {
  double util = 0;
  bool has_util = false;
  double memory = 0;
  bool has_memory = false;
  int devices = 0;
};

}  // namespace

struct Collector::State {
  explicit State(Registry& r)
      : collections(r.AddCounter("danqing_exporter_collections", "Metric collections run.").Get()),
        collection_seconds(r.AddGauge("danqing_exporter_collection_duration_seconds",
                                      "Duration of the last collection.", {}, "seconds")
                               .Get()),
        pod_resources_up(r.AddGauge("danqing_pod_resources_up",
                                    "1 when the last pod resources List succeeded, else 0.")
                             .Get()),
        pod_resources_errors(r.AddCounter(
            "danqing_pod_resources_errors",
            "Pod resources List calls that failed, by reason (socket_missing, unavailable, "
            "deadline_exceeded, error). Metrics are still served, without pod labels.",
            {"reason"})),
        checkpoint_errors(r.AddCounter(
            "danqing_kubelet_checkpoint_errors",
            "Failed reads of the kubelet's device checkpoint (time-sliced splits fall back to "
            "single-holder attribution), by reason (missing, invalid).",
            {"reason"})) {}

  Counter& collections;
  Gauge& collection_seconds;
  Gauge& pod_resources_up;
  Family<Counter>& pod_resources_errors;
  Family<Counter>& checkpoint_errors;
  std::unique_ptr<PodResourcesClient> client;
  uint64_t generation = 0;
  std::string last_pod_error;  // logged once per change
};

Collector::Collector(CollectorOptions options, Sources sources, Registry& registry)
    : options_(std::move(options)),
      sources_(std::move(sources)),
      state_(std::make_unique<State>(registry)) {
  if (options_.hostname.empty()) options_.hostname = LocalHostname();
  if (!options_.pod_resources_socket.empty()) {
    state_->client = std::make_unique<PodResourcesClient>(options_.pod_resources_socket,
                                                          options_.pod_resources_timeout);
  }
}

Collector::~Collector() = default;

std::shared_ptr<const Snapshot> Collector::Collect() {
  const auto start = std::chrono::steady_clock::now();
  State& st = *state_;
  Builder b;
  Ids id(b);

  std::shared_ptr<const gpu::NodeInventory> inv;
  if (sources_.inventory) inv = sources_.inventory();

  // Health by UUID.
  std::map<std::string, DeviceHealth> health;
  if (sources_.health) {
    for (auto& h : sources_.health()) health[h.uuid] = std::move(h);
  }

  // Pods.
  HolderMap holders;
  std::map<std::string, int> allocatable;
  bool pods_known = false;
  if (st.client) {
    auto list = st.client->List();
    if (list.ok()) {
      pods_known = true;
      st.pod_resources_up.Set(1);
      std::shared_ptr<const DraDevices> dra;
      if (sources_.dra_devices) dra = sources_.dra_devices();
      holders = HoldersFrom(**list, options_.resource_prefix, dra.get());
      if (!st.last_pod_error.empty()) spdlog::info("metrics: pod resources answer again");
      st.last_pod_error.clear();
      auto alloc = st.client->GetAllocatable();
      if (alloc.ok()) allocatable = AllocatableFrom(**alloc, options_.resource_prefix);
    } else {
      st.pod_resources_up.Set(0);
      st.pod_resources_errors.WithLabels({std::string(ReasonOf(list.status()))}).Inc();
      if (st.last_pod_error != list.status().message()) {
        spdlog::warn("metrics: no pod labels: {}", list.status().message());
        st.last_pod_error = list.status().message();
      }
    }
  }
  // Pod UIDs (from /proc) → pods, read only when a shared device needs it.
  std::optional<std::map<std::string, PodByUid>> by_uid;
  auto pods_by_uid = [&]() -> const std::map<std::string, PodByUid>& {
    if (by_uid) return *by_uid;
    by_uid.emplace();
    if (options_.kubelet_checkpoint.empty()) return *by_uid;
    const auto text = ReadTextFile(options_.kubelet_checkpoint);
    if (!text) {
      st.checkpoint_errors.WithLabels({"missing"}).Inc();
      return *by_uid;
    }
    auto entries = ParseCheckpoint(*text);
    if (!entries.ok()) {
      st.checkpoint_errors.WithLabels({"invalid"}).Inc();
      return *by_uid;
    }
    *by_uid = JoinCheckpoint(*entries, holders);
    return *by_uid;
  };

  std::vector<Row> rows;
  if (inv) {
    b.Put(id.gpus, {{"Hostname", options_.hostname}}, static_cast<double>(inv->gpus.size()));
    b.Put(id.discovery_errors, {{"Hostname", options_.hostname}},
          static_cast<double>(inv->errors.size()));
    for (const auto& g : inv->gpus) {
      Labels base{{"gpu", std::to_string(g.index)},
                  {"UUID", g.uuid},
                  {"device", "nvidia" + std::to_string(g.minor_number.value_or(
                                            static_cast<uint32_t>(std::max(g.index, 0))))},
                  {options_.snake_case_labels ? "model_name" : "modelName", g.name},
                  {"Hostname", options_.hostname},
                  {"pci_bus_id", g.pci.bus_id}};
      rows.push_back({&g, nullptr, g.uuid, base});
      for (const auto& m : g.mig_devices) {
        Labels ml = base;
        ml.emplace_back("GPU_I_PROFILE", m.profile);
        ml.emplace_back("GPU_I_ID", std::to_string(m.gpu_instance_id));
        // dcgm-exporter's labels name the GPU instance; a GPU instance split
        // into several compute instances would give them one label set (two
        // samples of one series). Those also name the compute instance.
        const auto same_gi = std::count_if(g.mig_devices.begin(), g.mig_devices.end(), [&](const auto& o) {
          return o.gpu_instance_id == m.gpu_instance_id;
        });
        if (same_gi > 1) ml.emplace_back("GPU_CI_ID", std::to_string(m.compute_instance_id));
        rows.push_back({&g, &m, m.uuid, std::move(ml)});
      }
    }
  }

  for (const Row& row : rows) {
    // Health: the device's own entry; a MIG device is also unhealthy while
    // its GPU is (the kubelet is told the same), the GPU's reasons first.
    const auto find_health = [&health](const std::string& uuid) -> const DeviceHealth* {
      const auto it = health.find(uuid);
      return it == health.end() ? nullptr : &it->second;
    };
    const DeviceHealth* h = find_health(row.uuid);
    bool healthy = h == nullptr || h->healthy;
    std::string reason = healthy ? "" : h->reason;
    if (row.mig != nullptr) {
      if (const DeviceHealth* gh = find_health(row.gpu->uuid); gh != nullptr && !gh->healthy) {
        reason = healthy ? gh->reason : gh->reason + "," + reason;
        healthy = false;
      }
    }
    // Who holds it.
    const std::vector<DeviceHolder>* hs = nullptr;
    if (auto it = holders.find(row.uuid); it != holders.end()) hs = &it->second;
    std::map<ContainerRef, int> containers;  // container → device IDs held
    if (hs) {
      for (const auto& holder : *hs) containers[holder.ref]++;
    }
    Labels labels = row.labels;
    if (containers.size() == 1) {
      const ContainerRef& ref = containers.begin()->first;
      labels.emplace_back("namespace", ref.ns);
      labels.emplace_back("pod", ref.pod);
      labels.emplace_back("container", ref.container);
    }

    std::optional<gpu::Sensors> sensors;
    if (sources_.read_sensors) {
      auto r = sources_.read_sensors(row.uuid);
      if (r.ok()) {
        sensors = std::move(r).value();
        for (const auto& f : sensors->failures) {
          AgentMetrics().nvml_errors.WithLabels({Lowercase(StatusCodeName(f.code()))}).Inc();
        }
      } else if (r.status().code() != StatusCode::kNotFound) {
        AgentMetrics().nvml_errors.WithLabels({Lowercase(StatusCodeName(r.status().code()))}).Inc();
      }
    }
    b.Put(id.sensors_up, row.labels, sensors ? 1 : 0);
    if (sensors) {
      const gpu::Sensors& s = *sensors;
      if (s.utilization_gpu) b.Put(id.gpu_util, labels, *s.utilization_gpu);
      if (s.utilization_memory) b.Put(id.mem_copy_util, labels, *s.utilization_memory);
      if (s.memory_used_bytes) b.Put(id.fb_used, labels, std::floor(*s.memory_used_bytes / kMiB));
      if (s.memory_free_bytes) b.Put(id.fb_free, labels, std::floor(*s.memory_free_bytes / kMiB));
      if (s.memory_total_bytes)
        b.Put(id.fb_total, labels, std::floor(*s.memory_total_bytes / kMiB));
      if (s.temperature_c) b.Put(id.temp, labels, *s.temperature_c);
      if (s.power_mw) b.Put(id.power, labels, *s.power_mw / 1000.0);
      if (s.clock_sm_mhz) b.Put(id.sm_clock, labels, *s.clock_sm_mhz);
      if (s.clock_mem_mhz) b.Put(id.mem_clock, labels, *s.clock_mem_mhz);
      if (s.clock_video_mhz) b.Put(id.video_clock, labels, *s.clock_video_mhz);
      if (s.throttle_reasons) {
        b.Put(id.throttle_mask, labels, static_cast<double>(*s.throttle_reasons));
        for (const auto& t : kThrottleReasons) {
          Labels tl = row.labels;
          tl.emplace_back("reason", t.name);
          b.Put(id.throttle_reason, tl, (*s.throttle_reasons & t.bit) ? 1 : 0);
        }
      }
      auto put_u64 = [&](size_t fam, const std::optional<uint64_t>& v) {
        if (v) b.Put(fam, labels, static_cast<double>(*v));
      };
      put_u64(id.sbe_vol, s.ecc_volatile_corrected);
      put_u64(id.dbe_vol, s.ecc_volatile_uncorrected);
      put_u64(id.sbe_agg, s.ecc_aggregate_corrected);
      put_u64(id.dbe_agg, s.ecc_aggregate_uncorrected);
      if (s.retired_pages_pending)
        b.Put(id.retired_pending, labels, *s.retired_pages_pending ? 1 : 0);
      if (s.remapped_rows_correctable) b.Put(id.remap_corr, labels, *s.remapped_rows_correctable);
      if (s.remapped_rows_uncorrectable)
        b.Put(id.remap_unc, labels, *s.remapped_rows_uncorrectable);
      if (s.remapped_rows_failure)
        b.Put(id.remap_failure, labels, *s.remapped_rows_failure ? 1 : 0);
      if (s.remapped_rows_pending)
        b.Put(id.remap_pending, row.labels, *s.remapped_rows_pending ? 1 : 0);
    }
    // XIDs are the GPU's (NVML reports them on the GPU, whichever of its MIG
    // instances they hit: the health monitor counts them there); MIG rows
    // repeat none.
    if (row.mig == nullptr) {
      b.Put(id.xid_last, labels, h ? static_cast<double>(h->last_xid) : 0);
      if (h) {
        for (const auto& [xid, n] : h->xid_counts) {
          Labels xl = row.labels;
          xl.emplace_back("xid", std::to_string(xid));
          b.Put(id.xid_total, xl, static_cast<double>(n));
        }
      }
    }
    {
      Labels hl = row.labels;
      hl.emplace_back("reason", reason);
      b.Put(id.healthy, hl, healthy ? 1 : 0);
    }

    // Allocation state.
    if (pods_known) {
      b.Put(id.allocated, row.labels, hs ? static_cast<double>(hs->size()) : 0);
      b.Put(id.holders, row.labels, static_cast<double>(containers.size()));
      if (auto it = allocatable.find(row.uuid); it != allocatable.end()) {
        b.Put(id.allocatable, row.labels, it->second);
      }
    }

    // Processes and the per-pod split.
    const std::vector<gpu::ProcessInfo>* procs =
        sensors && sensors->processes ? &*sensors->processes : nullptr;
    if (procs) b.Put(id.processes, row.labels, static_cast<double>(procs->size()));
    if (!pods_known || containers.empty()) continue;

    std::map<ContainerRef, PodFigures> figures;
    for (const auto& [ref, n] : containers) figures[ref].devices = n;
    const bool shared = containers.size() > 1;
    if (!shared) {
      PodFigures& f = figures.begin()->second;
      if (sensors && sensors->utilization_gpu) {
        f.util = *sensors->utilization_gpu;
        f.has_util = true;
      }
      if (sensors && sensors->memory_used_bytes) {
        f.memory = static_cast<double>(*sensors->memory_used_bytes);
        f.has_memory = true;
      }
    } else if (procs) {
      for (auto& [ref, f] : figures) f.has_util = f.has_memory = true;  // no process: 0, exactly
      int unattributed = 0;
      for (const auto& p : *procs) {
        const ContainerRef* owner = nullptr;
        auto ident = ReadProcessCgroup(options_.proc_root, p.pid);
        if (ident.ok() && ident->has_value()) {
          const auto& uids = pods_by_uid();
          if (auto it = uids.find((*ident)->pod_uid); it != uids.end()) {
            for (const auto& [ref, n] : containers) {
              if (ref.ns != it->second.ns || ref.pod != it->second.pod) continue;
              if (owner == nullptr) owner = &ref;
              const auto& held = it->second.containers;
              auto c = held.find(ref.container);
              if (c != held.end() &&
                  std::find(c->second.begin(), c->second.end(), row.uuid) != c->second.end()) {
                owner = &ref;
                break;
              }
            }
          }
        }
        if (owner == nullptr) {
          ++unattributed;
          continue;
        }
        PodFigures& f = figures[*owner];
        f.memory += static_cast<double>(p.used_memory_bytes);
        if (p.sm_util) f.util += *p.sm_util;
      }
      for (auto& [ref, f] : figures) f.util = std::min(f.util, 100.0);
      b.Put(id.unattributed, row.labels, unattributed);
    }
    for (const auto& [ref, f] : figures) {
      Labels pl = row.labels;
      pl.emplace_back("namespace", ref.ns);
      pl.emplace_back("pod", ref.pod);
      pl.emplace_back("container", ref.container);
      pl.emplace_back("share", shared ? "shared" : "exclusive");
      b.Put(id.pod_devices, pl, f.devices);
      if (f.has_util) b.Put(id.pod_util, pl, f.util);
      if (f.has_memory) b.Put(id.pod_mem, pl, f.memory);
    }
  }

  if (sources_.health_transitions) {
    for (const auto& [transition, n] : sources_.health_transitions()) {
      b.Put(id.transitions, {{"transition", transition}}, static_cast<double>(n));
    }
  }

  auto snap = std::make_shared<Snapshot>();
  snap->generation = ++st.generation;
  snap->taken = std::chrono::system_clock::now();
  snap->families = b.Take();
  st.collections.Inc();
  st.collection_seconds.Set(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return snap;
}

}  // namespace danqing::metrics
