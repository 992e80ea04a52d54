// Chooses a poem for a photo: one whose themes match the perceived ones,
// varied per photo (seeded by the image hash) and not repeated within a
// short window of recent choices: this process's own, or, given a
// RecentChoices, one window shared with other selectors (every replica of the
// service). When the shared window cannot be read or written the choice is
// made on the local window (every choice is recorded there too), logged when
// it starts and counted (shared_fallbacks()); the shared one is tried again
// after SelectorOptions::shared_retry.
//
// Thread-safety: Choose() may be called from many threads at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "verse/corpus.h"
#include "verse/recent_choices.h"

namespace danqing::verse {

struct ThemeWeight {
  std::string theme;
  double weight = 0;  // 0..1, from the perceiver
};

struct SelectorOptions {
  size_t no_repeat_window = 64;  // this many recent choices are not chosen again
  double near_best = 0.75;       // candidates score at least this fraction of the best
  size_t max_candidates = 40;    // at most this many candidates to vary among
  // A poem's i-th theme (0 = strongest) counts 1 / (1 + rank_discount * i):
  // mild, so a poem that carries several of the photo's cues beats one that
  // carries the strongest alone (perception is noisy; covering its top cues
  // fits more often).
  double rank_discount = 0.25;
  // A quatrain (4 lines) scores this factor more: the composition breathes.
  double quatrain_bonus = 1.3;
  // After the shared window failed, choices use the local one for this long
  // before it is tried again (a lost Redis costs an inscription no timeout).
  std::chrono::milliseconds shared_retry{1000};
};

class VerseSelector {
 public:
  // `corpus` must outlive the selector. `shared` (may be null: the local
  // window only) is the window shared with other selectors.
  explicit VerseSelector(const Corpus& corpus, SelectorOptions options = {},
                         std::shared_ptr<RecentChoices> shared = nullptr);

  // A poem for these themes; the same themes and seed give the same poem
  // unless it was chosen within the window.
  const Poem& Choose(const std::vector<ThemeWeight>& themes, uint64_t seed);

  // How well a poem matches: each of its themes adds the perceived weight,
  // discounted by the
  // theme's rank in the poem's tag list (see rank_discount); a quatrain's sum
  // is multiplied by quatrain_bonus.
  static double Match(const Poem& poem, const std::vector<ThemeWeight>& themes,
                      const SelectorOptions& options = {});

  // Choices made on the local window because the shared one failed.
  uint64_t shared_fallbacks() const { return shared_fallbacks_.load(); }

 private:
  using Scored = std::vector<std::pair<double, int>>;  // (score, poem index), best first
  // The poems to vary among (indices; near the best of those `excluded`
  // leaves), the seed's choice first and the others after it in turn; empty
  // when every poem is excluded.
  std::vector<int> Candidates(const Scored& scored, uint64_t seed,
                              const std::function<bool(int)>& excluded) const;
  // On the shared window: the index chosen and recorded there, or an error
  // (the caller falls back to the local window).
  Result<int> ChooseShared(const Scored& scored, uint64_t seed);
  void RememberLocally(int idx);  // takes mu_
  void SharedFailed(const Status& why);

  const Corpus& corpus_;
  const SelectorOptions options_;
  std::unordered_map<std::string, int> theme_ids_;  // every theme of the corpus, numbered
  std::vector<std::vector<int>> poem_themes_;       // per poem, its themes' numbers in order
  const std::shared_ptr<RecentChoices> shared_;
  std::mutex mu_;
  std::deque<int> recent_;  // poem indices, guarded by mu_
  std::chrono::steady_clock::time_point shared_retry_at_{};  // guarded by mu_
  bool shared_down_ = false;                                 // guarded by mu_
  std::atomic<uint64_t> shared_fallbacks_{0};
};

}  // namespace danqing::verse
