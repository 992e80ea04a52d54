// Chooses a poem for a photo: one whose themes match the perceived ones,
// varied per photo (seeded by the image hash) and not repeated within a
// short window of recent choices (per process).
//
// Thread-safety: Choose() may be called from many threads at once.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "verse/corpus.h"

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
};

class VerseSelector {
 public:
  // `corpus` must outlive the selector.
  explicit VerseSelector(const Corpus& corpus, SelectorOptions options = {});

  // A poem for these themes; the same themes and seed give the same poem
  // unless it was chosen within the window.
  const Poem& Choose(const std::vector<ThemeWeight>& themes, uint64_t seed);

  // How well a poem matches: each of its themes adds the perceived weight,
  // discounted by the
  // theme's rank in the poem's tag list (see rank_discount); a quatrain's sum
  // is multiplied by quatrain_bonus.
  static double Match(const Poem& poem, const std::vector<ThemeWeight>& themes,
                      const SelectorOptions& options = {});

 private:
  const Corpus& corpus_;
  const SelectorOptions options_;
  std::mutex mu_;
  std::deque<int> recent_;  // poem indices, guarded by mu_
};

}  // namespace danqing::verse
