// The no-repeat window of a VerseSelector, shared by several selectors: every
// replica of the service behind one Redis (src/service/redis_job_store.h,
// NewRedisRecentChoices). src/verse knows only this interface.
//
// Thread-safety: implementations are called from many threads at once.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/status.h"

namespace danqing::verse {

class RecentChoices {
 public:
  virtual ~RecentChoices() = default;
  // The ids (Poem::id) of the poems chosen most recently, newest first, at
  // most `window`. UNAVAILABLE when the shared window cannot be read.
  virtual Result<std::vector<int>> Recent(size_t window) = 0;
  // Records as the newest choice the first of `poem_ids` (in order of
  // preference) that is not among the newest `window` (other selectors may
  // have chosen some since Recent()), at once for every selector: its
  // position in `poem_ids`, or -1 when every one was there. Keeps at most
  // `window` ids.
  virtual Result<int> Record(const std::vector<int>& poem_ids, size_t window) = 0;
  // Where the window is kept, for logs ("redis 127.0.0.1:6379 danqing:verse:recent").
  virtual std::string Name() const = 0;
};

}  // namespace danqing::verse
