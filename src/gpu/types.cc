#include "gpu/types.h"

namespace danqing::gpu {

std::string_view MigModeName(MigMode mode) {
  switch (mode) {
    case MigMode::kUnsupported: return "n/a";
    case MigMode::kDisabled: return "disabled";
    case MigMode::kEnabled: return "enabled";
  }
  return "?";
}

std::string_view PcieLevelName(PcieLevel level) {
  // The abbreviations of `nvidia-smi topo -m`.
  switch (level) {
    case PcieLevel::kSame: return "X";
    case PcieLevel::kSwitch: return "PIX";
    case PcieLevel::kMultiSwitch: return "PXB";
    case PcieLevel::kHostBridge: return "PHB";
    case PcieLevel::kNumaNode: return "NODE";
    case PcieLevel::kSystem: return "SYS";
    case PcieLevel::kUnknown: return "?";
  }
  return "?";
}

std::string_view EventKindName(EventKind kind) {
  switch (kind) {
    case EventKind::kXid: return "xid";
    case EventKind::kDoubleBitEcc: return "ecc_double_bit";
    case EventKind::kSingleBitEcc: return "ecc_single_bit";
    case EventKind::kMigConfigChange: return "mig_config_change";
    case EventKind::kOther: return "other";
  }
  return "other";
}

const Gpu* NodeInventory::FindGpu(std::string_view uuid) const {
  for (const auto& g : gpus) {
    if (g.uuid == uuid) return &g;
  }
  return nullptr;
}

namespace throttle {
std::string Describe(uint64_t reasons) {
  static constexpr std::pair<uint64_t, std::string_view> kNames[] = {
      {kGpuIdle, "gpu_idle"},
      {kApplicationsClocksSetting, "applications_clocks"},
      {kSwPowerCap, "sw_power_cap"},
      {kHwSlowdown, "hw_slowdown"},
      {kSyncBoost, "sync_boost"},
      {kSwThermalSlowdown, "sw_thermal"},
      {kHwThermalSlowdown, "hw_thermal"},
      {kHwPowerBrakeSlowdown, "hw_power_brake"},
      {kDisplayClockSetting, "display_clocks"},
  };
  if (reasons == 0) return "none";
  std::string out;
  uint64_t known = 0;
  for (auto [bit, name] : kNames) {
    known |= bit;
    if ((reasons & bit) == 0) continue;
    if (!out.empty()) out += ',';
    out += name;
  }
  if ((reasons & ~known) != 0) {
    if (!out.empty()) out += ',';
    out += "other";
  }
  return out;
}
}  // namespace throttle

}  // namespace danqing::gpu
