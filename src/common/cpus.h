// The CPUs this process may use: what std::thread::hardware_concurrency()
// does not say inside a container.
//
// hardware_concurrency() counts the node's CPUs. A pod limited to 2 CPUs on a
// 64-core GPU node would start 64 render workers, each holding a decoded
// photo and a canvas, and be throttled and OOM-killed. This takes the
// smallest of the node's CPUs, the process's affinity mask (cpuset, taskset)
// and the cgroup CPU quota (v2 cpu.max, else v1 cpu.cfs_quota_us/period),
// rounded up, and at least 1.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace danqing {

// The quota of a cgroup v2 `cpu.max` ("200000 100000" → 2, "150000 100000"
// → 2, "max 100000" → nullopt); nullopt when unlimited or unparsable.
std::optional<unsigned> CpuQuotaFromCpuMax(std::string_view cpu_max);

// The same from cgroup v1's cpu.cfs_quota_us and cpu.cfs_period_us (a quota
// of -1 is unlimited).
std::optional<unsigned> CpuQuotaFromCfs(std::string_view quota_us, std::string_view period_us);

// min(node CPUs, affinity, cgroup quota), >= 1. `cgroup_root` is where the
// process's cgroup is mounted (in a container, its own cgroup).
unsigned AvailableCpus(const std::string& cgroup_root = "/sys/fs/cgroup");

}  // namespace danqing
