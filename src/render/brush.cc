#include "render/brush.h"

#include <algorithm>
#include <cmath>

namespace danqing::render {
namespace {

struct P {
  float x, y, hw;
};

float Smoothstep(float a, float b, float x) {
  float t = std::clamp((x - a) / (b - a), 0.0f, 1.0f);
  return t * t * (3.0f - 2.0f * t);
}

// Catmull-Rom through the points, segments no longer than `step` pixels.
std::vector<P> Densify(const std::vector<P>& in, float step) {
  std::vector<P> out;
  if (in.size() == 1) return in;
  for (size_t i = 0; i + 1 < in.size(); ++i) {
    const P& p0 = in[i == 0 ? 0 : i - 1];
    const P& p1 = in[i];
    const P& p2 = in[i + 1];
    const P& p3 = in[std::min(in.size() - 1, i + 2)];
    float len = std::hypot(p2.x - p1.x, p2.y - p1.y);
    int n = std::max(1, static_cast<int>(std::ceil(len / step)));
    for (int k = 0; k < n; ++k) {
      float t = static_cast<float>(k) / static_cast<float>(n);
      float t2 = t * t, t3 = t2 * t;
      auto cr = [&](float a, float b, float c, float d) {
        return 0.5f * ((2 * b) + (-a + c) * t + (2 * a - 5 * b + 4 * c - d) * t2 + (-a + 3 * b - 3 * c + d) * t3);
      };
      out.push_back({cr(p0.x, p1.x, p2.x, p3.x), cr(p0.y, p1.y, p2.y, p3.y), p1.hw + (p2.hw - p1.hw) * t});
    }
  }
  out.push_back(in.back());
  return out;
}

std::vector<float> Cumulative(const std::vector<P>& pts, float* total) {
  std::vector<float> c(pts.size(), 0.0f);
  float acc = 0;
  for (size_t i = 1; i < pts.size(); ++i) {
    acc += std::hypot(pts[i].x - pts[i - 1].x, pts[i].y - pts[i - 1].y);
    c[i] = acc;
  }
  *total = acc;
  return c;
}

P At(const std::vector<P>& pts, const std::vector<float>& cum, float s, size_t* hint) {
  size_t i = *hint;
  while (i + 2 < pts.size() && cum[i + 1] < s) ++i;
  *hint = i;
  if (pts.size() == 1) return pts[0];
  float seg = cum[i + 1] - cum[i];
  float t = seg > 1e-6f ? std::clamp((s - cum[i]) / seg, 0.0f, 1.0f) : 0.0f;
  return {pts[i].x + (pts[i + 1].x - pts[i].x) * t, pts[i].y + (pts[i + 1].y - pts[i].y) * t,
          pts[i].hw + (pts[i + 1].hw - pts[i].hw) * t};
}

}  // namespace

float Affine::Scale() const { return std::sqrt(std::fabs(m[0] * m[4] - m[1] * m[3])); }

void PlanCharacter(const CharStrokes& ch, const Affine& xf, const BrushStyle& style, float cell,
                   Rng& rng, InkState* ink, std::vector<Dab>* dabs, PenPoint* first, PenPoint* last) {
  const float scale = xf.Scale();  // canvas px per box unit
  PenPoint prev_end;
  if (first != nullptr) first->valid = false;
  for (size_t si = 0; si < ch.strokes.size(); ++si) {
    const Stroke& st = ch.strokes[si];
    if (st.points.empty()) continue;
    // Stroke half-widths: outline-measured; median points outside the outline
    // (0) borrow from the stroke's widest point.
    float max_hw = 0;
    for (const auto& mp : st.points) max_hw = std::max(max_hw, mp.half_width);
    if (max_hw <= 0) max_hw = 40;
    std::vector<P> pts;
    pts.reserve(st.points.size());
    for (const auto& mp : st.points) {
      float bx = mp.x + style.wobble * rng.Signed(), by = mp.y + style.wobble * rng.Signed();
      P p{};
      xf.Apply(bx, by, &p.x, &p.y);
      float hw = mp.half_width > 0 ? mp.half_width : 0.35f * max_hw;
      p.hw = std::max(hw, 0.3f * max_hw) * scale * style.width * 1.22f;
      pts.push_back(p);
    }
    float step = std::max(0.5f, 0.5f * 0.2f * max_hw * scale);
    std::vector<P> dense = Densify(pts, step);
    for (int it = 0; it < style.smooth && dense.size() > 2; ++it) {
      std::vector<P> sm = dense;
      for (size_t i = 1; i + 1 < dense.size(); ++i) {
        sm[i].x = 0.25f * dense[i - 1].x + 0.5f * dense[i].x + 0.25f * dense[i + 1].x;
        sm[i].y = 0.25f * dense[i - 1].y + 0.5f * dense[i].y + 0.25f * dense[i + 1].y;
      }
      dense.swap(sm);
    }
    float total = 0;
    std::vector<float> cum = Cumulative(dense, &total);
    float s0 = total * style.trim, s1 = total * (1.0f - style.trim);
    if (total < 1e-3f) s1 = s0;
    // Curvature (turning angle per window) marks 顿 at turns.
    const float phase = rng.Uniform() * 100.0f;
    const float len_in_cells = total / std::max(1.0f, cell);
    const float speed = std::clamp(len_in_cells * 2.2f, 0.0f, 1.0f);
    size_t hint = 0;
    float s = s0;
    P prev = At(dense, cum, s, &hint);
    float dirx = 0, diry = 1;
    if (dense.size() > 1) {
      size_t h2 = 0;
      P nx = At(dense, cum, std::min(s1, s0 + 3.0f), &h2);
      float l = std::hypot(nx.x - prev.x, nx.y - prev.y);
      if (l > 1e-4f) { dirx = (nx.x - prev.x) / l; diry = (nx.y - prev.y) / l; }
    }
    if (first != nullptr && !first->valid) *first = {true, prev.x, prev.y, dirx, diry};
    PenPoint start{true, prev.x, prev.y, dirx, diry};
    if (prev_end.valid && style.hairline > 0 && rng.Uniform() < style.hairline) {
      float gap = std::hypot(start.x - prev_end.x, start.y - prev_end.y);
      if (gap < 0.7f * cell && gap > 1.0f) PlanHairline(prev_end, start, cell, rng, *ink, dabs);
    }
    float last_dx = dirx, last_dy = diry;
    size_t dir_hint = 0;
    const float span = std::max(1e-3f, s1 - s0);
    while (true) {
      size_t h_ahead = dir_hint;
      P p = At(dense, cum, s, &hint);
      P ahead = At(dense, cum, std::min(s1, s + std::max(1.0f, p.hw)), &h_ahead);
      dir_hint = hint;
      float tx = ahead.x - p.x, ty = ahead.y - p.y;
      float tl = std::hypot(tx, ty);
      if (tl > 1e-4f) { tx /= tl; ty /= tl; } else { tx = last_dx; ty = last_dy; }
      float turn = std::fabs(std::atan2(last_dx * ty - last_dy * tx, last_dx * tx + last_dy * ty));
      last_dx = tx;
      last_dy = ty;
      float t = (s - s0) / span;
      float press = 1.0f + style.press * std::exp(-(t / 0.08f) * (t / 0.08f));
      // Pause and press at a turn (not in the flick of a hook at the very end).
      float dun = 1.0f + std::min(0.25f, std::max(0.0f, turn - 0.08f) * 0.8f) * (1.0f - Smoothstep(0.8f, 0.95f, t));
      float v = speed * std::pow(std::sin(3.14159f * std::clamp(t, 0.0f, 1.0f)), 0.7f);
      float r = std::max(0.45f, p.hw * press * dun * (1.0f - style.speed_thin * v));
      float load = ink->load;
      float dry = std::clamp(((1.0f - load) * 1.25f - 0.25f + 0.35f * v * (1.0f - 0.5f * load)) * style.dry_gain,
                             0.0f, 0.72f);
      Dab d;
      d.x = p.x;
      d.y = p.y;
      d.r = r;
      d.nx = -ty;
      d.ny = tx;
      d.ink = std::clamp(0.66f + 0.34f * std::sqrt(load), 0.0f, 1.0f);  // 浓 to 淡 as the brush empties
      d.dry = dry;
      d.wet = std::clamp(load * load * 0.9f * (1.0f - 0.5f * v), 0.0f, 1.0f);
      d.s = s;
      d.phase = phase;
      dabs->push_back(d);
      float adv = std::max(0.4f, r * 0.3f);
      ink->load = std::max(0.0f, ink->load - adv * 0.032f / std::max(8.0f, cell) * style.dry_gain);
      if (s >= s1) break;
      s = std::min(s1, s + adv);
    }
    prev_end = {true, dabs->back().x, dabs->back().y, last_dx, last_dy};
  }
  if (last != nullptr) *last = prev_end;
}

void PlanHairline(const PenPoint& from, const PenPoint& to, float cell, Rng& rng, const InkState& ink,
                  std::vector<Dab>* dabs) {
  float gap = std::hypot(to.x - from.x, to.y - from.y);
  float cx = from.x + from.dx * 0.4f * gap, cy = from.y + from.dy * 0.4f * gap;
  float r = std::max(0.45f, cell * 0.006f);
  int n = std::max(2, static_cast<int>(gap / std::max(0.4f, r * 0.5f)));
  float phase = rng.Uniform() * 100.0f;
  for (int i = 0; i <= n; ++i) {
    float t = static_cast<float>(i) / static_cast<float>(n), u = 1.0f - t;
    float x = u * u * from.x + 2 * u * t * cx + t * t * to.x;
    float y = u * u * from.y + 2 * u * t * cy + t * t * to.y;
    float dx = 2 * u * (cx - from.x) + 2 * t * (to.x - cx), dy = 2 * u * (cy - from.y) + 2 * t * (to.y - cy);
    float l = std::max(1e-4f, std::hypot(dx, dy));
    Dab d;
    d.x = x;
    d.y = y;
    d.r = r * (1.0f + 0.6f * std::sin(3.14159f * t));
    d.nx = -dy / l;
    d.ny = dx / l;
    d.ink = 0.75f;
    d.dry = std::clamp(0.3f + 0.4f * (1.0f - ink.load), 0.0f, 0.8f);
    d.s = t * gap;
    d.phase = phase;
    dabs->push_back(d);
  }
}

void PlanRaster(const std::vector<uint8_t>& raster, int res, const Affine& xf, Rng& rng,
                InkState* ink, float cell, std::vector<Dab>* dabs) {
  const float box_per_px = 1024.0f / static_cast<float>(res);
  const float r = std::max(0.5f, 0.62f * box_per_px * xf.Scale());
  const float phase = rng.Uniform() * 100.0f;
  const float load = ink->load;
  for (int y = 0; y < res; ++y) {
    for (int x = 0; x < res; ++x) {
      uint8_t c = raster[static_cast<size_t>(y) * static_cast<size_t>(res) + static_cast<size_t>(x)];
      if (c < 60) continue;
      Dab d;
      xf.Apply((static_cast<float>(x) + 0.5f) * box_per_px, (static_cast<float>(y) + 0.5f) * box_per_px, &d.x, &d.y);
      d.r = r;
      d.nx = 1;
      d.ny = 0;
      d.ink = (0.8f + 0.2f * load) * Smoothstep(60.0f, 200.0f, c);
      d.dry = std::clamp((1.0f - load) * 1.1f - 0.3f, 0.0f, 0.7f);
      d.wet = load * load * 0.8f;
      d.s = d.y;
      d.phase = phase;
      dabs->push_back(d);
    }
  }
  ink->load = std::max(0.0f, ink->load - 0.12f * 24.0f / 24.0f);
  (void)cell;
}

}  // namespace danqing::render
