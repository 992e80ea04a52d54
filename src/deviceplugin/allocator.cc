#include "deviceplugin/allocator.h"

#include <algorithm>
#include <compare>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <string_view>

namespace danqing::deviceplugin {
namespace {

// Above this many combinations of the remaining picks the search switches from
// exhaustive enumeration to greedy construction plus local search. C(16, 8) is
// 12870, so every request on a 16-GPU node is still answered exactly.
constexpr int64_t kExhaustiveLimit = 20000;
// Work budget of the heuristic search, in set evaluations (a few ns each):
// half for greedy seeds, the rest for double swaps. It bounds the latency on
// nodes larger than the exhaustive search covers.
constexpr int64_t kGreedyBudget = int64_t{1} << 18;
constexpr int64_t kMaxPcieScore = 6;

// Nearer PCIe paths score higher.
int64_t PcieScore(gpu::PcieLevel level) {
  switch (level) {
    case gpu::PcieLevel::kSame: return 6;  // only for a bogus distinct pair
    case gpu::PcieLevel::kSwitch: return 5;
    case gpu::PcieLevel::kMultiSwitch: return 4;
    case gpu::PcieLevel::kHostBridge: return 3;
    case gpu::PcieLevel::kNumaNode: return 2;
    case gpu::PcieLevel::kSystem: return 1;
    case gpu::PcieLevel::kUnknown: return 0;
  }
  return 0;
}

// C(n, k), or cap + 1 once it exceeds cap.
int64_t Binomial(int64_t n, int64_t k, int64_t cap) {
  if (k < 0 || k > n) return 0;
  k = std::min(k, n - k);
  int64_t r = 1;
  for (int64_t i = 1; i <= k; ++i) {
    r = r * (n - k + i) / i;  // r is now C(n - k + i, i): exact at every step
    if (r > cap) return cap + 1;
  }
  return r;
}

// How good a set of picked GPUs is; compared member by member, higher wins.
struct Key {
  // Sum of pair scores within the whole allocation (picked GPUs and the
  // must_include ones): criteria 1 and 2 at once (see pair_score_).
  int64_t links = 0;
  // Change in the sum of pair scores among the GPUs that stay available
  // (criterion 3). Only GPUs whose last free device is picked leave; the
  // constant sum over all available GPUs is left out, so this is <= 0.
  int64_t rest = 0;
  // Free devices on the picked GPUs: among equal sets, take from the GPUs
  // with the most free replicas, which spreads time-sliced load.
  int64_t spread = 0;

  auto operator<=>(const Key&) const = default;
  Key operator+(const Key& o) const { return {links + o.links, rest + o.rest, spread + o.spread}; }
  Key operator-(const Key& o) const { return {links - o.links, rest - o.rest, spread - o.spread}; }
};

constexpr Key kWorstKey{std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::min(),
                        std::numeric_limits<int64_t>::min()};

}  // namespace

// The search for one Choose() call, over "candidates": GPUs (entities) that
// have a free device and hold none of must_include, indexed 0..m-1 in entity
// order. It picks d of them (one device each); criterion 4 (lowest positions)
// is the lexicographic order of the sorted candidate indices.
struct PreferredAllocator::Impl {
  int m = 0;
  int d = 0;
  std::vector<int64_t> with_must;  // pair scores to the must_include GPUs
  std::vector<int64_t> loss;       // pair scores to the other available GPUs, lost
                                   // when this one's last free device is picked
  std::vector<int64_t> free;       // free devices
  std::vector<int64_t> pair;       // m×m pair scores, 0 on the diagonal
  std::vector<int64_t> pair_lost;  // m×m: pair score when both lose their last
                                   // free device (added back: counted twice in loss)

  std::vector<int> best;  // sorted candidate indices
  Key best_key = kWorstKey;

  std::vector<int> prev_twin;  // exhaustive search: the nearest earlier twin, or -1

  static int64_t EntityScore(const PreferredAllocator& a, int ea, int eb) {
    const int ga = a.entity_gpu_[static_cast<size_t>(ea)];
    const int gb = a.entity_gpu_[static_cast<size_t>(eb)];
    if (ga < 0 || gb < 0) return 0;
    return a.pair_score_[static_cast<size_t>(ga) * a.topology_.size() + static_cast<size_t>(gb)];
  }

