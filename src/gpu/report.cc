#include "gpu/report.h"

#include <fmt/format.h>

#include <algorithm>

namespace danqing::gpu {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

template <typename T>
nlohmann::json Opt(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

std::string OptStr(const std::optional<uint32_t>& v, std::string_view unit = "") {
  return v ? fmt::format("{}{}", *v, unit) : "-";
}

std::string CudaVersion(int v) {
  return v > 0 ? fmt::format("{}.{}", v / 1000, (v % 1000) / 10) : "?";
}

nlohmann::json SensorsJson(const Sensors& s) {
  nlohmann::json j = {
      {"uuid", s.uuid},
      {"utilization_gpu_percent", Opt(s.utilization_gpu)},
      {"utilization_memory_percent", Opt(s.utilization_memory)},
      {"memory_total_bytes", Opt(s.memory_total_bytes)},
      {"memory_used_bytes", Opt(s.memory_used_bytes)},
      {"memory_free_bytes", Opt(s.memory_free_bytes)},
      {"temperature_celsius", Opt(s.temperature_c)},
      {"power_milliwatts", Opt(s.power_mw)},
      {"clock_graphics_mhz", Opt(s.clock_graphics_mhz)},
      {"clock_sm_mhz", Opt(s.clock_sm_mhz)},
      {"clock_memory_mhz", Opt(s.clock_mem_mhz)},
      {"clock_video_mhz", Opt(s.clock_video_mhz)},
      {"throttle_reasons", Opt(s.throttle_reasons)},
      {"throttle_reasons_text",
       s.throttle_reasons ? nlohmann::json(throttle::Describe(*s.throttle_reasons)) : nullptr},
      {"ecc_volatile_corrected", Opt(s.ecc_volatile_corrected)},
      {"ecc_volatile_uncorrected", Opt(s.ecc_volatile_uncorrected)},
      {"ecc_aggregate_corrected", Opt(s.ecc_aggregate_corrected)},
      {"ecc_aggregate_uncorrected", Opt(s.ecc_aggregate_uncorrected)},
      {"retired_pages_pending", Opt(s.retired_pages_pending)},
      {"remapped_rows_correctable", Opt(s.remapped_rows_correctable)},
      {"remapped_rows_uncorrectable", Opt(s.remapped_rows_uncorrectable)},
      {"remapped_rows_pending", Opt(s.remapped_rows_pending)},
      {"remapped_rows_failure", Opt(s.remapped_rows_failure)},
  };
  if (s.processes) {
    nlohmann::json procs = nlohmann::json::array();
    for (const auto& p : *s.processes) {
      procs.push_back({{"pid", p.pid},
                       {"used_memory_bytes", p.used_memory_bytes},
                       {"sm_util_percent", Opt(p.sm_util)},
                       {"memory_util_percent", Opt(p.mem_util)},
                       {"gpu_instance_id", Opt(p.gpu_instance_id)},
                       {"compute_instance_id", Opt(p.compute_instance_id)}});
    }
    j["processes"] = std::move(procs);
  } else {
    j["processes"] = nullptr;
  }
  nlohmann::json failures = nlohmann::json::array();
  for (const auto& f : s.failures) failures.push_back(f.ToString());
  j["failures"] = std::move(failures);
  return j;
}

}  // namespace

Result<Snapshot> TakeSnapshot(GpuBackend& backend, bool with_sensors) {
  Snapshot snap;
  snap.source = backend.Describe();
  auto inv = backend.Discover();
  if (!inv.ok()) return inv.status();
  snap.inventory = std::move(inv).value();
  if (with_sensors) {
    for (const auto& g : snap.inventory.gpus) snap.sensors.push_back(backend.ReadSensors(g.uuid));
    for (const auto& g : snap.inventory.gpus) {
      for (const auto& m : g.mig_devices) snap.sensors.push_back(backend.ReadSensors(m.uuid));
    }
  }
  return snap;
}

nlohmann::json ToJson(const Snapshot& snap) {
  const NodeInventory& inv = snap.inventory;
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& g : inv.gpus) {
    nlohmann::json migs = nlohmann::json::array();
    for (const auto& m : g.mig_devices) {
      migs.push_back({{"uuid", m.uuid},
                      {"index", m.index},
                      {"profile", m.profile},
                      {"gpu_instance_id", m.gpu_instance_id},
                      {"compute_instance_id", m.compute_instance_id},
                      {"gpu_instance_profile_id", m.gpu_instance_profile_id},
                      {"gpu_instance_slices", m.gpu_instance_slices},
                      {"compute_instance_slices", m.compute_instance_slices},
                      {"placement_start", m.placement_start},
                      {"multiprocessor_count", m.multiprocessor_count},
                      {"memory_bytes", m.memory_bytes}});
    }
    gpus.push_back({{"index", g.index},
                    {"uuid", g.uuid},
                    {"name", g.name},
                    {"brand", g.brand},
                    {"architecture", g.architecture},
                    {"memory_bytes", g.memory_bytes},
                    {"pci_bus_id", g.pci.bus_id},
                    {"pci_device_id", fmt::format("0x{:08X}", g.pci.device_id)},
                    {"minor_number", Opt(g.minor_number)},
                    {"numa_node", Opt(g.numa_node)},
                    {"compute_capability", fmt::format("{}.{}", g.cuda_major, g.cuda_minor)},
                    {"mig_mode", MigModeName(g.mig_mode)},
                    {"mig_pending_change", g.mig_pending_change},
                    {"mig_devices", std::move(migs)}});
  }
  nlohmann::json topo = nlohmann::json::array();
  const Topology& t = inv.topology;
  for (size_t a = 0; a < t.size(); ++a) {
    for (size_t b = a + 1; b < t.size(); ++b) {
      topo.push_back({{"a", inv.gpus[a].index},
                      {"b", inv.gpus[b].index},
                      {"nvlinks", t.at(a, b).nvlinks},
                      {"pcie", PcieLevelName(t.at(a, b).pcie)}});
    }
  }
  nlohmann::json errors = nlohmann::json::array();
  for (const auto& e : inv.errors) {
    errors.push_back({{"index", e.index}, {"uuid", e.uuid}, {"error", e.status.ToString()}});
  }
  nlohmann::json sensors = nlohmann::json::array();
  for (const auto& s : snap.sensors) {
    if (s.ok()) {
      sensors.push_back(SensorsJson(*s));
    } else {
      sensors.push_back({{"error", s.status().ToString()}});
    }
  }
  return {{"source", snap.source},
          {"driver_version", inv.driver_version},
          {"cuda_driver_version", inv.cuda_driver_version},
          {"gpus", std::move(gpus)},
          {"topology", std::move(topo)},
          {"sensors", std::move(sensors)},
          {"errors", std::move(errors)},
          {"disabled_features", inv.disabled_features}};
}

