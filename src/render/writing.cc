#include "render/writing.h"

#include <algorithm>
#include <cmath>

namespace danqing::render {
namespace {

struct Rhythm {
  float cells_per_s;  // brush speed along a stroke
  float air_factor;   // the way between strokes goes this much faster
  float stroke_ms;    // lifting the brush between strokes
  float char_ms;      // between characters
  float run_ms;       // between columns (rows)
  float role_ms;      // before the title's end, the signature
  float reload_ms;    // dipping the brush
  float seal_ms;      // after the last character, before the seal
};

Rhythm RhythmFor(Style style) {
  switch (style) {
    case Style::kKai: return {28.0f, 2.0f, 10.0f, 50.0f, 220.0f, 260.0f, 260.0f, 500.0f};
    case Style::kXing: return {30.0f, 2.5f, 7.0f, 45.0f, 180.0f, 220.0f, 220.0f, 450.0f};
    case Style::kCao: return {36.0f, 3.0f, 4.0f, 30.0f, 150.0f, 180.0f, 200.0f, 400.0f};
  }
  return RhythmFor(Style::kXing);
}

}  // namespace

int WritingHaloPx(int diffuse_iterations) {
  // The wet disk reaches r + 1 px (half resolution, rounded out), each
  // diffusion step one half-resolution pixel (2 px), and the composition's
  // bilinear sample of the half-resolution plane one more.
  return 2 * (std::max(0, diffuse_iterations) + 1) + 2;
}

std::vector<WriteSegment> BuildWriteSegments(const std::vector<Dab>& dabs,
                                             const std::vector<uint16_t>& dab_ms, int halo_px) {
  std::vector<WriteSegment> out;
  const size_t n = std::min(dabs.size(), dab_ms.size());
  auto reach = [&](const Dab& d) {  // plane pixels
    return (d.r * 1.1f + 1.0f + (d.wet > 0.0f ? static_cast<float>(halo_px) : 0.0f) + 2.0f) * 0.5f;
  };
  // Distance from (px, py) to the segment a-b.
  auto dist = [](float ax, float ay, float bx, float by, float px, float py) {
    const float dx = bx - ax, dy = by - ay, l2 = dx * dx + dy * dy;
    float u = l2 > 0.0f ? ((px - ax) * dx + (py - ay) * dy) / l2 : 0.0f;
    u = std::clamp(u, 0.0f, 1.0f);
    const float ex = ax + u * dx - px, ey = ay + u * dy - py;
    return std::sqrt(ex * ex + ey * ey);  // not hypot: this runs per dab, and hypot is slow
  };
  auto same_stroke = [&](size_t j) {
    return dabs[j].phase == dabs[j - 1].phase && dab_ms[j] >= dab_ms[j - 1];
  };
  size_t i = 0;
  while (i < n) {
    const Dab& a = dabs[i];
    const float ax = a.x * 0.5f, ay = a.y * 0.5f, ra = reach(a);
    // The farthest dab of the stroke within ra of the start: short enough
    // that the capsule hugs the stroke.
    size_t last = i;
    const float ra2 = ra * ra;
    while (last + 1 < n && same_stroke(last + 1)) {
      const float ex = dabs[last + 1].x * 0.5f - ax, ey = dabs[last + 1].y * 0.5f - ay;
      if (ex * ex + ey * ey > ra2) break;
      ++last;
    }
    const float bx = dabs[last].x * 0.5f, by = dabs[last].y * 0.5f;
    float r = 0.0f;
    for (size_t k = i; k <= last; ++k) {
      const Dab& d = dabs[k];
      r = std::max(r, dist(ax, ay, bx, by, d.x * 0.5f, d.y * 0.5f) + reach(d));
    }
    WriteSegment s;
    s.x0 = ax;
    s.y0 = ay;
    s.x1 = bx;
    s.y1 = by;
    s.r = r;
    s.t0 = static_cast<float>(dab_ms[i]);
    s.t1 = static_cast<float>(dab_ms[last]);
    out.push_back(s);
    // The next capsule starts where this one ended, or after it when the
    // stroke ends there.
    i = last > i && last + 1 < n && same_stroke(last + 1) ? last : last + 1;
  }
  return out;
}

WritingSchedule ScheduleWriting(const std::vector<Dab>& dabs, const std::vector<WrittenSpan>& spans,
                                Style style) {
  const Rhythm rh = RhythmFor(style);
  std::vector<double> t(dabs.size(), 0.0);
  double now = 0;
  int prev_run = -1, prev_role = -1;
  bool first = true;
  // Moves the brush over dabs [a, b) in order from `now`; a change of stroke
  // (each stroke and hairline has its own phase) lifts the brush.
  auto write = [&](size_t a, size_t b, float cell) {
    const double speed = std::max(1.0f, cell) * rh.cells_per_s / 1000.0;  // px per ms
    const double max_step = 0.25 * std::max(1.0f, cell);  // a font raster's scan jumps
    for (size_t i = a; i < b; ++i) {
      if (i > a) {
        const Dab& p = dabs[i - 1];
        const Dab& d = dabs[i];
        const double ex = static_cast<double>(d.x - p.x), ey = static_cast<double>(d.y - p.y);
        double dist = std::sqrt(ex * ex + ey * ey);
        if (d.phase != p.phase) {
          now += rh.stroke_ms + std::min(dist, 2.0 * cell) / (speed * rh.air_factor);
        } else {
          now += std::min(dist, max_step) / speed;
        }
      }
      t[i] = now;
    }
  };
  for (const WrittenSpan& s : spans) {
    if (!first) {
      now += rh.char_ms;
      if (s.run != prev_run) now += rh.run_ms;
      if (s.role != prev_role) now += rh.role_ms;
      if (s.reload) now += rh.reload_ms;
    }
    first = false;
    // The link from the previous character comes first, then the character.
    write(s.link, s.end, s.cell);
    if (s.end > s.link) now += rh.stroke_ms;
    write(s.begin, s.link, s.cell);
    prev_run = s.run;
    prev_role = s.role;
  }
  double seal = now + rh.seal_ms;
  double hold = 700.0;
  // Too long for 16 bits: the same rhythm, faster.
  const double k = seal + 1.0 > kMaxWritingMs ? (kMaxWritingMs - 1.0) / seal : 1.0;
  WritingSchedule out;
  out.dab_ms.resize(dabs.size());
  for (size_t i = 0; i < dabs.size(); ++i) {
    out.dab_ms[i] = static_cast<uint16_t>(std::min<double>(std::lround(t[i] * k), kMaxWritingMs));
  }
  out.seal_ms = static_cast<uint32_t>(std::lround(seal * k));
  out.end_ms = out.seal_ms + static_cast<uint32_t>(hold);
  return out;
}

}  // namespace danqing::render
