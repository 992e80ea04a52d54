// The background painting's per-pixel arithmetic (issue 27): the landscape
// (ridges with coverage-based edges, 远近 tones, 皴 along the slope, water and
// mist as washes), the photo's ink wash (edge-preserving smoothing, a few ink
// values, brush lines on strong edges, wet bleeding), the paper's mottling
// and the wash's colour. One definition for both backends: passes_cpu.cc
// calls these functions in its loops, passes_cuda.cu in its kernels (nvcc
// compiles them for the device too), so the two give the same bytes.
//
// Only IEEE float arithmetic, sqrtf (correctly rounded) and floorf (exact)
// here: no other libm call, so the results are the same on every host
// (render_test pins the photo wash's bytes).
//
// Thread-safety: pure functions of their arguments.
#pragma once

#include <math.h>
#include <stdint.h>

#include "render/passes.h"

namespace danqing::render::paint {

DANQING_HOST_DEVICE inline float Clamp01(float v) {
  return fminf(fmaxf(v, 0.0f), 1.0f);
}

// (The reciprocal folds to a constant where a and b are: no division.)
DANQING_HOST_DEVICE inline float Smooth(float a, float b, float x) {
  const float t = Clamp01((x - a) * (1.0f / (b - a)));
  return t * t * (3.0f - 2.0f * t);
}

// Smooth value noise from an integer hash (no table), 0..1, one lattice cell
// per unit; not periodic over any canvas size.
DANQING_HOST_DEVICE inline float HashCorner(int x, int y, uint32_t salt) {
  uint32_t h = static_cast<uint32_t>(x) * 0x8da6b343u ^ static_cast<uint32_t>(y) * 0xd8163841u ^
               salt * 0xcb1ab31fu;
  h ^= h >> 15;
  h *= 0x2c1b3c6du;
  h ^= h >> 12;
  h *= 0x297a2d39u;
  h ^= h >> 15;
  return static_cast<float>(h >> 8) * (1.0f / 16777216.0f);
}
DANQING_HOST_DEVICE inline float HashNoise(float x, float y, uint32_t salt) {
  const float fx = floorf(x), fy = floorf(y);
  const int ix = static_cast<int>(fx), iy = static_cast<int>(fy);
  float tx = x - fx, ty = y - fy;
  tx = tx * tx * (3.0f - 2.0f * tx);
  ty = ty * ty * (3.0f - 2.0f * ty);
  const float a = HashCorner(ix, iy, salt), b = HashCorner(ix + 1, iy, salt);
  const float c = HashCorner(ix, iy + 1, salt), d = HashCorner(ix + 1, iy + 1, salt);
  const float top = a + (b - a) * tx, bottom = c + (d - c) * tx;
  return top + (bottom - top) * ty;
}

// Smooth value noise from Textures::noise2 (`lattice`, period kNoise2), the
// arithmetic of Textures::Noise2: cheaper than HashNoise (a table load per
// corner), for the per-pixel passes that have the textures.
DANQING_HOST_DEVICE inline float Noise2(const float* lattice, float x, float y) {
  constexpr int K = Textures::kNoise2;
  const float fx = floorf(x), fy = floorf(y);
  const float tx = x - fx, ty = y - fy;
  const int ix = static_cast<int>(static_cast<long long>(fx) & (K - 1));
  const int iy = static_cast<int>(static_cast<long long>(fy) & (K - 1));
  const int jx = (ix + 1) & (K - 1), jy = (iy + 1) & (K - 1);
  const float sx = tx * tx * (3.0f - 2.0f * tx), sy = ty * ty * (3.0f - 2.0f * ty);
  const float a = lattice[iy * K + ix] + (lattice[iy * K + jx] - lattice[iy * K + ix]) * sx;
  const float b = lattice[jy * K + ix] + (lattice[jy * K + jx] - lattice[jy * K + ix]) * sx;
  return a + (b - a) * sy;
}

// ---------------------------------------------------------------- landscape

// The landscape wash at pixel (x, y) of a w x h plane. `ridge_y` is
// RidgeTable's (w values per ridge, far to near).
//  - Ridge edges: the coverage of the ridge's silhouette, from the distance to
//    it measured across the edge (the depth below the ridge line over the
//    slope's length), in pixels: the same soft ramp at any size and slope, no
//    staircase on steep flanks.
//  - 远近: far layers paler and flatter (less 皴 contrast); Compose turns pale
//    washes bluer-grey (WashColour).
//  - 皴: streaks of noise laid along the ridge line (ridge-relative
//    coordinates: across the width, and the distance across the silhouette),
//    so they follow the slope, clustered by a slower noise; the crest's dark
//    band is measured across the edge too (as wide on a steep flank).
//  - Mist: each layer fades into an uneven band of mist at its foot.
//  - Water: broad, soft horizontal washes below water_top, darker by the shore.
DANQING_HOST_DEVICE inline float LandscapePixel(const float* lattice, const Ridge* ridges,
                                                const float* ridge_y, int nridges, float water_top,
                                                float water_phase, float sky, int x, int y, int w,
                                                int h) {
  const float fw = static_cast<float>(w), fh = static_cast<float>(h);
  const float aspect = fw / fh;
  const float fy = (static_cast<float>(y) + 0.5f) / fh;
  const float fx = (static_cast<float>(x) + 0.5f) / fw;
  float acc =
      sky * (1.0f - fy) * (0.6f + 0.8f * Noise2(lattice, fx * 3.0f * aspect + 11.0f, fy * 3.0f));
  const int xl = x > 0 ? x - 1 : 0, xr = x < w - 1 ? x + 1 : w - 1;
  const float span = static_cast<float>(xr - xl > 0 ? xr - xl : 1);
  for (int r = 0; r < nridges; ++r) {
    const Ridge rg = ridges[r];
    if (fx < rg.x0 || fx > rg.x1) continue;
    const float* row = ridge_y + static_cast<size_t>(r) * static_cast<size_t>(w);
    const float ry = row[x];
    const float depth = fy - ry;
    if (depth > rg.mist * 1.35f) continue;                // below the deepest mist line
    const float slope = (row[xr] - row[xl]) * fh / span;  // plane pixels down per pixel across
    const float norm = sqrtf(1.0f + slope * slope);
    const float dist = depth * fh / norm;  // pixels across the edge, + inside
    if (dist < -1.0f) continue;
    // Mist line: uneven along the width.
    const float mist_len =
        rg.mist * (0.65f + 0.7f * Noise2(lattice, fx * 5.0f * aspect + rg.phase + 23.0f,
                                         static_cast<float>(r) * 7.0f));
    if (depth > mist_len) continue;
    const float cover = Smooth(-1.0f, 1.0f, dist);
    const float xfade = Smooth(rg.x0, rg.x0 + 0.1f, fx) * (1.0f - Smooth(rg.x1 - 0.1f, rg.x1, fx));
    const float near = nridges > 1 ? static_cast<float>(r) / static_cast<float>(nridges - 1) : 1.0f;
    // Darker at the crest, graded down into the mist.
    // (Across the edge, not down the column: as wide on a steep flank.)
    const float across = depth / norm;
    const float dd = across > 0.0f ? across * (1.0f / 0.035f) : 0.0f;
    const float crest = 0.45f + 0.55f / (1.0f + dd * dd);
    const float mist = 1.0f - Smooth(0.0f, mist_len, depth);
    // 皴 along the ridge line: long thin streaks in (width, distance across
    // the silhouette), grouped by a slow noise; near layers carry more.
    const float u = fx * aspect, v = across;
    const float streak = Noise2(lattice, u * 14.0f + rg.phase * 3.0f + 31.0f, v * 70.0f);
    const float group = Noise2(lattice, u * 5.0f + rg.phase + 37.0f, v * 18.0f + 101.0f);
    const float cun_mark = Smooth(0.5f, 0.8f, streak) * Smooth(0.3f, 0.65f, group);
    const float flat = 0.8f + 0.2f * group;
    const float cun = flat + (0.3f + 1.0f * near) * cun_mark;
    float d = rg.density * crest * mist * cun * xfade * cover;
    d = Clamp01(d);
    acc = acc + d * (1.0f - acc);
  }
  if (fy > water_top) {
    const float t = fy - water_top;
    const float band = Noise2(lattice, fx * 1.6f * aspect + water_phase + 53.0f, fy * 18.0f);
    const float ripple =
        Noise2(lattice, fx * 5.0f * aspect + water_phase * 2.0f + 59.0f, fy * 40.0f + 7.0f);
    const float shore = 0.09f * (1.0f - Smooth(0.0f, 0.07f, t));
    const float washes = (0.06f + 0.08f * Smooth(0.3f, 0.9f, band) + 0.02f * ripple) *
                         (1.0f - Smooth(0.0f, 0.22f, t));
    const float water = (shore + washes) * Smooth(0.0f, 0.025f, t);
    acc = acc + water * (1.0f - acc);
  }
  return acc;
}

// ------------------------------------------------------------------- paper

// The paper's slow blotches and finer sizing mottle, 0..1, at pixel (x, y)
// of the low-resolution plane; `bscale` is canvas pixels per plane pixel
// over 220.
DANQING_HOST_DEVICE inline float PaperMottle(const float* lattice, int x, int y, float bscale) {
  const float px = static_cast<float>(x) * bscale, py = static_cast<float>(y) * bscale;
  return 0.65f * Noise2(lattice, px + 37.0f, py) +
         0.35f * Noise2(lattice, px * 5.0f + 11.0f, py * 5.0f + 3.0f);
}

// The wash's colour for one channel at density `wa`: pale washes are the
// cool, bluer grey of dilute ink (far ridges, mist), dense ones `dark`.
// `mix` is WashMix(wa), once per pixel.
DANQING_HOST_DEVICE inline float WashMix(float wa) {
  return Smooth(0.05f, 0.6f, wa);
}
DANQING_HOST_DEVICE inline float WashChannel(float paper, float dark, float light, float wa,
                                             float mix) {
  const float colour = light + (dark - light) * mix;
  return paper + (colour - paper) * wa;
}

// Paper brightness and how much wash the paper takes at a pixel: `mottle`
// from PaperMottle, `fibre` the fibre tile (Textures::Paper, 0..1: faint grain,
// long thin fibres up to 1). Fibres show lighter and take less pigment.
DANQING_HOST_DEVICE inline float PaperTone(float mottle, float fibre) {
  return 1.0f - 0.07f * (mottle - 0.5f) + 0.045f * (fibre - 0.15f);
}
DANQING_HOST_DEVICE inline float WashTaken(float wa, float mottle, float fibre) {
  return Clamp01(wa * (0.86f + 0.28f * mottle) * (1.02f - 0.15f * fibre));
}

// --------------------------------------------------------------- photo wash

// Edge-preserving smoothing of the luminance plane (w x h): a 5x5 bilateral
// filter, tent weights in space, 1 / (1 + (d/0.08)^4) in tone, taps in row
// order, edges repeated.
DANQING_HOST_DEVICE inline float PhotoSmooth(const float* lum, int w, int h, int x, int y) {
  const float c = lum[static_cast<size_t>(y) * static_cast<size_t>(w) + static_cast<size_t>(x)];
  float sum = 0.0f, norm = 0.0f;
  for (int dy = -2; dy <= 2; ++dy) {
    int yy = y + dy;
    yy = yy < 0 ? 0 : (yy > h - 1 ? h - 1 : yy);
    const float* row = lum + static_cast<size_t>(yy) * static_cast<size_t>(w);
    const float wy = static_cast<float>(3 - (dy < 0 ? -dy : dy));
    for (int dx = -2; dx <= 2; ++dx) {
      int xx = x + dx;
      xx = xx < 0 ? 0 : (xx > w - 1 ? w - 1 : xx);
      const float v = row[xx];
      const float t = (v - c) * 12.5f;
      const float t2 = t * t;
      const float wt = wy * static_cast<float>(3 - (dx < 0 ? -dx : dx)) / (1.0f + t2 * t2);
      sum += wt * v;
      norm += wt;
    }
  }
  return sum / norm;
}

// The number of ink values the photo's tones are reduced to, and the darkest.
inline constexpr int kWashLevels = 5;
inline constexpr float kWashDarkest = 0.82f;

// The ink value for a smoothed luminance: darkness within the photo's tonal
// range [lo, hi] (PhotoInput), through a contrast curve, then rounded to one
// of kWashLevels values (0: the paper) with a soft step.
DANQING_HOST_DEVICE inline float PhotoTone(float lum, float lo, float hi) {
  float t = Clamp01((hi - lum) / (hi - lo) * 1.1f - 0.1f);
  t = t * t * (3.0f - 2.0f * t);
  const float steps = static_cast<float>(kWashLevels - 1);
  const float f = t * steps;
  float k = floorf(f);
  k = k > steps - 1.0f ? steps - 1.0f : k;
  const float step = Smooth(0.3f, 0.7f, f - k);
  return (k + step) / steps * kWashDarkest;
}

// A radius-r box blur along x (along_x 1) or y (0): taps -r..r in order, the
// edge repeated, over 2r+1.
DANQING_HOST_DEVICE inline float BoxAt(const float* p, int w, int h, int x, int y, int along_x,
                                       int r) {
  float s = 0.0f;
  for (int k = -r; k <= r; ++k) {
    int xx = along_x ? x + k : x;
    int yy = along_x ? y : y + k;
    xx = xx < 0 ? 0 : (xx > w - 1 ? w - 1 : xx);
    yy = yy < 0 ? 0 : (yy > h - 1 ? h - 1 : yy);
    s += p[static_cast<size_t>(yy) * static_cast<size_t>(w) + static_cast<size_t>(xx)];
  }
  return s / static_cast<float>(2 * r + 1);
}
inline constexpr int kBleedRadius = 6;  // the wet bleeding's blur, plane pixels

struct PhotoText {
  float sx, sy, margin;  // wash pixels per canvas pixel; the fade's margin (canvas pixels)
  float x0, y0, x1, y1;  // the text block, canvas pixels
};

// The wash at (x, y): the ink values `tone` (PhotoTone of `smooth`), wet
// bleeding from dark areas (`bleed`: tone blurred by kBleedRadius along x
// then y) with an uneven reach, brush lines along the strong edges of
// `smooth` whose width and ink vary along them, lighter under the text block.
DANQING_HOST_DEVICE inline float PhotoInk(const float* smooth, const float* tone,
                                          const float* bleed, int w, int h, int x, int y,
                                          const PhotoText& text) {
  const int xl = x > 0 ? x - 1 : 0, xr = x < w - 1 ? x + 1 : w - 1;
  const int yu = y > 0 ? y - 1 : 0, yd = y < h - 1 ? y + 1 : h - 1;
  const size_t W = static_cast<size_t>(w);
  const float* up = smooth + static_cast<size_t>(yu) * W;
  const float* mid = smooth + static_cast<size_t>(y) * W;
  const float* dn = smooth + static_cast<size_t>(yd) * W;
  // Sobel, over 4: luminance change per pixel.
  const float gx = ((up[xr] - up[xl]) + 2.0f * (mid[xr] - mid[xl]) + (dn[xr] - dn[xl])) * 0.125f;
  const float gy = ((dn[xl] - up[xl]) + 2.0f * (dn[x] - up[x]) + (dn[xr] - up[xr])) * 0.125f;
  const float g = sqrtf(gx * gx + gy * gy);
  const float fx = static_cast<float>(x), fy = static_cast<float>(y);
  const float pressure = HashNoise(fx * 0.11f + 5.0f, fy * 0.11f + 9.0f, 71u);
  const float th = 0.035f + 0.04f * pressure;  // a lower threshold: a wider line
  const float line =
      Smooth(th, th + 0.06f, g) * (0.5f + 0.4f * HashNoise(fx * 0.23f, fy * 0.23f, 73u));
  // The ink values through a 3x3 tent: soft steps between them at the
  // plane's resolution.
  const float* tu = tone + static_cast<size_t>(yu) * W;
  const float* tm = tone + static_cast<size_t>(y) * W;
  const float* td = tone + static_cast<size_t>(yd) * W;
  const float q = ((tu[xl] + 2.0f * tu[x] + tu[xr]) + 2.0f * (tm[xl] + 2.0f * tm[x] + tm[xr]) +
                   (td[xl] + 2.0f * td[x] + td[xr])) *
                  0.0625f;
  const float b = bleed[static_cast<size_t>(y) * W + static_cast<size_t>(x)];
  const float reach = 0.7f + 0.3f * HashNoise(fx * 0.3f + 1.0f, fy * 0.3f + 2.0f, 79u);
  float d = fmaxf(q, b * fminf(1.0f, reach * 1.25f));
  d = d + line * (1.0f - d);
  d = d > 0.9f ? 0.9f : d;
  // Lighter under the text block, with a soft margin.
  const float py = (fy + 0.5f) / text.sy, px = (fx + 0.5f) / text.sx;
  const float inside = fminf(fminf(px - text.x0, text.x1 - px), fminf(py - text.y0, text.y1 - py));
  const float fade = Clamp01((inside + text.margin) / (2.0f * text.margin));
  return d * (1.0f - 0.6f * fade * fade * (3.0f - 2.0f * fade));
}

}  // namespace danqing::render::paint
