// The painted backgrounds (issue 27): landscape ridge edges without
// staircases, 远近 tones, the paper without a regular net, the photo as an ink
// painting of a few ink values that stays recognisable, determinism per seed.
// CPU/CUDA parity of the same passes: render_cuda_emulated_test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "image/image.h"
#include "render/paint.h"
#include "render/passes.h"
#include "render/renderer.h"
#include "testing/support/render_fixtures.h"

namespace danqing::render {
namespace {

const Textures& Tex() {
  static const Textures* t = new Textures(Textures::Build());
  return *t;
}

// A ridge with steep flanks everywhere (high frequency, tall relief), fully
// inside the width, no mist band near its edge, no water, no sky.
LandscapeParams SteepRidge() {
  LandscapeParams p;
  p.ridges.push_back({0.75f, 0.3f, 3.0f, 5.0f, 0.8f, 0.6f, -0.2f, 1.2f});
  p.water_top = 2.0f;
  p.sky = 0.0f;
  return p;
}

// Rows that cross the ridge's edge where it is steep (|slope| >= 2 plane
// pixels per pixel): the first pixel with wash, walking from outside (zero)
// into the ridge, over the wash two pixels further in. A coverage-based edge
// gives that first pixel part of the ink (about half or less); an edge
// anti-aliased only down the columns gives it all of it on steep flanks.
std::vector<double> EdgeRatios(const Plane& wash, const std::vector<float>& ridge_y) {
  const int w = wash.w, h = wash.h;
  std::vector<double> ratios;
  for (int x = 3; x < w - 3; ++x) {
    const float slope =
        (ridge_y[static_cast<size_t>(x + 1)] - ridge_y[static_cast<size_t>(x - 1)]) *
        static_cast<float>(h) / 2.0f;
    if (std::fabs(slope) < 2.0f) continue;
    const int dir = slope > 0 ? -1 : 1;  // ridge line falls to the right: inside is to the left
    for (int y = 1; y < h - 1; ++y) {
      const float* row = wash.row(y);
      const int xo = x, xi = x + dir;  // outside, first inside
      if (row[xo] != 0.0f || row[xi] <= 0.0f) continue;
      const float deeper = row[xi + 2 * dir];
      if (deeper < 0.05f) continue;
      ratios.push_back(static_cast<double>(row[xi]) / static_cast<double>(deeper));
    }
  }
  return ratios;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 1.0 : v[v.size() / 2];
}

TEST(LandscapeTest, RidgeEdgesAreCoverageNotStairsAtAnySize) {
  const LandscapeParams p = SteepRidge();
  // (Down to 1280x720: on smaller planes the relief of this ridge changes
  // its tone over fewer pixels than the test's two; the column test below
  // covers tiny canvases.)
  for (auto [w, h] : {std::pair{1920, 1080}, std::pair{3840, 2160}, std::pair{1280, 720}}) {
    const CanvasPlanes planes = PlanesFor(w, h);
    Plane wash;
    wash.Reset(planes.lw, planes.lh);
    CpuPasses(1).Landscape(p, Tex(), &wash);
    const std::vector<float> ridge_y = RidgeTable(p, Tex(), planes.lw);
    const std::vector<double> ratios = EdgeRatios(wash, ridge_y);
    ASSERT_GE(ratios.size(), 8u) << w << "x" << h << ": the ridge has steep flanks";
    const size_t soft = static_cast<size_t>(
        std::count_if(ratios.begin(), ratios.end(), [](double r) { return r < 0.8; }));
    std::printf("%dx%d: %zu steep edge crossings, median first/inner %.2f, %.0f%% partial\n", w, h,
                ratios.size(), Median(ratios),
                100.0 * static_cast<double>(soft) / static_cast<double>(ratios.size()));
    EXPECT_LT(Median(ratios), 0.5) << w << "x" << h;
    EXPECT_GE(static_cast<double>(soft), 0.75 * static_cast<double>(ratios.size()))
        << w << "x" << h;
  }
}

TEST(LandscapeTest, EdgesTakeIntermediateValuesDownTheColumnsToo) {
  // Where the ridge is flat, the edge is a ramp down each column: between
  // the sky (0) and the ridge there is a pixel of part of the ink, at any
  // canvas size (the ramp is in pixels, not a fraction of the height).
  LandscapeParams p = SteepRidge();
  p.ridges[0].freq = 1.0f;
  p.ridges[0].amp = 0.12f;
  for (auto [w, h] : {std::pair{1920, 1080}, std::pair{480, 270}, std::pair{240, 135}}) {
    const CanvasPlanes planes = PlanesFor(w, h);
    Plane wash;
    wash.Reset(planes.lw, planes.lh);
    CpuPasses(1).Landscape(p, Tex(), &wash);
    const std::vector<float> ridge_y = RidgeTable(p, Tex(), planes.lw);
    int flat = 0, ramps = 0;
    for (int x = 1; x < wash.w - 1; ++x) {
      const float slope =
          (ridge_y[static_cast<size_t>(x + 1)] - ridge_y[static_cast<size_t>(x - 1)]) *
          static_cast<float>(wash.h) / 2.0f;
      if (std::fabs(slope) > 0.3f) continue;
      ++flat;
      int y = 0;
      while (y < wash.h && wash.row(y)[x] == 0.0f) ++y;
      if (y + 3 >= wash.h) continue;
      if (wash.row(y)[x] < 0.75f * wash.row(y + 2)[x]) ++ramps;
    }
    std::printf("%dx%d: %d flat columns, %d with a ramp\n", w, h, flat, ramps);
    ASSERT_GT(flat, 2) << w << "x" << h;
    EXPECT_GE(ramps, flat * 9 / 10) << w << "x" << h;
  }
}

TEST(LandscapeTest, PaleWashesAreBluerGreyThanDenseOnes) {
  // 远近: far ridges are pale washes; Compose gives them the cool grey of
  // dilute ink, the dense near ridges the warm black.
  const int w = 64, h = 48;
  const CanvasPlanes planes = PlanesFor(w, h);
  auto compose = [&](float density) {
    Plane wash, ink;
    wash.Reset(planes.lw, planes.lh);
    std::fill(wash.v.begin(), wash.v.end(), density);
    ink.Reset(w, h);
    ComposeInputs in;
    in.wash_low = &wash;
    in.ink = &ink;
    std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
    CpuPasses(1).Compose(in, Tex(), w, h, rgb.data());
    double r = 0, b = 0;
    for (size_t i = 0; i < rgb.size(); i += 3) {
      r += in.paper_rgb[0] - rgb[i];
      b += in.paper_rgb[2] - rgb[i + 2];
    }
    return b / r;  // how much of the darkening is in blue against red
  };
  const double pale = compose(0.15f), dense = compose(0.75f);
  EXPECT_LT(pale, dense - 0.15) << "pale " << pale << ", dense " << dense;
}

TEST(LandscapeTest, WaterIsAWashNotLines) {
  // Below the water line: no thin dark lines (no pixel much darker than the
  // mean of the rows three pixels above and below it).
  LandscapeParams p;
  p.water_top = 0.5f;
  p.water_phase = 7.0f;
  const CanvasPlanes planes = PlanesFor(1920, 1080);
  Plane wash;
  wash.Reset(planes.lw, planes.lh);
  CpuPasses(1).Landscape(p, Tex(), &wash);
  double sum = 0;
  float worst = 0;
  for (int y = wash.h / 2 + 4; y < wash.h - 4; ++y) {
    for (int x = 0; x < wash.w; ++x) {
      const float v = wash.row(y)[x];
      sum += v;
      worst = std::max(worst, v - 0.5f * (wash.row(y - 3)[x] + wash.row(y + 3)[x]));
    }
  }
  EXPECT_GT(sum, 0.0) << "there is a water wash";
  EXPECT_LT(worst, 0.06f) << "a line across the water";
}

// The paper alone (no wash, no ink), its luminance with the slow tone taken
// out (minus a 17x17 box mean): the texture.
std::vector<float> PaperDetail(int w, int h, int seed_dx, int seed_dy) {
  Plane wash, ink;
  const CanvasPlanes planes = PlanesFor(w, h);
  wash.Reset(planes.lw, planes.lh);
  ink.Reset(w, h);
  ComposeInputs in;
  in.wash_low = &wash;
  in.ink = &ink;
  in.fibre_dx = seed_dx;
  in.fibre_dy = seed_dy;
  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
  CpuPasses(2).Compose(in, Tex(), w, h, rgb.data());
  std::vector<float> lum(static_cast<size_t>(w) * h), tmp(lum.size()), out(lum.size());
  for (size_t i = 0; i < lum.size(); ++i) {
    lum[i] = 0.299f * rgb[i * 3] + 0.587f * rgb[i * 3 + 1] + 0.114f * rgb[i * 3 + 2];
  }
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x)
      tmp[static_cast<size_t>(y) * w + x] = paint::BoxAt(lum.data(), w, h, x, y, 1, 8);
  }
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const size_t i = static_cast<size_t>(y) * w + x;
      out[i] = lum[i] - paint::BoxAt(tmp.data(), w, h, x, y, 0, 8);
    }
  }
  return out;
}

