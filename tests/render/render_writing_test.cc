// The write-time plane (issue 28): recorded in the same render, it says when
// the brush first reached each pixel. These tests check what a player relies
// on: the plain render is unchanged by asking for it, every pixel that the
// writing changes has a time, the background is the page without ink,
// characters are written in order with a plausible rhythm, the seal last.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "render/passes.h"
#include "render/renderer.h"
#include "render/writing.h"
#include "testing/support/render_fixtures.h"

namespace danqing::render {
namespace {

using testing_fixtures::Opts;
using testing_fixtures::Poem;

class WritingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    RendererConfig c;
    c.backend = "cpu";
    auto r = Renderer::Create(c);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    renderer_ = std::move(r).value().release();
  }
  static void TearDownTestSuite() {
    delete renderer_;
    renderer_ = nullptr;
  }
  static Renderer* renderer_;
};
Renderer* WritingTest::renderer_ = nullptr;

// At time t: the final image where ms <= t, the background elsewhere.
image::PixelBuffer FrameAt(const image::Image& final_img, const Writing& wr, uint32_t t) {
  image::PixelBuffer out(final_img.rgb.size());
  for (size_t i = 0; i < static_cast<size_t>(wr.width) * static_cast<size_t>(wr.height); ++i) {
    const uint16_t ms =
        wr.ms[wr.PlaneIndex(static_cast<int>(i) % wr.width, static_cast<int>(i) / wr.width)];
    const bool inked = ms != kNotWritten && ms <= t;
    for (int c = 0; c < 3; ++c)
      out[i * 3 + c] = inked ? final_img.rgb[i * 3 + c] : wr.background.rgb[i * 3 + c];
  }
  return out;
}

TEST_F(WritingTest, EveryChangedPixelHasATimeAndTheLastFrameIsTheImage) {
  for (Background bg : {Background::kLandscape, Background::kPaper}) {
    for (bool vertical : {true, false}) {
      for (Style style : {Style::kKai, Style::kXing, Style::kCao}) {
        RenderOptions o = Opts(7, bg, 640, 400, style);
        o.vertical = vertical;
        Writing wr;
        auto img = renderer_->Render(Poem(1), o, nullptr, &wr);
        ASSERT_TRUE(img.ok()) << img.status().ToString();
        ASSERT_EQ(wr.width, 640);
        ASSERT_EQ(wr.height, 400);
        ASSERT_EQ(wr.plane_width, 320);
        ASSERT_EQ(wr.plane_height, 200);
        ASSERT_EQ(wr.ms.size(), 320u * 200u);
        ASSERT_EQ(wr.background.rgb.size(), img->rgb.size());
        // Asking for the writing leaves the image alone.
        auto plain = renderer_->Render(Poem(1), o);
        ASSERT_TRUE(plain.ok());
        EXPECT_TRUE(plain->rgb == img->rgb) << "the writing changed the image";
        size_t changed = 0, untimed = 0, timed = 0;
        for (size_t i = 0; i < img->rgb.size() / 3; ++i) {
          const bool differs = !std::equal(img->rgb.begin() + i * 3, img->rgb.begin() + i * 3 + 3,
                                           wr.background.rgb.begin() + i * 3);
          const uint16_t ms =
              wr.ms[wr.PlaneIndex(static_cast<int>(i % 640), static_cast<int>(i / 640))];
          changed += differs;
          untimed += differs && ms == kNotWritten;
          timed += ms != kNotWritten;
        }
        EXPECT_GT(changed, 5000u);
        EXPECT_EQ(untimed, 0u) << "pixels the writing changes with no time, style "
                               << static_cast<int>(style) << " bg " << static_cast<int>(bg)
                               << " vertical " << vertical;
        EXPECT_LT(timed, img->rgb.size() / 3) << "some paper is never written on";
        EXPECT_TRUE(FrameAt(*img, wr, wr.end_ms) == img->rgb);
        // Before the start only the painting (trees are part of it: time 0).
        EXPECT_FALSE(FrameAt(*img, wr, 0) == img->rgb);
        // A quatrain with title and signature: 6 to 12 s, the seal last.
        EXPECT_GE(wr.end_ms, 6000u) << static_cast<int>(style);
        EXPECT_LE(wr.end_ms, 12000u) << static_cast<int>(style);
        EXPECT_LT(wr.seal_ms, wr.end_ms);
        uint16_t latest_ink = 0;
        size_t at_seal = 0;
        for (uint16_t v : wr.ms) {
          if (v == kNotWritten) continue;
          if (v == wr.seal_ms)
            ++at_seal;
          else
            latest_ink = std::max(latest_ink, v);
        }
        EXPECT_LT(latest_ink, wr.seal_ms);
        EXPECT_GT(at_seal, 25u) << "the seal's square";
      }
    }
  }
}