  // Picks d of the entities `cand` (ascending), one device each, for an
  // allocation that already holds the entities `held`; `pool` is every entity
  // still available before this pick (criterion 3 scores what stays of it),
  // `free` the free devices per entity, and `leaves[i]` whether picking
  // cand[i] takes its last device from the pool. Returns the chosen entities,
  // ascending.
  static std::vector<int> Search(const PreferredAllocator& a, const std::vector<int>& cand,
                                 const std::vector<int>& held, const std::vector<int>& pool,
                                 const std::vector<int64_t>& free, const std::vector<char>& leaves,
                                 int d) {
    Impl s;
    s.m = static_cast<int>(cand.size());
    s.d = std::min(d, s.m);
    if (s.d <= 0) return {};
    const auto m = static_cast<size_t>(s.m);
    s.with_must.assign(m, 0);
    s.loss.assign(m, 0);
    s.free.assign(m, 0);
    s.pair.assign(m * m, 0);
    s.pair_lost.assign(m * m, 0);
    for (size_t i = 0; i < m; ++i) {
      const int c = cand[i];
      s.free[i] = free[static_cast<size_t>(c)];
      for (int e : held) {
        if (e != c) s.with_must[i] += EntityScore(a, c, e);
      }
      if (leaves[i]) {
        for (int e : pool) {
          if (e != c) s.loss[i] += EntityScore(a, c, e);
        }
      }
    }
    for (size_t i = 0; i < m; ++i) {
      for (size_t j = 0; j < m; ++j) {
        if (i == j) continue;
        const int64_t score = EntityScore(a, cand[i], cand[j]);
        s.pair[i * m + j] = score;
        if (leaves[i] && leaves[j]) s.pair_lost[i * m + j] = score;
      }
    }
    if (Binomial(s.m, s.d, kExhaustiveLimit) <= kExhaustiveLimit) {
      s.Exhaustive();
    } else {
      s.Heuristic();
    }
    std::vector<int> chosen;
    chosen.reserve(s.best.size());
    for (int i : s.best) chosen.push_back(cand[static_cast<size_t>(i)]);
    return chosen;
  }

  int64_t Pair(int i, int j) const { return pair[Idx(i) * Idx(m) + Idx(j)]; }
  int64_t PairLost(int i, int j) const { return pair_lost[Idx(i) * Idx(m) + Idx(j)]; }
  static size_t Idx(int i) { return static_cast<size_t>(i); }

  // What candidate i adds on its own, before its pairs with other picks.
  Key Alone(int i) const { return {with_must[Idx(i)], -loss[Idx(i)], free[Idx(i)]}; }

  void Offer(const std::vector<int>& sorted_set, const Key& key) {
    if (key > best_key || (key == best_key && sorted_set < best)) {
      best_key = key;
      best = sorted_set;
    }
  }

  // ---- Exhaustive search.

  // Enumerates the combinations depth-first in lexicographic order; only a
  // strictly better score replaces the best, so ties keep the lowest set.
  //
  // When the three parts of the key fit one int64 as links·W1 + rest·W2 +
  // spread (always on real nodes), it works on that single number, otherwise
  // on Key; the order is the same.
  void Exhaustive() {
    FindTwins();
    const std::optional<std::pair<int64_t, int64_t>> weights = PackedWeights();
    if (weights) {
      const auto [w1, w2] = *weights;
      std::vector<int64_t> alone(Idx(m)), pairs(Idx(m) * Idx(m));
      for (int i = 0; i < m; ++i) {
        const Key a = Alone(i);
        alone[Idx(i)] = a.links * w1 + a.rest * w2 + a.spread;
        for (int j = 0; j < m; ++j) {
          pairs[Idx(i) * Idx(m) + Idx(j)] = Pair(i, j) * w1 + PairLost(i, j) * w2;
        }
      }
      best = Enumeration<int64_t>(m, d, prev_twin, pairs).Run(alone);
    } else {
      std::vector<Key> alone(Idx(m)), pairs(Idx(m) * Idx(m));
      for (int i = 0; i < m; ++i) {
        alone[Idx(i)] = Alone(i);
        for (int j = 0; j < m; ++j) pairs[Idx(i) * Idx(m) + Idx(j)] = PairKey(i, j);
      }
      best = Enumeration<Key>(m, d, prev_twin, pairs).Run(alone);
    }
  }