TEST(PaperTest, NoRegularNet) {
  // Autocorrelation of the paper's texture along rows and columns (every
  // lag from 12 pixels to most of the canvas): a tiled or lattice texture
  // has a strong peak at its period; 宣纸's fibres and sizing have none.
  const int w = 1920, h = 1080;
  const std::vector<float> d = PaperDetail(w, h, 123, 45);
  double var = 0;
  for (float v : d) var += static_cast<double>(v) * v;
  var /= static_cast<double>(d.size());
  ASSERT_GT(var, 0.05) << "the paper has a texture";
  double peak = 0;
  int peak_lag = 0;
  for (int lag = 12; lag < 1400; lag += 1) {
    double s = 0;
    size_t n = 0;
    for (int y = 8; y < h - 8; y += 9) {
      const float* r = d.data() + static_cast<size_t>(y) * w;
      for (int x = 8; x + lag < w - 8; ++x, ++n) s += static_cast<double>(r[x]) * r[x + lag];
    }
    const double c = s / static_cast<double>(n) / var;
    if (c > peak) {
      peak = c;
      peak_lag = lag;
    }
  }
  for (int lag = 12; lag < 900; lag += 1) {
    double s = 0;
    size_t n = 0;
    for (int x = 8; x < w - 8; x += 9) {
      for (int y = 8; y + lag < h - 8; ++y, ++n) {
        s += static_cast<double>(d[static_cast<size_t>(y) * w + x]) *
             d[static_cast<size_t>(y + lag) * w + x];
      }
    }
    const double c = s / static_cast<double>(n) / var;
    if (c > peak) {
      peak = c;
      peak_lag = lag;
    }
  }
  std::printf("paper texture: strongest autocorrelation %.3f at lag %d\n", peak, peak_lag);
  EXPECT_LT(peak, 0.15) << "a periodic pattern at lag " << peak_lag;
}

