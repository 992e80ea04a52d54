#include "common/cpus.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <thread>

#include "common/read_file.h"

namespace danqing {
namespace {

std::optional<long long> ParseInt(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  long long v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<unsigned> Quota(long long quota, long long period) {
  if (quota <= 0 || period <= 0) return std::nullopt;
  return static_cast<unsigned>(std::max<long long>(1, (quota + period - 1) / period));
}

}  // namespace

std::optional<unsigned> CpuQuotaFromCpuMax(std::string_view cpu_max) {
  const size_t space = cpu_max.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const auto quota = ParseInt(cpu_max.substr(0, space));  // "max": nullopt
  const auto period = ParseInt(cpu_max.substr(space + 1));
  if (!quota || !period) return std::nullopt;
  return Quota(*quota, *period);
}

std::optional<unsigned> CpuQuotaFromCfs(std::string_view quota_us, std::string_view period_us) {
  const auto quota = ParseInt(quota_us);
  const auto period = ParseInt(period_us);
  if (!quota || !period) return std::nullopt;
  return Quota(*quota, *period);
}

unsigned AvailableCpus(const std::string& cgroup_root) {
  unsigned n = std::max(1u, std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    n = std::min(n, static_cast<unsigned>(std::max(1, CPU_COUNT(&set))));
  }
  std::optional<unsigned> quota;
  if (auto v2 = ReadTextFile(cgroup_root + "/cpu.max")) {
    quota = CpuQuotaFromCpuMax(*v2);
  } else if (auto q = ReadTextFile(cgroup_root + "/cpu/cpu.cfs_quota_us")) {
    if (auto p = ReadTextFile(cgroup_root + "/cpu/cpu.cfs_period_us")) quota = CpuQuotaFromCfs(*q, *p);
  }
  if (quota) n = std::min(n, *quota);
  return std::max(1u, n);
}

}  // namespace danqing