std::string RenderTable(const Snapshot& snap) {
  const NodeInventory& inv = snap.inventory;
  std::string out;
  auto line = [&out](const std::string& s) {
    out += s;
    out += '\n';
  };
  line(fmt::format("Source: {}", snap.source));
  line(fmt::format("Driver {}   CUDA {}   GPUs {}", inv.driver_version.empty() ? "?" : inv.driver_version,
                   CudaVersion(inv.cuda_driver_version), inv.gpus.size()));
  line("");
  line(fmt::format("{:<4} {:<40} {:<26} {:>9} {:<16} {:>4} {:>3} {:>5} {:<8}", "IDX", "UUID", "NAME",
                   "MEMORY", "PCI BUS ID", "NUMA", "CC", "MINOR", "MIG"));
  for (const auto& g : inv.gpus) {
    line(fmt::format("{:<4} {:<40} {:<26} {:>6.0f}MiB {:<16} {:>4} {:>3} {:>5} {:<8}", g.index, g.uuid,
                     g.name, static_cast<double>(g.memory_bytes) / kMiB, g.pci.bus_id,
                     g.numa_node ? std::to_string(*g.numa_node) : "-",
                     fmt::format("{}.{}", g.cuda_major, g.cuda_minor),
                     g.minor_number ? std::to_string(*g.minor_number) : "-",
                     std::string(MigModeName(g.mig_mode)) + (g.mig_pending_change ? "*" : "")));
  }
  bool any_mig = std::any_of(inv.gpus.begin(), inv.gpus.end(),
                             [](const Gpu& g) { return !g.mig_devices.empty(); });
  if (any_mig) {
    line("");
    line("MIG devices");
    line(fmt::format("{:<4} {:<4} {:<41} {:<10} {:>3} {:>3} {:>4} {:>9}", "GPU", "IDX", "UUID",
                     "PROFILE", "GI", "CI", "SMS", "MEMORY"));
    for (const auto& g : inv.gpus) {
      for (const auto& m : g.mig_devices) {
        line(fmt::format("{:<4} {:<4} {:<41} {:<10} {:>3} {:>3} {:>4} {:>6.0f}MiB", g.index, m.index,
                         m.uuid, m.profile, m.gpu_instance_id, m.compute_instance_id,
                         m.multiprocessor_count, static_cast<double>(m.memory_bytes) / kMiB));
      }
    }
  }
  if (inv.gpus.size() > 1) {
    line("");
    line("Topology (NV# = NVLink lanes; PIX/PXB/PHB/NODE/SYS = PCIe path)");
    std::string header = "       ";
    for (const auto& g : inv.gpus) header += fmt::format("{:>6}", fmt::format("GPU{}", g.index));
    line(header);
    for (size_t a = 0; a < inv.gpus.size(); ++a) {
      std::string row = fmt::format("{:<7}", fmt::format("GPU{}", inv.gpus[a].index));
      for (size_t b = 0; b < inv.gpus.size(); ++b) {
        const GpuLink& l = inv.topology.at(a, b);
        std::string cell = a == b ? "X"
                           : l.nvlinks > 0 ? fmt::format("NV{}", l.nvlinks)
                                           : std::string(PcieLevelName(l.pcie));
        row += fmt::format("{:>6}", cell);
      }
      line(row);
    }
  }
  if (!snap.sensors.empty()) {
    line("");
    line("Sensors");
    line(fmt::format("{:<41} {:>5} {:>7} {:>5} {:>11} {:>7} {:>7} {:>4} {:>4} {:>5} {:<}", "UUID", "TEMP",
                     "POWER", "UTIL", "MEM USED", "SM CLK", "MEM CLK", "DBE", "PEND", "PROCS",
                     "THROTTLE"));
    for (const auto& r : snap.sensors) {
      if (!r.ok()) {
        line(fmt::format("  error: {}", r.status().ToString()));
        continue;
      }
      const Sensors& s = *r;
      line(fmt::format(
          "{:<41} {:>5} {:>7} {:>5} {:>11} {:>7} {:>7} {:>4} {:>4} {:>5} {:<}", s.uuid,
          OptStr(s.temperature_c, "C"),
          s.power_mw ? fmt::format("{:.0f}W", *s.power_mw / 1000.0) : "-",
          OptStr(s.utilization_gpu, "%"),
          s.memory_used_bytes ? fmt::format("{:.0f}MiB", static_cast<double>(*s.memory_used_bytes) / kMiB) : "-",
          OptStr(s.clock_sm_mhz), OptStr(s.clock_mem_mhz),
          s.ecc_volatile_uncorrected ? std::to_string(*s.ecc_volatile_uncorrected) : "-",
          s.retired_pages_pending || s.remapped_rows_pending
              ? ((s.retired_pages_pending.value_or(false) || s.remapped_rows_pending.value_or(false)) ? "yes" : "no")
              : "-",
          s.processes ? std::to_string(s.processes->size()) : "-",
          s.throttle_reasons ? throttle::Describe(*s.throttle_reasons) : "-"));
      for (const auto& f : s.failures) line(fmt::format("  warning: {}", f.ToString()));
    }
  }
  if (!inv.errors.empty()) {
    line("");
    line("Devices that could not be read");
    for (const auto& e : inv.errors) {
      line(fmt::format("  GPU {} {}: {}", e.index, e.uuid, e.status.ToString()));
    }
  }
  if (!inv.disabled_features.empty()) {
    line("");
    line("Features off (the NVML library lacks them)");
    for (const auto& f : inv.disabled_features) line("  " + f);
  }
  return out;
}

}  // namespace danqing::gpu