TEST(PaperTest, FibresAreLongThinAndSparse) {
  const Textures& t = Tex();
  ASSERT_EQ(t.paper.size(), static_cast<size_t>(Textures::kPaper) * Textures::kPaper);
  size_t fibre = 0;
  for (uint8_t v : t.paper) fibre += v > 90 ? 1 : 0;
  const double share = static_cast<double>(fibre) / static_cast<double>(t.paper.size());
  std::printf("fibre pixels: %.2f%%\n", 100.0 * share);
  EXPECT_GT(share, 0.005) << "there are fibres";
  EXPECT_LT(share, 0.08) << "sparse, not a mat";
  // Thin and long: along a row, a run of fibre pixels is short (a fibre is
  // crossed, not followed), and fibres run at every angle (runs along
  // columns are as short).
  auto mean_run = [&](bool along_x) {
    size_t runs = 0, px = 0;
    const int P = Textures::kPaper;
    for (int a = 0; a < P; a += 4) {
      int run = 0;
      for (int b = 0; b < P; ++b) {
        const uint8_t v = along_x ? t.paper[static_cast<size_t>(a) * P + b]
                                  : t.paper[static_cast<size_t>(b) * P + a];
        if (v > 90) {
          ++run;
          ++px;
        } else if (run > 0) {
          ++runs;
          run = 0;
        }
      }
    }
    return runs == 0 ? 0.0 : static_cast<double>(px) / static_cast<double>(runs);
  };
  const double rx = mean_run(true), ry = mean_run(false);
  std::printf("mean fibre run: %.1f px along rows, %.1f along columns\n", rx, ry);
  EXPECT_GT(rx, 1.0);
  EXPECT_LT(std::max(rx, ry) / std::min(rx, ry), 1.5) << "no preferred direction";
}

// The photos the tests ship (public domain, tests/data/photos/README.md).
image::Image LoadPhoto(const char* name) {
  auto img = image::ReadFile(std::string(DANQING_SOURCE_DIR) + "/tests/data/photos/" + name);
  EXPECT_TRUE(img.ok()) << name << ": " << img.status().ToString();
  return img.ok() ? std::move(img).value() : image::Image{};
}

// The photo's wash at 1920x1080, the text block outside the canvas (no fade).
Plane WashOf(const image::Image& photo, int w = 1920, int h = 1080) {
  const CanvasPlanes planes = PlanesFor(w, h);
  const PhotoInput in = CoverPhoto(photo, planes, -2000, -2000, -1990, -1990);
  Plane wash;
  wash.Reset(planes.lw, planes.lh);
  CpuPasses(2).PhotoWash(in, planes, &wash);
  return wash;
}