  // W1 and W2 such that links·W1 + rest·W2 + spread orders sets as Key does,
  // for any set of candidates; nullopt when the values could overflow.
  std::optional<std::pair<int64_t, int64_t>> PackedWeights() const {
    int64_t links_max = 0, rest_min = 0, rest_max = 0, spread_max = 0;
    for (int i = 0; i < m; ++i) {
      links_max += with_must[Idx(i)];
      rest_min -= loss[Idx(i)];
      spread_max += free[Idx(i)];
      for (int j = i + 1; j < m; ++j) {
        links_max += Pair(i, j);
        rest_max += PairLost(i, j);
      }
    }
    // spread < w2, and rest·w2 + spread spans less than w1; every partial sum
    // of the search lies in [rest_min·w2, links_max·w1 + w1).
    int64_t w2 = 0, span = 0, w1 = 0, top = 0, bottom = 0;
    if (__builtin_add_overflow(spread_max, 1, &w2) ||
        __builtin_sub_overflow(rest_max, rest_min, &span) ||
        __builtin_add_overflow(span, 1, &span) || __builtin_mul_overflow(span, w2, &w1) ||
        __builtin_mul_overflow(links_max, w1, &top) || __builtin_add_overflow(top, w1, &top) ||
        __builtin_mul_overflow(rest_min, w2, &bottom)) {
      return std::nullopt;
    }
    return std::make_pair(w1, w2);
  }

  // Twins (candidates that relate identically to everything else, like the
  // two GPUs behind one PCIe switch on an NVSwitch board) are interchangeable:
  // a set holding a later twin without the earlier one scores the same as its
  // image with the earlier one, which is lower, so the enumeration only takes
  // each twin class's members in order.
  void FindTwins() {
    prev_twin.assign(Idx(m), -1);
    for (int b = 1; b < m; ++b) {
      for (int a = b - 1; a >= 0; --a) {
        if (Twins(a, b)) {
          prev_twin[Idx(b)] = a;  // the nearest earlier member of b's class
          break;
        }
      }
    }
  }

  bool Twins(int a, int b) const {
    if (with_must[Idx(a)] != with_must[Idx(b)] || loss[Idx(a)] != loss[Idx(b)] ||
        free[Idx(a)] != free[Idx(b)]) {
      return false;
    }
    for (int x = 0; x < m; ++x) {
      if (x == a || x == b) continue;
      if (Pair(a, x) != Pair(b, x) || PairLost(a, x) != PairLost(b, x)) return false;
    }
    return true;
  }

  // The depth-first enumeration over a score type T (int64_t or Key).
  // gains[depth][c] holds what candidate c would add to the picks so far, so a
  // leaf costs one addition and a node one update per later candidate.
  template <typename T>
  class Enumeration {
   public:
    Enumeration(int m, int d, const std::vector<int>& prev_twin, const std::vector<T>& pairs)
        : m_(m), d_(d), prev_twin_(prev_twin), pairs_(pairs) {}

    std::vector<int> Run(const std::vector<T>& alone) {
      gains_.assign(Idx(d_) * Idx(m_), T{});
      std::copy(alone.begin(), alone.end(), gains_.begin());
      current_.assign(Idx(d_), -1);
      picked_.assign(Idx(m_), 0);
      Dfs(0, 0, T{});
      return best_;
    }

   private:
    bool Allowed(int i) const {
      const int twin = prev_twin_[Idx(i)];
      return twin < 0 || picked_[Idx(twin)];
    }

    void Dfs(int start, int depth, const T& score) {
      const T* gain = &gains_[Idx(depth) * Idx(m_)];
      const int last = m_ - (d_ - depth);  // the highest index that leaves room
      if (depth == d_ - 1) {
        for (int i = start; i <= last; ++i) {
          if (!Allowed(i)) continue;
          const T total = score + gain[i];
          if (best_.empty() || total > best_score_) {
            best_score_ = total;
            current_[Idx(depth)] = i;
            best_ = current_;
          }
        }
        return;
      }
      T* next = &gains_[Idx(depth + 1) * Idx(m_)];
      for (int i = start; i <= last; ++i) {
        if (!Allowed(i)) continue;
        const T* row = &pairs_[Idx(i) * Idx(m_)];
        for (int c = i + 1; c < m_; ++c) next[c] = gain[c] + row[c];
        current_[Idx(depth)] = i;
        picked_[Idx(i)] = 1;
        Dfs(i + 1, depth + 1, score + gain[i]);
        picked_[Idx(i)] = 0;
      }
    }

