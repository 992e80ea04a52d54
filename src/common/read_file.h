// ReadTextFile: a whole file as a string, or nullopt when it cannot be opened
// (missing, unreadable). For the small files the agent reads: /proc and
// /sys entries, cgroup limits, runtime and kubelet files.
#pragma once

#include <optional>
#include <string>

namespace danqing {

std::optional<std::string> ReadTextFile(const std::string& path);

}  // namespace danqing