// More ink at every step, and in writing order: in a vertical layout the
// columns go right to left, so the inked pixels' mean x moves left.
TEST_F(WritingTest, InkGrowsInWritingOrder) {
  RenderOptions o = Opts(3, Background::kPaper, 800, 500, Style::kXing);
  Writing wr;
  auto img = renderer_->Render(Poem(0), o, nullptr, &wr);
  ASSERT_TRUE(img.ok());
  size_t prev = 0;
  double first_x = -1, last_x = -1;
  for (int k = 1; k <= 8; ++k) {
    const uint32_t t0 = wr.seal_ms * static_cast<uint32_t>(k - 1) / 8,
                   t1 = wr.seal_ms * static_cast<uint32_t>(k) / 8;
    size_t n = 0, band = 0;
    double sx = 0;
    for (size_t i = 0; i < wr.ms.size(); ++i) {
      if (wr.ms[i] <= t1) ++n;
      if (wr.ms[i] > t0 && wr.ms[i] <= t1) {
        ++band;
        sx += static_cast<double>(i % static_cast<size_t>(wr.plane_width)) * 2;
      }
    }
    EXPECT_GT(n, prev) << "step " << k;
    prev = n;
    if (band > 0 && k == 1) first_x = sx / static_cast<double>(band);
    if (band > 0 && k == 7) last_x = sx / static_cast<double>(band);
  }
  EXPECT_GT(first_x, last_x + 100) << "right to left";
}

TEST(WritingScheduleTest, RhythmAndBounds) {
  // Two characters in two columns, two strokes each.
  std::vector<Dab> dabs;
  auto stroke = [&](float x, float y0, float y1, float phase) {
    for (float y = y0; y <= y1; y += 2) {
      Dab d;
      d.x = x;
      d.y = y;
      d.phase = phase;
      dabs.push_back(d);
    }
  };
  stroke(5, 0, 10, 0);  // a tree: part of the painting
  const size_t a = dabs.size();
  stroke(100, 0, 40, 1);
  stroke(110, 0, 40, 2);
  const size_t b = dabs.size();
  stroke(60, 0, 40, 3);
  stroke(70, 0, 40, 4);
  const size_t c = dabs.size();
  std::vector<WrittenSpan> spans = {{a, b, b, 50, 0, 0, false}, {b, c, c, 50, 1, 0, false}};
  WritingSchedule s = ScheduleWriting(dabs, spans, Style::kXing);
  ASSERT_EQ(s.dab_ms.size(), dabs.size());
  EXPECT_EQ(s.dab_ms[0], 0);
  for (size_t i = a + 1; i < c; ++i) EXPECT_GE(s.dab_ms[i], s.dab_ms[i - 1]) << i;
  // A pen lift between strokes takes longer than a step along one.
  EXPECT_GT(s.dab_ms[a + 21] - s.dab_ms[a + 20], s.dab_ms[a + 1] - s.dab_ms[a]);
  // A new column waits longer than a new stroke.
  EXPECT_GT(s.dab_ms[b] - s.dab_ms[b - 1], s.dab_ms[a + 21] - s.dab_ms[a + 20]);
  EXPECT_GT(s.seal_ms, s.dab_ms[c - 1]);
  EXPECT_GT(s.end_ms, s.seal_ms);
  // A text far too long for 16 bits plays faster and still fits.
  std::vector<Dab> many;
  std::vector<WrittenSpan> long_spans;
  for (int k = 0; k < 600; ++k) {
    const size_t begin = many.size();
    for (int i = 0; i < 40; ++i) {
      Dab d;
      d.x = static_cast<float>(k % 20) * 40;
      d.y = static_cast<float>(i) * 3;
      d.phase = static_cast<float>(k * 3 + i / 10);
      many.push_back(d);
    }
    long_spans.push_back({begin, many.size(), many.size(), 40, k / 20, 0, k % 5 == 0});
  }
  WritingSchedule l = ScheduleWriting(many, long_spans, Style::kKai);
  EXPECT_LE(l.seal_ms, kMaxWritingMs);
  EXPECT_LT(l.dab_ms.back(), l.seal_ms);
  EXPECT_GT(l.dab_ms.back(), 30000);
}