    const int m_, d_;
    const std::vector<int>& prev_twin_;
    const std::vector<T>& pairs_;
    std::vector<T> gains_;  // d×m
    std::vector<int> current_;
    std::vector<char> picked_;
    std::vector<int> best_;
    T best_score_{};
  };

  // ---- Heuristic search, for more combinations than Exhaustive() takes.

  // A set being built or improved, with every candidate's pair-score sums to
  // it kept current, so adding, removing or swapping is scored in O(1).
  struct Solution {
    std::vector<int> set;
    std::vector<int64_t> link;       // Σ pair(x, y) over y in set
    std::vector<int64_t> link_lost;  // Σ pair_lost(x, y) over y in set
    std::vector<char> in;
    Key key;
  };

  Solution Empty() const {
    Solution s;
    s.link.assign(Idx(m), 0);
    s.link_lost.assign(Idx(m), 0);
    s.in.assign(Idx(m), 0);
    return s;
  }
  Key PairKey(int x, int y) const { return {Pair(x, y), PairLost(x, y), 0}; }
  // What x adds to the set (x outside) or what removing it takes (x inside).
  Key Contribution(const Solution& s, int x) const {
    return Alone(x) + Key{s.link[Idx(x)], s.link_lost[Idx(x)], 0};
  }
  void Add(Solution& s, int x) const {
    s.key = s.key + Contribution(s, x);
    s.in[Idx(x)] = 1;
    s.set.push_back(x);
    for (int y = 0; y < m; ++y) {
      s.link[Idx(y)] += Pair(x, y);
      s.link_lost[Idx(y)] += PairLost(x, y);
    }
  }
  // Puts c in place of set[pos]; the caller sets the key.
  void Replace(Solution& s, size_t pos, int c) const {
    const int t = s.set[pos];
    s.in[Idx(t)] = 0;
    s.in[Idx(c)] = 1;
    for (int y = 0; y < m; ++y) {
      s.link[Idx(y)] += Pair(c, y) - Pair(t, y);
      s.link_lost[Idx(y)] += PairLost(c, y) - PairLost(t, y);
    }
    s.set[pos] = c;
  }

  // Greedy construction from several seeds (the best-connected candidates
  // first), each improved by single and double swaps; the best result wins,
  // ties keeping the lowest set. The work budget bounds the latency on large
  // nodes: seeds stop at half of it, double swaps at all of it (one seed and
  // its single swaps always run).
  void Heuristic() {
    std::vector<int64_t> potential(Idx(m));
    for (int i = 0; i < m; ++i) {
      int64_t p = with_must[Idx(i)];
      for (int j = 0; j < m; ++j) p += Pair(i, j);
      potential[Idx(i)] = p;
    }
    std::vector<int> order(Idx(m));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return potential[Idx(a)] > potential[Idx(b)]; });