// Luminance of the photo's cover-fit window at the wash's size, 0..1.
std::vector<float> PhotoLum(const image::Image& photo, int w = 1920, int h = 1080) {
  const CanvasPlanes planes = PlanesFor(w, h);
  const PhotoInput in = CoverPhoto(photo, planes, 0, 0, 0, 0);
  const image::Image small =
      image::ResizeRegion(photo, in.x0, in.y0, in.w, in.h, planes.lw, planes.lh);
  std::vector<float> lum(static_cast<size_t>(planes.lw) * planes.lh);
  for (size_t i = 0; i < lum.size(); ++i) {
    lum[i] = (0.299f * small.rgb[i * 3] + 0.587f * small.rgb[i * 3 + 1] +
              0.114f * small.rgb[i * 3 + 2]) /
             255.0f;
  }
  return lum;
}

std::vector<float> Blur(const std::vector<float>& p, int w, int h, int r) {
  std::vector<float> a(p.size()), b(p.size());
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x)
      a[static_cast<size_t>(y) * w + x] = paint::BoxAt(p.data(), w, h, x, y, 1, r);
  }
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x)
      b[static_cast<size_t>(y) * w + x] = paint::BoxAt(a.data(), w, h, x, y, 0, r);
  }
  return b;
}

double Correlation(const std::vector<float>& a, const std::vector<float>& b) {
  double ma = 0, mb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ma += a[i];
    mb += b[i];
  }
  ma /= static_cast<double>(a.size());
  mb /= static_cast<double>(b.size());
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  return sab / std::sqrt(saa * sbb);
}

const char* const kPhotos[] = {"astronaut.jpg", "chelsea.jpg", "coffee.jpg", "rocket.jpg"};

TEST(WashTest, PhotoBecomesAFewInkValues) {
  // Most of the wash lies on one of the kWashLevels ink values (the paper
  // among them), the rest in the soft steps between them, the brush lines
  // and the bleeding; at least three values are used over a fair area.
  const float steps = static_cast<float>(paint::kWashLevels - 1);
  for (const char* name : kPhotos) {
    const image::Image photo = LoadPhoto(name);
    ASSERT_FALSE(photo.empty());
    const Plane wash = WashOf(photo);
    std::vector<size_t> at(paint::kWashLevels, 0);
    size_t on = 0;
    for (float v : wash.v) {
      const float k = std::round(v / paint::kWashDarkest * steps);
      const float level = k / steps * paint::kWashDarkest;
      if (std::fabs(v - level) <= 0.03f) {
        ++on;
        ++at[static_cast<size_t>(k)];
      }
    }
    const double share = static_cast<double>(on) / static_cast<double>(wash.v.size());
    int used = 0;
    for (size_t n : at)
      used += static_cast<double>(n) > 0.04 * static_cast<double>(wash.v.size()) ? 1 : 0;
    std::printf("%s: %.0f%% of the wash on an ink value, %d values used\n", name, 100.0 * share,
                used);
    EXPECT_GE(share, 0.5) << name;
    EXPECT_GE(used, 3) << name;
    EXPECT_GT(static_cast<double>(at[0]), 0.01 * static_cast<double>(wash.v.size()))
        << name << ": the paper shows through in the lights";
  }
}

TEST(WashTest, PhotoStaysRecognisable) {
  // The wash, blurred (two 9-pixel box passes on the 640x360 plane), against
  // the photo's luminance blurred the same way: correlated as the photo
  // (light where the photo is light), far less with another photo.
  const int w = 640, h = 360;
  for (size_t i = 0; i < std::size(kPhotos); ++i) {
    const image::Image photo = LoadPhoto(kPhotos[i]);
    const image::Image other = LoadPhoto(kPhotos[(i + 1) % std::size(kPhotos)]);
    ASSERT_FALSE(photo.empty());
    ASSERT_FALSE(other.empty());
    const Plane wash = WashOf(photo);
    ASSERT_EQ(wash.w, w);
    std::vector<float> light(wash.v.size());
    for (size_t k = 0; k < light.size(); ++k) light[k] = 1.0f - wash.v[k];
    const double own = Correlation(Blur(light, w, h, 4), Blur(PhotoLum(photo), w, h, 4));
    const double cross = Correlation(Blur(light, w, h, 4), Blur(PhotoLum(other), w, h, 4));
    std::printf("%s: correlation with its photo %.3f, with %s %.3f\n", kPhotos[i], own,
                kPhotos[(i + 1) % std::size(kPhotos)], cross);
    EXPECT_GE(own, 0.85) << kPhotos[i];
    EXPECT_LT(cross, own - 0.3) << kPhotos[i];
  }
}

