// The CPU reference implementation of the heavy passes (see passes.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>

#include "render/paint.h"
#include "render/passes.h"
#include "render/random.h"

namespace danqing::render {
namespace {

inline float Smoothstep(float a, float b, float x) {
  float t = std::clamp((x - a) / (b - a), 0.0f, 1.0f);
  return t * t * (3.0f - 2.0f * t);
}


constexpr int kBand = 32;  // rows per work item in the dab passes

// Dab indices per band of rows, in list order.
std::vector<std::vector<uint32_t>> BinDabs(const std::vector<Dab>& dabs, float scale, int h) {
  int bands = (h + kBand - 1) / kBand;
  std::vector<std::vector<uint32_t>> bins(static_cast<size_t>(bands));
  for (size_t i = 0; i < dabs.size(); ++i) {
    const Dab& d = dabs[i];
    float rr = (d.r * 1.1f + 1.5f) * scale;
    int b0 = std::max(0, static_cast<int>(std::floor(d.y * scale - rr)) / kBand);
    int b1 = std::min(bands - 1, static_cast<int>(std::floor(d.y * scale + rr)) / kBand);
    if (d.y * scale + rr < 0) continue;
    for (int b = b0; b <= b1; ++b) bins[static_cast<size_t>(b)].push_back(static_cast<uint32_t>(i));
  }
  return bins;
}

// The water disk StampWet gives a dab on a ww x wh plane at `scale`: its
// centre and radius there, and the pixels it may write (x1 < x0 or y1 < y0:
// none; no water: none).
struct WetDisk {
  float cx, cy, r;
  PixelBox px;
};
WetDisk WetExtent(const Dab& d, float scale, int ww, int wh) {
  WetDisk w{d.x * scale, d.y * scale, std::max(0.5f, d.r * scale), PixelBox{}};
  if (d.wet <= 0.0f) return w;
  w.px.x0 = std::max(0, static_cast<int>(w.cx - w.r - 1));
  w.px.x1 = std::min(ww - 1, static_cast<int>(w.cx + w.r + 1));
  w.px.y0 = std::max(0, static_cast<int>(w.cy - w.r - 1));
  w.px.y1 = std::min(wh - 1, static_cast<int>(w.cy + w.r + 1));
  return w;
}

void StampOne(const Dab& d, const Textures& tex, int ya, int yb, Plane* ink) {
  float reach = d.r * 1.1f + 1.0f;
  int x0 = std::max(0, static_cast<int>(std::floor(d.x - reach)));
  int x1 = std::min(ink->w - 1, static_cast<int>(std::ceil(d.x + reach)));
  int y0 = std::max(ya, static_cast<int>(std::floor(d.y - reach)));
  int y1 = std::min(yb - 1, static_cast<int>(std::ceil(d.y + reach)));
  if (x0 > x1 || y0 > y1) return;
  const float inv_r = 1.0f / d.r;
  const int bristles = std::clamp(static_cast<int>(d.r / 1.1f), 5, 48);
  const bool dry = d.dry > 0.02f;
  const float streak_scale = 1.0f / std::max(2.0f, d.r * 2.2f);
  const uint32_t ph = static_cast<uint32_t>(d.phase * 997.0f);
  for (int y = y0; y <= y1; ++y) {
    float* row = ink->row(y);
    float dy = static_cast<float>(y) + 0.5f - d.y;
    for (int x = x0; x <= x1; ++x) {
      float dx = static_cast<float>(x) + 0.5f - d.x;
      float d2 = dx * dx + dy * dy;
      if (d2 > reach * reach || row[x] >= d.ink) continue;
      float fib = tex.Fibre(x, y);
      float edge = d.r * (0.9f + 0.2f * fib);
      float cov = std::clamp(edge - std::sqrt(d2) + 0.5f, 0.0f, 1.0f);
      if (cov <= 0.0f) continue;
      float val = d.ink * cov;
      if (dry) {
        float u = std::clamp((dx * d.nx + dy * d.ny) * inv_r, -1.0f, 1.0f);
        int b = std::min(bristles - 1, static_cast<int>((u + 1.0f) * 0.5f * static_cast<float>(bristles)));
        float hb = Hash01(static_cast<uint32_t>(b) * 7919u + ph);
        float n = tex.Noise1(d.s * streak_scale + static_cast<float>(b) * 37.0f + d.phase * 11.0f);
        float au = std::fabs(u);
        float q = 0.45f * hb + 0.55f * n + 0.12f - 0.35f * au * au * au;
        val *= Smoothstep(d.dry - 0.1f, d.dry + 0.1f, q);
      }
      if (val > row[x]) row[x] = val;
    }
  }
}

// One capsule on the half-resolution time plane, within rows [ya, yb).
void StampSegment(const WriteSegment& s, int w, int ya, int yb, uint16_t* ms) {
  const int x0 = std::max(0, static_cast<int>(std::floor(std::min(s.x0, s.x1) - s.r)));
  const int x1 = std::min(w - 1, static_cast<int>(std::ceil(std::max(s.x0, s.x1) + s.r)));
  const int y0 = std::max(ya, static_cast<int>(std::floor(std::min(s.y0, s.y1) - s.r)));
  const int y1 = std::min(yb - 1, static_cast<int>(std::ceil(std::max(s.y0, s.y1) + s.r)));
  for (int y = y0; y <= y1; ++y) {
    uint16_t* row = ms + static_cast<size_t>(y) * static_cast<size_t>(w);
    const float py = static_cast<float>(y) + 0.5f;
    for (int x = x0; x <= x1; ++x) {
      const uint16_t t = SegmentTime(s, static_cast<float>(x) + 0.5f, py);
      if (t < row[x]) row[x] = t;
    }
  }
}

}  // namespace

void CpuPasses::StampWriteTimes(const std::vector<WriteSegment>& segments, int ww, int wh,
                                uint16_t* ms) const {
  const int bands = (wh + kBand - 1) / kBand;
  std::vector<std::vector<uint32_t>> bins(static_cast<size_t>(bands));
  for (size_t i = 0; i < segments.size(); ++i) {
    const WriteSegment& s = segments[i];
    const float lo = std::min(s.y0, s.y1) - s.r - 1.0f, hi = std::max(s.y0, s.y1) + s.r + 1.0f;
    if (hi < 0.0f || lo > static_cast<float>(wh)) continue;
    const int b0 = std::max(0, static_cast<int>(lo) / kBand),
              b1 = std::min(bands - 1, static_cast<int>(hi) / kBand);
    for (int b = b0; b <= b1; ++b) bins[static_cast<size_t>(b)].push_back(static_cast<uint32_t>(i));
  }
  ParallelFor(threads_, bands, [&](int b0, int b1) {
    for (int b = b0; b < b1; ++b) {
      const int ya = b * kBand, yb = std::min(wh, ya + kBand);
      for (uint32_t i : bins[static_cast<size_t>(b)]) StampSegment(segments[i], ww, ya, yb, ms);
    }
  });
}

void CpuPasses::StampDabs(const std::vector<Dab>& dabs, const Textures& tex, Plane* ink) const {
  auto bins = BinDabs(dabs, 1.0f, ink->h);
  ParallelFor(threads_, static_cast<int>(bins.size()), [&](int b0, int b1) {
    for (int b = b0; b < b1; ++b) {
      int ya = b * kBand, yb = std::min(ink->h, ya + kBand);
      for (uint32_t i : bins[static_cast<size_t>(b)]) StampOne(dabs[i], tex, ya, yb, ink);
    }
  });
}

void CpuPasses::StampWet(const std::vector<Dab>& dabs, float scale, Plane* wet) const {
  auto bins = BinDabs(dabs, scale, wet->h);
  ParallelFor(threads_, static_cast<int>(bins.size()), [&](int b0, int b1) {
    for (int b = b0; b < b1; ++b) {
      int ya = b * kBand, yb = std::min(wet->h, ya + kBand);
      for (uint32_t i : bins[static_cast<size_t>(b)]) {
        const Dab& d = dabs[i];
        const WetDisk disk = WetExtent(d, scale, wet->w, wet->h);
        const float cx = disk.cx, cy = disk.cy, r = disk.r;
        const int y0 = std::max(ya, disk.px.y0), y1 = std::min(yb - 1, disk.px.y1);
        for (int y = y0; y <= y1; ++y) {
          float* row = wet->row(y);
          float dy = static_cast<float>(y) + 0.5f - cy;
          for (int x = disk.px.x0; x <= disk.px.x1; ++x) {
            float dx = static_cast<float>(x) + 0.5f - cx;
            float cov = std::clamp(r + 0.5f - std::sqrt(dx * dx + dy * dy), 0.0f, 1.0f);
            row[x] = std::max(row[x], cov * d.wet);
          }
        }
      }
    }
  });
}

void CpuPasses::Diffuse(const Textures& tex, int iterations, Plane* wet) const {
  // Bounds of the wet area, grown by the spread of the iterations.
  PixelBox wetted{wet->w, wet->h, -1, -1};
  for (int y = 0; y < wet->h; ++y) {
    const float* r = wet->row(y);
    for (int x = 0; x < wet->w; ++x) {
      if (r[x] > 0) {
        wetted.x0 = std::min(wetted.x0, x); wetted.x1 = std::max(wetted.x1, x);
        wetted.y0 = std::min(wetted.y0, y); wetted.y1 = std::max(wetted.y1, y);
      }
    }
  }
  if (wetted.empty()) return;
  const PixelBox box = wetted.Grown(iterations, wet->w, wet->h);
  const int bx0 = box.x0, bx1 = box.x1, by0 = box.y0, by1 = box.y1;
  // The caller thread's scratch plane; the workers get it by reference (a
  // thread_local named inside the lambda would be each worker's own).
  thread_local Plane scratch;
  Plane& next = scratch;
  next = *wet;
  for (int it = 0; it < iterations; ++it) {
    const Plane& src = *wet;
    ParallelFor(threads_, by1 - by0 + 1, [&src, &next, &tex, bx0, bx1, by0](int r0, int r1) {
      for (int y = by0 + r0; y < by0 + r1; ++y) {
        const float* up = src.row(std::max(0, y - 1));
        const float* mid = src.row(y);
        const float* dn = src.row(std::min(src.h - 1, y + 1));
        float* out = next.row(y);
        for (int x = bx0; x <= bx1; ++x) {
          int xl = std::max(0, x - 1), xr = std::min(src.w - 1, x + 1);
          float nb = std::max(std::max(up[x], dn[x]), std::max(mid[xl], mid[xr]));
          float avg = 0.25f * (up[x] + dn[x] + mid[xl] + mid[xr]);
          // Water runs along fibres: permeability from the fibre tile.
          float perm = 0.45f + 0.5f * tex.Fibre(x * 2 + 17, y * 2 + 5);
          float flow = (0.55f * nb + 0.45f * avg) * perm * 0.93f;
          out[x] = std::max(mid[x], flow);
        }
      }
    });
    std::swap(next.v, wet->v);
  }
  if (next.v.size() > 1920u * 1080u) scratch = Plane{};
}

void CpuPasses::Landscape(const LandscapeParams& p, const Textures& tex, Plane* wash) const {
  const int w = wash->w, h = wash->h;
  // Ridge heights per column (cheap, 1-D), then the per-pixel washes.
  const std::vector<float> ridge_y = RidgeTable(p, tex, w);
  const int n = static_cast<int>(p.ridges.size());
  ParallelFor(threads_, h, [&](int y0, int y1) {
    for (int y = y0; y < y1; ++y) {
      float* out = wash->row(y);
      for (int x = 0; x < w; ++x) {
        out[x] = paint::LandscapePixel(tex.noise2.data(), p.ridges.data(), ridge_y.data(), n,
                                       p.water_top, p.water_phase, p.sky, x, y, w, h);
      }
    }
  });
}

void CpuPasses::Compose(const ComposeInputs& in, const Textures& tex, int w, int h, uint8_t* rgb,
                        const BackgroundOut* background) const {
  const Plane& wash = *in.wash_low;
  const Plane* wet = in.wet_half;
  // Horizontal interpolation tables for the low-resolution planes.
  struct XTab {
    std::vector<int> i0;
    std::vector<float> t;
  };
  auto make_tab = [w](int src_w) {
    XTab tab;
    tab.i0.resize(static_cast<size_t>(w));
    tab.t.resize(static_cast<size_t>(w));
    float k = static_cast<float>(src_w) / static_cast<float>(w);
    for (int x = 0; x < w; ++x) {
      float f = std::clamp((static_cast<float>(x) + 0.5f) * k - 0.5f, 0.0f, static_cast<float>(src_w - 1));
      int i = std::min(static_cast<int>(f), std::max(0, src_w - 2));
      tab.i0[static_cast<size_t>(x)] = i;
      tab.t[static_cast<size_t>(x)] = src_w > 1 ? f - static_cast<float>(i) : 0.0f;
    }
    return tab;
  };
  const XTab wash_tab = make_tab(wash.w);
  const XTab wet_tab = wet != nullptr ? make_tab(wet->w) : XTab{};
  // Paper blotches, at the wash plane's resolution.
  Plane blotch;
  blotch.Reset(wash.w, wash.h);
  const float bscale = static_cast<float>(w) / static_cast<float>(wash.w) / 220.0f;
  for (int y = 0; y < wash.h; ++y) {
    for (int x = 0; x < wash.w; ++x) {
      blotch.row(y)[x] = paint::PaperMottle(tex.noise2.data(), x, y, bscale);
    }
  }
  // Vertical interpolation of a plane into a row buffer.
  auto vrow = [h](const Plane& p, int y, std::vector<float>* out) {
    float f = std::clamp((static_cast<float>(y) + 0.5f) * static_cast<float>(p.h) / static_cast<float>(h) - 0.5f,
                         0.0f, static_cast<float>(p.h - 1));
    int y0 = static_cast<int>(f), y1 = std::min(y0 + 1, p.h - 1);
    float t = f - static_cast<float>(y0);
    const float* a = p.row(y0);
    const float* b = p.row(y1);
    out->resize(static_cast<size_t>(p.w) + 1);
    for (int x = 0; x < p.w; ++x) (*out)[static_cast<size_t>(x)] = a[x] + (b[x] - a[x]) * t;
    (*out)[static_cast<size_t>(p.w)] = (*out)[static_cast<size_t>(p.w - 1)];
  };
  ParallelFor(threads_, h, [&](int y0, int y1) {
    std::vector<float> wash_row, blotch_row, wet_row;
    for (int y = y0; y < y1; ++y) {
      const float* ink = in.ink->row(y);
      uint8_t* out = rgb + static_cast<size_t>(y) * static_cast<size_t>(w) * 3;
      vrow(wash, y, &wash_row);
      vrow(blotch, y, &blotch_row);
      if (wet != nullptr) vrow(*wet, y, &wet_row);
      for (int x = 0; x < w; ++x) {
        const size_t xs = static_cast<size_t>(x);
        const float pf = tex.Paper(x + in.fibre_dx, y + in.fibre_dy);
        const size_t i = static_cast<size_t>(wash_tab.i0[xs]);
        const float t = wash_tab.t[xs];
        float bl = blotch_row[i] + (blotch_row[i + 1] - blotch_row[i]) * t;
        float wa = wash_row[i] + (wash_row[i + 1] - wash_row[i]) * t;
        float paper_k = paint::PaperTone(bl, pf);
        // The sizing's mottle takes more or less pigment; fibres take less.
        wa = paint::WashTaken(wa, bl, pf);
        const float mix = paint::WashMix(wa);
        float a = ink[x];
        if (wet != nullptr) {
          const size_t j = static_cast<size_t>(wet_tab.i0[xs]);
          float halo = wet_row[j] + (wet_row[j + 1] - wet_row[j]) * wet_tab.t[xs];
          if (halo > 0.0f) {
            // The halo creeps along the ink's fibre tile.
            const float fib = tex.Fibre(x + in.fibre_dx, y + in.fibre_dy);
            float spread = halo * (0.22f + 0.28f * fib);
            a = 1.0f - (1.0f - a) * (1.0f - spread);
          }
        }
        for (int c = 0; c < 3; ++c) {
          float paper = in.paper_rgb[c] * paper_k;
          float v = paint::WashChannel(paper, in.wash_rgb[c], in.wash_light_rgb[c], wa, mix);
          v = v + (in.ink_rgb[c] - v) * a;
          out[x * 3 + c] = static_cast<uint8_t>(std::clamp(v + 0.5f, 0.0f, 255.0f));
        }
      }
      if (background == nullptr) continue;
      // The writing's background: the same pixel without the ink where the
      // brush comes, the final pixel elsewhere (equal there).
      uint8_t* bg = background->rgb + static_cast<size_t>(y) * static_cast<size_t>(w) * 3;
      std::copy_n(out, static_cast<size_t>(w) * 3, bg);
      const int ww = background->ww;
      const uint16_t* ms =
          background->ms +
          static_cast<size_t>(std::min(y / 2, background->wh - 1)) * static_cast<size_t>(ww);
      for (int x = 0; x < w; ++x) {
        if (ms[std::min(x / 2, ww - 1)] == kNotWritten) {
          x |= 1;  // the block's other pixel has the same time (x / 2 < ww - 1 here, or the last
                   // block)
          continue;
        }
        const size_t xs = static_cast<size_t>(x);
        // No ink and no wet halo here: the final pixel is the background.
        if (ink[x] <= 0.0f) {
          if (wet == nullptr) continue;
          const size_t j = static_cast<size_t>(wet_tab.i0[xs]);
          if (wet_row[j] <= 0.0f && wet_row[j + 1] <= 0.0f) continue;
        }
        const float pf = tex.Paper(x + in.fibre_dx, y + in.fibre_dy);
        const size_t i = static_cast<size_t>(wash_tab.i0[xs]);
        const float t = wash_tab.t[xs];
        float bl = blotch_row[i] + (blotch_row[i + 1] - blotch_row[i]) * t;
        float wa = wash_row[i] + (wash_row[i + 1] - wash_row[i]) * t;
        float paper_k = paint::PaperTone(bl, pf);
        wa = paint::WashTaken(wa, bl, pf);
        const float mix = paint::WashMix(wa);
        for (int c = 0; c < 3; ++c) {
          float paper = in.paper_rgb[c] * paper_k;
          float v = paint::WashChannel(paper, in.wash_rgb[c], in.wash_light_rgb[c], wa, mix);
          bg[x * 3 + c] = static_cast<uint8_t>(std::clamp(v + 0.5f, 0.0f, 255.0f));
        }
      }
    }
  });
}

void CpuPasses::PhotoWash(const PhotoInput& photo, const CanvasPlanes& planes, Plane* wash) const {
  const int w = planes.lw, h = planes.lh;
  const image::Image small = image::ResizeRegion(*photo.image, photo.x0, photo.y0, photo.w, photo.h, w, h);
  if (small.empty()) {  // a window CheckPlan refuses (Run checks first): no wash
    std::fill(wash->v.begin(), wash->v.end(), 0.0f);
    return;
  }
  image::UninitVector<float> lum(static_cast<size_t>(w) * static_cast<size_t>(h));  // each pass writes every element
  image::UninitVector<float> tmp(lum.size());
  auto rows = [&](auto&& fn) {
    ParallelFor(threads_, h, [&](int y0, int y1) {
      for (int y = y0; y < y1; ++y) fn(y);
    });
  };
  rows([&](int y) {
    const uint8_t* r = small.row(y);
    float* out = lum.data() + static_cast<size_t>(y) * static_cast<size_t>(w);
    for (int x = 0; x < w; ++x) {
      out[x] = (0.299f * r[x * 3] + 0.587f * r[x * 3 + 1] + 0.114f * r[x * 3 + 2]) / 255.0f;
    }
  });
  // The ink painting (paint.h): edge-preserving smoothing, the tones as a
  // few ink values, their wet bleeding (a box blur along x, then y), then
  // edges, bleeding and the fade under the text per pixel.
  const float* lp = lum.data();
  float* tp = tmp.data();
  rows([&](int y) {
    float* out = tp + static_cast<size_t>(y) * static_cast<size_t>(w);
    for (int x = 0; x < w; ++x) out[x] = paint::PhotoSmooth(lp, w, h, x, y);
  });
  image::UninitVector<float> tone(lum.size()), bleed(lum.size());
  float* qp = tone.data();
  rows([&](int y) {
    const size_t o = static_cast<size_t>(y) * static_cast<size_t>(w);
    for (int x = 0; x < w; ++x) {
      qp[o + static_cast<size_t>(x)] =
          paint::PhotoTone(tp[o + static_cast<size_t>(x)], photo.lum_lo, photo.lum_hi);
    }
  });
  float* bx = lum.data();  // the luminance is no longer needed
  rows([&](int y) {
    float* out = bx + static_cast<size_t>(y) * static_cast<size_t>(w);
    for (int x = 0; x < w; ++x) out[x] = paint::BoxAt(qp, w, h, x, y, 1, paint::kBleedRadius);
  });
  float* bp = bleed.data();
  rows([&](int y) {
    float* out = bp + static_cast<size_t>(y) * static_cast<size_t>(w);
    for (int x = 0; x < w; ++x) out[x] = paint::BoxAt(bx, w, h, x, y, 0, paint::kBleedRadius);
  });
  // Wash pixels per canvas pixel, and the soft margin around the text block.
  paint::PhotoText text{};
  text.sx = static_cast<float>(w) / static_cast<float>(planes.w);
  text.sy = static_cast<float>(h) / static_cast<float>(planes.h);
  text.margin = 0.04f * static_cast<float>(w) / text.sx;
  text.x0 = photo.text_x0;
  text.y0 = photo.text_y0;
  text.x1 = photo.text_x1;
  text.y1 = photo.text_y1;
  rows([&](int y) {
    float* out = wash->row(y);
    for (int x = 0; x < w; ++x) out[x] = paint::PhotoInk(tp, qp, bp, w, h, x, y, text);
  });
}

PhotoInput CoverPhoto(const image::Image& photo, const CanvasPlanes& planes, float text_x0, float text_y0,
                      float text_x1, float text_y1) {
  PhotoInput in;
  in.image = &photo;
  const double ar = static_cast<double>(planes.lw) / planes.lh;
  const double par = static_cast<double>(photo.width) / std::max(1, photo.height);
  in.w = photo.width;
  in.h = photo.height;
  if (par > ar) {
    in.w = static_cast<int>(photo.height * ar);
    in.x0 = (photo.width - in.w) / 2;
  } else {
    in.h = static_cast<int>(photo.width / ar);
    in.y0 = (photo.height - in.h) / 2;
  }
  in.w = std::max(1, in.w);
  in.h = std::max(1, in.h);
  // A photo whose pixels do not match its size (CheckPlan refuses it): no
  // range to measure.
  if (photo.rgb.size() !=
          static_cast<size_t>(photo.width) * static_cast<size_t>(photo.height) * 3 ||
      in.x0 + in.w > photo.width || in.y0 + in.h > photo.height) {
    in.text_x0 = text_x0;
    in.text_y0 = text_y0;
    in.text_x1 = text_x1;
    in.text_y1 = text_y1;
    return in;
  }
  // The tonal range, from a grid of the window's pixels.
  const int step =
      std::max(1, static_cast<int>(std::sqrt(static_cast<double>(in.w) * in.h / 65536.0)));
  std::vector<uint32_t> hist(256, 0);
  uint32_t n = 0;
  for (int y = in.y0; y < in.y0 + in.h; y += step) {
    const uint8_t* row = photo.row(y);
    for (int x = in.x0; x < in.x0 + in.w; x += step, ++n) {
      const uint8_t* p = row + static_cast<size_t>(x) * 3;
      ++hist[(299u * p[0] + 587u * p[1] + 114u * p[2] + 500u) / 1000u];
    }
  }
  auto percentile = [&](uint32_t rank) {
    uint32_t seen = 0;
    for (int v = 0; v < 256; ++v) {
      seen += hist[static_cast<size_t>(v)];
      if (seen > rank) return static_cast<float>(v) / 255.0f;
    }
    return 1.0f;
  };
  float lo = percentile(n / 50), hi = percentile(n - 1 - n / 50);
  if (hi - lo < 0.25f) {
    const float mid = std::clamp(0.5f * (lo + hi), 0.125f, 0.875f);
    lo = mid - 0.125f;
    hi = mid + 0.125f;
  }
  in.lum_lo = lo;
  in.lum_hi = hi;
  in.text_x0 = text_x0;
  in.text_y0 = text_y0;
  in.text_x1 = text_x1;
  in.text_y1 = text_y1;
  return in;
}

void CpuPasses::Run(const PassPlan& plan, const Textures& tex, uint8_t* rgb, Plane* ink_out,
                    PassTimes* times) {
  using Clock = std::chrono::steady_clock;
  auto ms = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  if (Status s = CheckPlan(plan); !s.ok()) {
    status_ = s;
    return;
  }
  const CanvasPlanes& pl = plan.planes;
  // Scratch planes are reused by the thread's next render (no page faults on
  // fresh memory); planes above 4K are released afterwards.
  thread_local Plane ink, wet, wash;
  const auto t0 = Clock::now();
  wash.Reset(pl.lw, pl.lh);
  if (plan.landscape != nullptr) {
    Landscape(*plan.landscape, tex, &wash);
  } else {
    PhotoWash(*plan.photo, pl, &wash);
  }
  const auto t1 = Clock::now();
  ink.Reset(pl.w, pl.h);
  StampDabs(*plan.dabs, tex, &ink);
  const WritingPlan* writing = plan.writing;
  if (writing != nullptr) {
    std::fill_n(writing->ms_out, static_cast<size_t>(pl.ww) * static_cast<size_t>(pl.wh),
                kNotWritten);
    StampWriteTimes(*writing->segments, pl.ww, pl.wh, writing->ms_out);
  }
  const auto t2 = Clock::now();
  wet.Reset(pl.ww, pl.wh);
  StampWet(*plan.dabs, pl.wet_scale(), &wet);
  Diffuse(tex, plan.diffuse_iterations, &wet);
  const auto t3 = Clock::now();
  ComposeInputs in = plan.look;
  in.wash_low = &wash;
  in.ink = &ink;
  in.wet_half = &wet;
  if (writing != nullptr) {
    const BackgroundOut bg{writing->background_out, writing->ms_out, pl.ww, pl.wh};
    Compose(in, tex, pl.w, pl.h, rgb, &bg);
  } else {
    Compose(in, tex, pl.w, pl.h, rgb);
  }
  const auto t4 = Clock::now();
  if (ink_out != nullptr) *ink_out = ink;
  if (static_cast<int64_t>(pl.w) * pl.h > 3840LL * 2160LL) {
    ink = Plane{};
    wet = Plane{};
    wash = Plane{};
  }
  if (times != nullptr) *times = PassTimes{ms(t0, t1), ms(t1, t2), ms(t2, t3), ms(t3, t4)};
}

Status CheckPlan(const PassPlan& plan) {
  const CanvasPlanes& p = plan.planes;
  const CanvasPlanes want = PlanesFor(p.w, p.h);
  if (p.w < 1 || p.h < 1 || p.ww != want.ww || p.wh != want.wh || p.lw != want.lw || p.lh != want.lh) {
    return Internal("pass plan: plane sizes are not PlanesFor(" + std::to_string(p.w) + ", " + std::to_string(p.h) +
                    ")");
  }
  if (plan.dabs == nullptr) return Internal("pass plan: no dab list");
  if ((plan.landscape == nullptr) == (plan.photo == nullptr)) {
    return Internal("pass plan: needs exactly one of a landscape and a photo");
  }
  if (const PhotoInput* ph = plan.photo; ph != nullptr) {
    const image::Image* im = ph->image;
    if (im == nullptr || im->empty() ||
        im->rgb.size() != static_cast<size_t>(im->width) * static_cast<size_t>(im->height) * 3) {
      return Internal("pass plan: the photo has no pixels or not width*height*3 bytes");
    }
    if (ph->w < 1 || ph->h < 1 || ph->x0 < 0 || ph->y0 < 0 || ph->x0 > im->width - ph->w ||
        ph->y0 > im->height - ph->h) {
      return Internal("pass plan: the photo window " + std::to_string(ph->w) + "x" + std::to_string(ph->h) + "+" +
                      std::to_string(ph->x0) + "+" + std::to_string(ph->y0) + " is not inside the " +
                      std::to_string(im->width) + "x" + std::to_string(im->height) + " photo");
    }
  }
  if (plan.landscape != nullptr && plan.landscape->ridges.size() > static_cast<size_t>(kMaxRidges)) {
    return Internal("pass plan: more than " + std::to_string(kMaxRidges) + " ridges");
  }
  if (const WritingPlan* wr = plan.writing; wr != nullptr) {
    if (wr->segments == nullptr) return Internal("pass plan: the writing has no segments");
    if (wr->ms_out == nullptr || wr->background_out == nullptr) {
      return Internal("pass plan: the writing has nowhere to go");
    }
    for (const WriteSegment& s : *wr->segments) {
      if (!(s.r >= 0.0f && s.r < 4096.0f && s.t0 >= 0.0f && s.t0 <= s.t1 && s.t1 < kNotWritten)) {
        return Internal("pass plan: a write segment with a bad radius or times");
      }
    }
  }
  return Status::Ok();
}

CanvasPlanes PlanesFor(int w, int h) {
  CanvasPlanes p;
  p.w = std::max(1, w);
  p.h = std::max(1, h);
  p.ww = std::max(1, w / 2);
  p.wh = std::max(1, h / 2);
  p.lw = std::max(8, w / 3);
  p.lh = std::max(8, h / 3);
  return p;
}

PixelBox WetBounds(const std::vector<Dab>& dabs, float scale, int ww, int wh) {
  PixelBox b{ww, wh, -1, -1};
  for (const Dab& d : dabs) {
    const PixelBox px = WetExtent(d, scale, ww, wh).px;  // what StampWet may write
    if (px.empty()) continue;
    b.x0 = std::min(b.x0, px.x0);
    b.y0 = std::min(b.y0, px.y0);
    b.x1 = std::max(b.x1, px.x1);
    b.y1 = std::max(b.y1, px.y1);
  }
  if (b.x1 < 0) return PixelBox{};
  return b;
}

std::vector<float> RidgeTable(const LandscapeParams& p, const Textures& tex, int w) {
  std::vector<float> t(static_cast<size_t>(w) * p.ridges.size());
  for (size_t r = 0; r < p.ridges.size(); ++r) {
    for (int x = 0; x < w; ++x) {
      float fx = (static_cast<float>(x) + 0.5f) / static_cast<float>(w);
      t[r * static_cast<size_t>(w) + static_cast<size_t>(x)] = RidgeY(p.ridges[r], tex, fx);
    }
  }
  return t;
}

float RidgeY(const Ridge& rg, const Textures& tex, float fx) {
  float t = fx * rg.freq + rg.phase;
  float n = 0.6f * tex.Noise1(t * 8.0f) + 0.28f * tex.Noise1(t * 21.0f + 300.0f) +
            0.12f * tex.Noise1(t * 55.0f + 900.0f);
  // Peaks: sharpen the noise so ridges rise to summits.
  n = std::pow(std::clamp(n, 0.0f, 1.0f), 1.6f);
  return rg.base - rg.amp * n * 1.6f;
}

float Textures::Noise1(float t) const {
  float f = std::floor(t);
  float fr = t - f;
  int i = static_cast<int>(static_cast<int64_t>(f) & (kNoise1 - 1));
  float a = noise1[static_cast<size_t>(i)], b = noise1[static_cast<size_t>((i + 1) & (kNoise1 - 1))];
  float s = fr * fr * (3.0f - 2.0f * fr);
  return a + (b - a) * s;
}

float Textures::Noise2(float x, float y) const {
  float fx = std::floor(x), fy = std::floor(y);
  float tx = x - fx, ty = y - fy;
  int ix = static_cast<int>(static_cast<int64_t>(fx) & (kNoise2 - 1));
  int iy = static_cast<int>(static_cast<int64_t>(fy) & (kNoise2 - 1));
  int jx = (ix + 1) & (kNoise2 - 1), jy = (iy + 1) & (kNoise2 - 1);
  auto at = [&](int a, int b) { return noise2[static_cast<size_t>(b * kNoise2 + a)]; };
  float sx = tx * tx * (3.0f - 2.0f * tx), sy = ty * ty * (3.0f - 2.0f * ty);
  float a = at(ix, iy) + (at(jx, iy) - at(ix, iy)) * sx;
  float b = at(ix, jy) + (at(jx, jy) - at(ix, jy)) * sx;
  return a + (b - a) * sy;
}

float Textures::Fbm2(float x, float y, int octaves) const {
  float sum = 0, amp = 0.5f, norm = 0;
  for (int o = 0; o < octaves; ++o) {
    sum += amp * Noise2(x, y);
    norm += amp;
    x = x * 2.03f + 17.0f;
    y = y * 2.03f + 31.0f;
    amp *= 0.5f;
  }
  return sum / norm;
}

Textures Textures::Build() {
  Textures t;
  Rng rng(0x5eedF1BEull);
  t.noise1.resize(kNoise1);
  for (auto& v : t.noise1) v = rng.Uniform();
  t.noise2.resize(static_cast<size_t>(kNoise2) * kNoise2);
  for (auto& v : t.noise2) v = rng.Uniform();
  // Paper: fine grain plus a mat of fibres, tileable.
  t.fibre.assign(static_cast<size_t>(kFibre) * kFibre, 0.0f);
  for (int y = 0; y < kFibre; ++y) {
    for (int x = 0; x < kFibre; ++x) {
      t.fibre[static_cast<size_t>(y * kFibre + x)] =
          0.35f * t.Noise2(static_cast<float>(x) / 2.0f, static_cast<float>(y) / 2.0f) +
          0.25f * rng.Uniform();
    }
  }
  for (int f = 0; f < 5000; ++f) {
    float x = rng.Uniform() * kFibre, y = rng.Uniform() * kFibre;
    float ang = rng.Uniform() * 6.2832f;
    float len = 6.0f + rng.Uniform() * 30.0f;
    float curl = (rng.Uniform() - 0.5f) * 0.15f;
    float strength = 0.15f + 0.35f * rng.Uniform();
    for (float s = 0; s < len; s += 0.7f) {
      int ix = static_cast<int>(x) & (kFibre - 1), iy = static_cast<int>(y) & (kFibre - 1);
      float& v = t.fibre[static_cast<size_t>(iy * kFibre + ix)];
      v = std::min(1.6f, v + strength);
      x += std::cos(ang) * 0.7f;
      y += std::sin(ang) * 0.7f;
      ang += curl;
    }
  }
  float lo = 1e9f, hi = -1e9f;
  for (float v : t.fibre) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  for (auto& v : t.fibre) v = (v - lo) / (hi - lo);
  // 宣纸: a faint grain, then long thin fibres at random angles, sparse (a
  // few percent of the sheet), each tapering at its ends, drawn with
  // bilinear coverage (no stair-stepped lines). No lattice, no net.
  constexpr int P = kPaper;
  std::vector<float> paper(static_cast<size_t>(P) * P);
  for (int y = 0; y < P; ++y) {
    for (int x = 0; x < P; ++x) {
      paper[static_cast<size_t>(y) * P + static_cast<size_t>(x)] =
          0.2f * paint::HashCorner(x, y, 89u);
    }
  }
  Rng frng(0x9a9e5f1bull);
  for (int f = 0; f < 1100; ++f) {
    float x = frng.Uniform() * P, y = frng.Uniform() * P;
    float ang = frng.Uniform() * 6.2831853f;
    const float u = frng.Uniform();
    const float len = 50.0f + 190.0f * u * u;
    const float curl = (frng.Uniform() - 0.5f) * 0.005f;
    const float strength = 0.25f + 0.5f * frng.Uniform();
    const float wander_phase = frng.Uniform() * 6.2831853f;  // a gentle wave along the fibre
    for (float s = 0; s < len; s += 0.5f) {
      const float taper = std::min(1.0f, std::min(s, len - s) / 12.0f);
      const float fx = std::floor(x), fy = std::floor(y);
      const float ax = x - fx, ay = y - fy;
      const int ix = static_cast<int>(fx), iy = static_cast<int>(fy);
      const float wts[4] = {(1 - ax) * (1 - ay), ax * (1 - ay), (1 - ax) * ay, ax * ay};
      for (int k = 0; k < 4; ++k) {
        const int px = (ix + (k & 1)) & (P - 1), py = (iy + (k >> 1)) & (P - 1);
        float& v = paper[static_cast<size_t>(py) * P + static_cast<size_t>(px)];
        v = std::max(v, strength * taper * std::min(1.0f, wts[k] * 1.6f));
      }
      x += std::cos(ang) * 0.5f;
      y += std::sin(ang) * 0.5f;
      ang += curl + 0.006f * std::sin(s * 0.045f + wander_phase);
    }
  }
  t.paper.resize(paper.size());
  for (size_t i = 0; i < paper.size(); ++i) {
    t.paper[i] = static_cast<uint8_t>(std::clamp(paper[i], 0.0f, 1.0f) * 255.0f + 0.5f);
  }
  return t;
}

}  // namespace danqing::render
