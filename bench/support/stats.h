// Latency figures for the benches: durations as milliseconds or microseconds,
// and the nearest-rank quantiles (p50, p99, max) of a set of samples.
//
// Thread-safety: plain functions over values; call from any thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <vector>

namespace danqing::bench {

using Clock = std::chrono::steady_clock;

inline double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}
inline double Us(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

// The sample at rank floor(q * n) of `sorted` (ascending, not empty), the
// last one where that rank is past the end.
inline double AtQuantile(const std::vector<double>& sorted, double q) {
  const auto rank = static_cast<std::size_t>(q * static_cast<double>(sorted.size()));
  return sorted[std::min(sorted.size() - 1, rank)];
}

struct Stats {
  std::size_t n = 0;
  double p50 = 0, p99 = 0, max = 0;
};

// p50, p99 and max of `v`, which must not be empty.
inline Stats Summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v.size(), AtQuantile(v, 0.50), AtQuantile(v, 0.99), v.back()};
}

// One row: `what` left-aligned in `width` columns, then n, p50, p99 and max
// of `us` (microseconds, not empty), whole microseconds.
inline void PrintMicros(const char* what, int width, const std::vector<double>& us) {
  const Stats s = Summarize(us);
  std::printf("%-*s n=%zu  p50 %8.0f us  p99 %8.0f us  max %8.0f us\n", width, what, s.n, s.p50,
              s.p99, s.max);
}

}  // namespace danqing::bench
