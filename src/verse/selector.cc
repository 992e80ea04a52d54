#include "verse/selector.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace danqing::verse {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

VerseSelector::VerseSelector(const Corpus& corpus, SelectorOptions options,
                             std::shared_ptr<RecentChoices> shared)
    : corpus_(corpus), options_(options), shared_(std::move(shared)) {
  // Every theme named once, as a number: Choose compares numbers, not
  // strings, for each poem (0.6 of the 1.4 ms a choice took on the bundled
  // corpus; docs/benchmarks.md, "fourth steps").
  std::unordered_map<std::string, int> ids;
  poem_themes_.reserve(corpus_.poems().size());
  for (const Poem& poem : corpus_.poems()) {
    std::vector<int> themes;
    themes.reserve(poem.themes.size());
    for (const std::string& t : poem.themes) {
      themes.push_back(ids.emplace(t, static_cast<int>(ids.size())).first->second);
    }
    poem_themes_.push_back(std::move(themes));
  }
  theme_ids_ = std::move(ids);
}

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

std::vector<int> VerseSelector::Candidates(const Scored& scored, uint64_t seed,
                                           const std::function<bool(int)>& excluded) const {
  std::vector<int> candidates;
  double best = -1;
  for (const auto& [score, idx] : scored) {
    if (excluded(idx)) continue;
    if (best < 0) best = score;
    if (score < best * options_.near_best || candidates.size() >= options_.max_candidates) break;
    candidates.push_back(idx);
  }
  if (!candidates.empty()) {
    const auto first = static_cast<std::ptrdiff_t>(SplitMix64(seed) % candidates.size());
    std::rotate(candidates.begin(), candidates.begin() + first, candidates.end());
  }
  return candidates;
}

Result<int> VerseSelector::ChooseShared(const Scored& scored, uint64_t seed) {
  const auto& poems = corpus_.poems();
  // The choice, then the other candidates in turn, go to Record(): it keeps
  // the first that no other selector recorded since Recent() was read. Only
  // when every one was (a burst on a small corpus) is the window read again.
  for (int attempt = 0; attempt < 4; ++attempt) {
    auto recent = shared_->Recent(options_.no_repeat_window);
    if (!recent.ok()) return recent.status();
    const std::unordered_set<int> taken(recent->begin(), recent->end());  // poem ids
    const std::vector<int> candidates = Candidates(
        scored, seed, [&](int idx) { return taken.count(poems[static_cast<size_t>(idx)].id) > 0; });
    if (candidates.empty()) break;  // every poem that fits is in the window
    std::vector<int> ids;
    for (int idx : candidates) ids.push_back(poems[static_cast<size_t>(idx)].id);
    auto recorded = shared_->Record(ids, options_.no_repeat_window);
    if (!recorded.ok()) return recorded.status();
    if (*recorded >= 0 && static_cast<size_t>(*recorded) < candidates.size()) {
      return candidates[static_cast<size_t>(*recorded)];
    }
  }
  return scored.front().second;  // a repeat, as on the local window
}

void VerseSelector::RememberLocally(int idx) {
  std::lock_guard<std::mutex> lock(mu_);
  recent_.push_back(idx);
  while (recent_.size() > options_.no_repeat_window) recent_.pop_front();
}

void VerseSelector::SharedFailed(const Status& why) {
  shared_fallbacks_.fetch_add(1);
  std::lock_guard<std::mutex> lock(mu_);
  shared_retry_at_ = std::chrono::steady_clock::now() + options_.shared_retry;
  if (!shared_down_) {
    spdlog::warn(
        "verse: the shared no-repeat window ({}) failed: {}; choosing on this process's "
        "window until it answers",
        shared_->Name(), why.message());
  }
  shared_down_ = true;
}

const Poem& VerseSelector::Choose(const std::vector<ThemeWeight>& themes, uint64_t seed) {
  const auto& poems = corpus_.poems();
  // The perceived themes as the corpus numbers them (a theme no poem carries
  // adds nothing, as in Match).
  std::vector<std::pair<int, double>> wanted;
  for (const auto& t : themes) {
    if (auto it = theme_ids_.find(t.theme); it != theme_ids_.end()) {
      wanted.emplace_back(it->second, t.weight);
    }
  }
  // Match's score, summed in the same order (the same doubles).
  Scored scored, rest;
  scored.reserve(poems.size());
  for (size_t i = 0; i < poems.size(); ++i) {
    const std::vector<int>& ids = poem_themes_[i];
    double score = 0;
    for (size_t r = 0; r < ids.size(); ++r) {
      for (const auto& [id, weight] : wanted) {
        if (id == ids[r]) score += weight / (1.0 + options_.rank_discount * static_cast<double>(r));
      }
    }
    if (poems[i].lines.size() == 4) score *= options_.quatrain_bonus;
    (score > 0 ? scored : rest).emplace_back(score, static_cast<int>(i));
  }
  // Best first; ties keep corpus order (famous poems first). Most poems
  // share no theme with the photo: only those that do are sorted, the
  // others follow in corpus order (sorted too if a weight was negative).
  const auto better = [](const auto& a, const auto& b) { return a.first > b.first; };
  std::stable_sort(scored.begin(), scored.end(), better);
  if (std::any_of(rest.begin(), rest.end(), [](const auto& e) { return e.first != 0; })) {
    std::stable_sort(rest.begin(), rest.end(), better);
  }
  scored.insert(scored.end(), rest.begin(), rest.end());

  if (shared_ && options_.no_repeat_window > 0) {
    bool try_shared;
    {
      std::lock_guard<std::mutex> lock(mu_);
      try_shared = !shared_down_ || std::chrono::steady_clock::now() >= shared_retry_at_;
    }
    if (try_shared) {
      auto chosen = ChooseShared(scored, seed);
      if (chosen.ok()) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (shared_down_) spdlog::info("verse: the shared no-repeat window answers again");
          shared_down_ = false;
        }
        RememberLocally(*chosen);
        return poems[static_cast<size_t>(*chosen)];
      }
      SharedFailed(chosen.status());
    } else {
      shared_fallbacks_.fetch_add(1);
    }
  }

  std::lock_guard<std::mutex> lock(mu_);
  const std::vector<int> candidates = Candidates(scored, seed, [&](int idx) {
    return std::find(recent_.begin(), recent_.end(), idx) != recent_.end();
  });
  const int chosen = candidates.empty() ? scored.front().second : candidates.front();
  recent_.push_back(chosen);
  while (recent_.size() > options_.no_repeat_window) recent_.pop_front();
  return poems[static_cast<size_t>(chosen)];
}

}  // namespace danqing::verse