TEST(WashTest, DarkAreasBleedAndEdgesGetBrushLines) {
  // The synthetic photo: a dark disc on a light grey gradient. Just outside
  // the disc the wash is darker than the light ground far from it (wet
  // bleeding and the line along its edge); inside it is dark.
  const image::Image photo = testing_fixtures::GradientDiscPhoto(960, 540);
  const Plane wash = WashOf(photo);
  // The disc: centre (5w/8, 5h/12), radius 5w/32 of the photo; the photo has
  // the canvas' aspect, so plane coordinates scale directly.
  const float cx = 5.0f * wash.w / 8.0f, cy = 5.0f * wash.h / 12.0f, r = 5.0f * wash.w / 32.0f;
  auto at = [&](float x, float y) { return wash.row(static_cast<int>(y))[static_cast<int>(x)]; };
  EXPECT_GT(at(cx, cy), 0.6f) << "the disc is dark ink";
  float ring = 0;
  for (int k = 1; k <= 6; ++k) ring += at(cx, cy + r + static_cast<float>(k)) / 6.0f;
  const float ground = at(cx, cy + r + 40.0f);
  std::printf("disc %.3f, just outside %.3f, ground %.3f\n", at(cx, cy), ring, ground);
  EXPECT_GT(ring, ground + 0.08f) << "bleeding and a line at the disc's edge";
}

TEST(WashTest, TheInkValuesSpanThePhotosOwnRange) {
  const CanvasPlanes planes = PlanesFor(480, 270);
  // A dim, low-contrast photo (grey 40..119 across, the canvas' aspect, so
  // the window is all of it): its own 2nd..98th percentiles.
  image::Image dim;
  dim.width = 160;
  dim.height = 90;
  dim.rgb.resize(160u * 90u * 3u);
  for (int y = 0; y < 90; ++y) {
    for (int x = 0; x < 160; ++x) {
      std::fill_n(dim.rgb.data() + (static_cast<size_t>(y) * 160 + x) * 3, 3,
                  static_cast<uint8_t>(40 + x / 2));
    }
  }
  PhotoInput in = CoverPhoto(dim, planes, 0, 0, 0, 0);
  EXPECT_NEAR(in.lum_lo, 41.6f / 255.0f, 0.006f);
  EXPECT_NEAR(in.lum_hi, 118.4f / 255.0f, 0.006f);
  // A flat photo: a range of 0.25 around its tone, not a division by zero.
  std::fill(dim.rgb.begin(), dim.rgb.end(), uint8_t{250});
  in = CoverPhoto(dim, planes, 0, 0, 0, 0);
  EXPECT_FLOAT_EQ(in.lum_hi - in.lum_lo, 0.25f);
  EXPECT_LE(in.lum_hi, 1.0f);
  // Pixels that do not match the size (the plan check refuses such a photo
  // with a clear error): nothing is read, the full range stands.
  image::Image torn;
  torn.width = 300;
  torn.height = 200;
  in = CoverPhoto(torn, planes, 0, 0, 0, 0);
  EXPECT_EQ(in.lum_lo, 0.0f);
  EXPECT_EQ(in.lum_hi, 1.0f);
  PassPlan plan;
  plan.planes = planes;
  const std::vector<Dab> dabs;
  plan.dabs = &dabs;
  plan.photo = &in;
  const Status st = CheckPlan(plan);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("photo"), std::string::npos) << st.ToString();
}

TEST(BackgroundTest, EachSeedPaintsItsOwnAndTheSameSeedTheSame) {
  auto r = Renderer::Create();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const image::Image photo = testing_fixtures::ColourPhoto(400, 300);
  for (Background bg : {Background::kLandscape, Background::kPaper, Background::kPhoto}) {
    RenderOptions o;
    o.width = 480;
    o.height = 270;
    o.background = bg;
    if (bg == Background::kPhoto) o.photo = &photo;
    o.seed = 5;
    auto a = (*r)->Render({"山水", "", "", ""}, o);
    auto b = (*r)->Render({"山水", "", "", ""}, o);
    o.seed = 6;
    o.threads = 3;
    auto c = (*r)->Render({"山水", "", "", ""}, o);
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    EXPECT_TRUE(a->rgb == b->rgb) << BackgroundName(bg);
    EXPECT_FALSE(a->rgb == c->rgb) << BackgroundName(bg);
  }
}

}  // namespace
}  // namespace danqing::render