    int64_t work = 0;
    for (int seed = 0; seed < m && (seed == 0 || work < kGreedyBudget / 2); ++seed) {
      Solution s = Empty();
      Add(s, order[Idx(seed)]);
      while (static_cast<int>(s.set.size()) < d) {
        // The candidate that adds the most to the set so far (lowest on ties).
        Key best_gain = kWorstKey;
        int pick = -1;
        for (int x = 0; x < m; ++x) {
          if (s.in[Idx(x)]) continue;
          const Key gain = Contribution(s, x);
          if (gain > best_gain) {
            best_gain = gain;
            pick = x;
          }
        }
        Add(s, pick);
        work += m;
      }
      while (SingleSwap(s, work) || DoubleSwap(s, work)) {
      }
      std::sort(s.set.begin(), s.set.end());
      Offer(s.set, s.key);
    }
  }

  // Makes the best swap of one member for one non-member if it strictly
  // improves the key; false when none does.
  bool SingleSwap(Solution& s, int64_t& work) const {
    Key best_swap = s.key;
    size_t out = 0;
    int add = -1;
    for (size_t p = 0; p < s.set.size(); ++p) {
      const int t = s.set[p];
      const Key without = s.key - Contribution(s, t);
      for (int c = 0; c < m; ++c) {
        if (s.in[Idx(c)]) continue;
        const Key with = without + Contribution(s, c) - PairKey(c, t);
        if (with > best_swap) {
          best_swap = with;
          out = p;
          add = c;
        }
      }
    }
    work += static_cast<int64_t>(s.set.size()) * m;
    if (add < 0) return false;
    Replace(s, out, add);
    s.key = best_swap;
    return true;
  }

  // The same with two members for two non-members, when the budget allows a
  // full pass (it escapes traps such as a pair split across PCIe switches).
  bool DoubleSwap(Solution& s, int64_t& work) const {
    const auto k = static_cast<int64_t>(s.set.size());
    const int64_t cost = k * (k - 1) / 2 * (m - k) * (m - k - 1) / 2 + k * k * m;
    if (k < 2 || m - k < 2 || work + cost > kGreedyBudget) return false;
    work += cost;
    std::vector<int> outside;
    for (int c = 0; c < m; ++c) {
      if (!s.in[Idx(c)]) outside.push_back(c);
    }
    std::vector<Key> base(outside.size());
    Key best_swap = s.key;
    size_t out1 = 0, out2 = 0;
    int add1 = -1, add2 = -1;
    for (size_t p1 = 0; p1 < s.set.size(); ++p1) {
      for (size_t p2 = p1 + 1; p2 < s.set.size(); ++p2) {
        const int t1 = s.set[p1], t2 = s.set[p2];
        // Removing both counts their own pair twice: add it back once.
        const Key without = s.key - Contribution(s, t1) - Contribution(s, t2) + PairKey(t1, t2);
        for (size_t i = 0; i < outside.size(); ++i) {
          const int c = outside[i];
          base[i] = Contribution(s, c) - PairKey(c, t1) - PairKey(c, t2);
        }
        for (size_t i = 0; i < outside.size(); ++i) {
          for (size_t j = i + 1; j < outside.size(); ++j) {
            const Key with = without + base[i] + base[j] + PairKey(outside[i], outside[j]);
            if (with > best_swap) {
              best_swap = with;
              out1 = p1;
              out2 = p2;
              add1 = outside[i];
              add2 = outside[j];
            }
          }
        }
      }
    }
    if (add1 < 0) return false;
    Replace(s, out1, add1);
    Replace(s, out2, add2);
    s.key = best_swap;
    return true;
  }
};

PreferredAllocator::PreferredAllocator(gpu::Topology topology,
                                       std::vector<AllocatableDevice> devices, ReplicaPolicy policy)
    : topology_(std::move(topology)), devices_(std::move(devices)), policy_(policy) {
  const size_t n = topology_.size();
  // Larger than the PCIe scores of all pairs together, so one NVLink lane
  // outweighs any PCIe difference in a sum over pairs.
  pcie_scale_ = kMaxPcieScore * static_cast<int64_t>(n * (n > 0 ? n - 1 : 0) / 2) + 1;
  pair_score_.assign(n * n, 0);
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = a + 1; b < n; ++b) {
      // Read both directions so a lopsided topology still scores symmetrically.
      const gpu::GpuLink& ab = topology_.at(a, b);
      const gpu::GpuLink& ba = topology_.at(b, a);
      const int64_t lanes = std::max({ab.nvlinks, ba.nvlinks, 0});
      const int64_t pcie = std::max(PcieScore(ab.pcie), PcieScore(ba.pcie));
      const int64_t score = lanes * pcie_scale_ + pcie;
      pair_score_[a * n + b] = score;
      pair_score_[b * n + a] = score;
    }
  }

  index_.reserve(devices_.size());
  for (size_t i = 0; i < devices_.size(); ++i) {
    index_.emplace_back(devices_[i].id, static_cast<int>(i));
  }
  std::sort(index_.begin(), index_.end());
  // A repeated ID in the table resolves to its first position.
  index_.erase(std::unique(index_.begin(), index_.end(),
                           [](const auto& x, const auto& y) { return x.first == y.first; }),
               index_.end());

  std::map<int, int> entity_by_gpu;  // gpu value → entity
  entity_of_.reserve(devices_.size());
  for (const AllocatableDevice& dev : devices_) {
    const int fresh = static_cast<int>(entity_gpu_.size());
    const int e = dev.gpu >= 0 ? entity_by_gpu.emplace(dev.gpu, fresh).first->second : fresh;
    if (e == fresh) {
      entity_gpu_.push_back(dev.gpu >= 0 && static_cast<size_t>(dev.gpu) < n ? dev.gpu : -1);
    }
    entity_of_.push_back(e);
  }
}

