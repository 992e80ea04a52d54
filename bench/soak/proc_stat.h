// What the soaks watch in the process under test: resident memory, threads
// and open file descriptors, from /proc/<pid>. Shared by agent_soak and
// service_soak.
#pragma once

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace danqing::soak {

struct ProcStat {
  long rss_kib = 0;
  int threads = 0;
  int fds = 0;
};

inline ProcStat Sample(int pid) {
  ProcStat s;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) s.rss_kib = std::stol(line.substr(6));
    if (line.rfind("Threads:", 0) == 0) s.threads = std::stoi(line.substr(8));
  }
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++s.fds;
  }
  return s;
}

// Raises each figure of `peak` to `s` where `s` is higher.
inline void KeepPeak(ProcStat& peak, const ProcStat& s) {
  peak.rss_kib = std::max(peak.rss_kib, s.rss_kib);
  peak.threads = std::max(peak.threads, s.threads);
  peak.fds = std::max(peak.fds, s.fds);
}

// "  <who> RSS KiB start/end/peak: ..." and the same for FDs and threads.
inline void PrintProcStats(const char* who, const ProcStat& start, const ProcStat& end, const ProcStat& peak) {
  std::printf("  %s RSS KiB start/end/peak: %ld / %ld / %ld\n", who, start.rss_kib, end.rss_kib, peak.rss_kib);
  std::printf("  %s FDs start/end/peak: %d / %d / %d\n", who, start.fds, end.fds, peak.fds);
  std::printf("  %s threads start/end/peak: %d / %d / %d\n", who, start.threads, end.threads, peak.threads);
}

}  // namespace danqing::soak