// The passes refuse a writing plan without its parts or with bad capsules.
TEST(WritingPlanTest, CheckedWithThePlan) {
  std::vector<Dab> dabs(3);
  LandscapeParams land;
  PassPlan plan;
  plan.planes = PlanesFor(64, 64);
  plan.dabs = &dabs;
  plan.landscape = &land;
  std::vector<WriteSegment> segs(2);
  std::vector<uint16_t> ms(32 * 32);
  std::vector<uint8_t> bg(64 * 64 * 3);
  WritingPlan wp;
  wp.ms_out = ms.data();
  wp.background_out = bg.data();
  plan.writing = &wp;
  EXPECT_NE(CheckPlan(plan).message().find("no segments"), std::string::npos);
  wp.segments = &segs;
  EXPECT_TRUE(CheckPlan(plan).ok());
  segs[1].t0 = 50;
  segs[1].t1 = 40;
  EXPECT_NE(CheckPlan(plan).message().find("bad radius or times"), std::string::npos);
  segs[1].t1 = 65535;
  EXPECT_NE(CheckPlan(plan).message().find("bad radius or times"), std::string::npos);
  segs[1].t1 = 60;
  wp.ms_out = nullptr;
  EXPECT_NE(CheckPlan(plan).message().find("nowhere"), std::string::npos);
}

// Capsules cover every dab's footprint and carry its time along them.
TEST(WritingSegmentsTest, CoverEveryDabAndKeepTheTimes) {
  std::vector<Dab> dabs;
  std::vector<uint16_t> ms;
  for (int k = 0; k < 60; ++k) {  // a curved stroke, then a dot of another stroke
    Dab d;
    d.x = 100 + 40 * std::cos(k * 0.05f);
    d.y = 100 + 40 * std::sin(k * 0.05f);
    d.r = 3 + (k % 7) * 0.5f;
    d.wet = k % 2 == 0 ? 0.5f : 0.0f;
    d.phase = 1;
    dabs.push_back(d);
    ms.push_back(static_cast<uint16_t>(1000 + k * 3));
  }
  Dab dot;
  dot.x = 30;
  dot.y = 30;
  dot.r = 4;
  dot.phase = 2;
  dabs.push_back(dot);
  ms.push_back(2000);
  const int halo = WritingHaloPx(2);
  const std::vector<WriteSegment> segs = BuildWriteSegments(dabs, ms, halo);
  EXPECT_LT(segs.size(), dabs.size() / 4) << "runs of dabs merge";
  for (size_t i = 0; i < dabs.size(); ++i) {
    const Dab& d = dabs[i];
    const float reach =
        (d.r * 1.1f + 1.0f + (d.wet > 0 ? static_cast<float>(halo) : 0.0f) + 2.0f) * 0.5f;
    // Points of the footprint's rim, on the half-resolution plane.
    for (int a = 0; a < 16; ++a) {
      const float px = d.x * 0.5f + 0.999f * reach * std::cos(a * 0.3927f);
      const float py = d.y * 0.5f + 0.999f * reach * std::sin(a * 0.3927f);
      uint16_t best = kNotWritten;
      for (const WriteSegment& s : segs) best = std::min(best, SegmentTime(s, px, py));
      ASSERT_NE(best, kNotWritten) << "dab " << i << " rim " << a;
      // No later than the brush passing by (along the capsule the time runs
      // linearly: a rim point ahead of the dab gets the time the brush's
      // centre passes it, within the reach's travel), no earlier than the stroke.
      EXPECT_LE(best, ms[i] + 30) << "dab " << i << " rim " << a;
      EXPECT_GE(best, i < 60 ? 1000 : 2000);
    }
    // At the dab's centre: by its own time (earlier when an earlier dab's
    // footprint, wet halo included, already reached it).
    uint16_t centre = kNotWritten;
    for (const WriteSegment& s : segs)
      centre = std::min(centre, SegmentTime(s, d.x * 0.5f, d.y * 0.5f));
    EXPECT_LE(centre, ms[i] + 1) << "dab " << i;
  }
  EXPECT_EQ(SegmentTime(segs.back(), 15, 15), 2000);
}

}  // namespace
}  // namespace danqing::render
