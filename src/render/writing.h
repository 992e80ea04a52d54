// The writing rhythm (issue 28): when the brush lays down each dab, so that
// the passes can record when each pixel was first inked (WritingPlan in
// passes.h) and a player can replay the inscription stroke by stroke.
//
// The brush moves along a stroke at a speed proportional to the character's
// cell (faster from kai to cao), lifts between strokes (a pause plus the way
// through the air), pauses between characters, longer between columns (rows)
// and when it is dipped in ink again; the seal is stamped last. A quatrain
// takes about 6 to 12 s. Times are milliseconds in 16 bits: a long text whose
// rhythm would run past kMaxWritingMs is played faster to fit.
//
// Thread-safety: pure functions over their arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "render/passes.h"
#include "render/renderer.h"

namespace danqing::render {

// The last write time a plane can hold (kNotWritten is 0xFFFF).
inline constexpr uint32_t kMaxWritingMs = 60000;

// One written character's dabs in the dab list: [begin, link) its strokes,
// [link, end) the 游丝 that joins it to the previous character (drawn before
// it, though appended after it).
struct WrittenSpan {
  size_t begin = 0, link = 0, end = 0;
  float cell = 0;       // cell size, canvas px
  int run = 0;          // column (vertical) or row (horizontal)
  int role = 0;         // 0 poem, 1 title, 2 signature/date
  bool reload = false;  // the brush was dipped in ink before this character
};

struct WritingSchedule {
  std::vector<uint16_t> dab_ms;  // one per dab; dabs before the first character (trees): 0
  uint32_t seal_ms = 0;          // when the seal is stamped
  uint32_t end_ms = 0;           // the seal plus a short hold: the length of the writing
};

// The schedule for `dabs`, of which `spans` are the characters in writing
// order (non-overlapping, increasing). Dabs outside every span are part of
// the painting (time 0).
WritingSchedule ScheduleWriting(const std::vector<Dab>& dabs, const std::vector<WrittenSpan>& spans,
                                Style style);

// The wet halo's reach beyond a dab's ink, canvas px, for a render whose wet
// plane diffuses `diffuse_iterations` steps at half resolution.
int WritingHaloPx(int diffuse_iterations);

// The capsules of the time plane (passes.h, WriteSegment) for `dabs` laid
// down at `dab_ms`: consecutive dabs of one stroke (same phase, time not
// going back) merge while the capsule stays short (about its own radius) and
// every merged dab's footprint stays inside it. A dab's footprint is the
// ink's reach, r * 1.1 + 1, plus halo_px when it carries water, plus 2 px for
// the 2x2 block of a plane pixel; in plane pixels, half that.
std::vector<WriteSegment> BuildWriteSegments(const std::vector<Dab>& dabs,
                                             const std::vector<uint16_t>& dab_ms, int halo_px);

}  // namespace danqing::render
