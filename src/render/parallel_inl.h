// ParallelFor (see passes.h).
#pragma once

#include <algorithm>
#include <thread>
#include <vector>

namespace danqing::render {

template <typename Fn>
void ParallelFor(int threads, int n, Fn fn) {
  if (n <= 0) return;
  int t = std::clamp(threads, 1, n);
  if (t == 1) {
    fn(0, n);
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(t - 1));
  for (int i = 1; i < t; ++i) {
    int b = static_cast<int>(static_cast<long long>(n) * i / t);
    int e = static_cast<int>(static_cast<long long>(n) * (i + 1) / t);
    pool.emplace_back([=] { fn(b, e); });
  }
  fn(0, static_cast<int>(static_cast<long long>(n) / t));
  for (auto& th : pool) th.join();
}

}  // namespace danqing::render
