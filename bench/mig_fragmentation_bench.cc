// MIG fragmentation (issue 26): how many claims of a replayed random stream
// fit on an 8x A100-80GB node with dynamic MIG versus the best static MIG
// layout chosen in hindsight.
//
// The stream (fixed seed): one claim arrives per step, profile 1g.10gb /
// 2g.20gb / 3g.40gb / 7g.80gb with weights 40/25/25/10, held for a uniform
// 1..2D-1 steps (mean D), then released. A claim that does not fit at its
// arrival is refused (counted, never retried).
//   dynamic: the scheduler's counter check (mig_placements.h counters, as
//     published by dynamic_mig.h): first fit over GPUs 0..7 and, on each, the
//     profile's placements in NVML's order; a release frees the counters.
//   static: each GPU is cut once into a maximal layout of those four
//     profiles (MaximalLayouts, e.g. 7x1g, 3g+2g+1g, 2x3g, 7g); a claim takes
//     any free instance of its profile. Only the node's instance counts per
//     profile matter, so every count vector reachable with 8 GPUs is
//     replayed and the best one (most claims fitted) is reported.
// Usage: mig_fragmentation_bench [steps] [seed]
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <queue>
#include <random>
#include <set>
#include <vector>

#include "dra/mig_placements.h"

namespace {

namespace dra = danqing::dra;

constexpr std::array<uint32_t, 4> kProfiles = {19, 14, 9, 0};  // 1g.10gb, 2g.20gb, 3g.40gb, 7g.80gb
constexpr std::array<int, 4> kWeights = {40, 25, 25, 10};

struct Claim {
  int profile = 0;  // index into kProfiles
  int duration = 0;
};

std::vector<Claim> Stream(int steps, unsigned seed, int mean) {
  std::mt19937 rng(seed);
  std::discrete_distribution<int> pick(kWeights.begin(), kWeights.end());
  std::uniform_int_distribution<int> hold(1, 2 * mean - 1);
  std::vector<Claim> out;
  for (int i = 0; i < steps; ++i) out.push_back({pick(rng), hold(rng)});
  return out;
}

using Release = std::pair<int, int>;  // (step, token)

// Replays with `try_place(profile) -> token or -1` and `release(token)`.
template <typename Place, typename Free>
int Replay(const std::vector<Claim>& stream, Place&& try_place, Free&& release) {
  std::priority_queue<Release, std::vector<Release>, std::greater<>> ends;
  int fitted = 0;
  for (int t = 0; t < static_cast<int>(stream.size()); ++t) {
    while (!ends.empty() && ends.top().first <= t) {
      release(ends.top().second);
      ends.pop();
    }
    const int token = try_place(stream[static_cast<std::size_t>(t)].profile);
    if (token < 0) continue;
    ++fitted;
    ends.emplace(t + stream[static_cast<std::size_t>(t)].duration, token);
  }
  return fitted;
}

int Dynamic(const std::vector<Claim>& stream, const std::vector<dra::MigGpuSpec>& gpus) {
  std::vector<dra::Counters> capacity;
  for (const auto& g : gpus) capacity.push_back(dra::GpuCounters(g));
  std::vector<dra::Counters> used(gpus.size());
  std::map<int, std::pair<std::size_t, dra::Counters>> held;
  int next = 0;
  return Replay(
      stream,
      [&](int profile) {
        for (std::size_t g = 0; g < gpus.size(); ++g) {
          const dra::MigProfileSpec* p =
              gpus[g].FindProfile(kProfiles[static_cast<std::size_t>(profile)]);
          for (uint32_t start : p->placement_starts) {
            dra::Counters use = dra::PlacementCounters(*p, start);
            if (dra::TryConsume(capacity[g], used[g], use)) {
              held[next] = {g, std::move(use)};
              return next++;
            }
          }
        }
        return -1;
      },
      [&](int token) {
        auto it = held.find(token);
        dra::Release(used[it->second.first], it->second.second);
        held.erase(it);
      });
}

using CountVector = std::array<int, 4>;

int Static(const std::vector<Claim>& stream, const CountVector& counts) {
  CountVector free = counts;
  std::map<int, int> held;
  int next = 0;
  return Replay(
      stream,
      [&](int profile) {
        if (free[static_cast<std::size_t>(profile)] == 0) return -1;
        --free[static_cast<std::size_t>(profile)];
        held[next] = profile;
        return next++;
      },
      [&](int token) {
        ++free[static_cast<std::size_t>(held[token])];
        held.erase(token);
      });
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 20000;
  const unsigned seed =
      argc > 2 ? static_cast<unsigned>(std::strtoul(argv[2], nullptr, 10)) : 20261205U;
  std::vector<dra::MigGpuSpec> gpus;
  for (int i = 0; i < 8; ++i) gpus.push_back(dra::A100_80GB(i, "GPU-" + std::to_string(i)));

  // Per-GPU maximal layouts → the node's reachable instance-count vectors.
  const auto layouts = dra::MaximalLayouts(gpus[0], {kProfiles.begin(), kProfiles.end()});
  std::set<CountVector> per_gpu;
  for (const auto& layout : layouts) {
    CountVector v{};
    for (const auto& [id, start] : layout) {
      for (std::size_t k = 0; k < kProfiles.size(); ++k) {
        if (kProfiles[k] == id) ++v[k];
      }
    }
    per_gpu.insert(v);
  }
  std::set<CountVector> node = {CountVector{}};
  for (std::size_t g = 0; g < gpus.size(); ++g) {
    std::set<CountVector> next;
    for (const auto& a : node) {
      for (const auto& b : per_gpu)
        next.insert({a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3]});
    }
    node = std::move(next);
  }
  std::printf(
      "A100-80GB maximal layouts of 1g/2g/3g/7g: %zu (%zu distinct instance counts per GPU); "
      "node count vectors: %zu\n",
      layouts.size(), per_gpu.size(), node.size());
  std::printf("stream: %d claims, seed %u, weights 1g/2g/3g/7g = 40/25/25/10\n\n", steps, seed);
  std::printf("%-10s %-14s %-18s %-34s %s\n", "mean hold", "offered slices", "dynamic fitted",
              "best static fitted (1g,2g,3g,7g)", "dynamic - static");
  for (int mean : {8, 16, 24, 32, 48}) {
    const auto stream = Stream(steps, seed, mean);
    const int dynamic = Dynamic(stream, gpus);
    int best = -1;
    CountVector best_counts{};
    for (const auto& v : node) {
      const int fitted = Static(stream, v);
      if (fitted > best) {
        best = fitted;
        best_counts = v;
      }
    }
    const double offered = mean * (0.40 * 1 + 0.25 * 2 + 0.25 * 3 + 0.10 * 7);
    char counts[64];
    std::snprintf(counts, sizeof(counts), "%d (%d,%d,%d,%d)", best, best_counts[0], best_counts[1],
                  best_counts[2], best_counts[3]);
    std::printf("%-10d %-14.0f %6d = %5.1f%%    %-34s %+d (%+.1f pts)\n", mean, offered, dynamic,
                100.0 * dynamic / steps, counts, dynamic - best, 100.0 * (dynamic - best) / steps);
  }
  return 0;
}
