// The renderer writing xing and cao from the calligraphers' forms (issue 27):
// which form each character came from, the fallback one style down (counted,
// never a blank cell), bad forms files, and the column flow (sizes from the
// characters, the brush dipped at each phrase), deterministic per seed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "render/cursive_forms.h"
#include "render/renderer.h"
#include "testing/support/render_fixtures.h"

namespace danqing::render {
namespace {

namespace fs = std::filesystem;

constexpr char kPoem[] = "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。";  // 4 phrases of 5

RenderOptions Opts(Style style, uint64_t seed = 11) {
  RenderOptions o;
  o.width = 960;
  o.height = 540;
  o.style = style;
  o.background = Background::kPaper;
  o.seed = seed;
  return o;
}

// A placement's ink sampled through its affine over its 1024 box: the number
// of inked samples (ink >= 0.2) and their mean ink.
struct CellInk {
  int inked = 0;
  double mean = 0;
};
CellInk InkOf(const Renderer::Placement& pl, const std::vector<float>& ink, int w, int h) {
  CellInk out;
  constexpr int kRes = 64;
  for (int y = 0; y < kRes; ++y) {
    for (int x = 0; x < kRes; ++x) {
      const auto px = danqing::render::testing_fixtures::BoxSampleOnCanvas(pl, x, y, kRes, w, h);
      if (!px) continue;
      const int cx = px->x, cy = px->y;
      const float v =
          ink[static_cast<size_t>(cy) * static_cast<size_t>(w) + static_cast<size_t>(cx)];
      if (v < 0.2f) continue;
      ++out.inked;
      out.mean += v;
    }
  }
  if (out.inked > 0) out.mean /= out.inked;
  return out;
}

class RenderFormsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto r = Renderer::Create();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    renderer_ = std::move(r).value();
    if (renderer_->forms() == nullptr) GTEST_SKIP() << "no cursive-*.bin built (tools/cursive)";
    dir_ = fs::temp_directory_path() /
           ("danqing-forms-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  // Every poem character has ink in its box (no blank cell).
  static void ExpectNoBlankCell(const Renderer::Detail& d, const RenderOptions& o) {
    for (const auto& pl : d.placements) {
      const CellInk ci = InkOf(pl, d.ink, o.width, o.height);
      EXPECT_GT(ci.inked, 40) << "U+" << std::hex << static_cast<int>(pl.c) << " has no ink";
    }
  }
  std::unique_ptr<Renderer> renderer_;
  fs::path dir_;
};

TEST_F(RenderFormsTest, XingAndCaoAreWrittenFromTheirFormsKaiFromTheStrokeData) {
  for (Style s : {Style::kKai, Style::kXing, Style::kCao}) {
    const RenderOptions o = Opts(s);
    RenderStats st;
    Renderer::Detail d;
    auto img = renderer_->RenderDetailed({kPoem, "", "", ""}, o, &st, &d);
    ASSERT_TRUE(img.ok()) << img.status().ToString();
    ASSERT_EQ(st.characters, 20);
    ASSERT_EQ(d.placements.size(), 20u);
    for (const auto& pl : d.placements) {
      EXPECT_EQ(pl.form, s == Style::kKai ? -1 : static_cast<int>(s)) << StyleName(s);
    }
    EXPECT_EQ(st.form_characters, s == Style::kKai ? 0 : 20);
    EXPECT_EQ(st.forms_to_xing, 0);
    EXPECT_EQ(st.forms_to_kai, 0);
    ExpectNoBlankCell(d, o);
  }
}

TEST_F(RenderFormsTest, FlowVariesSizesInXingAndCaoNotInKaiAndIsDeterministic) {
  for (Style s : {Style::kKai, Style::kXing, Style::kCao}) {
    const RenderOptions o = Opts(s, 5);
    Renderer::Detail d;
    auto img = renderer_->RenderDetailed({kPoem, "", "", ""}, o, nullptr, &d);
    ASSERT_TRUE(img.ok());
    float lo = 1e9f, hi = 0;
    for (const auto& pl : d.placements) {
      lo = std::min(lo, pl.cell);
      hi = std::max(hi, pl.cell);
    }
    if (s == Style::kKai) {
      EXPECT_FLOAT_EQ(lo, hi) << "kai keeps its grid";
    } else {
      EXPECT_GT(hi / lo, 1.15f) << StyleName(s) << ": sizes follow the characters";
    }
    auto again = renderer_->Render({kPoem, "", "", ""}, o);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(img->rgb, again->rgb) << StyleName(s) << ": same seed, same image";
  }
  auto other = renderer_->Render({kPoem, "", "", ""}, Opts(Style::kCao, 6));
  auto first = renderer_->Render({kPoem, "", "", ""}, Opts(Style::kCao, 5));
  ASSERT_TRUE(other.ok() && first.ok());
  EXPECT_NE(other->rgb, first->rgb);
}

// 浓 -> 枯 over a phrase, dark again at the next: the first character of a
// phrase is darker than the last of the phrase before.
TEST_F(RenderFormsTest, TheBrushIsDippedAtEachPhrase) {
  for (Style s : {Style::kXing, Style::kCao}) {
    const RenderOptions o = Opts(s);
    Renderer::Detail d;
    ASSERT_TRUE(renderer_->RenderDetailed({kPoem, "", "", ""}, o, nullptr, &d).ok());
    ASSERT_EQ(d.placements.size(), 20u);
    int darker = 0;
    for (size_t i = 5; i < 20; i += 5) {
      const double start = InkOf(d.placements[i], d.ink, o.width, o.height).mean;
      const double end = InkOf(d.placements[i - 1], d.ink, o.width, o.height).mean;
      if (start > end) ++darker;
    }
    EXPECT_EQ(darker, 3) << StyleName(s);
  }
}

TEST_F(RenderFormsTest, NoFormsFilesFallBackToKaiCountedWithInkInEveryCell) {
  RendererConfig c;
  c.cursive_dir = dir_.string();  // empty
  auto r = Renderer::Create(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->forms(), nullptr);
  for (Style s : {Style::kXing, Style::kCao}) {
    const RenderOptions o = Opts(s);
    RenderStats st;
    Renderer::Detail d;
    ASSERT_TRUE((*r)->RenderDetailed({kPoem, "", "", ""}, o, &st, &d).ok());
    EXPECT_EQ(st.characters, 20);
    EXPECT_EQ(st.forms_to_kai, 20);
    EXPECT_EQ(st.form_characters, 0);
    for (const auto& pl : d.placements) EXPECT_EQ(pl.form, -1);
    ExpectNoBlankCell(d, o);
  }
}

TEST_F(RenderFormsTest, CaoWithoutItsFileTakesTheXingFormsCounted) {
  fs::copy_file(fs::path(renderer_->strokes_path()).parent_path() / CursiveFileName(Style::kXing),
                dir_ / CursiveFileName(Style::kXing));
  RendererConfig c;
  c.cursive_dir = dir_.string();
  auto r = Renderer::Create(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const RenderOptions o = Opts(Style::kCao);
  RenderStats st;
  Renderer::Detail d;
  ASSERT_TRUE((*r)->RenderDetailed({kPoem, "", "", ""}, o, &st, &d).ok());
  EXPECT_EQ(st.form_characters, 20);
  EXPECT_EQ(st.forms_to_xing, 20);
  EXPECT_EQ(st.forms_to_kai, 0);
  for (const auto& pl : d.placements) EXPECT_EQ(pl.form, static_cast<int>(Style::kXing));
  ExpectNoBlankCell(d, o);
}

// A form whose skeleton came out empty (no paths), and a character absent
// from the form file: both written in kai, counted; the rest from the form.
TEST_F(RenderFormsTest, AnEmptyFormOrAMissingCharacterFallsBackToKai) {
  // DQSTRK01 with 白 (no strokes) and 日 (one stroke of two points).
  std::string b = "DQSTRK01";
  auto u32 = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) b.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  };
  u32(2);
  u32(0);
  u32(U'日');  // 0x65E5 < 0x767D: the index is sorted
  u32(32);
  u32(U'白');
  u32(44);
  const unsigned char ri[] = {1, 2, 100, 0, 0x84, 0x03, 40, 0x20, 0x03, 0x84, 0x03, 40, 0};
  for (unsigned char v : ri) b.push_back(static_cast<char>(v));
  std::ofstream(dir_ / CursiveFileName(Style::kXing), std::ios::binary) << b;
  RendererConfig c;
  c.cursive_dir = dir_.string();
  auto r = Renderer::Create(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const RenderOptions o = Opts(Style::kXing);
  RenderStats st;
  Renderer::Detail d;
  ASSERT_TRUE((*r)->RenderDetailed({"白日依山尽", "", "", ""}, o, &st, &d).ok());
  EXPECT_EQ(st.characters, 5);
  EXPECT_EQ(st.form_characters, 1);  // 日
  EXPECT_EQ(st.forms_to_kai, 4);     // 白 (empty form), 依山尽 (absent)
  ASSERT_EQ(d.placements.size(), 5u);
  EXPECT_EQ(d.placements[0].form, -1);
  EXPECT_EQ(d.placements[1].form, static_cast<int>(Style::kXing));
  ExpectNoBlankCell(d, o);
}

TEST_F(RenderFormsTest, ACorruptFormsFileIsAClearErrorNamingIt) {
  std::ofstream(dir_ / CursiveFileName(Style::kCao), std::ios::binary) << "DQSTRK01 truncated";
  RendererConfig c;
  c.cursive_dir = dir_.string();
  auto r = Renderer::Create(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("cursive-cao.bin"), std::string::npos)
      << r.status().message();
  c.no_cursive = true;  // the forms turned off: kai stroke data for every style
  auto plain = Renderer::Create(c);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  RenderStats st;
  ASSERT_TRUE((*plain)->Render({kPoem, "", "", ""}, Opts(Style::kCao), &st).ok());
  EXPECT_EQ(st.forms_to_kai, 20);
}

// The write-time plane (issue 28) follows the forms' writing order: a
// character's top is written before its bottom, and each character after
// the one before it in the column.
TEST_F(RenderFormsTest, TheWritingFollowsTheFormsOrder) {
  for (Style s : {Style::kXing, Style::kCao}) {
    const RenderOptions o = Opts(s);
    Renderer::Detail d;
    Writing wr;
    ASSERT_TRUE(renderer_->RenderDetailed({kPoem, "", "", ""}, o, nullptr, &d, &wr).ok());
    ASSERT_EQ(d.placements.size(), 20u);
    int top_first = 0;
    double prev_mean = -1;
    int in_order = 0;
    for (const auto& pl : d.placements) {
      double sum[3] = {0, 0, 0};
      int n[3] = {0, 0, 0};
      constexpr int kRes = 48;
      for (int y = 0; y < kRes; ++y) {
        for (int x = 0; x < kRes; ++x) {
          const auto px = danqing::render::testing_fixtures::BoxSampleOnCanvas(pl, x, y, kRes, o.width, o.height);
          if (!px) continue;
          const int cx = px->x, cy = px->y;
          if (d.ink[static_cast<size_t>(cy) * static_cast<size_t>(o.width) +
                    static_cast<size_t>(cx)] < 0.3f)
            continue;
          const uint16_t ms = wr.ms[wr.PlaneIndex(cx, cy)];
          if (ms == 0xFFFF) continue;
          sum[y * 3 / kRes] += ms;
          ++n[y * 3 / kRes];
        }
      }
      ASSERT_GT(n[0] + n[1] + n[2], 0);
      if (n[0] > 0 && n[2] > 0 && sum[0] / n[0] < sum[2] / n[2]) ++top_first;
      const double mean = (sum[0] + sum[1] + sum[2]) / (n[0] + n[1] + n[2]);
      if (mean > prev_mean) ++in_order;
      prev_mean = mean;
    }
    EXPECT_GE(top_first, 16) << StyleName(s) << ": tops written first in most characters";
    EXPECT_GE(in_order, 19) << StyleName(s) << ": characters in writing order";
  }
}

// Characters in no font at all are dropped and counted, as before, in every style.
TEST_F(RenderFormsTest, CharactersInNoFontAreDroppedAndCounted) {
  for (Style s : {Style::kXing, Style::kCao}) {
    RenderStats st;
    auto img = renderer_->Render({"白日\U0001F600依山", "", "", ""}, Opts(s), &st);
    ASSERT_TRUE(img.ok()) << img.status().ToString();
    EXPECT_EQ(st.characters, 4);
    EXPECT_EQ(st.dropped_characters, 1);
  }
}

}  // namespace
}  // namespace danqing::render
