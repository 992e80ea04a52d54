// Brush planning: turns a character's stroke medians (or a font raster) into
// the dab list the passes stamp. Cheap and sequential (per character); the
// pixel work is in the passes (passes.h).
//
// Thread-safety: pure functions over their arguments.
#pragma once

#include <vector>

#include "render/passes.h"
#include "render/random.h"
#include "render/stroke_data.h"

namespace danqing::render {

// 1024-box (y down) -> canvas pixels: x' = m0 x + m1 y + m2, y' = m3 x + m4 y + m5.
struct Affine {
  float m[6] = {1, 0, 0, 0, 1, 0};
  void Apply(float x, float y, float* ox, float* oy) const {
    *ox = m[0] * x + m[1] * y + m[2];
    *oy = m[3] * x + m[4] * y + m[5];
  }
  float Scale() const;  // sqrt(|det|)
};

struct BrushStyle {
  float trim = 0;            // fraction of each stroke's length dropped at both ends
  int smooth = 0;            // smoothing passes over the dense path (rounds corners)
  float width = 1.0f;        // width multiplier
  float press = 0.18f;       // 起笔 press at the start of a stroke
  float speed_thin = 0.12f;  // how much speed thins the middle of long strokes
  float dry_gain = 1.0f;     // how fast the ink runs dry into flying white
  float hairline = 0;        // probability of a 游丝 between consecutive strokes
  float link_chars = 0;      // probability of a link into the next character of a column
  float wobble = 0;          // random displacement of median points, box units
  float entry = 0;           // 起笔: how far behind/beside the start the tip lands, in half-widths
};

// The brush's ink load; drained by stroke length, reloaded by the caller.
struct InkState {
  float load = 1.0f;
};

struct PenPoint {
  bool valid = false;
  float x = 0, y = 0, dx = 0, dy = 0;  // position and unit direction, canvas px
};

// Appends dabs for every stroke of `ch`. `first`/`last` receive the pen at the
// start of the first stroke and the end of the last one (for links).
void PlanCharacter(const CharStrokes& ch, const Affine& xf, const BrushStyle& style, float cell,
                   Rng& rng, InkState* ink, std::vector<Dab>* dabs, PenPoint* first, PenPoint* last);

// A thin 游丝 hairline from `from` (leaving along its direction) to `to`.
void PlanHairline(const PenPoint& from, const PenPoint& to, float cell, Rng& rng, const InkState& ink,
                  std::vector<Dab>* dabs);

// A font raster (res x res over the 1024 box) inked with the same brush texture.
void PlanRaster(const std::vector<uint8_t>& raster, int res, const Affine& xf, Rng& rng,
                InkState* ink, float cell, std::vector<Dab>* dabs);

}  // namespace danqing::render
