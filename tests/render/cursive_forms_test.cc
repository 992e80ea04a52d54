// Stroke paths recovered from glyphs (render/glyph_skeleton.h) and the
// cursive forms files built from the calligraphers' fonts
// (render/cursive_forms.h, tools/cursive): known shapes, known glyphs, the
// fallback cao -> xing, and bad files.
#include "render/cursive_forms.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "render/glyph_font.h"
#include "render/glyph_skeleton.h"

namespace danqing::render {
namespace {

namespace fs = std::filesystem;
constexpr int kRes = 256;
constexpr char kUKai[] = "/usr/share/fonts/truetype/arphic/ukai.ttc";

std::vector<uint8_t> Blank() {
  return std::vector<uint8_t>(kRes * kRes, 0);
}
void Fill(std::vector<uint8_t>* r, int x0, int y0, int x1, int y1) {
  for (int y = y0; y < y1; ++y)
    for (int x = x0; x < x1; ++x) (*r)[static_cast<size_t>(y * kRes + x)] = 255;
}

// "(x,y r) ..." per stroke, for failure messages.
std::string Describe(const CharStrokes& cs) {
  std::string out;
  for (const auto& s : cs.strokes) {
    out += "\n  stroke:";
    for (const auto& p : s.points) {
      out += " (" + std::to_string(static_cast<int>(p.x)) + "," +
             std::to_string(static_cast<int>(p.y)) + " r" +
             std::to_string(static_cast<int>(p.half_width)) + ")";
    }
  }
  return out;
}

float Dx(const Stroke& s) {
  return s.points.back().x - s.points.front().x;
}
float Dy(const Stroke& s) {
  return s.points.back().y - s.points.front().y;
}

TEST(GlyphSkeleton, AHorizontalBarIsOnePathLeftToRightWithItsHalfWidth) {
  auto r = Blank();
  Fill(&r, 40, 120, 216, 140);  // 176 x 20 px: 704 x 80 box units
  CharStrokes cs = SkeletonStrokes(r, kRes);
  ASSERT_EQ(cs.strokes.size(), 1u) << Describe(cs);
  const Stroke& s = cs.strokes[0];
  EXPECT_GT(Dx(s), 500.0f) << "left to right";
  EXPECT_LT(std::fabs(Dy(s)), 20.0f);
  // Half-width 10 px = 40 box units at the middle of the bar.
  float hw = 0;
  for (const auto& p : s.points) hw = std::max(hw, p.half_width);
  EXPECT_NEAR(hw, 40.0f, 6.0f) << Describe(cs);
  EXPECT_GT(MaskIoU(RasterizeStrokes(cs, kRes), Threshold(r)), 0.85);
}

TEST(GlyphSkeleton, ACrossIsTwoPathsHorizontalFirstThenTopToBottom) {
  auto r = Blank();
  Fill(&r, 40, 118, 216, 138);  // 一
  Fill(&r, 118, 30, 138, 226);  // 丨
  CharStrokes cs = SkeletonStrokes(r, kRes);
  ASSERT_EQ(cs.strokes.size(), 2u) << Describe(cs);
  EXPECT_GT(Dx(cs.strokes[0]), 500.0f) << "一 first, left to right";
  EXPECT_GT(Dy(cs.strokes[1]), 550.0f) << "丨 second, top to bottom";
  EXPECT_LT(std::fabs(Dx(cs.strokes[1])), 30.0f);
  EXPECT_GT(MaskIoU(RasterizeStrokes(cs, kRes), Threshold(r)), 0.8);
}

TEST(GlyphSkeleton, AnLShapeIsOnePathAndARingIsOneClosedPath) {
  auto r = Blank();
  Fill(&r, 60, 60, 80, 200);    // down
  Fill(&r, 60, 180, 200, 200);  // then right
  CharStrokes l = SkeletonStrokes(r, kRes);
  ASSERT_EQ(l.strokes.size(), 1u) << Describe(l);
  auto ring = Blank();
  Fill(&ring, 60, 60, 200, 200);
  for (int y = 80; y < 180; ++y)
    for (int x = 80; x < 180; ++x) ring[static_cast<size_t>(y * kRes + x)] = 0;
  CharStrokes o = SkeletonStrokes(ring, kRes);
  ASSERT_EQ(o.strokes.size(), 1u);
  EXPECT_GT(o.strokes[0].points.size(), 4u);
  EXPECT_GT(MaskIoU(RasterizeStrokes(o, kRes), Threshold(ring)), 0.8);
}

TEST(GlyphSkeleton, NoInkGivesNoPathsAndBadSizesAreRefused) {
  EXPECT_TRUE(SkeletonStrokes(Blank(), kRes).strokes.empty());
  EXPECT_TRUE(SkeletonStrokes(std::vector<uint8_t>(10, 255), kRes).strokes.empty());
  auto speck = Blank();
  Fill(&speck, 10, 10, 11, 11);  // one pixel: under min_component
  EXPECT_TRUE(SkeletonStrokes(speck, kRes).strokes.empty());
  EXPECT_DOUBLE_EQ(MaskIoU({}, {}), 1.0);
}

TEST(GlyphSkeleton, KaiGlyphsFromUKai) {
  auto font = GlyphFont::Open(kUKai);
  if (!font.ok()) GTEST_SKIP() << font.status().ToString();
  std::vector<uint8_t> cov;
  ASSERT_TRUE(CentredGlyphCoverage(**font, U'一', kRes, &cov));
  CharStrokes one = SkeletonStrokes(cov, kRes);
  ASSERT_EQ(one.strokes.size(), 1u) << Describe(one);
  EXPECT_GT(Dx(one.strokes[0]), 400.0f);
  ASSERT_TRUE(CentredGlyphCoverage(**font, U'十', kRes, &cov));
  CharStrokes ten = SkeletonStrokes(cov, kRes);
  ASSERT_EQ(ten.strokes.size(), 2u) << Describe(ten);
  EXPECT_GT(Dx(ten.strokes[0]), 400.0f);
  EXPECT_GT(Dy(ten.strokes[1]), 400.0f);
  for (const auto& s : ten.strokes) {
    for (const auto& p : s.points) {
      EXPECT_GT(p.half_width, 4.0f);  // a brush kai stroke: 10..80 box units
      EXPECT_LT(p.half_width, 90.0f);
    }
  }
  EXPECT_GT(MaskIoU(RasterizeStrokes(ten, kRes), Threshold(cov)), 0.75);
}

TEST(GlyphSkeleton, PathsTheFontJoinsBecomeOneAndPathsApartStayApart) {
  CharStrokes cs;
  cs.strokes.push_back({{{100, 100, 30}, {500, 100, 30}}});  // 一
  cs.strokes.push_back({{{520, 110, 30}, {300, 500, 30}}});  // begins where 一 ends: joined
  cs.strokes.push_back({});                                  // empty: dropped
  cs.strokes.push_back({{{700, 300, 30}, {700, 800, 30}}});  // 200 units away: a lift
  JoinTouchingPaths(&cs);
  ASSERT_EQ(cs.strokes.size(), 2u) << Describe(cs);
  EXPECT_EQ(cs.strokes[0].points.size(), 4u);
  EXPECT_FLOAT_EQ(cs.strokes[0].points[3].y, 500.0f);
  EXPECT_FLOAT_EQ(cs.strokes[1].points[0].x, 700.0f);
}

// The files tools/cursive built into the build tree (skipped when they were not).
TEST(CursiveForms, BuiltFormsCoverThePoemsWithFaithfulPaths) {
  auto forms = CursiveForms::Open();
  if (!forms.ok()) GTEST_SKIP() << forms.status().ToString();
  const std::u32string poem = U"白日依山尽黄河入海流欲穷千里目更上一层楼朝辞白帝彩云间";
  for (Style s : {Style::kKai, Style::kXing, Style::kCao}) {
    ASSERT_NE((*forms)->forms(s), nullptr) << StyleName(s);
    EXPECT_GT((*forms)->forms(s)->size(), 3000u);
    for (char32_t c : poem) {
      CharStrokes cs;
      Style from{};
      ASSERT_TRUE((*forms)->Lookup(s, c, &cs, &from))
          << StyleName(s) << " U+" << std::hex << static_cast<int>(c);
      EXPECT_FALSE(cs.strokes.empty());
      for (const auto& st : cs.strokes) EXPECT_FALSE(st.points.empty());
    }
  }
}

class CursiveFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("danqing-cursive-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A DQSTRK01 file with one character of one two-point stroke.
  void Write(Style s, char32_t c) {
    std::string b = "DQSTRK01";
    auto u32 = [&](uint32_t v) {
      for (int i = 0; i < 4; ++i) b.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
    };
    u32(1);
    u32(0);
    u32(static_cast<uint32_t>(c));
    u32(24);
    const unsigned char rec[] = {1, 2, 100, 0, 0x84, 0x03, 20, 0x20, 0x03, 0x84, 0x03, 20};
    for (unsigned char v : rec) b.push_back(static_cast<char>(v));
    std::ofstream(dir_ / CursiveFileName(s), std::ios::binary) << b;
  }
  fs::path dir_;
};

TEST_F(CursiveFiles, CaoFallsBackToXingAndSaysSo) {
  Write(Style::kXing, U'一');
  auto forms = CursiveForms::Open(dir_.string());
  ASSERT_TRUE(forms.ok()) << forms.status().ToString();
  CharStrokes cs;
  Style from = Style::kKai;
  ASSERT_TRUE((*forms)->Lookup(Style::kCao, U'一', &cs, &from));
  EXPECT_EQ(from, Style::kXing);
  ASSERT_EQ(cs.strokes.size(), 1u);
  EXPECT_FLOAT_EQ(cs.strokes[0].points[1].x, 800.0f);
  EXPECT_FALSE((*forms)->Has(Style::kKai, U'一'));  // kai has no fallback here
  EXPECT_FALSE((*forms)->Has(Style::kXing, U'二'));
  EXPECT_EQ((*forms)->forms(Style::kCao), nullptr);
}

TEST_F(CursiveFiles, NoFilesIsNotFoundAndACorruptOneIsNamed) {
  EXPECT_EQ(CursiveForms::Open(dir_.string()).status().code(), StatusCode::kNotFound);
  std::ofstream(dir_ / CursiveFileName(Style::kCao), std::ios::binary)
      << "DQSTRK02 not a strokes file";
  auto bad = CursiveForms::Open(dir_.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("cursive-cao.bin"), std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace danqing::render

#ifdef DANQING_BUILD_CURSIVE
namespace danqing::render {
namespace {

// tools/cursive/build_cursive: bad arguments, missing or unreadable fonts and
// poems are clear errors (exit 2 for usage, 1 otherwise); a good run writes a
// file CursiveForms reads.
class BuildCursive : public CursiveFiles {
 protected:
  int Run(const std::string& args, std::string* out) {
    const fs::path log = dir_ / "log.txt";
    const std::string cmd =
        std::string(DANQING_BUILD_CURSIVE) + " " + args + " >" + log.string() + " 2>&1";
    const int rc = std::system(cmd.c_str());
    std::ifstream in(log);
    std::stringstream ss;
    ss << in.rdbuf();
    *out = ss.str();
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  }
};

TEST_F(BuildCursive, BadInputsAreClearErrors) {
  const std::string poems = (dir_ / "poems.tsv").string();
  std::ofstream(poems) << "一\t十\n";
  const std::string out = " --out " + (dir_ / "out").string() + " --poems " + poems + " ";
  std::string log;
  EXPECT_EQ(Run(out + "li=" + kUKai, &log), 2);
  EXPECT_NE(log.find("unknown style"), std::string::npos) << log;
  EXPECT_EQ(Run(out + "--res 8 kai=" + std::string(kUKai), &log), 2) << log;
  EXPECT_EQ(Run(out + "xing=" + (dir_ / "none.woff").string(), &log), 1);
  EXPECT_NE(log.find("none.woff: no such file"), std::string::npos) << log;
  std::ofstream(dir_ / "bad.woff") << "wOFF but not really";
  EXPECT_EQ(Run(out + "xing=" + (dir_ / "bad.woff").string(), &log), 1);
  EXPECT_NE(log.find("FreeType cannot read it"), std::string::npos) << log;
  EXPECT_EQ(Run(" --out " + (dir_ / "out").string() + " --poems " + (dir_ / "nope.tsv").string() +
                    " kai=" + kUKai,
                &log),
            1);
  EXPECT_NE(log.find("nope.tsv: cannot read it"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(dir_ / "out" / "cursive-xing.bin"));
}

TEST_F(BuildCursive, AGoodRunWritesFormsCursiveFormsReads) {
  if (!fs::exists(kUKai)) GTEST_SKIP() << "no UKai";
  const std::string poems = (dir_ / "poems.tsv").string();
  std::ofstream(poems) << "一\t十\n";
  std::string log;
  ASSERT_EQ(Run(" --out " + dir_.string() + " --poems " + poems + " --res 64 xing=" + kUKai, &log),
            0)
      << log;
  EXPECT_NE(log.find("0 empty skeletons"), std::string::npos) << log;
  auto forms = CursiveForms::Open(dir_.string());
  ASSERT_TRUE(forms.ok()) << forms.status().ToString();
  EXPECT_GT((*forms)->forms(Style::kXing)->size(), 3700u);  // GB 2312 level 1 and the poems
  CharStrokes one;
  ASSERT_TRUE((*forms)->Lookup(Style::kXing, U'一', &one));
  ASSERT_EQ(one.strokes.size(), 1u) << Describe(one);
  EXPECT_GT(Dx(one.strokes[0]), 400.0f);
}

}  // namespace
}  // namespace danqing::render
#endif
