#include "dra/mig_placements.h"

#include <algorithm>
#include <functional>
#include <set>
#include <utility>

namespace danqing::dra {
namespace {

constexpr uint64_t kMiB = 1ULL << 20;

// The engine counters: name, and the member of the profile that feeds it.
struct EngineField {
  const char* counter;
  uint32_t MigProfileSpec::*field;
};
constexpr EngineField kEngines[] = {
    {"copy-engines", &MigProfileSpec::copy_engines},
    {"decoders", &MigProfileSpec::decoders},
    {"encoders", &MigProfileSpec::encoders},
    {"jpegs", &MigProfileSpec::jpegs},
    {"ofas", &MigProfileSpec::ofas},
};

std::string SliceCounter(uint32_t k) {
  return "memory-slice-" + std::to_string(k);
}

}  // namespace

const MigProfileSpec* MigGpuSpec::FindProfile(uint32_t profile_id) const {
  for (const auto& p : profiles) {
    if (p.profile_id == profile_id) return &p;
  }
  return nullptr;
}

const MigProfileSpec* MigGpuSpec::FindProfile(const std::string& profile_name) const {
  for (const auto& p : profiles) {
    if (p.name == profile_name) return &p;
  }
  return nullptr;
}

Counters GpuCounters(const MigGpuSpec& gpu) {
  Counters c;
  for (uint32_t k = 0; k < gpu.memory_slices; ++k) c[SliceCounter(k)] = 1;
  c["compute-slices"] = gpu.compute_slices;
  const MigProfileSpec* whole = nullptr;
  for (const auto& p : gpu.profiles) {
    if (whole == nullptr || p.memory_slices > whole->memory_slices) whole = &p;
  }
  if (whole != nullptr) {
    for (const auto& e : kEngines) {
      if (whole->*e.field > 0) c[e.counter] = whole->*e.field;
    }
  }
  return c;
}

Counters PlacementCounters(const MigProfileSpec& profile, uint32_t start) {
  Counters c;
  for (uint32_t k = start; k < start + profile.memory_slices; ++k) c[SliceCounter(k)] = 1;
  c["compute-slices"] = profile.compute_slices;
  for (const auto& e : kEngines) {
    if (profile.*e.field > 0) c[e.counter] = profile.*e.field;
  }
  return c;
}

bool PlacementsOverlap(uint32_t a_start, uint32_t a_size, uint32_t b_start, uint32_t b_size) {
  return a_start < b_start + b_size && b_start < a_start + a_size;
}

bool TryConsume(const Counters& capacity, Counters& used, const Counters& use) {
  for (const auto& [name, n] : use) {
    const auto cap = capacity.find(name);
    if (cap == capacity.end()) return false;
    const auto u = used.find(name);
    const int64_t now = u == used.end() ? 0 : u->second;
    if (now + n > cap->second) return false;
  }
  for (const auto& [name, n] : use) used[name] += n;
  return true;
}

void Release(Counters& used, const Counters& use) {
  for (const auto& [name, n] : use) {
    auto it = used.find(name);
    if (it == used.end()) continue;
    it->second -= n;
    if (it->second <= 0) used.erase(it);
  }
}

MigGpuSpec A100_80GB(int index, std::string uuid) {
  MigGpuSpec g;
  g.index = index;
  g.uuid = std::move(uuid);
  g.product = "NVIDIA A100-SXM4-80GB";
  // id, name, compute, memory slices, instances, SMs, MiB, CE, NVDEC, NVENC, JPG, OFA, starts
  const auto row = [](uint32_t id, const char* name, uint32_t cs, uint32_t ms, uint32_t count,
                      uint32_t sms, uint64_t mib, uint32_t ce, uint32_t dec, uint32_t jpg,
                      uint32_t ofa, std::vector<uint32_t> starts) {
    MigProfileSpec p;
    p.profile_id = id;
    p.name = name;
    p.compute_slices = cs;
    p.memory_slices = ms;
    p.instance_count = count;
    p.multiprocessors = sms;
    p.memory_bytes = mib * kMiB;
    p.copy_engines = ce;
    p.decoders = dec;
    p.jpegs = jpg;
    p.ofas = ofa;
    p.placement_starts = std::move(starts);
    return p;
  };
  g.profiles = {
      row(19, "1g.10gb", 1, 1, 7, 14, 9856, 1, 0, 0, 0, {0, 1, 2, 3, 4, 5, 6}),
      row(20, "1g.10gb+me", 1, 1, 1, 14, 9856, 1, 1, 1, 1, {0, 1, 2, 3, 4, 5, 6}),
      row(15, "1g.20gb", 1, 2, 4, 14, 19968, 1, 1, 0, 0, {0, 2, 4, 6}),
      row(14, "2g.20gb", 2, 2, 3, 28, 19968, 2, 1, 0, 0, {0, 2, 4}),
      row(9, "3g.40gb", 3, 4, 2, 42, 40192, 3, 2, 0, 0, {0, 4}),
      row(5, "4g.40gb", 4, 4, 1, 56, 40192, 4, 2, 0, 0, {0}),
      row(0, "7g.80gb", 7, 8, 1, 98, 80896, 7, 5, 1, 1, {0}),
  };
  return g;
}

std::vector<MigLayout> MaximalLayouts(const MigGpuSpec& gpu,
                                      const std::vector<uint32_t>& profile_ids) {
  // Every (profile, start) candidate, in a fixed order.
  std::vector<std::pair<const MigProfileSpec*, uint32_t>> candidates;
  for (uint32_t id : profile_ids) {
    const MigProfileSpec* p = gpu.FindProfile(id);
    if (p == nullptr) continue;
    for (uint32_t s : p->placement_starts) candidates.emplace_back(p, s);
  }
  const Counters capacity = GpuCounters(gpu);
  std::set<MigLayout> found;
  MigLayout current;
  Counters used;
  std::map<uint32_t, uint32_t> per_profile;
  const auto fits = [&](const MigProfileSpec& p, uint32_t s) {
    if (per_profile[p.profile_id] >= p.instance_count) return false;
    Counters probe = used;
    return TryConsume(capacity, probe, PlacementCounters(p, s));
  };
  std::function<void(std::size_t)> walk = [&](std::size_t from) {
    bool extended = false;
    for (std::size_t i = from; i < candidates.size(); ++i) {
      const auto& [p, s] = candidates[i];
      if (!fits(*p, s)) continue;
      extended = true;
      TryConsume(capacity, used, PlacementCounters(*p, s));
      ++per_profile[p->profile_id];
      current.emplace_back(p->profile_id, s);
      walk(i + 1);
      current.pop_back();
      --per_profile[p->profile_id];
      Release(used, PlacementCounters(*p, s));
    }
    if (extended) return;
    // Maximal only if no candidate at all fits (also those before `from`).
    for (const auto& [p, s] : candidates) {
      if (fits(*p, s)) return;
    }
    MigLayout sorted = current;
    std::sort(sorted.begin(), sorted.end());
    found.insert(std::move(sorted));
  };
  walk(0);
  return {found.begin(), found.end()};
}

}  // namespace danqing::dra
