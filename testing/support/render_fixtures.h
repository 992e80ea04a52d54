// Inputs shared by the tests that compare a render backend with the CPU
// reference (tests/render/render_backend_test.cc on a real GPU,
// render_cuda_emulated_test.cc on the host emulation): the two test poems,
// render options, and a synthetic photo. Header-only: those tests link
// neither the fake NVML nor the kubelet emulator.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>

#include "image/image.h"
#include "render/renderer.h"

namespace danqing::render::testing_fixtures {

inline const char* const kPoems[] = {
    "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。",
    "千山鸟飞绝，万径人踪灭。孤舟蓑笠翁，独钓寒江雪。",
};

inline Inscription Poem(int i) { return {kPoems[i % 2], "登高", "王之涣", "甲辰春"}; }

// Where the centre of sample (x, y) of a res x res grid over a placement's
// 1024 box (Renderer::Placement::m) falls on a w x h canvas: that pixel, or
// nothing when it falls outside. How the tests and bench/legibility read the
// ink a character left in its cell.
struct CanvasPixel {
  int x = 0, y = 0;
};
inline std::optional<CanvasPixel> BoxSampleOnCanvas(const Renderer::Placement& p, int x, int y,
                                                    int res, int w, int h) {
  const float bx = (static_cast<float>(x) + 0.5f) * 1024.0f / static_cast<float>(res);
  const float by = (static_cast<float>(y) + 0.5f) * 1024.0f / static_cast<float>(res);
  const int cx = static_cast<int>(p.m[0] * bx + p.m[1] * by + p.m[2]);
  const int cy = static_cast<int>(p.m[3] * bx + p.m[4] * by + p.m[5]);
  if (cx < 0 || cy < 0 || cx >= w || cy >= h) return std::nullopt;
  return CanvasPixel{cx, cy};
}

// Cao (dry strokes) by default: the bristle path.
inline RenderOptions Opts(uint64_t seed, Background bg, int w, int h, Style style = Style::kCao) {
  RenderOptions o;
  o.width = w;
  o.height = h;
  o.seed = seed;
  o.background = bg;
  o.style = style;
  return o;
}

// A w x h photo whose pixel (x, y) is pixel(x, y, rgb), and whether (x, y)
// lies in the disc of radius r about (cx, cy).
template <typename Pixel>
image::Image SyntheticPhoto(int w, int h, int cx, int cy, int r, Pixel pixel) {
  image::Image photo;
  photo.width = w;
  photo.height = h;
  photo.rgb.resize(static_cast<size_t>(w) * static_cast<size_t>(h) * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const bool disc = (x - cx) * (x - cx) + (y - cy) * (y - cy) < r * r;
      pixel(x, y, disc, photo.row(y) + static_cast<size_t>(x) * 3);
    }
  }
  return photo;
}

// A grey gradient with a dark disc: tones and edges for the photo wash.
// w x h; the disc sits at (5w/8, 5h/12) with radius 5w/32.
inline image::Image GradientDiscPhoto(int w, int h) {
  return SyntheticPhoto(w, h, 5 * w / 8, 5 * h / 12, 5 * w / 32, [w](int x, int, bool disc, uint8_t* p) {
    std::fill_n(p, 3, static_cast<uint8_t>(disc ? 30 : 60 + (x * 180) / w));
  });
}

// A photo whose channels differ: red rises along x, green along y, blue in
// diagonal stripes, with a dark disc for edges, so a kernel that mixes up
// channels or rows shows.
inline image::Image ColourPhoto(int w, int h) {
  const int r = std::max(1, std::min(w, h) / 4);
  return SyntheticPhoto(w, h, w / 3, 2 * h / 3, r, [w, h](int x, int y, bool disc, uint8_t* p) {
    p[0] = static_cast<uint8_t>(disc ? 20 : 40 + (x * 200) / w);
    p[1] = static_cast<uint8_t>(disc ? 35 : 250 - (y * 210) / h);
    p[2] = static_cast<uint8_t>(((x + 2 * y) / 7) % 2 == 0 ? 230 : 15);
  });
}

}  // namespace danqing::render::testing_fixtures
