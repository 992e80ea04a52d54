#include "verse/selector.h"

#include <algorithm>

namespace danqing::verse {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

VerseSelector::VerseSelector(const Corpus& corpus, SelectorOptions options)
    : corpus_(corpus), options_(options) {}

double VerseSelector::Match(const Poem& poem, const std::vector<ThemeWeight>& themes,
                            const SelectorOptions& options) {
  double score = 0;
  for (size_t i = 0; i < poem.themes.size(); ++i) {
    for (const auto& t : themes) {
      if (t.theme != poem.themes[i]) continue;
      score += t.weight / (1.0 + options.rank_discount * static_cast<double>(i));
    }
  }
  if (poem.lines.size() == 4) score *= options.quatrain_bonus;
  return score;
}

const Poem& VerseSelector::Choose(const std::vector<ThemeWeight>& themes, uint64_t seed) {
  const auto& poems = corpus_.poems();
  std::vector<std::pair<double, int>> scored;
  scored.reserve(poems.size());
  for (size_t i = 0; i < poems.size(); ++i) {
    scored.emplace_back(Match(poems[i], themes, options_), static_cast<int>(i));
  }
  // Best first; ties keep corpus order (famous poems first).
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });

  std::lock_guard<std::mutex> lock(mu_);
  const auto recently = [&](int idx) {
    return std::find(recent_.begin(), recent_.end(), idx) != recent_.end();
  };
  std::vector<int> candidates;
  double best = -1;
  for (const auto& [score, idx] : scored) {
    if (recently(idx)) continue;
    if (best < 0) best = score;
    if (score < best * options_.near_best || candidates.size() >= options_.max_candidates) break;
    candidates.push_back(idx);
  }
  int chosen =
      candidates.empty() ? scored.front().second : candidates[SplitMix64(seed) % candidates.size()];
  recent_.push_back(chosen);
  while (recent_.size() > options_.no_repeat_window) recent_.pop_front();
  return poems[static_cast<size_t>(chosen)];
}

}  // namespace danqing::verse