std::vector<std::string> PreferredAllocator::Choose(const std::vector<std::string>& available,
                                                    const std::vector<std::string>& must_include,
                                                    int size) const {
  auto find = [this](std::string_view id) {
    auto it = std::lower_bound(
        index_.begin(), index_.end(), id,
        [](const std::pair<std::string, int>& e, std::string_view v) { return e.first < v; });
    return it != index_.end() && it->first == id ? it->second : -1;
  };
  enum : uint8_t { kNone, kMust, kCandidate };
  const size_t nd = devices_.size();
  std::vector<uint8_t> state(nd, kNone);

  // must_include: known devices in device order, then unknown IDs sorted.
  std::vector<int> must_known;
  std::vector<std::string> must_unknown;
  for (const std::string& id : must_include) {
    const int pos = find(id);
    if (pos < 0) {
      must_unknown.push_back(id);
    } else if (state[static_cast<size_t>(pos)] == kNone) {
      state[static_cast<size_t>(pos)] = kMust;
      must_known.push_back(pos);
    }
  }
  std::sort(must_known.begin(), must_known.end());
  std::sort(must_unknown.begin(), must_unknown.end());
  must_unknown.erase(std::unique(must_unknown.begin(), must_unknown.end()), must_unknown.end());
  // The answer holds must_include and at most every device: never reserve
  // what `size` asks for (a caller's number) beyond that.
  const size_t must = must_known.size() + must_unknown.size();
  std::vector<std::string> result;
  result.reserve(std::min(must + nd, std::max(must, static_cast<size_t>(std::max(size, 0)))));
  for (int pos : must_known) result.push_back(devices_[static_cast<size_t>(pos)].id);
  for (std::string& id : must_unknown) result.push_back(std::move(id));
  if (size <= 0 || result.size() >= static_cast<size_t>(size)) return result;
  const int64_t wanted = size - static_cast<int64_t>(result.size());

  for (const std::string& id : available) {
    const int pos = find(id);
    if (pos >= 0 && state[static_cast<size_t>(pos)] == kNone) {
      state[static_cast<size_t>(pos)] = kCandidate;
    }
  }

  const size_t ne = entity_gpu_.size();
  std::vector<int64_t> free(ne, 0);
  std::vector<char> has_must(ne, 0);
  int64_t total_free = 0;
  for (size_t pos = 0; pos < nd; ++pos) {
    const auto e = static_cast<size_t>(entity_of_[pos]);
    if (state[pos] == kMust) has_must[e] = 1;
    if (state[pos] == kCandidate) {
      ++free[e];
      ++total_free;
    }
  }

  // How many devices to take from each entity.
  std::vector<int64_t> take(ne, 0);
  std::vector<int> avail;    // entities with a free device
  std::vector<int> must_es;  // entities holding must_include devices
  for (size_t e = 0; e < ne; ++e) {
    if (free[e] > 0) avail.push_back(static_cast<int>(e));
    if (has_must[e]) must_es.push_back(static_cast<int>(e));
  }
  if (total_free <= wanted) {
    take = free;  // fewer usable than asked: all of them
  } else if (policy_ == ReplicaPolicy::kPacked) {
    TakePacked(free, has_must, avail, must_es, wanted, take);
  } else {
    TakeDistributed(free, has_must, avail, must_es, wanted, take);
  }

  // Each entity's lowest free devices, in device order.
  for (size_t pos = 0; pos < nd; ++pos) {
    if (state[pos] != kCandidate) continue;
    int64_t& t = take[static_cast<size_t>(entity_of_[pos])];
    if (t > 0) {
      result.push_back(devices_[pos].id);
      --t;
    }
  }
  return result;
}

void PreferredAllocator::TakeDistributed(const std::vector<int64_t>& free,
                                         const std::vector<char>& has_must,
                                         const std::vector<int>& avail,
                                         const std::vector<int>& must_es, int64_t wanted,
                                         std::vector<int64_t>& take) const {
  const size_t ne = free.size();
  // Step 1: one device on each of up to `wanted` distinct GPUs that hold no
  // must_include device: the GPUs with the most free devices (the least
  // loaded) first, as NVIDIA's distributed allocation; the search chooses
  // only among GPUs with equal free counts where not all of them fit, the
  // GPUs taken for having more counting as already held.
  std::vector<int> others;
  std::vector<int64_t> counts;
  for (int e : avail) {
    if (has_must[static_cast<size_t>(e)]) continue;
    others.push_back(e);
    counts.push_back(free[static_cast<size_t>(e)]);
  }
  const int d = static_cast<int>(std::min<int64_t>(wanted, static_cast<int64_t>(others.size())));
  if (d > 0) {
    std::nth_element(counts.begin(), counts.begin() + (d - 1), counts.end(), std::greater<>());
    const int64_t tier = counts[static_cast<size_t>(d - 1)];
    std::vector<int> held = must_es;
    std::vector<int> cand;
    std::vector<char> leaves;
    for (int e : others) {
      const int64_t f = free[static_cast<size_t>(e)];
      if (f > tier) {
        take[static_cast<size_t>(e)] = 1;
        held.push_back(e);
      } else if (f == tier) {
        cand.push_back(e);
        leaves.push_back(f == 1);
      }
    }
    const int rest = d - static_cast<int>(held.size() - must_es.size());
    for (int e : Impl::Search(*this, cand, held, avail, free, leaves, rest)) {
      take[static_cast<size_t>(e)] = 1;
    }
  }
  // Step 2: more devices than distinct GPUs: reuse GPUs, each extra device
  // from the GPU with the most free devices left (lowest entity on ties).
  for (int64_t extra = wanted - d; extra > 0; --extra) {
    size_t pick = ne;
    for (size_t e = 0; e < ne; ++e) {
      const int64_t left = free[e] - take[e];
      if (left > 0 && (pick == ne || left > free[pick] - take[pick])) pick = e;
    }
    if (pick == ne) break;
    ++take[pick];
  }
}

// Walks the GPUs by free count, fewest first. A whole group of equal free
// counts that fits is emptied; in the group where the request ends, the
// search picks the GPUs to empty (they leave the pool: criterion 3), then,
// when a remainder is left, the one GPU that gives it, best linked to all
// taken so far. With one device per GPU this is a single group and a single
// search, the same as TakeDistributed's step 1.
void PreferredAllocator::TakePacked(const std::vector<int64_t>& free,
                                    const std::vector<char>& has_must,
                                    const std::vector<int>& avail, const std::vector<int>& must_es,
                                    int64_t wanted, std::vector<int64_t>& take) const {
  std::vector<int64_t> counts;
  for (int e : avail) counts.push_back(free[static_cast<size_t>(e)]);
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());

  std::vector<int> held = must_es;  // GPUs in the allocation so far
  std::vector<char> in_held = has_must;
  std::vector<int> pool = avail;  // GPUs still available
  auto hold = [&](int e) {
    if (!in_held[static_cast<size_t>(e)]) {
      in_held[static_cast<size_t>(e)] = 1;
      held.push_back(e);
    }
  };
  int64_t left = wanted;
  for (const int64_t c : counts) {
    if (left <= 0) break;
    std::vector<int> group;
    for (int e : pool) {
      if (free[static_cast<size_t>(e)] == c) group.push_back(e);
    }
    const auto g = static_cast<int64_t>(group.size());
    if (g * c <= left) {  // the whole group
      for (int e : group) {
        take[static_cast<size_t>(e)] = c;
        hold(e);
      }
      left -= g * c;
      std::erase_if(pool, [&](int e) { return free[static_cast<size_t>(e)] == c; });
      continue;
    }
    // Empty `full` GPUs of the group, then `rest` devices from one more.
    const int64_t full = left / c;
    const int64_t rest = left % c;
    if (full > 0) {
      const std::vector<char> leaves(group.size(), 1);
      const std::vector<int> emptied =
          Impl::Search(*this, group, held, pool, free, leaves, static_cast<int>(full));
      for (int e : emptied) {
        take[static_cast<size_t>(e)] = c;
        hold(e);
      }
      std::erase_if(group, [&](int e) { return take[static_cast<size_t>(e)] > 0; });
      std::erase_if(pool, [&](int e) { return take[static_cast<size_t>(e)] > 0; });
    }
    if (rest > 0) {
      const std::vector<char> leaves(group.size(), 0);  // it keeps free devices
      for (int e : Impl::Search(*this, group, held, pool, free, leaves, 1)) {
        take[static_cast<size_t>(e)] = rest;
      }
    }
    left = 0;
  }
}

}  // namespace danqing::deviceplugin
